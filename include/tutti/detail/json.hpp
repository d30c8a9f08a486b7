// SPDX-License-Identifier: Apache-2.0
/// @file detail/json.hpp
/// @brief The JSON the library writes (the trainer's records, the plan, a link profile), built
/// with nlohmann-json: its objects keep their keys in the order written, and a number keeps the
/// significant digits its report asks for.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace tutti::detail {

/// A JSON value whose objects keep their keys in the order they were written.
using json = nlohmann::ordered_json;

/// Significant digits of the numbers in the trainer's JSON-lines records: 9 give back any float
/// exactly, and a record per step stays short.
inline constexpr int log_record_digits = 9;

/// Significant digits of the numbers in the JSON of a plan (`tutti plan --json`) and of a link
/// profile (`tutti bench allreduce --save-link`).
inline constexpr int report_digits = 12;

/// `v` rounded to `significant_digits` digits (`log_record_digits`, `report_digits`), written by
/// nlohmann-json as the shortest text that reads back as that value, and a whole number as an
/// integer ("512", not "512.0"); JSON has no infinity or NaN, so those become null.
inline json json_number(double v, int significant_digits) {
  if (!std::isfinite(v)) return nullptr;
  char text[40];
  std::snprintf(text, sizeof text, "%.*g", significant_digits, v);
  const double rounded = std::strtod(text, nullptr);
  if (std::abs(rounded) < 0x1p53 && rounded == std::floor(rounded))
    return static_cast<std::int64_t>(rounded);
  return rounded;
}

/// `*v` as `json_number` writes it, or null when there is no value.
inline json json_number(const std::optional<double>& v, int significant_digits) {
  return v ? json_number(*v, significant_digits) : json(nullptr);
}

/// `v` as a report writes it (`report_digits`): the numbers of a plan and of a link profile.
inline json report_number(double v) {
  return json_number(v, report_digits);
}

/// `*v` as a report writes it, or null when there is no value.
inline json report_number(const std::optional<double>& v) {
  return json_number(v, report_digits);
}

/// `*v`, or null when there is no value.
inline json json_optional(const std::optional<int>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace tutti::detail
