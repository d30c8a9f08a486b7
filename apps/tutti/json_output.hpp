// SPDX-License-Identifier: Apache-2.0
// One rule for every JSON file the program writes: written whole through a temporary file and
// renamed (detail/checked_file.hpp), or not at all with an error naming the file and the reason;
// text that is not valid UTF-8 (a path or an id read from a file) is written with each invalid
// byte replaced by U+FFFD instead of failing after the work.
#pragma once

#include <tutti/detail/checked_file.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace tutti::cli {

/// `j` as text, indented by `indent` (-1: one line), invalid UTF-8 replaced by U+FFFD.
inline std::string json_text(const nlohmann::json& j, int indent = 2) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
}

/// Writes `j` to `path` (see json_text); throws `tutti::error` naming `fn`, the file and the
/// reason, leaving a previous file there as it was.
inline void write_json_file(const std::string& path, const nlohmann::json& j, const char* fn,
                            int indent = 2) {
  tutti::detail::write_file_replacing(path, json_text(j, indent), fn);
}

}  // namespace tutti::cli
