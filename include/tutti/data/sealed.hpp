// SPDX-License-Identifier: Apache-2.0
/// @file data/sealed.hpp
/// @brief Sealed shards: a dataset split into W files under authenticated encryption, each with a
/// key derived from one master key, and a MAC'd manifest; decrypted in memory only.
///
/// Layout of a sealed directory:
///   manifest.json      format, shard count, rows, chunk size, per shard: file, row range, sizes,
///                      chunk count, BLAKE2b-256 of the file, key id, entry MAC; a MAC over it all
///   shard-000.tsb ...  "TUTTISB1", u32 chunk size, secretstream header, then the chunks
///
/// Shard s holds the contiguous rows [first_row, first_row + rows) of the dataset (the first
/// n mod W shards one row more), so the concatenation of all shards in id order is the dataset
/// in its original order and every reader agrees on N and on the row ids. Each shard also
/// carries the whole user and item index maps (and the ids' names when they have them), so a
/// rank that opens only its own shard still shares one index space (and model shape) with every
/// other rank.
///
/// Keys: master (32 random bytes) --crypto_kdf(id = s, "tuttishd")--> shard key s, which is
/// what `tutti seal --export-shard-key s` hands out. From a shard key come its stream key
/// (id 1, "tuttistr": XChaCha20-Poly1305 secretstream) and its entry MAC key (id 2, "tuttient");
/// from the master the manifest MAC key (id 2^64-1, "tuttiman"). A key id is BLAKE2b-128 keyed
/// with the key over a fixed label: it names a key without revealing it.
///
/// Needs libsodium (link `tutti::sodium`, or `-lsodium`).
///
/// The parts live in data/sealed/: files.hpp (errors, file reads and writes), keys.hpp (keys,
/// their derivation, key files), format.hpp (the row block and its encryption) and
/// manifest.hpp (the manifest and its MACs).
#pragma once

#include <tutti/data/detail/sodium.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/data/sealed/files.hpp>
#include <tutti/data/sealed/format.hpp>
#include <tutti/data/sealed/keys.hpp>
#include <tutti/data/sealed/manifest.hpp>
#include <tutti/error.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tutti::data {

/// How `seal_shards` splits and encrypts.
struct seal_options {
  std::uint32_t shards = 1;            ///< W: number of shard files
  std::size_t chunk_size = 64 * 1024;  ///< plaintext bytes per secretstream chunk
};

/// Splits `data` into `opt.shards` contiguous shards and writes them, encrypted, with a signed
/// manifest into `dir` (created when missing; an existing manifest or shard file is never
/// overwritten). No plaintext is written to disk. Returns the manifest.
/// @throws tutti::invalid_argument for a shard key, a bad option or inconsistent data;
/// tutti::error when a file cannot be written.
inline sealed_manifest seal_shards(const interactions& data, const secret_key& master,
                                   const std::filesystem::path& dir, const seal_options& opt = {}) {
  constexpr const char* fn = "tutti::data::seal_shards";
  TUTTI_EXPECTS(
      master.kind() == key_kind::master, fn,
      "the key is shard " + std::to_string(master.shard()) + "'s key; expected the master key");
  TUTTI_EXPECTS(opt.shards >= 1 && opt.shards <= detail::sealed_max_shards, fn,
                "shards = " + std::to_string(opt.shards) + "; expected 1.." +
                    std::to_string(detail::sealed_max_shards));
  TUTTI_EXPECTS(
      opt.chunk_size >= detail::sealed_min_chunk && opt.chunk_size <= detail::sealed_max_chunk, fn,
      "chunk_size = " + std::to_string(opt.chunk_size) + "; expected " +
          std::to_string(detail::sealed_min_chunk) + ".." +
          std::to_string(detail::sealed_max_chunk) + " bytes");
  const std::size_t n = data.size();
  TUTTI_EXPECTS(data.items.size() == n && data.labels.size() == n &&
                    (data.timestamps.empty() || data.timestamps.size() == n),
                fn, "users, items, labels and timestamps differ in length; expected equal");
  for (std::size_t i = 0; i < n; ++i)
    TUTTI_EXPECTS(data.users[i] >= 0 && data.users[i] < data.n_users() && data.items[i] >= 0 &&
                      data.items[i] < data.n_items(),
                  fn, "row " + std::to_string(i) + " has an index outside the id maps");

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw error(std::string(fn) + "(): cannot create '" + dir.string() + "': " + ec.message());
  if (std::filesystem::exists(dir / "manifest.json", ec))
    throw error(std::string(fn) + "(): '" + dir.string() +
                "' already holds a sealed dataset (manifest.json); refusing to overwrite it");

  const std::uint64_t digest = data.digest();
  nlohmann::json files = nlohmann::json::array();
  for (std::uint32_t s = 0; s < opt.shards; ++s) {
    auto [first, count] = detail::sealed_rows_of(n, opt.shards, s);
    std::vector<unsigned char> plain =
        detail::sealed_encode_rows(data, s, opt.shards, first, count, digest);
    detail::wipe_on_exit wipe{plain};
    secret_key shard_key = detail::sealed_shard_key(master, s);
    std::uint64_t chunks = 0;
    std::vector<unsigned char> sealed = detail::sealed_encrypt(
        plain, detail::sealed_stream_key(shard_key).data(), s, opt.shards, opt.chunk_size, chunks);
    const std::string name = detail::sealed_file_name(s, opt.shards);
    detail::write_new_file(dir / name, sealed.data(), sealed.size(), 0644, false, fn);
    files.push_back({{"id", s},
                     {"file", name},
                     {"rows", count},
                     {"first_row", first},
                     {"plaintext_bytes", plain.size()},
                     {"ciphertext_bytes", sealed.size()},
                     {"chunks", chunks},
                     {"blake2b", detail::to_hex(detail::blake2b().update(sealed).finish())},
                     {"key_id", shard_key.id()}});
  }
  nlohmann::json manifest = {{"format", "tutti-sealed"},
                             {"version", detail::sealed_version},
                             {"shards", opt.shards},
                             {"rows", n},
                             {"chunk_size", opt.chunk_size},
                             {"split", "contiguous"},
                             {"cipher", "crypto_secretstream_xchacha20poly1305"},
                             {"kdf", "crypto_kdf_blake2b"},
                             {"mac_algorithm", "crypto_auth_hmacsha512256"},
                             {"master_key_id", master.id()},
                             {"shard_files", std::move(files)}};
  detail::sealed_sign_manifest(manifest, master);
  const std::string text = manifest.dump(2) + "\n";
  const auto tmp = dir / "manifest.json.tmp";
  std::filesystem::remove(tmp, ec);
  detail::write_new_file(tmp, text.data(), text.size(), 0644, true, fn);
  std::filesystem::rename(tmp, dir / "manifest.json", ec);
  if (ec)
    throw error(std::string(fn) + "(): cannot rename '" + tmp.string() + "': " + ec.message());
  return detail::sealed_parse_manifest(manifest, (dir / "manifest.json").string());
}

