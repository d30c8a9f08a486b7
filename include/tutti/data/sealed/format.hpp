// SPDX-License-Identifier: Apache-2.0
/// @file data/sealed/format.hpp
/// @brief The bytes of a sealed shard: the row block (magic, header, both index maps, the rows'
/// columns) and its encryption into a shard file ("TUTTISB1", u32 chunk size, secretstream
/// header, then XChaCha20-Poly1305 chunks bound to their format version and shard).
/// Decoding and decryption are total: safe to feed arbitrary bytes.
#pragma once

#include <tutti/data/detail/sodium.hpp>
#include <tutti/data/id_names.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/data/sealed/files.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  /// The next `n` bytes as text; empty (and `ok` false) past the end.
  std::string_view text(std::size_t n) {
    if (!take(n)) return {};
    return {reinterpret_cast<const char*>(in.data() + at - n), n};
  }
  std::size_t left() const noexcept { return in.size() - at; }
};

inline constexpr std::uint32_t sealed_flag_implicit = 1;    ///< labels are 0/1
inline constexpr std::uint32_t sealed_flag_time = 2;        ///< rows carry timestamps
inline constexpr std::uint32_t sealed_flag_user_names = 4;  ///< user names follow the rows
inline constexpr std::uint32_t sealed_flag_item_names = 8;  ///< item names follow the rows

/// Appends `names` after the rows: per name, its byte count (u32) and its bytes.
inline void sealed_encode_names(le_writer& w, const data::id_names& names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string_view n = names[i];
    w.u32(static_cast<std::uint32_t>(n.size()));
    w.bytes(n.data(), n.size());
  }
}

/// Reads `count` names written by `sealed_encode_names`, each of which must be the name of its
/// code in `codes`; nullopt when they run past the end or a name does not match its code.
inline std::optional<data::id_names> sealed_decode_names(le_reader& r,
                                                         const std::vector<std::int64_t>& codes) {
  data::id_names names;
  for (const std::int64_t code : codes) {
    const std::uint32_t len = r.u32();
    const std::string_view n = r.text(len);
    if (!r.ok || data::name_code(n) != code) return std::nullopt;
    names.push_back(n);
  }
  return names;
}

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

/// Serialises rows [first, first + count) of `d` with both index maps, then the names of the
/// ids that have them.
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
  w.u32((d.implicit ? sealed_flag_implicit : 0u) | (with_time ? sealed_flag_time : 0u) |
        (d.user_names ? sealed_flag_user_names : 0u) |
        (d.item_names ? sealed_flag_item_names : 0u));
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
  if (d.user_names) sealed_encode_names(w, *d.user_names);
  if (d.item_names) sealed_encode_names(w, *d.item_names);
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
  if (flags > 15) throw bad("unknown flags " + std::to_string(flags));
  const bool with_time = (flags & sealed_flag_time) != 0;
  const bool with_names = (flags & (sealed_flag_user_names | sealed_flag_item_names)) != 0;
  blk.with_time = with_time;
  constexpr std::uint64_t max_index =
      static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
  if (n_users > max_index || n_items > max_index) throw bad("index space beyond 2^31-1");
  // Sizes are checked by division so that no product can overflow.
  if (n_users > r.left() / 8 || n_items > (r.left() - n_users * 8) / 8)
    throw bad("index maps run past the end");
  const std::uint64_t per_row = 12 + (with_time ? 8 : 0);
  const std::uint64_t after_maps = r.left() - (n_users + n_items) * 8;
  // Names, when present, follow the rows: the rows must fit; the end is checked after them.
  if (with_names ? after_maps / per_row < count
                 : after_maps % per_row != 0 || after_maps / per_row != count)
    throw bad("holds " + std::to_string(after_maps) + " bytes of rows; expected " +
              std::to_string(count) + " rows of " + std::to_string(per_row) + " bytes");
  if (blk.first_row > blk.total_rows || count > blk.total_rows - blk.first_row)
    throw bad("rows " + std::to_string(blk.first_row) + "+" + std::to_string(count) +
              " beyond the dataset's " + std::to_string(blk.total_rows));

  data::interactions& d = blk.rows;
  d.implicit = (flags & sealed_flag_implicit) != 0;
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
  for (const std::uint32_t axis : {sealed_flag_user_names, sealed_flag_item_names}) {
    if ((flags & axis) == 0) continue;
    const bool users = axis == sealed_flag_user_names;
    auto names = sealed_decode_names(r, users ? d.user_ids : d.item_ids);
    if (!names)
      throw bad(std::string(users ? "user" : "item") + " names are cut or do not match their ids");
    (users ? d.user_names : d.item_names) =
        std::make_shared<const data::id_names>(std::move(*names));
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

}  // namespace tutti::detail
