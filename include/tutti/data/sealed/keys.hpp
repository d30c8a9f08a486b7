// SPDX-License-Identifier: Apache-2.0
/// @file data/sealed/keys.hpp
/// @brief Keys of sealed data: `tutti::data::secret_key` (guarded memory, move-only), the
/// derivation of shard, stream, entry and manifest keys from a master key, and key files
/// (`write_key_file`, `read_key_file`: mode 0600, never overwritten).
///
/// Keys: master (32 random bytes) --crypto_kdf(id = s, "tuttishd")--> shard key s. From a shard
/// key come its stream key (id 1, "tuttistr") and its entry MAC key (id 2, "tuttient"); from the
/// master the manifest MAC key (id 2^64-1, "tuttiman"). A key id is BLAKE2b-128 keyed with the key
/// over a fixed label: it names a key without revealing it.
#pragma once

#include <tutti/data/detail/sodium.hpp>
#include <tutti/data/sealed/files.hpp>
#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace tutti::data {

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

}  // namespace tutti::data

namespace tutti::detail {

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
/// @throws tutti::data::key_file_error when the file is missing, not a regular file (a named
/// pipe is refused, never waited on), owned by another user than this process's (or root),
/// readable or writable by group or others (mode & 077), or not a tutti key file.
inline secret_key read_key_file(const std::filesystem::path& path) {
  const std::string name = "key file '" + path.string() + "'";
  // O_NONBLOCK: opening a named pipe returns at once (instead of waiting for a writer), and
  // fstat below refuses it; it changes nothing for a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    ::close(fd);
    throw key_file_error(name + " is owned by user " + std::to_string(st.st_uid) +
                         ", not by this process's user " + std::to_string(::geteuid()) +
                         " (or root); a key must belong to whoever uses it");
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

}  // namespace tutti::data
