// SPDX-License-Identifier: Apache-2.0
/// @file checkpoint.hpp
/// @brief Checkpoint files: a versioned, checksummed binary format, atomic writes that keep the
/// last K, and finding the newest valid checkpoint of a directory. Format: docs/checkpoints.md.
#pragma once

#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace tutti {

/// Thrown for a checkpoint that cannot be used (or written): names the file and what is wrong.
/// The message reads `file: what`.
class checkpoint_error : public error {
 public:
  checkpoint_error(std::string file, const std::string& what)
      : error(file + ": " + what), m_file(std::move(file)) {}
  /// The checkpoint file (or the name given to `decode_checkpoint`).
  const std::string& file() const noexcept { return m_file; }

 private:
  std::string m_file;
};

/// Everything needed to continue a run exactly.
struct checkpoint_state {
  std::uint64_t config_digest = 0;  ///< digest of the options that change the result
  /// (field name, value as text), e.g. {"batch","4096"}: lets a resume name the differing fields.
  std::vector<std::pair<std::string, std::string>> config{};
  std::int32_t world_size = 1;         ///< world size of the run that wrote it (>= 1)
  std::uint64_t seed = 0;              ///< sampler/initialisation seed
  std::uint64_t epoch = 0;             ///< epoch in progress (0-based)
  std::uint64_t step_in_epoch = 0;     ///< steps of that epoch already applied
  std::uint64_t global_step = 0;       ///< steps applied over the whole run
  std::uint64_t samples_in_epoch = 0;  ///< real samples of this epoch already consumed (all ranks)
  /// Dataset positions consumed this epoch, when the writer re-sharded (may be empty).
  std::vector<std::uint64_t> consumed{};
  double epoch_loss_sum = 0;             ///< running train-loss sum of the epoch in progress
  double epoch_weight_sum = 0;           ///< running weight sum of the epoch in progress
  std::vector<std::uint64_t> rng{};      ///< rng/generator state words (may be empty)
  std::vector<float> parameters{};       ///< parameter arena, stored bitwise
  std::vector<float> optimizer_state{};  ///< optimizer-state arena, stored bitwise
  std::string schedule{};                ///< schedule name/description (informational)
  std::string note{};                    ///< free text (e.g. "SIGTERM", "periodic")
};

/// Constants of the file format (docs/checkpoints.md).
struct checkpoint_format {
  /// The first 8 bytes of every checkpoint file.
  static constexpr std::string_view magic = "TUTTICK1";
  /// The format version this build writes and the only one it reads.
  static constexpr std::uint32_t version = 1;
  /// Bytes of the header: magic, version, total length.
  static constexpr std::size_t header_size = 20;
  /// Offset of the first variable-length field (the schedule string).
  static constexpr std::size_t fixed_size = 88;
  /// The smallest valid file: every string and array empty.
  static constexpr std::size_t min_size = fixed_size + 7 * 8 + 4;
};

namespace detail {

/// CRC-32 (zlib's, the one of gzip and PNG) of `bytes`, continuing from `crc`.
inline std::uint32_t checkpoint_crc32(std::span<const unsigned char> bytes, std::uint32_t crc = 0) {
  uLong c = crc;
  // zlib's crc32 takes a 32-bit length; an arena of several GB is fed in pieces.
  constexpr std::size_t piece = std::size_t{1} << 30;
  while (!bytes.empty()) {
    const std::size_t n = std::min(bytes.size(), piece);
    c = ::crc32(c, bytes.data(), static_cast<uInt>(n));
    bytes = bytes.subspan(n);
  }
  return static_cast<std::uint32_t>(c);
}

/// Serialises a state field by field to `sink(const unsigned char*, std::size_t)`, keeping the
/// running CRC, so that a file can be written without a second copy of the arenas in memory.
template <class Sink>
class checkpoint_encoder {
 public:
  explicit checkpoint_encoder(Sink& sink) : m_sink(sink) {}

