// SPDX-License-Identifier: Apache-2.0
/// @file data/detail/sodium.hpp
/// @brief libsodium plumbing shared by sealed shards and the audit trail: start-up, hex, BLAKE2b.
///
/// Including this header needs libsodium's headers; a program using it links libsodium
/// (`pkg-config --libs libsodium`, or the CMake target `tutti::sodium` of this build tree).
#pragma once

#include <tutti/error.hpp>

#include <sodium.h>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tutti::detail {

/// Initialises libsodium once per process; every entry point that uses it calls this first.
inline void sodium_ready() {
  // sodium_init is itself idempotent and thread-safe; the static only saves repeated calls.
  static const int status = ::sodium_init();
  if (status < 0)
    throw error("tutti: libsodium could not be initialised (sodium_init() failed); no randomness");
}

/// Lower-case hex of `bytes`.
inline std::string to_hex(std::span<const unsigned char> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

/// Bytes of the hex string `s` (public values only: digests, MACs); nullopt unless `s` is
/// exactly `n` bytes of lower- or upper-case hex.
inline std::optional<std::vector<unsigned char>> from_hex(std::string_view s, std::size_t n) {
  if (s.size() != 2 * n) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<unsigned char> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    int hi = nibble(s[2 * i]);
    int lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return out;
}

/// Hex of a 64-bit value, 16 digits, most significant first.
inline std::string hex64(std::uint64_t v) {
  std::string out(16, '0');
  static constexpr char digits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = digits[v & 15];
  return out;
}

/// Parses `hex64`'s output; nullopt unless `s` is 16 hex digits.
inline std::optional<std::uint64_t> parse_hex64(std::string_view s) {
  auto bytes = from_hex(s, 8);
  if (!bytes) return std::nullopt;
  std::uint64_t v = 0;
  for (unsigned char b : *bytes) v = v << 8 | b;
  return v;
}

/// Writes `v` as 8 little-endian bytes at `out`.
inline void store_le64(unsigned char* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

/// Incremental BLAKE2b (libsodium's crypto_generichash) with a fixed 32-byte output.
class blake2b {
 public:
  /// Output length in bytes (BLAKE2b-256).
  static constexpr std::size_t digest_size = 32;
  /// A 32-byte digest.
  using digest = std::array<unsigned char, digest_size>;

  /// Unkeyed hash.
  blake2b() {
    sodium_ready();
    crypto_generichash_init(&m_state, nullptr, 0, digest_size);
  }
  blake2b(const blake2b&) = delete;
  blake2b& operator=(const blake2b&) = delete;
  ~blake2b() { sodium_memzero(&m_state, sizeof m_state); }

  /// Adds `bytes` to the hash.
  blake2b& update(std::span<const unsigned char> bytes) {
    crypto_generichash_update(&m_state, bytes.data(), bytes.size());
    return *this;
  }
  /// Adds the characters of `s`.
  blake2b& update(std::string_view s) {
    return update({reinterpret_cast<const unsigned char*>(s.data()), s.size()});
  }
  /// Adds 64-bit values as little-endian bytes, in order (the same bytes on every host).
  blake2b& update_le64(std::span<const std::uint64_t> values) {
    if constexpr (std::endian::native == std::endian::little) {
      return update({reinterpret_cast<const unsigned char*>(values.data()), values.size() * 8});
    } else {
      unsigned char buf[512];
      std::size_t used = 0;
      for (std::uint64_t v : values) {
        store_le64(buf + used, v);
        used += 8;
        if (used == sizeof buf) {
          update({buf, used});
          used = 0;
        }
      }
      return update({buf, used});
    }
  }
  /// The digest; the object must not be updated afterwards.
  digest finish() {
    digest out{};
    crypto_generichash_final(&m_state, out.data(), out.size());
    return out;
  }

 private:
  crypto_generichash_state m_state{};
};

/// BLAKE2b-256 of `s`, as hex.
inline std::string blake2b_hex(std::string_view s) {
  auto d = blake2b().update(s).finish();
  return to_hex(d);
}

}  // namespace tutti::detail
