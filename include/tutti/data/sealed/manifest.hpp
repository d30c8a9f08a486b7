// SPDX-License-Identifier: Apache-2.0
/// @file data/sealed/manifest.hpp
/// @brief The manifest of a sealed directory (`tutti::data::sealed_manifest`): its JSON, the
/// entry MACs (under each shard's entry key) and the manifest MAC (under the master's manifest
/// key), and a parser that checks every type and count before anything is used.
#pragma once

#include <tutti/data/sealed/files.hpp>
#include <tutti/data/sealed/format.hpp>
#include <tutti/data/sealed/keys.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace tutti::data {

/// One shard's entry of the manifest.
struct sealed_shard_info {
  std::uint32_t id = 0;                ///< shard id, 0..W-1
  std::string file;                    ///< file name inside the directory
  std::uint64_t rows = 0;              ///< rows in this shard
  std::uint64_t first_row = 0;         ///< dataset row of its first row
  std::uint64_t plaintext_bytes = 0;   ///< size of the decrypted block
  std::uint64_t ciphertext_bytes = 0;  ///< size of the file
  std::uint64_t chunks = 0;            ///< secretstream chunks in the file
  std::string blake2b;                 ///< BLAKE2b-256 of the file, hex
  std::string key_id;                  ///< id of the shard key (never the key)
  std::string mac;                     ///< MAC of this entry under a key derived from the shard key
};

/// The manifest of a sealed directory.
struct sealed_manifest {
  std::uint32_t version = 1;             ///< format version
  std::uint32_t shards = 0;              ///< W
  std::uint64_t rows = 0;                ///< rows of the whole dataset
  std::uint64_t chunk_size = 0;          ///< plaintext bytes per chunk
  std::string master_key_id;             ///< id of the master key
  std::vector<sealed_shard_info> files;  ///< one entry per shard, in id order
  std::string mac;                       ///< MAC over the manifest under a master-derived key
};

}  // namespace tutti::data