  void bytes(const void* data, std::size_t n) {
    if (n == 0) return;
    const auto* p = static_cast<const unsigned char*>(data);
    m_crc = checkpoint_crc32({p, n}, m_crc);
    m_sink(p, n);
  }
  void u32(std::uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b, 4);
  }
  void u64(std::uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b, 8);
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64s(const std::vector<std::uint64_t>& v) {
    u64(v.size());
    words(v.data(), v.size());
  }
  void f32s(const std::vector<float>& v) {
    u64(v.size());
    words(v.data(), v.size());
  }
  /// Writes the CRC of everything written so far (the file's last field).
  void finish() {
    const std::uint32_t crc = m_crc;
    u32(crc);
  }

 private:
  /// Fixed-width values as little-endian bytes; bitwise, so NaN payloads and -0 survive.
  template <class T>
  void words(const T* data, std::size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
      bytes(data, n * sizeof(T));
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        if constexpr (sizeof(T) == 4)
          u32(std::bit_cast<std::uint32_t>(data[i]));
        else
          u64(std::bit_cast<std::uint64_t>(data[i]));
      }
    }
  }

  Sink& m_sink;
  std::uint32_t m_crc = 0;
};

/// Bytes of the encoded state, checksum included.
inline std::uint64_t checkpoint_encoded_size(const checkpoint_state& s) {
  std::uint64_t n = checkpoint_format::fixed_size;
  n += 8 + s.schedule.size() + 8 + s.note.size();
  n += 8;
  for (const auto& [name, value] : s.config) n += 16 + name.size() + value.size();
  n += 8 + 8 * s.consumed.size() + 8 + 8 * s.rng.size();
  n += 8 + 4 * s.parameters.size() + 8 + 4 * s.optimizer_state.size();
  return n + 4;
}

/// Writes the whole file (header, fields, checksum) to `sink`.
template <class Sink>
void encode_checkpoint_to(const checkpoint_state& s, Sink& sink) {
  TUTTI_EXPECTS(s.world_size >= 1, "tutti::encode_checkpoint",
                "world_size is " + std::to_string(s.world_size) + "; expected >= 1");
  checkpoint_encoder<Sink> out(sink);
  out.bytes(checkpoint_format::magic.data(), checkpoint_format::magic.size());
  out.u32(checkpoint_format::version);
  out.u64(checkpoint_encoded_size(s));
  out.u64(s.config_digest);
  out.u32(static_cast<std::uint32_t>(s.world_size));
  out.u64(s.seed);
  out.u64(s.epoch);
  out.u64(s.step_in_epoch);
  out.u64(s.global_step);
  out.u64(s.samples_in_epoch);
  out.u64(std::bit_cast<std::uint64_t>(s.epoch_loss_sum));
  out.u64(std::bit_cast<std::uint64_t>(s.epoch_weight_sum));
  out.str(s.schedule);
  out.str(s.note);
  out.u64(s.config.size());
  for (const auto& [name, value] : s.config) {
    out.str(name);
    out.str(value);
  }
  out.u64s(s.consumed);
  out.u64s(s.rng);
  out.f32s(s.parameters);
  out.f32s(s.optimizer_state);
  out.finish();
}

/// Reads fields from the checked body of a file; every length is compared with the bytes left
/// before anything is allocated, so a corrupt length throws instead of allocating or overrunning.
class checkpoint_decoder {
 public:
  checkpoint_decoder(std::span<const unsigned char> body, std::size_t offset,
                     const std::string& name)
      : m_body(body), m_offset(offset), m_name(name) {}

