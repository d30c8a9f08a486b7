// SPDX-License-Identifier: Apache-2.0
/// @file fuzz/sealed_fuzz.hpp
/// @brief The sealed-shard reader's fuzz property: manifests, shard files and decrypted row
/// blocks from arbitrary bytes, and tampered copies of a genuine shard file.
///
/// Shared by the libFuzzer target (fuzz/sealed_fuzz.cpp) and any replay driver. The first byte
/// picks the mode, the rest is its input:
///   0  decrypted row block -> `detail::sealed_decode_rows`: a consistent dataset or sealed_error;
///   1  manifest JSON       -> `detail::sealed_parse_manifest`: a consistent manifest or
///                             sealed_error (never a JSON exception, never a path for a file);
///   2  edits to a genuine shard file (3 bytes each: offset low, offset high, XOR mask; a first
///      byte with bit 0 set also truncates at the first offset, bit 1 swaps two chunks) ->
///      `detail::sealed_decrypt`: the original rows when the bytes are unchanged, else
///      sealed_error; anything else is a forgery the authentication let through;
///   3  a whole shard file  -> `detail::sealed_decrypt` with the genuine key: sealed_error, or
///                             the genuine rows (a file sealed under the same key elsewhere).
#pragma once

#include <tutti/data/sealed.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tutti_fuzz {

/// A genuine shard file sealed once per process, with what it holds.
struct genuine_shard {
  static constexpr std::uint32_t shards = 3;  ///< the file claims to be shard 1 of 3
  static constexpr std::uint32_t shard = 1;
  static constexpr std::size_t chunk = 64;  ///< smallest chunk: many chunks to reorder
  std::array<unsigned char, 32> key{};      ///< stream key (fixed: a fuzz input must replay)
  tutti::data::interactions rows;           ///< the rows sealed
  std::vector<unsigned char> file;          ///< the shard file's bytes

  genuine_shard() {
    tutti::detail::sodium_ready();
    for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<unsigned char>(7 * i + 1);
    for (int i = 0; i < 24; ++i) {
      rows.users.push_back(i % 5);
      rows.items.push_back((i * 7) % 6);
      rows.labels.push_back(static_cast<float>(1 + i % 5));
      rows.timestamps.push_back(1000 + i);
    }
    for (int u = 0; u < 5; ++u) rows.user_ids.push_back(100 + u);
    for (int v = 0; v < 6; ++v) rows.item_ids.push_back(7000 + v);
    const auto plain =
        tutti::detail::sealed_encode_rows(rows, shard, shards, 0, rows.size(), rows.digest());
    std::uint64_t chunks = 0;
    file = tutti::detail::sealed_encrypt(plain, key.data(), shard, shards, chunk, chunks);
  }
};

/// The one genuine shard of this process.
inline const genuine_shard& genuine() {
  static const genuine_shard g;
  return g;
}

/// "" when `d` is consistent, else what is wrong with it.
inline std::string check_rows(const tutti::data::interactions& d) {
  if (d.items.size() != d.size() || d.labels.size() != d.size() ||
      (!d.timestamps.empty() && d.timestamps.size() != d.size()))
    return "column arrays of different lengths";
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (d.users[i] < 0 || d.users[i] >= d.n_users() || d.items[i] < 0 || d.items[i] >= d.n_items())
      return "a dense index outside the index space";
    if (!std::isfinite(d.labels[i])) return "a non-finite label";
  }
  return "";
}

/// Decrypts `bytes` with the genuine key. Whatever authenticates must hold the genuine rows
/// (nothing else was ever sealed under this key); `may_open` says whether anything may
/// (false for a genuine file this process modified); `must_open` whether it must.
inline std::string check_decrypt(const std::vector<unsigned char>& bytes, bool may_open,
                                 bool must_open) {
  const genuine_shard& g = genuine();
  try {
    std::vector<unsigned char> plain = tutti::detail::sealed_decrypt(
        bytes, g.key.data(), g.shard, g.shards, g.chunk, "shard-001.tsb");
    if (!may_open) return "a modified shard file decrypted without an error";
    const auto blk = tutti::detail::sealed_decode_rows(plain, g.shard, "shard-001.tsb");
    if (blk.rows.digest() != g.rows.digest() || blk.rows.user_ids != g.rows.user_ids ||
        blk.rows.item_ids != g.rows.item_ids || blk.rows.timestamps != g.rows.timestamps)
      return "a shard file decrypted to rows that were never sealed";
  } catch (const tutti::data::sealed_error& e) {
    if (must_open) return std::string("the genuine shard failed: ") + e.what();
    if (e.shard() != g.shard) return "the error names another shard";
  }
  return "";
}

/// Runs one input; "" when every property holds, else a description of the first that broke.
inline std::string sealed_check(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return "";
  const std::span<const unsigned char> in(data + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: {
        try {
          const auto blk = tutti::detail::sealed_decode_rows(in, 0, "block");
          if (auto bad = check_rows(blk.rows); !bad.empty()) return "sealed_decode_rows: " + bad;
          if (blk.first_row > blk.total_rows || blk.rows.size() > blk.total_rows - blk.first_row)
            return "sealed_decode_rows: rows beyond the dataset";
        } catch (const tutti::data::sealed_error&) {
        }
        return "";
      }
      case 1: {
        const nlohmann::json j = nlohmann::json::parse(in.begin(), in.end(), nullptr, false);
        if (j.is_discarded()) return "";
        try {
          const auto m = tutti::detail::sealed_parse_manifest(j, "manifest.json");
          if (m.files.size() != m.shards) return "sealed_parse_manifest: entries != shards";
          for (std::size_t s = 0; s < m.files.size(); ++s) {
            const auto& f = m.files[s];
            if (f.id != s) return "sealed_parse_manifest: entries out of order";
            if (f.file.empty() || f.file == "." || f.file == ".." ||
                f.file.find_first_of("/\\") != std::string::npos)
              return "sealed_parse_manifest: a shard file outside the directory";
          }
        } catch (const tutti::data::sealed_error&) {
        }
        return "";
      }
      case 2: {
        const genuine_shard& g = genuine();
        std::vector<unsigned char> bytes = g.file;
        const std::uint8_t how = in.empty() ? 0 : in[0];
        std::size_t first_offset = bytes.size();
        for (std::size_t k = 1; k + 2 < in.size(); k += 3) {
          const std::size_t at = (in[k] | static_cast<std::size_t>(in[k + 1]) << 8) % bytes.size();
          if (k == 1) first_offset = at;
          bytes[at] ^= in[k + 2];
        }
        if ((how & 1) && first_offset < bytes.size()) bytes.resize(first_offset);
        const std::size_t head = tutti::detail::sealed_file_header;
        const std::size_t stride = g.chunk + tutti::detail::sealed_abytes;
        if ((how & 2) && bytes.size() >= head + 2 * stride) {
          const std::size_t n = (bytes.size() - head) / stride;
          const std::size_t a = (how >> 2) % n, b = (how >> 5) % n;
          for (std::size_t i = 0; i < stride; ++i)
            std::swap(bytes[head + a * stride + i], bytes[head + b * stride + i]);
        }
        const bool unchanged = bytes == g.file;
        return check_decrypt(bytes, unchanged, unchanged);
      }
      default: {
        const std::vector<unsigned char> bytes(in.begin(), in.end());
        return check_decrypt(bytes, true, bytes == genuine().file);
      }
    }
  } catch (const tutti::error& e) {
    return std::string("an unexpected tutti::error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("a non-tutti exception: ") + e.what();
  }
}

}  // namespace tutti_fuzz
