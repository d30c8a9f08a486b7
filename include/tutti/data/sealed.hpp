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
/// carries the whole user and item index maps, so a rank that opens only its own shard still
/// shares one index space (and model shape) with every other rank.
///
/// Keys: master (32 random bytes) --crypto_kdf(id = s, "tuttishd")--> shard key s, which is
/// what `tutti seal --export-shard-key s` hands out. From a shard key come its stream key
/// (id 1, "tuttistr": XChaCha20-Poly1305 secretstream) and its entry MAC key (id 2, "tuttient");
/// from the master the manifest MAC key (id 2^64-1, "tuttiman"). A key id is BLAKE2b-128 keyed
/// with the key over a fixed label: it names a key without revealing it.
///
/// Needs libsodium (link `tutti::sodium`, or `-lsodium`).
#pragma once

#include <tutti/data/detail/sodium.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti::data {

/// A sealed directory or one of its shards cannot be trusted: wrong key, tampered, truncated,
/// reordered or missing. Nothing from the shard it names has been returned.
class sealed_error : public error {
 public:
  /// `shard` < 0 when the fault lies in the manifest or the directory as a whole.
  sealed_error(std::int64_t shard, std::string file, const std::string& what)
      : error(shard >= 0 ? "shard " + std::to_string(shard) + " (" +
                               std::filesystem::path(file).filename().string() + "): " + what
                         : file + ": " + what),
        m_shard(shard),
        m_file(std::move(file)) {}
  /// The shard at fault, or -1 for the manifest or directory.
  std::int64_t shard() const noexcept { return m_shard; }
  /// The file at fault (shard file or manifest).
  const std::string& file() const noexcept { return m_file; }

 private:
  std::int64_t m_shard;
  std::string m_file;
};

/// A key file cannot be used: unreadable, not private (mode & 077), or not a tutti key file.
class key_file_error : public error {
 public:
  using error::error;
};

/// What a key is for.
enum class key_kind : std::uint8_t {
  master,  ///< opens every shard and the manifest MAC
  shard,   ///< opens one shard only
};

class secret_key;

}  // namespace tutti::data

namespace tutti::detail {
struct secret_key_access;
}  // namespace tutti::detail

namespace tutti::data {

/// 32 bytes of key material in libsodium's guarded, mlock'd memory, wiped when destroyed.
/// Move-only; never copied into ordinary memory by tutti.
class secret_key {
 public:
  /// Key length in bytes.
  static constexpr std::size_t size = crypto_kdf_KEYBYTES;
  static_assert(crypto_kdf_KEYBYTES == crypto_secretstream_xchacha20poly1305_KEYBYTES &&
                crypto_kdf_KEYBYTES == crypto_auth_KEYBYTES);

  /// A fresh random master key.
  static secret_key generate() {
    secret_key k(key_kind::master, 0);
    randombytes_buf(k.m_bytes, size);
    return k;
  }
  /// A key from `bytes` (exactly `size` of them); the caller wipes its own copy.
  static secret_key from_bytes(std::span<const unsigned char> bytes,
                               key_kind kind = key_kind::master, std::uint32_t shard = 0) {
    TUTTI_EXPECTS(
        bytes.size() == size, "tutti::data::secret_key::from_bytes",
        "got " + std::to_string(bytes.size()) + " bytes; expected " + std::to_string(size));
    secret_key k(kind, shard);
    std::memcpy(k.m_bytes, bytes.data(), size);
    return k;
  }

  secret_key(secret_key&& o) noexcept
      : m_bytes(std::exchange(o.m_bytes, nullptr)), m_kind(o.m_kind), m_shard(o.m_shard) {}
  secret_key& operator=(secret_key&& o) noexcept {
    if (this != &o) {
      release();
      m_bytes = std::exchange(o.m_bytes, nullptr);
      m_kind = o.m_kind;
      m_shard = o.m_shard;
    }
    return *this;
  }
  secret_key(const secret_key&) = delete;
  secret_key& operator=(const secret_key&) = delete;
  ~secret_key() { release(); }

  /// Master or shard key.
  key_kind kind() const noexcept { return m_kind; }
  /// The shard a shard key opens (0 for a master key).
  std::uint32_t shard() const noexcept { return m_shard; }
  /// The key bytes (`size` of them); valid while the key lives.
  const unsigned char* data() const noexcept { return m_bytes; }
  /// Public identity of the key: BLAKE2b-128 keyed with it over a fixed label, as hex.
  std::string id() const {
    static constexpr std::string_view label = "tutti-key-id/v1";
    unsigned char out[16];
    crypto_generichash(out, sizeof out, reinterpret_cast<const unsigned char*>(label.data()),
                       label.size(), m_bytes, size);
    return detail::to_hex(out);
  }