  std::uint32_t u32(const char* field) {
    const unsigned char* p = take(4, field);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{p[i]} << (8 * i);
    return v;
  }
  std::uint64_t u64(const char* field) {
    const unsigned char* p = take(8, field);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
    return v;
  }
  std::string str(const char* field) {
    const std::uint64_t n = count(1, field);
    const unsigned char* p = take(static_cast<std::size_t>(n), field);
    return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
  }
  /// An element count, checked against the bytes left: each element takes >= `min_bytes`.
  std::uint64_t count(std::size_t min_bytes, const char* field) {
    const std::uint64_t offset = m_offset + m_pos;
    const std::uint64_t n = u64(field);
    if (n > left() / min_bytes)
      fail("inconsistent length: field '" + std::string(field) + "' at offset " +
           std::to_string(offset) + " says " + std::to_string(n) + " entries of " +
           std::to_string(min_bytes) + "+ bytes, but only " + std::to_string(left()) +
           " bytes remain before the checksum");
    return n;
  }
  std::vector<std::uint64_t> u64s(const char* field) {
    std::vector<std::uint64_t> v(static_cast<std::size_t>(count(8, field)));
    words(v.data(), v.size(), field);
    return v;
  }
  std::vector<float> f32s(const char* field) {
    std::vector<float> v(static_cast<std::size_t>(count(4, field)));
    words(v.data(), v.size(), field);
    return v;
  }
  std::size_t left() const noexcept { return m_body.size() - m_pos; }
  std::size_t offset() const noexcept { return m_offset + m_pos; }
  [[noreturn]] void fail(const std::string& what) const { throw checkpoint_error(m_name, what); }

 private:
  const unsigned char* take(std::size_t n, const char* field) {
    if (n > left())
      fail("inconsistent length: field '" + std::string(field) + "' at offset " +
           std::to_string(offset()) + " needs " + std::to_string(n) + " bytes, but only " +
           std::to_string(left()) + " remain before the checksum");
    const unsigned char* p = m_body.data() + m_pos;
    m_pos += n;
    return p;
  }
  template <class T>
  void words(T* data, std::size_t n, const char* field) {
    const unsigned char* p = take(n * sizeof(T), field);  // n was checked by count()
    if constexpr (std::endian::native == std::endian::little) {
      if (n != 0) std::memcpy(data, p, n * sizeof(T));
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        std::uint64_t v = 0;
        for (std::size_t b = 0; b < sizeof(T); ++b)
          v |= std::uint64_t{p[i * sizeof(T) + b]} << (8 * b);
        if constexpr (sizeof(T) == 4)
          data[i] = std::bit_cast<T>(static_cast<std::uint32_t>(v));
        else
          data[i] = std::bit_cast<T>(v);
      }
    }
  }

  std::span<const unsigned char> m_body;
  std::size_t m_offset;
  std::size_t m_pos = 0;
  const std::string& m_name;
};

inline std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

inline std::uint32_t load_le32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{p[i]} << (8 * i);
  return v;
}

inline std::string hex32(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", static_cast<unsigned>(v));
  return buf;
}

/// `text` with non-printable bytes as \xNN, for naming a bad magic.
inline std::string printable(std::span<const unsigned char> text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  return out;
}

/// Checks the header of a file of `size` bytes whose first bytes are `head` (all of them, up to
/// the header's 20): magic, version, and that the announced total length is the file's size.
/// So truncation is reported before any field is parsed, or any large buffer allocated.
inline void check_checkpoint_header(std::span<const unsigned char> head, std::uint64_t size,
                                    const std::string& name) {
  using fmt = checkpoint_format;
  const auto fail = [&name](const std::string& what) {
    throw checkpoint_error(name, what);
  };
  const std::size_t magic_seen = std::min(head.size(), fmt::magic.size());
  if (magic_seen > 0 && std::memcmp(head.data(), fmt::magic.data(), magic_seen) != 0)
    fail("not a tutti checkpoint: bad magic \"" + printable(head.first(magic_seen)) +
         "\" (expected \"" + std::string(fmt::magic) + "\")");
  if (size < fmt::magic.size() + 4)
    fail("truncated: " + std::to_string(size) + " bytes, shorter than the " +
         std::to_string(fmt::header_size) + "-byte header");
  const std::uint32_t version = load_le32(head.data() + 8);
  if (version != fmt::version)
    fail(version > fmt::version
             ? "format version " + std::to_string(version) +
                   " is newer than this build of tutti reads (version " +
                   std::to_string(fmt::version) + "); resume with the tutti that wrote it"
             : "unknown format version " + std::to_string(version) + " (this build reads version " +
                   std::to_string(fmt::version) + ")");
  if (size < fmt::header_size)
    fail("truncated: " + std::to_string(size) + " bytes, shorter than the " +
         std::to_string(fmt::header_size) + "-byte header");
  const std::uint64_t total = load_le64(head.data() + 12);
  if (total < fmt::min_size)
    fail("inconsistent length: the header says " + std::to_string(total) +
         " bytes, less than the smallest checkpoint (" + std::to_string(fmt::min_size) + ")");
  if (size < total)
    fail("truncated: " + std::to_string(size) + " of the " + std::to_string(total) +
         " bytes the header announces");
  if (size > total)
    fail("inconsistent length: " + std::to_string(size) + " bytes, but the header says " +
         std::to_string(total) + " (trailing data)");
}

