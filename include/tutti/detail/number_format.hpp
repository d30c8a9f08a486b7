// SPDX-License-Identifier: Apache-2.0
/// @file detail/number_format.hpp
/// @brief Text formatting shared by the trainer's messages, the plan and the benchmark (numbers,
/// units, escaping for XML); the JSON they write is built in detail/json.hpp.
#pragma once

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <string_view>

namespace tutti::detail {

/// printf into a std::string.
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string
sfmt(const char* f, ...) {
  va_list args;
  va_start(args, f);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, f, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, f, args);
  va_end(args);
  return out;
}

/// A number for a message: the shortest of %g's forms.
inline std::string num(double v) {
  return sfmt("%g", v);
}

/// Text escaped for XML/HTML content and attribute values.
inline std::string xml_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// Bytes in decimal units, as vendors and `--device-memory 16GB` count them: "8.00 GB".
inline std::string bytes_text(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (std::abs(b) >= 1000.0 && u < 5) {
    b /= 1000.0;
    ++u;
  }
  return u == 0 ? sfmt("%.0f B", b) : sfmt("%.2f %s", b, units[u]);
}

/// A count in SI units: 2.00 G, 35.0 k, 512.
inline std::string count_text(double v) {
  const char* units[] = {"", " k", " M", " G", " T"};
  int u = 0;
  while (std::abs(v) >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  if (u == 0) return sfmt("%.4g", v);
  return sfmt("%.3g%s", v, units[u]);
}

/// A share as a percentage with two decimals: 0.3 is "30.00%".
inline std::string percent_text(double share) {
  return sfmt("%.2f%%", 100.0 * share);
}

/// A throughput or other figure for a table: whole numbers from 1000 on, 4 significant digits
/// below.
inline std::string figure(double v) {
  if (!std::isfinite(v)) return "inf";
  return std::abs(v) >= 1000.0 ? sfmt("%.0f", v) : sfmt("%.4g", v);
}

/// A duration in the unit a person reads best: "850 us", "12.3 ms", "4.20 s", "12.5 min",
/// "20.0 h", "3.2 d".
inline std::string duration_text(double s) {
  if (!std::isfinite(s)) return "inf";
  if (s == 0) return "0 s";
  if (s < 1e-3) return sfmt("%.0f us", s * 1e6);
  if (s < 1.0) return sfmt("%.1f ms", s * 1e3);
  if (s < 120.0) return sfmt("%.2f s", s);
  if (s < 7200.0) return sfmt("%.1f min", s / 60.0);
  if (s < 3.0 * 86400.0) return sfmt("%.1f h", s / 3600.0);
  return sfmt("%.1f d", s / 86400.0);
}

}  // namespace tutti::detail
