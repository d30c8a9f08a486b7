// SPDX-License-Identifier: Apache-2.0
/// @file detail/utf8.hpp
/// @brief `utf8_error_at`: where a text stops being UTF-8 (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF).
#pragma once

#include <cstddef>
#include <string_view>

namespace tutti::detail {

/// The offset of the first byte of `s` that does not begin a well-formed UTF-8 sequence (or
/// begins one cut short), or `std::string_view::npos` when all of `s` is UTF-8.
constexpr std::size_t utf8_error_at(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    // Length of the sequence and the range its second byte may take (Table 3-7 of Unicode).
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;  // overlong below U+0800
      if (b == 0xED) hi = 0x9F;  // the surrogates U+D800..U+DFFF
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;  // overlong below U+10000
      if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
    }
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      const unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
      if (c < min || c > max) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace tutti::detail
