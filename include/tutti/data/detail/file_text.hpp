// SPDX-License-Identifier: Apache-2.0
/// @file data/detail/file_text.hpp
/// @brief `file_text`: a data file's bytes for the parser, mapped from the page cache where the
/// system can, read into memory where it cannot.
///
/// Reading a 253 MB log into a string copies every byte twice (the kernel's cache into a buffer,
/// the buffer into the string), on one thread, into memory touched for the first time; the
/// parser then reads it once. Mapping the file lets the parser's threads read the cached pages
/// where they are: no copy and no second quarter-gigabyte resident while the rows are built.
#pragma once

#include <tutti/data/detail/csv_text.hpp>

#include <cerrno>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define TUTTI_DETAIL_MAPS_FILES 1
#endif

namespace tutti::detail {

/// The bytes of the file at `path`, as `view()`: a read-only private mapping of a regular,
/// non-empty file where the system maps it, else the file read into memory (`csv_read_file`: a
/// pipe, a device, an empty file, a system without `mmap`). `fn` names the caller in errors.
/// A mapped file must not be truncated while it is read (its missing pages would raise SIGBUS):
/// as with any reader of a file another program rewrites, write the new file beside it and
/// rename it over the old one.
/// @throws tutti::error when the file cannot be opened or read.
class file_text {
 public:
  file_text(const std::string& path, const char* fn) {
#if defined(TUTTI_DETAIL_MAPS_FILES)
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw csv_file_error(fn, "open", path, errno);
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      const auto size = static_cast<std::size_t>(st.st_size);
      void* at = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (at != MAP_FAILED) {
        ::close(fd);
        ::madvise(at, size, MADV_WILLNEED);  // a hint: read ahead what the cache lacks
        m_mapped = static_cast<const char*>(at);
        m_size = size;
        return;
      }
    }
    ::close(fd);
#endif
    m_read = csv_read_file(path, fn);
  }
  file_text(const file_text&) = delete;
  file_text& operator=(const file_text&) = delete;
  file_text(file_text&& o) noexcept
      : m_mapped(std::exchange(o.m_mapped, nullptr)),
        m_size(std::exchange(o.m_size, 0)),
        m_read(std::move(o.m_read)) {
    o.m_read.clear();  // the moved-from object views nothing
  }
  file_text& operator=(file_text&&) = delete;
  ~file_text() {
#if defined(TUTTI_DETAIL_MAPS_FILES)
    if (m_mapped) ::munmap(const_cast<char*>(m_mapped), m_size);
#endif
  }

  /// The file's bytes, valid while this object lives.
  std::string_view view() const noexcept {
    return m_mapped ? std::string_view(m_mapped, m_size) : std::string_view(m_read);
  }
  /// True when the bytes are the file mapped (false: read into memory).
  bool mapped() const noexcept {
    return m_mapped != nullptr;
  }

 private:
  const char* m_mapped = nullptr;
  std::size_t m_size = 0;
  std::string m_read;
};

}  // namespace tutti::detail

#undef TUTTI_DETAIL_MAPS_FILES
