// SPDX-License-Identifier: Apache-2.0
/// @file detail/checked_file.hpp
/// @brief `write_file_replacing`: a whole file written through a temporary beside it, every
/// write and the close checked, synced, then renamed over the target.
#pragma once

#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

namespace tutti::detail {

/// Writes all of `text` to `fd`, retrying short writes; 0, or the errno of the failed write
/// (ENOSPC for a write that wrote nothing).
inline int write_all(int fd, std::string_view text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : ENOSPC;
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  return 0;
}

/// Writes each of `parts` to `fd` in order; 0, or the errno of the first failed write.
inline int write_parts(int fd, std::initializer_list<std::string_view> parts) {
  int err = 0;
  for (auto part = parts.begin(); err == 0 && part != parts.end(); ++part)
    err = write_all(fd, *part);
  return err;
}

/// Writes `text` into an existing file that is not a regular one (a terminal, a pipe,
/// /dev/stdout, /dev/full): opened as it is, never replaced, every write and the close checked.
inline void write_into_special(const std::filesystem::path& path,
                               std::initializer_list<std::string_view> parts, const char* fn) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  int err = fd < 0 ? errno : write_parts(fd, parts);
  if (fd >= 0 && ::close(fd) != 0 && err == 0) err = errno;
  if (err != 0)
    throw error(std::string(fn) + ": cannot write '" + path.string() + "': " + errno_text(err));
}

/// Writes the concatenation of `parts` (a header and a body, say, without copying them
/// together) to `path`: into `path.tmp-<pid>` beside it (so the rename stays on one file
/// system), each write checked, fsynced, closed and checked, then renamed over `path`. A reader
/// sees the old file or the whole new one; a full disk, a file-size limit or a folder that
/// cannot be written throws `tutti::error` naming `fn`, the file and the reason, and leaves
/// `path` as it was. A `path` that is a symbolic link replaces the file it names (the link
/// stays); one that names a device, a pipe or a terminal is written into as it is.
inline void write_file_replacing(const std::filesystem::path& given,
                                 std::initializer_list<std::string_view> parts, const char* fn) {
  std::filesystem::path path = given;
  std::error_code ec;
  if (std::filesystem::is_symlink(given, ec)) {
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(given, ec);
    if (!ec) path = resolved;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      throw error(std::string(fn) + ": cannot write '" + given.string() +
                  "': it is a folder; expected the path of a file");
    write_into_special(path, parts, fn);
    return;
  }
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw error(std::string(fn) + ": cannot create '" + tmp.string() + "' (to write '" +
                given.string() + "'): " + errno_text(err));
  }
  int err = write_parts(fd, parts);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::filesystem::remove(tmp, ec);
    throw error(std::string(fn) + ": cannot write '" + given.string() + "': " + errno_text(err));
  }
}

/// Writes `text` to `path` as `write_file_replacing` of the parts above does.
inline void write_file_replacing(const std::filesystem::path& path, std::string_view text,
                                 const char* fn) {
  write_file_replacing(path, {text}, fn);
}

}  // namespace tutti::detail
