// SPDX-License-Identifier: Apache-2.0
/// @file data/csv.hpp
/// @brief `tutti::data::load_csv`: reads (user, item, label[, timestamp]) rows from CSV or TSV.
///
/// The whole file is read into memory and parsed with `std::from_chars`; a malformed row stops
/// the load with a `tutti::data_error` naming file, line and column. Quoting is not supported:
/// the formats this reads (MovieLens ratings, InstEval, exported logs) never quote numbers.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace tutti::data {

/// Which columns to read and how to read them; columns are chosen by their header name.
struct csv_options {
  std::string user_col = "userId";   ///< header name of the user id column
  std::string item_col = "movieId";  ///< header name of the item id column
  std::string label_col = "rating";  ///< header name of the label column
  /// Header name of the timestamp column; empty: none; "auto": `timestamp` when present.
  std::string timestamp_col = "";
  char delimiter = 0;     ///< field separator; 0: '\t' for a `.tsv` file, else ','
  bool implicit = false;  ///< labels are implicit feedback and must be 0 or 1
};

}  // namespace tutti::data

namespace tutti::detail {

/// Open-addressing map from a source id to its dense index, in order of first appearance.
/// A node-based map costs a cache miss per row; this one keeps the probe inline.
class dense_id_map {
 public:
  /// Dense index of `id`, adding it when new.
  std::int32_t operator()(std::int64_t id) {
    if ((m_ids.size() + 1) * 2 > m_slots.size()) grow();
    std::size_t mask = m_slots.size() - 1;
    std::size_t at = mix64(static_cast<std::uint64_t>(id)) & mask;
    while (true) {
      std::int32_t slot = m_slots[at];
      if (slot < 0) {
        auto dense = static_cast<std::int32_t>(m_ids.size());
        m_slots[at] = dense;
        m_ids.push_back(id);
        return dense;
      }
      if (m_ids[static_cast<std::size_t>(slot)] == id) return slot;
      at = (at + 1) & mask;
    }
  }
  /// Number of distinct ids seen.
  std::size_t size() const noexcept { return m_ids.size(); }
  /// Dense index -> source id; leaves the map empty.
  std::vector<std::int64_t> release() {
    m_slots.clear();
    return std::move(m_ids);
  }

 private:
  void grow() {
    std::size_t n = m_slots.empty() ? 1024 : m_slots.size() * 2;
    m_slots.assign(n, -1);
    for (std::size_t d = 0; d < m_ids.size(); ++d) {
      std::size_t at = mix64(static_cast<std::uint64_t>(m_ids[d])) & (n - 1);
      while (m_slots[at] >= 0) at = (at + 1) & (n - 1);
      m_slots[at] = static_cast<std::int32_t>(d);
    }
  }
  std::vector<std::int32_t> m_slots;
  std::vector<std::int64_t> m_ids;
};

/// The text of a field as an error message shows it: quoted, shortened, control bytes escaped.
inline std::string csv_show_field(std::string_view s) {
  constexpr std::size_t max_shown = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < max_shown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_shown) out += "...";
  return out + "'";
}

