// SPDX-License-Identifier: Apache-2.0
/// @file detail/checked_file.hpp
/// @brief `write_file_replacing`: a whole file written through a temporary beside it, every
/// write and the close checked, synced, then renamed over the target.
#pragma once

#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace tutti::detail {

/// Writes `text` to `path`: into `path.tmp-<pid>` beside it (so the rename stays on one file
/// system), each write checked, fsynced, closed and checked, then renamed over `path`. A reader
/// sees the old file or the whole new one; a full disk, a file-size limit or a folder that
/// cannot be written throws `tutti::error` naming `fn`, the file and the reason, and leaves
/// `path` as it was.
inline void write_file_replacing(const std::filesystem::path& path, std::string_view text,
                                 const char* fn) {
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw error(std::string(fn) + ": cannot create '" + tmp.string() + "' (to write '" +
                path.string() + "'): " + errno_text(err));
  }
  bool ok = true;
  int err = 0;
  const char* p = text.data();
  std::size_t left = text.size();
  while (ok && left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = false;
      err = w < 0 ? errno : ENOSPC;
      break;
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    err = errno;
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw error(std::string(fn) + ": cannot write '" + path.string() + "': " + errno_text(err));
  }
}

}  // namespace tutti::detail