namespace tutti::detail {

/// crypto_auth (HMAC-SHA-512-256) of `text` under `key`, hex.
inline std::string sealed_mac(std::string_view text, const data::secret_key& key) {
  unsigned char out[crypto_auth_BYTES];
  crypto_auth(out, reinterpret_cast<const unsigned char*>(text.data()), text.size(), key.data());
  return detail::to_hex(out);
}
/// Constant-time check of a hex MAC of `text` under `key`.
inline bool sealed_mac_ok(std::string_view text, std::string_view mac_hex,
                          const data::secret_key& key) {
  auto mac = detail::from_hex(mac_hex, crypto_auth_BYTES);
  if (!mac) return false;
  return crypto_auth_verify(mac->data(), reinterpret_cast<const unsigned char*>(text.data()),
                            text.size(), key.data()) == 0;
}

/// The text an entry MAC covers: the entry without its MAC and the manifest fields a shard-key
/// holder relies on.
inline std::string sealed_entry_text(const nlohmann::json& manifest, const nlohmann::json& entry) {
  nlohmann::json e = entry;
  e.erase("mac");
  nlohmann::json covered = {{"entry", e},
                            {"version", manifest.value("version", nlohmann::json())},
                            {"shards", manifest.value("shards", nlohmann::json())},
                            {"rows", manifest.value("rows", nlohmann::json())},
                            {"chunk_size", manifest.value("chunk_size", nlohmann::json())}};
  return covered.dump();
}
/// The text the manifest MAC covers: the manifest without its MAC, compact, keys sorted.
inline std::string sealed_manifest_text(const nlohmann::json& manifest) {
  nlohmann::json m = manifest;
  m.erase("mac");
  return m.dump();
}

/// Recomputes every entry MAC and the manifest MAC of `manifest` with `master`. `seal_shards`
/// signs with it; tests use it to forge a consistent manifest around a tampered shard.
inline void sealed_sign_manifest(nlohmann::json& manifest, const data::secret_key& master) {
  auto& files = manifest.at("shard_files");
  for (auto& e : files) {
    const auto s = e.at("id").get<std::uint32_t>();
    data::secret_key sk = sealed_shard_key(master, s);
    e["mac"] = sealed_mac(sealed_entry_text(manifest, e), sealed_entry_key(sk));
  }
  manifest["mac"] = sealed_mac(sealed_manifest_text(manifest), sealed_manifest_key(master));
}

/// Parses manifest JSON into the struct, checking types and internal consistency.
inline data::sealed_manifest sealed_parse_manifest(const nlohmann::json& j,
                                                   const std::string& file) {
  auto bad = [&](const std::string& what) {
    return data::sealed_error(-1, file, "malformed manifest: " + what);
  };
  // A count: a JSON integer >= 0 that fits `max` (a float, a negative or a huge number would
  // make nlohmann's conversion undefined behaviour, not an exception).
  auto count = [&](const nlohmann::json& o, const char* key, std::uint64_t max) {
    const auto& v = o.at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
      throw bad(std::string(key) + " is not a non-negative integer");
    const auto x = v.get<std::uint64_t>();
    if (x > max) throw bad(std::string(key) + " = " + std::to_string(x) + " is out of range");
    return x;
  };
  constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
  constexpr std::uint64_t u64 = std::numeric_limits<std::uint64_t>::max();
  try {
    if (!j.is_object()) throw bad("not a JSON object");
    if (j.value("format", std::string()) != "tutti-sealed")
      throw bad("format is not \"tutti-sealed\"");
    data::sealed_manifest m;
    m.version = static_cast<std::uint32_t>(count(j, "version", u32));
    if (m.version != sealed_version)
      throw bad("version " + std::to_string(m.version) + "; this tutti reads version " +
                std::to_string(sealed_version));
    m.shards = static_cast<std::uint32_t>(count(j, "shards", u32));
    m.rows = count(j, "rows", u64);
    m.chunk_size = count(j, "chunk_size", u64);
    m.master_key_id = j.at("master_key_id").get<std::string>();
    if (m.shards == 0 || m.shards > sealed_max_shards) throw bad("shard count out of range");
    if (m.chunk_size < sealed_min_chunk || m.chunk_size > sealed_max_chunk)
      throw bad("chunk size out of range");
    const auto& files = j.at("shard_files");
    if (!files.is_array() || files.size() != m.shards)
      throw bad("shard_files has " + std::to_string(files.is_array() ? files.size() : 0) +
                " entries; expected " + std::to_string(m.shards));
    for (std::uint32_t s = 0; s < m.shards; ++s) {
      const auto& e = files[s];
      data::sealed_shard_info f;
      f.id = static_cast<std::uint32_t>(count(e, "id", u32));
      if (f.id != s) throw bad("entry " + std::to_string(s) + " has id " + std::to_string(f.id));
      f.file = e.at("file").get<std::string>();
      // A file name, never a path: a manifest must not point outside its directory.
      if (f.file.empty() || f.file == "." || f.file == ".." ||
          f.file.find_first_of("/\\") != std::string::npos ||
          f.file.find('\0') != std::string::npos)
        throw bad("entry " + std::to_string(s) + " names '" + f.file + "'; expected a file name");
      f.rows = count(e, "rows", u64);
      f.first_row = count(e, "first_row", u64);
      f.plaintext_bytes = count(e, "plaintext_bytes", u64);
      f.ciphertext_bytes = count(e, "ciphertext_bytes", u64);
      f.chunks = count(e, "chunks", u64);
      f.blake2b = e.at("blake2b").get<std::string>();
      f.key_id = e.at("key_id").get<std::string>();
      f.mac = e.value("mac", std::string());
      m.files.push_back(std::move(f));
    }
    m.mac = j.value("mac", std::string());
    return m;
  } catch (const nlohmann::json::exception& ex) {
    throw bad(ex.what());
  }
}

inline constexpr std::uint64_t sealed_max_manifest = std::uint64_t{64} << 20;

/// Reads and parses `dir`/manifest.json, returning the JSON as well.
inline std::pair<data::sealed_manifest, nlohmann::json> sealed_load_manifest(
    const std::filesystem::path& dir) {
  const auto path = dir / "manifest.json";
  std::vector<unsigned char> bytes;
  try {
    bytes = read_file_bytes(path, -1, sealed_max_manifest);
  } catch (const data::sealed_error&) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      throw data::sealed_error(
          -1, path.string(),
          "missing: '" + dir.string() + "' is not a sealed directory, or its manifest was removed");
    throw;
  }
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded()) throw data::sealed_error(-1, path.string(), "malformed manifest: not JSON");
  data::sealed_manifest m = sealed_parse_manifest(j, path.string());
  return {std::move(m), std::move(j)};
}

}  // namespace tutti::detail
