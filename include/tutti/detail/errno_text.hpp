// SPDX-License-Identifier: Apache-2.0
/// @file detail/errno_text.hpp
/// @brief `errno_text`: the text of an errno value, for error messages about files.
#pragma once

#include <string>
#include <system_error>

namespace tutti::detail {

/// The message of errno value `err` (thread-safe, unlike std::strerror).
inline std::string errno_text(int err) {
  return std::generic_category().message(err);
}

}  // namespace tutti::detail
