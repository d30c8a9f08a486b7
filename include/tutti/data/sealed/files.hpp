// SPDX-License-Identifier: Apache-2.0
/// @file data/sealed/files.hpp
/// @brief The errors of sealed data (`tutti::data::sealed_error`, `tutti::data::key_file_error`)
/// and the file reads and writes every part of it shares: a new file that is never an
/// overwrite, and a bounded read that names the shard at fault.
#pragma once

#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
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

}  // namespace tutti::data

namespace tutti::detail {

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
  // O_NONBLOCK: a named pipe is refused below instead of waited on.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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

}  // namespace tutti::detail