/// The global step a checkpoint file name encodes (`ckpt-<digits>.tck`), or nullopt for any
/// other name, temporary files included.
inline std::optional<std::uint64_t> checkpoint_step_of(const std::string& filename) {
  constexpr std::string_view prefix = "ckpt-", suffix = ".tck";
  std::string_view name = filename;
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return std::nullopt;
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::uint64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

/// `ckpt-<global_step zero-padded to 12 digits>.tck`.
inline std::string checkpoint_filename(std::uint64_t global_step) {
  std::string digits = std::to_string(global_step);
  if (digits.size() < 12) digits.insert(0, 12 - digits.size(), '0');
  return "ckpt-" + digits + ".tck";
}

/// Temporary files start with this, so no crash can leave a file named `ckpt-*.tck` behind.
inline constexpr std::string_view checkpoint_temp_prefix = ".tmp-ckpt-";

/// A file descriptor closed on scope exit.
class unique_fd {
 public:
  explicit unique_fd(int fd = -1) noexcept : m_fd(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() {
    if (m_fd >= 0) ::close(m_fd);
  }
  int get() const noexcept { return m_fd; }
  /// Closes now and reports close()'s error (0 on success): a late write error shows here.
  int close() noexcept {
    const int fd = std::exchange(m_fd, -1);
    return fd >= 0 && ::close(fd) != 0 ? errno : 0;
  }

 private:
  int m_fd;
};

/// Buffered writer to a file descriptor; errors are kept and reported by `flush()`.
class fd_sink {
 public:
  explicit fd_sink(int fd) : m_fd(fd) { m_buffer.reserve(capacity); }
  void operator()(const unsigned char* p, std::size_t n) {
    if (m_error != 0) return;
    if (n >= capacity) {
      flush();
      write_all(p, n);
      return;
    }
    if (m_buffer.size() + n > capacity) flush();
    m_buffer.insert(m_buffer.end(), p, p + n);
  }
  /// Writes what is buffered; returns the first errno met so far (0 when none).
  int flush() {
    if (m_error == 0 && !m_buffer.empty()) write_all(m_buffer.data(), m_buffer.size());
    m_buffer.clear();
    return m_error;
  }

 private:
  static constexpr std::size_t capacity = std::size_t{1} << 20;
  void write_all(const unsigned char* p, std::size_t n) {
    while (n > 0 && m_error == 0) {
      const ::ssize_t w = ::write(m_fd, p, std::min(n, std::size_t{1} << 30));
      if (w < 0) {
        if (errno != EINTR) m_error = errno;
        continue;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  int m_fd;
  int m_error = 0;
  std::vector<unsigned char> m_buffer;
};

/// The entries of `dir`, listed before any is removed (removing while iterating is unspecified).
inline std::vector<std::filesystem::path> list_directory(const std::filesystem::path& dir,
                                                         std::error_code& ec) {
  std::vector<std::filesystem::path> out;
  std::filesystem::directory_iterator it(dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    out.push_back(it->path());
  return out;
}

/// Makes a directory entry (a rename, a new file) durable.
inline int fsync_directory(const std::filesystem::path& dir) {
  unique_fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return errno;
  // Some file systems cannot sync a directory (EINVAL); their renames are as durable as it gets.
  if (::fsync(fd.get()) != 0 && errno != EINVAL) return errno;
  return fd.close();
}

}  // namespace detail

/// Serialises a state to the versioned binary format of docs/checkpoints.md.
/// Throws `tutti::invalid_argument` when `state.world_size < 1`.
inline std::vector<unsigned char> encode_checkpoint(const checkpoint_state& state) {
  std::vector<unsigned char> out;
  out.reserve(static_cast<std::size_t>(detail::checkpoint_encoded_size(state)));
  auto sink = [&out](const unsigned char* p, std::size_t n) {
    out.insert(out.end(), p, p + n);
  };
  detail::encode_checkpoint_to(state, sink);
  return out;
}

/// Parses bytes written by `encode_checkpoint`. Throws `tutti::checkpoint_error` naming `name`
/// for a bad magic, an unknown version, truncation, a checksum mismatch or inconsistent lengths.
/// Truncation and the checksum are checked before any field is parsed.
inline checkpoint_state decode_checkpoint(std::span<const unsigned char> bytes,
                                          const std::string& name) {
  const std::size_t size = bytes.size();
  detail::check_checkpoint_header(bytes.first(std::min(size, checkpoint_format::header_size)), size,
                                  name);
  const auto fail = [&name](const std::string& what) {
    throw checkpoint_error(name, what);
  };
  const std::uint32_t stored = detail::load_le32(bytes.data() + size - 4);
  const std::uint32_t computed = detail::checkpoint_crc32(bytes.first(size - 4));
  if (stored != computed)
    fail("checksum mismatch: stored CRC-32 " + detail::hex32(stored) + ", computed " +
         detail::hex32(computed) + "; the file is corrupt");

  using fmt = checkpoint_format;
  detail::checkpoint_decoder in(bytes.subspan(fmt::header_size, size - 4 - fmt::header_size),
                                fmt::header_size, name);
  checkpoint_state s;
  s.config_digest = in.u64("config_digest");
  s.world_size = static_cast<std::int32_t>(in.u32("world_size"));
  s.seed = in.u64("seed");
  s.epoch = in.u64("epoch");
  s.step_in_epoch = in.u64("step_in_epoch");
  s.global_step = in.u64("global_step");
  s.samples_in_epoch = in.u64("samples_in_epoch");
  s.epoch_loss_sum = std::bit_cast<double>(in.u64("epoch_loss_sum"));
  s.epoch_weight_sum = std::bit_cast<double>(in.u64("epoch_weight_sum"));
  s.schedule = in.str("schedule");
  s.note = in.str("note");
  const std::uint64_t fields = in.count(16, "config");
  s.config.reserve(static_cast<std::size_t>(fields));
  for (std::uint64_t i = 0; i < fields; ++i) {
    std::string field = in.str("config name");
    s.config.emplace_back(std::move(field), in.str("config value"));
  }
  s.consumed = in.u64s("consumed");
  s.rng = in.u64s("rng");
  s.parameters = in.f32s("parameters");
  s.optimizer_state = in.f32s("optimizer_state");
  if (in.left() != 0)
    in.fail("inconsistent length: " + std::to_string(in.left()) +
            " bytes between the last field (ending at offset " + std::to_string(in.offset()) +
            ") and the checksum");
  if (s.world_size < 1)
    in.fail("world_size is " + std::to_string(s.world_size) + "; expected >= 1");
  return s;
}

/// Reads and checks one checkpoint file; throws `tutti::checkpoint_error` naming it when it
/// cannot be read or is not a valid checkpoint.
inline checkpoint_state read_checkpoint(const std::filesystem::path& file) {
  const std::string name = file.string();
  detail::unique_fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw checkpoint_error(name, "cannot open: " + detail::errno_text(errno));
  struct ::stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw checkpoint_error(name, "cannot stat: " + detail::errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw checkpoint_error(name, "not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  std::vector<unsigned char> bytes;
  std::size_t got = 0;
  // Reads into bytes[got, want); stops short only where the file ends early.
  const auto read_to = [&](std::size_t want) {
    bytes.resize(want);
    while (got < want) {
      const ::ssize_t r =
          ::read(fd.get(), bytes.data() + got, std::min(want - got, std::size_t{1} << 30));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw checkpoint_error(name, "cannot read: " + detail::errno_text(errno));
      }
      if (r == 0) break;  // shrank while being read: decode reports the truncation
      got += static_cast<std::size_t>(r);
    }
    bytes.resize(got);
  };
  // The header first: a file that is not a checkpoint, or is truncated, is not read whole.
  read_to(static_cast<std::size_t>(std::min<std::uint64_t>(size, checkpoint_format::header_size)));
  detail::check_checkpoint_header(bytes, size, name);
  read_to(static_cast<std::size_t>(size));
  return decode_checkpoint(bytes, name);
}

/// Writes `DIR/ckpt-<global_step, 12 digits>.tck` atomically: a temporary file in DIR (named
/// `.tmp-ckpt-*`), write, fsync it, rename, fsync DIR. Then removes all but the newest `keep`
/// checkpoints by step (the file just written always stays) and leftover temporaries of
/// interrupted writes. DIR is created when missing; one writer per directory. Returns the path.
/// A crash at any point never leaves a half-written file named `ckpt-*.tck`. Throws
/// `tutti::checkpoint_error` naming the file when it cannot be written (nothing is left behind),
/// `tutti::invalid_argument` for `keep == 0` or `state.world_size < 1`.
inline std::filesystem::path write_checkpoint(const std::filesystem::path& dir,
                                              const checkpoint_state& state, std::size_t keep = 3) {
  namespace fs = std::filesystem;
  TUTTI_EXPECTS(keep >= 1, "tutti::write_checkpoint",
                "keep is 0; expected >= 1 (the checkpoint just written is always kept)");
  TUTTI_EXPECTS(state.world_size >= 1, "tutti::write_checkpoint",
                "world_size is " + std::to_string(state.world_size) + "; expected >= 1");
  const std::string filename = detail::checkpoint_filename(state.global_step);
  const fs::path target = dir / filename;
  const auto fail = [&target](const std::string& what, int err) {
    throw checkpoint_error(target.string(),
                           "cannot write checkpoint: " + what + ": " + detail::errno_text(err));
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("create directory " + dir.string(), ec.value());

  static std::atomic<unsigned> counter{0};
  fs::path temp;
  int raw_fd = -1;
  for (int attempt = 0; raw_fd < 0; ++attempt) {
    temp = dir / (std::string(detail::checkpoint_temp_prefix) + filename.substr(5) + "." +
                  std::to_string(::getpid()) + "." + std::to_string(counter++));
    raw_fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (raw_fd < 0 && (errno != EEXIST || attempt >= 100)) fail("open " + temp.string(), errno);
  }
  detail::unique_fd fd(raw_fd);
  const auto discard = [&temp] {
    std::error_code ignored;
    fs::remove(temp, ignored);
  };
  try {
    detail::fd_sink sink(fd.get());
    detail::encode_checkpoint_to(state, sink);
    if (const int err = sink.flush()) fail("write " + temp.string(), err);
    if (::fsync(fd.get()) != 0) fail("fsync " + temp.string(), errno);
    if (const int err = fd.close()) fail("close " + temp.string(), err);
    if (::rename(temp.c_str(), target.c_str()) != 0) fail("rename " + temp.string(), errno);
  } catch (...) {
    discard();
    throw;
  }
  // The file is whole either way; this error means its name might not survive a power loss.
  if (const int err = detail::fsync_directory(dir)) fail("fsync directory " + dir.string(), err);

  // Pruning is best effort: the new checkpoint is durable, and a file that cannot be removed
  // now is retried by the next write.
  std::vector<std::pair<std::uint64_t, fs::path>> older;
  for (const fs::path& file : detail::list_directory(dir, ec)) {
    const std::string name = file.filename().string();
    if (name == filename) continue;
    if (name.starts_with(detail::checkpoint_temp_prefix)) {
      fs::remove(file, ec);
    } else if (const auto step = detail::checkpoint_step_of(name)) {
      older.emplace_back(*step, file);
    }
  }
  std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) { return a > b; });
  for (std::size_t i = keep - 1; i < older.size(); ++i) fs::remove(older[i].second, ec);
  return target;
}

/// The newest valid checkpoint of a directory, the file it came from, and the newer ones skipped.
struct found_checkpoint {
  std::filesystem::path file{};  ///< the checkpoint read
  checkpoint_state state{};      ///< its contents
  /// Each newer `ckpt-*.tck` that was not valid, as "file: reason".
  std::vector<std::string> skipped{};
};

/// The newest checkpoint (by the step in its name) of `dir` that reads back valid. Invalid ones
/// (corrupt, truncated, wrong version, contents of another step than the name says) are skipped
/// and each is described in `skipped`. Temporary files of interrupted writes are not considered.
/// Empty when none is valid or `dir` has none or does not exist; throws
/// `tutti::checkpoint_error` when `dir` exists but cannot be listed.
inline std::optional<found_checkpoint> find_latest_checkpoint(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::nullopt;
  const std::vector<fs::path> files = detail::list_directory(dir, ec);
  if (ec) throw checkpoint_error(dir.string(), "cannot list checkpoints: " + ec.message());
  std::vector<std::pair<std::uint64_t, fs::path>> candidates;
  for (const fs::path& file : files)
    if (const auto step = detail::checkpoint_step_of(file.filename().string()))
      candidates.emplace_back(*step, file);
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a > b; });
  found_checkpoint found;
  for (auto& [step, file] : candidates) {
    try {
      checkpoint_state state = read_checkpoint(file);
      // A renamed file would be taken for another step; the contents decide.
      if (state.global_step != step)
        throw checkpoint_error(file.string(), "holds global_step " +
                                                  std::to_string(state.global_step) +
                                                  " but its name says " + std::to_string(step));
      found.file = std::move(file);
      found.state = std::move(state);
      return found;
    } catch (const checkpoint_error& e) {
      found.skipped.emplace_back(e.what());
    }
  }
  return std::nullopt;
}

/// Names the fields whose values differ between a checkpoint's config (`saved`) and the current
/// one (`now`); a field present on one side only differs. Fields named in `ignore` may differ
/// (e.g. "world_size"). A name given twice on one side counts with its first value. Order:
/// `saved`'s fields first, then those only in `now`; each name once. Empty means compatible.
inline std::vector<std::string> config_differences(
    const std::vector<std::pair<std::string, std::string>>& saved,
    const std::vector<std::pair<std::string, std::string>>& now,
    std::span<const std::string_view> ignore = {}) {
  using config = std::vector<std::pair<std::string, std::string>>;
  const auto lookup = [](const config& c, const std::string& name) -> const std::string* {
    for (const auto& [field, value] : c)
      if (field == name) return &value;
    return nullptr;
  };
  std::vector<std::string> differing;
  const auto consider = [&](const std::string& name) {
    if (std::find(ignore.begin(), ignore.end(), name) != ignore.end()) return;
    if (std::find(differing.begin(), differing.end(), name) != differing.end()) return;
    const std::string* a = lookup(saved, name);
    const std::string* b = lookup(now, name);
    if (a == nullptr || b == nullptr || *a != *b) differing.push_back(name);
  };
  for (const auto& entry : saved) consider(entry.first);
  for (const auto& entry : now) consider(entry.first);
  return differing;
}

}  // namespace tutti