 private:
  friend struct tutti::detail::secret_key_access;
  secret_key(key_kind kind, std::uint32_t shard) : m_kind(kind), m_shard(shard) {
    detail::sodium_ready();
    // sodium_malloc: guard pages, mlock where allowed, and the pages are wiped by sodium_free.
    m_bytes = static_cast<unsigned char*>(sodium_malloc(size));
    if (m_bytes == nullptr) throw error("tutti::data::secret_key: sodium_malloc failed");
  }
  void release() noexcept {
    if (m_bytes != nullptr) {
      sodium_memzero(m_bytes, size);
      sodium_free(m_bytes);
      m_bytes = nullptr;
    }
  }
  unsigned char* m_bytes = nullptr;
  key_kind m_kind = key_kind::master;
  std::uint32_t m_shard = 0;
};

/// How `seal_shards` splits and encrypts.
struct seal_options {
  std::uint32_t shards = 1;            ///< W: number of shard files
  std::size_t chunk_size = 64 * 1024;  ///< plaintext bytes per secretstream chunk
};

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

inline constexpr std::uint32_t sealed_version = 1;
inline constexpr std::string_view sealed_file_magic = "TUTTISB1";
inline constexpr std::string_view sealed_rows_magic = "TUTTIROW";
inline constexpr std::size_t sealed_stream_header =
    crypto_secretstream_xchacha20poly1305_HEADERBYTES;
inline constexpr std::size_t sealed_file_header = 8 + 4 + sealed_stream_header;
inline constexpr std::size_t sealed_abytes = crypto_secretstream_xchacha20poly1305_ABYTES;
inline constexpr std::size_t sealed_rows_header = 8 + 4 * 4 + 8 * 6;
inline constexpr std::uint32_t sealed_max_shards = 1u << 20;
inline constexpr std::size_t sealed_min_chunk = 64;
inline constexpr std::size_t sealed_max_chunk = std::size_t{1} << 26;
inline constexpr std::uint64_t sealed_max_key_file = 4096;

/// Builds keys in place; the only way to write into a secret_key's memory.
struct secret_key_access {
  /// crypto_kdf subkey `id` of `parent` under the 8-character `context`.
  static data::secret_key derive(const data::secret_key& parent, std::uint64_t id,
                                 const char* context, data::key_kind kind, std::uint32_t shard) {
    data::secret_key k(kind, shard);
    crypto_kdf_derive_from_key(k.m_bytes, data::secret_key::size, id, context, parent.data());
    return k;
  }
  /// An empty key of `kind` to be filled through `bytes`.
  static data::secret_key blank(data::key_kind kind, std::uint32_t shard) {
    return data::secret_key(kind, shard);
  }
  /// Writable bytes of a key under construction.
  static unsigned char* bytes(data::secret_key& k) { return k.m_bytes; }
};

/// A buffer in sodium_malloc'd memory, wiped and freed on destruction (key file text).
class secure_buffer {
 public:
  explicit secure_buffer(std::size_t n) : m_size(n) {
    detail::sodium_ready();
    m_data = static_cast<char*>(sodium_malloc(n == 0 ? 1 : n));
    if (m_data == nullptr) throw error("tutti: sodium_malloc failed");
  }
  secure_buffer(const secure_buffer&) = delete;
  secure_buffer& operator=(const secure_buffer&) = delete;
  ~secure_buffer() {
    sodium_memzero(m_data, m_size == 0 ? 1 : m_size);
    sodium_free(m_data);
  }
  char* data() noexcept { return m_data; }
  std::size_t size() const noexcept { return m_size; }

