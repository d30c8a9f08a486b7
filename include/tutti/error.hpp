// SPDX-License-Identifier: Apache-2.0
/// @file error.hpp
/// @brief The exception hierarchy: every error tutti raises derives from `tutti::error`.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace tutti {

/// Base class of every exception tutti throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A function was called with an argument outside its contract.
/// The message reads `function(): what was wrong; what was expected`.
class invalid_argument : public error {
 public:
  using error::error;
};

/// Input data could not be read; carries the file, 1-based line and 1-based column.
class data_error : public error {
 public:
  data_error(std::string file, std::size_t line, std::size_t column, const std::string& what)
      : error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + what),
        m_file(std::move(file)),
        m_line(line),
        m_column(column) {}
  /// The file being read.
  const std::string& file() const noexcept { return m_file; }
  /// 1-based line number (the header is line 1).
  std::size_t line() const noexcept { return m_line; }
  /// 1-based column (field) number; 0 when the whole line is at fault.
  std::size_t column() const noexcept { return m_column; }

 private:
  std::string m_file;
  std::size_t m_line;
  std::size_t m_column;
};

/// A collective operation failed because some rank failed, or a rank waited past its timeout.
/// Every rank of the group receives one; `failed_rank()` names the rank at fault (-1 if unknown).
class collective_error : public error {
 public:
  collective_error(int failed_rank, const std::string& what)
      : error(what), m_failed_rank(failed_rank) {}
  /// The rank whose failure or delay caused this error, or -1.
  int failed_rank() const noexcept { return m_failed_rank; }

 private:
  int m_failed_rank;
};

/// Ranks disagree about something that must be identical on all of them (seed, data, size).
class mismatch_error : public error {
 public:
  using error::error;
};

namespace detail {
/// Throws `tutti::invalid_argument` with the message `fn(): what`.
[[noreturn]] inline void throw_invalid(const char* fn, const std::string& what) {
  throw invalid_argument(std::string(fn) + "(): " + what);
}
}  // namespace detail

}  // namespace tutti

/// Checks an argument precondition; on failure throws `tutti::invalid_argument`
/// with "fn(): msg". `msg` may be any expression convertible to std::string.
#define TUTTI_EXPECTS(cond, fn, msg)                      \
  do {                                                    \
    if (!(cond)) ::tutti::detail::throw_invalid(fn, msg); \
  } while (0)