/// The manifest of a sealed directory, parsed but not authenticated (no key needed): shard
/// count, rows and sizes. `open_sealed` authenticates everything it uses.
inline sealed_manifest read_manifest(const std::filesystem::path& dir) {
  return detail::sealed_load_manifest(dir).first;
}

/// Decrypts shards of a sealed directory in memory and returns their rows, concatenated in
/// shard order, with the whole dataset's user and item index maps.
///
/// `shards` lists the shards to open; empty means every shard for a master key and its own shard
/// for a shard key. With a master key the manifest MAC is verified first; with either key each
/// entry's MAC, each file's size and BLAKE2b-256, and every chunk (in order, ending with
/// TAG_FINAL) are verified before any row is used. With every shard opened, the reassembled
/// dataset's digest must equal the one sealed.
/// @throws tutti::data::sealed_error naming the shard (or the manifest) at fault; nothing is
/// returned then. tutti::invalid_argument for a shard id out of range.
inline interactions open_sealed(const std::filesystem::path& dir, const secret_key& key,
                                std::span<const std::uint32_t> shards = {}) {
  auto [m, j] = detail::sealed_load_manifest(dir);
  const std::string manifest_file = (dir / "manifest.json").string();

  std::vector<std::uint32_t> which(shards.begin(), shards.end());
  if (which.empty()) {
    if (key.kind() == key_kind::master)
      for (std::uint32_t s = 0; s < m.shards; ++s) which.push_back(s);
    else
      which.push_back(key.shard());
  }
  std::sort(which.begin(), which.end());
  which.erase(std::unique(which.begin(), which.end()), which.end());
  TUTTI_EXPECTS(which.back() < m.shards, "tutti::data::open_sealed",
                "shard " + std::to_string(which.back()) + " requested; '" + dir.string() +
                    "' holds shards 0.." + std::to_string(m.shards - 1));

  if (key.kind() == key_kind::master) {
    if (key.id() != m.master_key_id)
      throw sealed_error(-1, manifest_file,
                         "wrong key: the master key's id is " + key.id() +
                             ", this directory was sealed with " + m.master_key_id +
                             "; no shard was opened");
    if (m.mac.empty())
      throw sealed_error(-1, manifest_file,
                         "the manifest carries no MAC (removed?); refusing to trust it");
    if (!detail::sealed_mac_ok(detail::sealed_manifest_text(j), m.mac,
                               detail::sealed_manifest_key(key)))
      throw sealed_error(-1, manifest_file,
                         "manifest MAC does not verify: the manifest was edited; no shard was "
                         "opened");
  }

  interactions out;
  bool first = true, with_time = false;
  std::uint64_t digest = 0;
  for (std::uint32_t s : which) {
    const sealed_shard_info& f = m.files[s];
    const auto path = dir / f.file;
    const std::string file = path.string();
    auto fail = [&](const std::string& what) {
      return sealed_error(s, file, what);
    };
    if (key.kind() == key_kind::shard && key.shard() != s)
      throw fail("the key file holds shard " + std::to_string(key.shard()) +
                 "'s key; a shard key opens only its own shard");
    std::optional<secret_key> derived;
    if (key.kind() == key_kind::master) derived.emplace(detail::sealed_shard_key(key, s));
    const secret_key& k = derived ? *derived : key;
    if (k.id() != f.key_id)
      throw fail("wrong key: its id is " + k.id() + ", the manifest expects " + f.key_id);
    if (f.mac.empty()) throw fail("the manifest entry carries no MAC (removed?)");
    if (!detail::sealed_mac_ok(detail::sealed_entry_text(j, j.at("shard_files").at(s)), f.mac,
                               detail::sealed_entry_key(k)))
      throw fail("manifest entry MAC does not verify: the manifest was edited");
    const std::uint64_t stride = m.chunk_size + detail::sealed_abytes;
    const std::uint64_t body = f.ciphertext_bytes > detail::sealed_file_header
                                   ? f.ciphertext_bytes - detail::sealed_file_header
                                   : 0;
    if ((body + stride - 1) / stride != f.chunks)
      throw fail("the manifest's " + std::to_string(f.chunks) + " chunks do not fit its " +
                 std::to_string(f.ciphertext_bytes) + " bytes");

    std::vector<unsigned char> bytes = detail::read_file_bytes(path, s, f.ciphertext_bytes);
    if (bytes.size() != f.ciphertext_bytes)
      throw fail("truncated: " + std::to_string(bytes.size()) + " bytes, the manifest says " +
                 std::to_string(f.ciphertext_bytes));
    const std::string got = detail::to_hex(detail::blake2b().update(bytes).finish());
    if (got != f.blake2b)
      throw fail("BLAKE2b-256 of the file is " + got.substr(0, 16) + "..., the manifest says " +
                 f.blake2b.substr(0, 16) + "...: the file was modified or replaced");
    std::vector<unsigned char> plain =
        detail::sealed_decrypt(bytes, detail::sealed_stream_key(k).data(), s, m.shards,
                               static_cast<std::size_t>(m.chunk_size), file);
    detail::wipe_on_exit wipe{plain};
    if (plain.size() != f.plaintext_bytes)
      throw fail("decrypted " + std::to_string(plain.size()) + " bytes, the manifest says " +
                 std::to_string(f.plaintext_bytes));
    detail::sealed_block blk = detail::sealed_decode_rows(plain, s, file);
    if (blk.shard != s || blk.shards != m.shards || blk.total_rows != m.rows ||
        blk.first_row != f.first_row || blk.rows.size() != f.rows)
      throw fail("decrypted header (shard " + std::to_string(blk.shard) + " of " +
                 std::to_string(blk.shards) + ", rows " + std::to_string(blk.first_row) + "+" +
                 std::to_string(blk.rows.size()) + ") disagrees with the manifest");
    interactions& d = blk.rows;
    if (first) {
      out.user_ids = std::move(d.user_ids);
      out.item_ids = std::move(d.item_ids);
      out.user_names = std::move(d.user_names);
      out.item_names = std::move(d.item_names);
      out.implicit = d.implicit;
      digest = blk.dataset_digest;
      with_time = blk.with_time;
      first = false;
    } else if (d.user_ids != out.user_ids || d.item_ids != out.item_ids ||
               !same_names(d.user_names, out.user_names) ||
               !same_names(d.item_names, out.item_names) || d.implicit != out.implicit ||
               blk.dataset_digest != digest || blk.with_time != with_time) {
      throw fail("its index maps, flags or dataset digest differ from shard " +
                 std::to_string(which.front()) + "'s: shards of different seals were mixed");
    }
    out.users.insert(out.users.end(), d.users.begin(), d.users.end());
    out.items.insert(out.items.end(), d.items.begin(), d.items.end());
    out.labels.insert(out.labels.end(), d.labels.begin(), d.labels.end());
    out.timestamps.insert(out.timestamps.end(), d.timestamps.begin(), d.timestamps.end());
  }
  if (which.size() == m.shards && (out.size() != m.rows || out.digest() != digest))
    throw sealed_error(-1, manifest_file,
                       "the reassembled dataset's digest differs from the sealed one");
  return out;
}

}  // namespace tutti::data