 private:
  char* m_data = nullptr;
  std::size_t m_size;
};

/// Wipes a byte vector (decrypted rows, serialised plaintext) when the scope ends.
struct wipe_on_exit {
  std::vector<unsigned char>& bytes;
  ~wipe_on_exit() {
    if (!bytes.empty()) sodium_memzero(bytes.data(), bytes.size());
  }
};

/// Wipes a secretstream state (it holds the stream key) when the scope ends.
struct stream_state {
  crypto_secretstream_xchacha20poly1305_state s{};
  ~stream_state() { sodium_memzero(&s, sizeof s); }
};

/// Writes `bytes` to a new file `path` (refusing an existing one) with `mode`; fsyncs when asked.
inline void write_new_file(const std::filesystem::path& path, const void* bytes, std::size_t n,
                           mode_t mode, bool sync, const char* fn) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    int err = errno;
    throw error(std::string(fn) + "(): cannot create '" + path.string() + "': " + errno_text(err) +
                (err == EEXIST ? " (refusing to overwrite it)" : ""));
  }
  // umask may have cleared bits we want, never added ones; fchmod states the mode exactly.
  bool ok = ::fchmod(fd, mode) == 0;
  const char* p = static_cast<const char*>(bytes);
  std::size_t left = n;
  while (ok && left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = false;
      break;
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  if (ok && sync) ok = ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw error(std::string(fn) + "(): cannot write '" + path.string() + "': " + errno_text(err));
  }
}