/// `s` without leading and trailing blanks (spaces; tabs too unless tab is the delimiter).
inline std::string_view csv_trim_field(std::string_view s, char delimiter) {
  auto blank = [delimiter](char c) {
    return c == ' ' || (c == '\t' && delimiter != '\t');
  };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

/// `s` without one leading '+' before a digit or '.', which from_chars does not take.
inline std::string_view csv_skip_plus(std::string_view s) {
  if (s.size() >= 2 && s[0] == '+' && ((s[1] >= '0' && s[1] <= '9') || s[1] == '.'))
    s.remove_prefix(1);
  return s;
}

/// True when `path` ends with ".tsv" (any case).
inline bool csv_has_tsv_extension(std::string_view path) {
  if (path.size() < 4) return false;
  std::string_view ext = path.substr(path.size() - 4);
  return ext[0] == '.' && (ext[1] | 0x20) == 't' && (ext[2] | 0x20) == 's' &&
         (ext[3] | 0x20) == 'v';
}

/// Splits one line (without its terminator) at `delimiter`.
inline void csv_split_fields(std::string_view line, char delimiter,
                             std::vector<std::string_view>& out) {
  out.clear();
  while (true) {
    auto* hit = static_cast<const char*>(std::memchr(line.data(), delimiter, line.size()));
    if (hit == nullptr) {
      out.push_back(line);
      return;
    }
    auto len = static_cast<std::size_t>(hit - line.data());
    out.push_back(line.substr(0, len));
    line.remove_prefix(len + 1);
  }
}

/// The line starting at `pos` without "\n" or "\r\n"; `next` receives the start of the next line.
inline std::string_view csv_next_line(std::string_view text, std::size_t pos, std::size_t& next) {
  std::size_t end = text.find('\n', pos);
  if (end == std::string_view::npos) {
    end = text.size();
    next = end;
  } else {
    next = end + 1;
  }
  std::string_view line = text.substr(pos, end - pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

/// True when `s` holds only whitespace.
inline bool csv_all_blank(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  return true;
}

}  // namespace tutti::detail

namespace tutti::data {

/// Parses CSV/TSV `text` already in memory; `source` names it in errors and, when
/// `opt.delimiter` is 0, picks the delimiter by its extension.
/// @throws tutti::data_error on malformed input (1-based line, header = line 1; 1-based field).
inline interactions parse_csv(std::string_view text, const csv_options& opt,
                              const std::string& source) {
  const char delim =
      opt.delimiter != 0 ? opt.delimiter : (detail::csv_has_tsv_extension(source) ? '\t' : ',');
  TUTTI_EXPECTS(
      delim != '\n' && delim != '\r', "tutti::data::parse_csv",
      "the delimiter is a line terminator; expected a field separator such as ',' or '\\t'");
  TUTTI_EXPECTS(!opt.user_col.empty() && !opt.item_col.empty() && !opt.label_col.empty(),
                "tutti::data::parse_csv",
                "a user, item or label column name is empty; expected the header names to read");

  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  // A NUL means a binary or truncated file; finding it once up front keeps the row loop lean.
  if (const void* nul = std::memchr(text.data(), '\0', text.size())) {
    auto at = static_cast<std::size_t>(static_cast<const char*>(nul) - text.data());
    std::size_t line_start = text.rfind('\n', at);
    line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
    std::size_t line_no = 1;
    for (std::size_t i = 0; i < line_start; ++i) line_no += text[i] == '\n';
    std::size_t column = 1;
    for (std::size_t i = line_start; i < at; ++i) column += text[i] == delim;
    throw data_error(source, line_no, column, "embedded NUL byte; expected text");
  }

  if (detail::csv_all_blank(text))
    throw data_error(source, 1, 0, "empty file; expected a header line naming the columns");

  std::size_t pos = 0;
  std::string_view header_line = detail::csv_next_line(text, 0, pos);
  std::vector<std::string_view> fields;
  detail::csv_split_fields(header_line, delim, fields);
  std::vector<std::string_view> header;
  header.reserve(fields.size());
  for (auto f : fields) header.push_back(detail::csv_trim_field(f, delim));
  const std::size_t n_cols = header.size();

  auto header_list = [&] {
    std::string s;
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (i) s += ", ";
      s += detail::csv_show_field(header[i]);
    }
    return s;
  };
  auto find_column = [&](const std::string& name, bool required) -> std::size_t {
    std::size_t found = n_cols;
    for (std::size_t i = 0; i < n_cols; ++i) {
      if (header[i] != name) continue;
      if (found != n_cols)
        throw data_error(source, 1, i + 1,
                         "column '" + name + "' appears twice (fields " +
                             std::to_string(found + 1) + " and " + std::to_string(i + 1) +
                             "); expected one column of that name");
      found = i;
    }
    if (found == n_cols && required)
      throw data_error(source, 1, 0,
                       "header has no column '" + name + "'; it has " + std::to_string(n_cols) +
                           (n_cols == 1 ? " column: " : " columns: ") + header_list() +
                           (n_cols == 1 && delim == ',' ? " (is the file tab-separated?)" : ""));
    return found;
  };
  const std::size_t user_at = find_column(opt.user_col, true);
  const std::size_t item_at = find_column(opt.item_col, true);
  const std::size_t label_at = find_column(opt.label_col, true);
  std::size_t time_at = n_cols;
  std::string time_name = opt.timestamp_col;
  if (opt.timestamp_col == "auto") {
    time_name = "timestamp";
    time_at = find_column(time_name, false);
  } else if (!opt.timestamp_col.empty()) {
    time_at = find_column(time_name, true);
  }
  const bool with_time = time_at < n_cols;

  // Rows are built into locals and moved out only once the whole file has parsed.
  std::size_t estimate = text.size() / (header_line.size() + 1) + 1;
  std::vector<std::int32_t> users, items;
  std::vector<float> labels;
  std::vector<std::int64_t> times;
  users.reserve(estimate);
  items.reserve(estimate);
  labels.reserve(estimate);
  if (with_time) times.reserve(estimate);
  detail::dense_id_map user_map, item_map;

  auto fail = [&](std::size_t line_no, std::size_t col, const std::string& name,
                  const std::string& expected, std::string_view got) {
    throw data_error(
        source, line_no, col + 1,
        "column '" + name + "': expected " + expected + ", got " +
            (got.empty() ? std::string("an empty field") : detail::csv_show_field(got)));
  };
  auto parse_int = [&](std::string_view raw, std::size_t line_no, std::size_t col,
                       const std::string& name, const char* what) -> std::int64_t {
    std::string_view s = detail::csv_trim_field(raw, delim);
    std::string_view digits = detail::csv_skip_plus(s);
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail(line_no, col, name, std::string(what) + " within the 64-bit range", s);
    if (ec != std::errc{} || end != digits.data() + digits.size() || digits.empty())
      fail(line_no, col, name, what, s);
    return v;
  };

  std::size_t line_no = 1;
  while (pos < text.size()) {
    std::size_t next = 0;
    std::string_view line = detail::csv_next_line(text, pos, next);
    ++line_no;
    if (detail::csv_all_blank(line)) {
      if (detail::csv_all_blank(text.substr(next))) break;
      throw data_error(source, line_no, 0,
                       "blank line before more rows; expected " + std::to_string(n_cols) +
                           " fields separated by " +
                           (delim == '\t' ? "tabs" : "'" + std::string(1, delim) + "'"));
    }
    pos = next;
    detail::csv_split_fields(line, delim, fields);
    if (fields.size() != n_cols) {
      bool few = fields.size() < n_cols;
      throw data_error(source, line_no, few ? fields.size() + 1 : n_cols + 1,
                       std::string(few ? "too few" : "too many") + " fields: expected " +
                           std::to_string(n_cols) + " (as in the header), got " +
                           std::to_string(fields.size()));
    }
    std::int64_t uid = parse_int(fields[user_at], line_no, user_at, opt.user_col, "an integer id");
    std::int64_t iid = parse_int(fields[item_at], line_no, item_at, opt.item_col, "an integer id");

    std::string_view ls = detail::csv_trim_field(fields[label_at], delim);
    std::string_view lnum = detail::csv_skip_plus(ls);
    double label = 0;
    auto [lend, lec] = std::from_chars(lnum.data(), lnum.data() + lnum.size(), label);
    const bool whole = lend == lnum.data() + lnum.size() && !lnum.empty();
    if (lec == std::errc::result_out_of_range && whole)
      fail(line_no, label_at, opt.label_col, "a finite number within the float range", ls);
    if (lec != std::errc{} || !whole) fail(line_no, label_at, opt.label_col, "a number", ls);
    if (!std::isfinite(label) || std::fabs(label) > std::numeric_limits<float>::max())
      fail(line_no, label_at, opt.label_col, "a finite number within the float range", ls);
    if (opt.implicit && label != 0.0 && label != 1.0)
      fail(line_no, label_at, opt.label_col, "0 or 1 (implicit feedback)", ls);

    if (with_time)
      times.push_back(
          parse_int(fields[time_at], line_no, time_at, time_name, "an integer timestamp"));

    if (user_map.size() == static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) ||
        item_map.size() == static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      throw data_error(source, line_no, 0,
                       "more than 2^31-1 distinct users or items; expected fewer");
    users.push_back(user_map(uid));
    items.push_back(item_map(iid));
    labels.push_back(static_cast<float>(label));
  }

  interactions out;
  out.users = std::move(users);
  out.items = std::move(items);
  out.labels = std::move(labels);
  out.timestamps = std::move(times);
  out.user_ids = user_map.release();
  out.item_ids = item_map.release();
  out.implicit = opt.implicit;
  return out;
}

/// Loads a CSV or TSV file whose first line is a header; ids are remapped to dense indices in
/// order of first appearance and kept in `user_ids` / `item_ids`.
/// @throws tutti::error when the file cannot be read; tutti::data_error when it is malformed.
inline interactions load_csv(const std::string& path, const csv_options& opt = {}) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    int err = errno;
    throw error("tutti::data::load_csv(): cannot open '" + path + "': " + std::strerror(err));
  }
  std::string text;
  char chunk[1 << 16];
  if (std::fseek(f, 0, SEEK_END) == 0) {
    long size = std::ftell(f);
    if (size > 0) text.reserve(static_cast<std::size_t>(size));
    std::rewind(f);
  }
  while (true) {
    std::size_t got = std::fread(chunk, 1, sizeof chunk, f);
    text.append(chunk, got);
    if (got < sizeof chunk) break;
  }
  bool failed = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (failed)
    throw error("tutti::data::load_csv(): cannot read '" + path + "': " + std::strerror(err));
  return parse_csv(text, opt, path);
}

}  // namespace tutti::data