/// Reads a whole file of at most `max_bytes` into memory; data::sealed_error when it cannot.
inline std::vector<unsigned char> read_file_bytes(const std::filesystem::path& path,
                                                  std::int64_t shard, std::uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw data::sealed_error(shard, path.string(),
                             err == ENOENT ? std::string("missing: the file does not exist")
                                           : "cannot open: " + errno_text(err));
  }
  struct ::stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw data::sealed_error(shard, path.string(), "not a regular file");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw data::sealed_error(shard, path.string(),
                             "is " + std::to_string(st.st_size) + " bytes; expected at most " +
                                 std::to_string(max_bytes) + " (the manifest's size)");
  }
  std::vector<unsigned char> out(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

/// Rows [first, first + count) of shard `s` of `n` rows split contiguously over `w` shards.
inline std::pair<std::uint64_t, std::uint64_t> sealed_rows_of(std::uint64_t n, std::uint32_t w,
                                                              std::uint32_t s) {
  const std::uint64_t base = n / w, extra = n % w;
  const std::uint64_t first = s * base + std::min<std::uint64_t>(s, extra);
  return {first, base + (s < extra ? 1 : 0)};
}

/// File name of shard `s` of `w`: shard-007.tsb, with more digits when w > 1000.
inline std::string sealed_file_name(std::uint32_t s, std::uint32_t w) {
  std::size_t digits = 3;
  for (std::uint32_t v = w > 0 ? w - 1 : 0; v >= 1000; v /= 10) ++digits;
  std::string id = std::to_string(s);
  if (id.size() < digits) id.insert(0, digits - id.size(), '0');
  return "shard-" + id + ".tsb";
}

/// Associated data of every chunk: binds a chunk to its format version and shard.
inline std::array<unsigned char, 12> sealed_chunk_ad(std::uint32_t shard, std::uint32_t shards) {
  std::array<unsigned char, 12> ad{};
  for (int i = 0; i < 4; ++i) {
    ad[i] = static_cast<unsigned char>(sealed_version >> (8 * i));
    ad[4 + i] = static_cast<unsigned char>(shard >> (8 * i));
    ad[8 + i] = static_cast<unsigned char>(shards >> (8 * i));
  }
  return ad;
}

/// Little-endian writer into a byte vector.
struct le_writer {
  std::vector<unsigned char>& out;
  // resize + memcpy rather than insert: GCC 12 at -O2 reports insert's inlined copy here as a
  // stringop-overflow (a false positive), which fails a consumer's -Werror build.
  void bytes(const void* p, std::size_t n) {
    if (n == 0) return;
    const std::size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
  }
};

/// Bounds-checked little-endian reader; `ok` turns false on the first read past the end.
struct le_reader {
  std::span<const unsigned char> in;
  std::size_t at = 0;
  bool ok = true;
  bool take(std::size_t n) {
    if (!ok || in.size() - at < n) return ok = false;
    at += n;
    return true;
  }
  std::uint32_t u32() {
    if (!take(4)) return 0;
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | in[at - 4 + static_cast<std::size_t>(i)];
    return v;
  }
  std::uint64_t u64() {
    if (!take(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | in[at - 8 + static_cast<std::size_t>(i)];
    return v;
  }
  std::size_t left() const noexcept { return in.size() - at; }
};

/// The decrypted content of one shard.
struct sealed_block {
  std::uint32_t shard = 0;
  std::uint32_t shards = 0;
  std::uint64_t total_rows = 0;
  std::uint64_t first_row = 0;
  std::uint64_t dataset_digest = 0;
  bool with_time = false;   ///< rows carry timestamps (even when this shard has none)
  data::interactions rows;  ///< this shard's rows with the whole dataset's index maps
};

/// Serialises rows [first, first + count) of `d` with both index maps.
inline std::vector<unsigned char> sealed_encode_rows(const data::interactions& d,
                                                     std::uint32_t shard, std::uint32_t shards,
                                                     std::uint64_t first, std::uint64_t count,
                                                     std::uint64_t digest) {
  const bool with_time = d.has_timestamps();
  std::vector<unsigned char> out;
  out.reserve(sealed_rows_header + 8 * (d.user_ids.size() + d.item_ids.size()) +
              count * (12 + (with_time ? 8 : 0)));
  le_writer w{out};
  w.bytes(sealed_rows_magic.data(), sealed_rows_magic.size());
  w.u32(sealed_version);
  w.u32((d.implicit ? 1u : 0u) | (with_time ? 2u : 0u));
  w.u32(shard);
  w.u32(shards);
  w.u64(d.size());
  w.u64(first);
  w.u64(count);
  w.u64(digest);
  w.u64(d.user_ids.size());
  w.u64(d.item_ids.size());
  for (std::int64_t id : d.user_ids) w.u64(static_cast<std::uint64_t>(id));
  for (std::int64_t id : d.item_ids) w.u64(static_cast<std::uint64_t>(id));
  const std::size_t b = static_cast<std::size_t>(first),
                    e = static_cast<std::size_t>(first + count);
  for (std::size_t i = b; i < e; ++i) w.u32(static_cast<std::uint32_t>(d.users[i]));
  for (std::size_t i = b; i < e; ++i) w.u32(static_cast<std::uint32_t>(d.items[i]));
  for (std::size_t i = b; i < e; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &d.labels[i], sizeof bits);
    w.u32(bits);
  }
  if (with_time)
    for (std::size_t i = b; i < e; ++i) w.u64(static_cast<std::uint64_t>(d.timestamps[i]));
  return out;
}

/// Parses a decrypted shard block; throws data::sealed_error (naming `shard_id`, `file`) when it is
/// malformed. Total on every input: safe to feed arbitrary bytes.
inline sealed_block sealed_decode_rows(std::span<const unsigned char> bytes, std::int64_t shard_id,
                                       const std::string& file) {
  auto bad = [&](const std::string& what) {
    return data::sealed_error(shard_id, file, "decrypted content is malformed: " + what);
  };
  le_reader r{bytes};
  if (bytes.size() < sealed_rows_header ||
      std::memcmp(bytes.data(), sealed_rows_magic.data(), sealed_rows_magic.size()) != 0)
    throw bad("no row block header");
  r.take(sealed_rows_magic.size());
  sealed_block blk;
  const std::uint32_t version = r.u32();
  const std::uint32_t flags = r.u32();
  blk.shard = r.u32();
  blk.shards = r.u32();
  blk.total_rows = r.u64();
  blk.first_row = r.u64();
  const std::uint64_t count = r.u64();
  blk.dataset_digest = r.u64();
  const std::uint64_t n_users = r.u64();
  const std::uint64_t n_items = r.u64();
  if (version != sealed_version)
    throw bad("format version " + std::to_string(version) + "; expected " +
              std::to_string(sealed_version));
  if (flags > 3) throw bad("unknown flags " + std::to_string(flags));
  const bool with_time = (flags & 2) != 0;
  blk.with_time = with_time;
  constexpr std::uint64_t max_index =
      static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
  if (n_users > max_index || n_items > max_index) throw bad("index space beyond 2^31-1");
  // Sizes are checked by division so that no product can overflow.
  if (n_users > r.left() / 8 || n_items > (r.left() - n_users * 8) / 8)
    throw bad("index maps run past the end");
  const std::uint64_t per_row = 12 + (with_time ? 8 : 0);
  const std::uint64_t after_maps = r.left() - (n_users + n_items) * 8;
  if (after_maps % per_row != 0 || after_maps / per_row != count)
    throw bad("holds " + std::to_string(after_maps) + " bytes of rows; expected " +
              std::to_string(count) + " rows of " + std::to_string(per_row) + " bytes");
  if (blk.first_row > blk.total_rows || count > blk.total_rows - blk.first_row)
    throw bad("rows " + std::to_string(blk.first_row) + "+" + std::to_string(count) +
              " beyond the dataset's " + std::to_string(blk.total_rows));

  data::interactions& d = blk.rows;
  d.implicit = (flags & 1) != 0;
  d.user_ids.resize(n_users);
  d.item_ids.resize(n_items);
  for (auto& id : d.user_ids) id = static_cast<std::int64_t>(r.u64());
  for (auto& id : d.item_ids) id = static_cast<std::int64_t>(r.u64());
  const auto n = static_cast<std::size_t>(count);
  d.users.resize(n);
  d.items.resize(n);
  d.labels.resize(n);
  for (auto& u : d.users) {
    u = static_cast<std::int32_t>(r.u32());
    if (u < 0 || static_cast<std::uint64_t>(u) >= n_users) throw bad("user index out of range");
  }
  for (auto& it : d.items) {
    it = static_cast<std::int32_t>(r.u32());
    if (it < 0 || static_cast<std::uint64_t>(it) >= n_items) throw bad("item index out of range");
  }
  for (auto& y : d.labels) {
    std::uint32_t bits = r.u32();
    std::memcpy(&y, &bits, sizeof y);
    if (!std::isfinite(y)) throw bad("non-finite label");
  }
  if (with_time) {
    d.timestamps.resize(n);
    for (auto& t : d.timestamps) t = static_cast<std::int64_t>(r.u64());
  }
  if (!r.ok || r.left() != 0) throw bad("size does not match its header");
  return blk;
}

/// Encrypts `plain` into the bytes of a shard file (magic, chunk size, stream header, chunks).
inline std::vector<unsigned char> sealed_encrypt(std::span<const unsigned char> plain,
                                                 const unsigned char* stream_key,
                                                 std::uint32_t shard, std::uint32_t shards,
                                                 std::size_t chunk_size, std::uint64_t& chunks) {
  chunks = plain.empty() ? 1 : (plain.size() + chunk_size - 1) / chunk_size;
  std::vector<unsigned char> out(sealed_file_header + plain.size() + chunks * sealed_abytes);
  std::memcpy(out.data(), sealed_file_magic.data(), sealed_file_magic.size());
  for (int i = 0; i < 4; ++i)
    out[8 + static_cast<std::size_t>(i)] = static_cast<unsigned char>(chunk_size >> (8 * i));
  stream_state st;
  crypto_secretstream_xchacha20poly1305_init_push(&st.s, out.data() + 12, stream_key);
  const auto ad = sealed_chunk_ad(shard, shards);
  std::size_t in = 0, at = sealed_file_header;
  for (std::uint64_t c = 0; c < chunks; ++c) {
    const std::size_t len = std::min(chunk_size, plain.size() - in);
    const unsigned char tag = c + 1 == chunks ? crypto_secretstream_xchacha20poly1305_TAG_FINAL
                                              : crypto_secretstream_xchacha20poly1305_TAG_MESSAGE;
    unsigned long long clen = 0;
    crypto_secretstream_xchacha20poly1305_push(&st.s, out.data() + at, &clen, plain.data() + in,
                                               len, ad.data(), ad.size(), tag);
    in += len;
    at += static_cast<std::size_t>(clen);
  }
  return out;
}

/// Decrypts the bytes of a shard file, chunk by chunk, in memory. Every chunk must
/// authenticate, in order, and the last one (and only it) must carry TAG_FINAL.
/// Throws data::sealed_error naming `shard_id` and `file`. Total on every input.
inline std::vector<unsigned char> sealed_decrypt(std::span<const unsigned char> file_bytes,
                                                 const unsigned char* stream_key,
                                                 std::uint32_t shard_id, std::uint32_t shards,
                                                 std::size_t chunk_size, const std::string& file) {
  auto fail = [&](const std::string& what) {
    return data::sealed_error(shard_id, file, what);
  };
  if (file_bytes.size() < sealed_file_magic.size() ||
      std::memcmp(file_bytes.data(), sealed_file_magic.data(), sealed_file_magic.size()) != 0)
    throw fail("not a sealed shard file (no TUTTISB1 header)");
  if (file_bytes.size() < sealed_file_header)
    throw fail("truncated inside the file header (" + std::to_string(file_bytes.size()) +
               " bytes)");
  std::uint32_t stored_chunk = 0;
  for (int i = 3; i >= 0; --i)
    stored_chunk = stored_chunk << 8 | file_bytes[8 + static_cast<std::size_t>(i)];
  if (stored_chunk != chunk_size)
    throw fail("chunk size " + std::to_string(stored_chunk) + " in the file, " +
               std::to_string(chunk_size) + " in the manifest");
  const std::size_t body = file_bytes.size() - sealed_file_header;
  const std::size_t stride = chunk_size + sealed_abytes;
  if (body == 0) throw fail("truncated: the file holds no chunk");
  const std::size_t n_chunks = (body + stride - 1) / stride;
  if (body - (n_chunks - 1) * stride < sealed_abytes)
    throw fail("truncated: the last chunk is shorter than its authentication tag");

  stream_state st;
  if (crypto_secretstream_xchacha20poly1305_init_pull(&st.s, file_bytes.data() + 12, stream_key) !=
      0)
    throw fail("invalid stream header");
  const auto ad = sealed_chunk_ad(shard_id, shards);
  std::vector<unsigned char> plain(body - n_chunks * sealed_abytes);
  std::size_t at = sealed_file_header, out = 0;
  try {
    for (std::size_t c = 0; c < n_chunks; ++c) {
      const std::size_t clen = std::min(stride, file_bytes.size() - at);
      unsigned long long mlen = 0;
      unsigned char tag = 0;
      if (crypto_secretstream_xchacha20poly1305_pull(&st.s, plain.data() + out, &mlen, &tag,
                                                     file_bytes.data() + at, clen, ad.data(),
                                                     ad.size()) != 0)
        throw fail("authentication failed at chunk " + std::to_string(c) + " of " +
                   std::to_string(n_chunks) +
                   ": wrong key, or the data was tampered with, reordered or cut");
      const bool last = c + 1 == n_chunks;
      if (tag == crypto_secretstream_xchacha20poly1305_TAG_FINAL && !last)
        throw fail("chunk " + std::to_string(c) + " carries the final tag but " +
                   std::to_string(n_chunks - c - 1) + " chunks follow: chunks were added");
      if (last && tag != crypto_secretstream_xchacha20poly1305_TAG_FINAL)
        throw fail("truncated: the stream ends at chunk " + std::to_string(c) +
                   " without its final tag (chunks were dropped from the end)");
      at += clen;
      out += static_cast<std::size_t>(mlen);
    }
  } catch (...) {
    sodium_memzero(plain.data(), plain.size());
    throw;
  }
  return plain;
}

inline constexpr const char* sealed_ctx_shard = "tuttishd";
inline constexpr const char* sealed_ctx_stream = "tuttistr";
inline constexpr const char* sealed_ctx_entry = "tuttient";
inline constexpr const char* sealed_ctx_manifest = "tuttiman";

/// Shard key `s` of `master`.
inline data::secret_key sealed_shard_key(const data::secret_key& master, std::uint32_t s) {
  return secret_key_access::derive(master, s, sealed_ctx_shard, data::key_kind::shard, s);
}
/// The secretstream key of a shard key.
inline data::secret_key sealed_stream_key(const data::secret_key& shard_key) {
  return secret_key_access::derive(shard_key, 1, sealed_ctx_stream, data::key_kind::shard,
                                   shard_key.shard());
}
/// The key of a shard's manifest entry MAC.
inline data::secret_key sealed_entry_key(const data::secret_key& shard_key) {
  return secret_key_access::derive(shard_key, 2, sealed_ctx_entry, data::key_kind::shard,
                                   shard_key.shard());
}
/// The key of the manifest MAC.
inline data::secret_key sealed_manifest_key(const data::secret_key& master) {
  return secret_key_access::derive(master, std::numeric_limits<std::uint64_t>::max(),
                                   sealed_ctx_manifest, data::key_kind::master, 0);
}

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

namespace tutti::data {

/// Shard key `shard` derived from a master key (what `--export-shard-key` writes).
/// @throws tutti::invalid_argument unless `master` is a master key.
inline secret_key derive_shard_key(const secret_key& master, std::uint32_t shard) {
  TUTTI_EXPECTS(
      master.kind() == key_kind::master, "tutti::data::derive_shard_key",
      "the key is shard " + std::to_string(master.shard()) + "'s key; expected the master key");
  return detail::sealed_shard_key(master, shard);
}

/// Writes `key` to a new file with mode 0600 (an existing file is never overwritten). Format:
/// "tutti-key 1", "kind master" or "kind shard" and "shard I", "id <key id>", "key <hex>".
inline void write_key_file(const std::filesystem::path& path, const secret_key& key) {
  std::string head = "tutti-key 1\nkind ";
  head += key.kind() == key_kind::master ? "master\n"
                                         : "shard\nshard " + std::to_string(key.shard()) + "\n";
  head += "id " + key.id() + "\nkey ";
  detail::secure_buffer text(head.size() + 2 * secret_key::size + 2);
  std::memcpy(text.data(), head.data(), head.size());
  sodium_bin2hex(text.data() + head.size(), 2 * secret_key::size + 1, key.data(), secret_key::size);
  text.data()[head.size() + 2 * secret_key::size] = '\n';
  detail::write_new_file(path, text.data(), head.size() + 2 * secret_key::size + 1, 0600, true,
                         "tutti::data::write_key_file");
}

/// Reads a key written by `write_key_file`, into guarded memory.
/// @throws tutti::data::key_file_error when the file is missing, not a regular file, readable or
/// writable by group or others (mode & 077), or not a tutti key file.
inline secret_key read_key_file(const std::filesystem::path& path) {
  const std::string name = "key file '" + path.string() + "'";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw key_file_error(name + ": cannot open: " + detail::errno_text(err));
  }
  struct ::stat st {};
  // fstat on the open descriptor: the mode checked is the mode of the bytes read.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw key_file_error(name + ": not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw key_file_error(name + " is accessible by group or others (mode " + mode +
                         "); a key must be private to its owner: chmod 600 '" + path.string() +
                         "'");
  }
  if (static_cast<std::uint64_t>(st.st_size) > detail::sealed_max_key_file) {
    ::close(fd);
    throw key_file_error(name + ": " + std::to_string(st.st_size) + " bytes; not a tutti key file");
  }
  detail::secure_buffer text(detail::sealed_max_key_file);
  std::size_t got = 0;
  while (got < text.size()) {
    ssize_t r = ::read(fd, text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);

  // Parse "name value" lines in place, without copying the key's hex into ordinary memory.
  std::string_view all(text.data(), got);
  auto not_key = [&](const std::string& why) {
    return key_file_error(name + ": not a tutti key file (" + why + ")");
  };
  std::string_view magic, kind, shard_text, id, hex;
  std::size_t pos = 0;
  while (pos < all.size()) {
    std::size_t end = all.find('\n', pos);
    if (end == std::string_view::npos) end = all.size();
    std::string_view line = all.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::size_t sp = line.find(' ');
    std::string_view k = line.substr(0, sp),
                     v = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    if (k == "tutti-key")
      magic = v;
    else if (k == "kind")
      kind = v;
    else if (k == "shard")
      shard_text = v;
    else if (k == "id")
      id = v;
    else if (k == "key")
      hex = v;
    else
      throw not_key("unknown line '" + std::string(k) + "'");
  }
  if (magic != "1") throw not_key("expected a first line 'tutti-key 1'");
  if (kind != "master" && kind != "shard") throw not_key("expected 'kind master' or 'kind shard'");
  std::uint32_t shard = 0;
  if (kind == "shard") {
    if (shard_text.empty() || shard_text.size() > 9 ||
        shard_text.find_first_not_of("0123456789") != std::string_view::npos)
      throw not_key("a shard key needs a line 'shard I'");
    shard = static_cast<std::uint32_t>(std::stoul(std::string(shard_text)));
  }
  secret_key key = detail::secret_key_access::blank(
      kind == "master" ? key_kind::master : key_kind::shard, shard);
  std::size_t bin_len = 0;
  if (hex.size() != 2 * secret_key::size ||
      sodium_hex2bin(detail::secret_key_access::bytes(key), secret_key::size, hex.data(),
                     hex.size(), nullptr, &bin_len, nullptr) != 0 ||
      bin_len != secret_key::size)
    throw not_key("expected a line 'key' with " + std::to_string(2 * secret_key::size) +
                  " hex digits");
  if (!id.empty() && id != key.id())
    throw key_file_error(name + ": the key does not match its recorded id " + std::string(id) +
                         " (the file was edited or damaged)");
  return key;
}

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
      out.implicit = d.implicit;
      digest = blk.dataset_digest;
      with_time = blk.with_time;
      first = false;
    } else if (d.user_ids != out.user_ids || d.item_ids != out.item_ids ||
               d.implicit != out.implicit || blk.dataset_digest != digest ||
               blk.with_time != with_time) {
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
