// SPDX-License-Identifier: Apache-2.0
/// @file data/detail/csv_text.hpp
/// @brief The text of a CSV or TSV file as `tutti::data::load_csv` reads it: lines, fields,
/// quoting, the header, one row's values, the faults and their messages, the id dictionaries,
/// and the one-pass reader of a whole file's rows.
#pragma once

#include <tutti/data/csv_options.hpp>
#include <tutti/data/id_names.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/errno_text.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/detail/utf8.hpp>
#include <tutti/error.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

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

/// The text of a field as an error message shows it: quoted, shortened, control bytes escaped
/// (and every byte above 0x7f when the field is not UTF-8, so the message itself is).
inline std::string csv_show_field(std::string_view s) {
  constexpr std::size_t max_shown = 40;
  const bool utf8 = utf8_error_at(s) == std::string_view::npos;
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < max_shown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || (!utf8 && c > 0x7f)) {
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

/// True for a blank around a field: a space, or a tab unless tab is the delimiter.
constexpr bool csv_is_blank(char c, char delimiter) noexcept {
  return (c == ' ' || c == '\t') && c != delimiter;
}

/// `s` without leading and trailing blanks (spaces; tabs too unless tab is the delimiter).
inline std::string_view csv_trim_field(std::string_view s, char delimiter) {
  while (!s.empty() && csv_is_blank(s.front(), delimiter)) s.remove_prefix(1);
  while (!s.empty() && csv_is_blank(s.back(), delimiter)) s.remove_suffix(1);
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

/// The delimiter `opt` asks for, or the one `source`'s extension implies.
/// @throws tutti::invalid_argument (naming `fn`) when the options cannot describe a file.
inline char csv_check_options(const data::csv_options& opt, const std::string& source,
                              const char* fn) {
  const char delim =
      opt.delimiter != 0 ? opt.delimiter : (csv_has_tsv_extension(source) ? '\t' : ',');
  TUTTI_EXPECTS(
      delim != '\n' && delim != '\r', fn,
      "the delimiter is a line terminator; expected a field separator such as ',' or '\\t'");
  TUTTI_EXPECTS(delim != '"', fn,
                "the delimiter is '\"', the quote character; expected a field separator such as "
                "',' or '\\t'");
  TUTTI_EXPECTS(!opt.user_col.empty() && !opt.item_col.empty(), fn,
                "a user or item column name is empty; expected the header names to read");
  return delim;
}

/// `text` without a leading UTF-8 byte order mark.
inline std::string_view csv_strip_bom(std::string_view text) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  return text;
}

/// Throws the data_error for the first NUL byte in `text` (line 1 = the start of `text`).
inline void csv_reject_nul(std::string_view text, char delim, const std::string& source) {
  const void* nul = std::memchr(text.data(), '\0', text.size());
  if (nul == nullptr) return;
  auto at = static_cast<std::size_t>(static_cast<const char*>(nul) - text.data());
  std::size_t line_start = text.rfind('\n', at);
  line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
  std::size_t line_no = 1;
  for (std::size_t i = 0; i < line_start; ++i) line_no += text[i] == '\n';
  std::size_t column = 1;
  bool in_quotes = false;  // a doubled quote toggles twice, so this tracks RFC 4180 quoting
  for (std::size_t i = line_start; i < at; ++i) {
    in_quotes ^= text[i] == '"';
    column += !in_quotes && text[i] == delim;
  }
  throw data_error(source, line_no, column, "embedded NUL byte; expected text");
}

/// Why a row could not be read: the strict loader turns it into a message, the cleaning loader
/// into a rejection reason.
enum class csv_fault : unsigned char {
  none,                ///< the row was read
  too_few_fields,      ///< fewer fields than the header
  too_many_fields,     ///< more fields than the header
  empty_field,         ///< a field that is read is empty (or blank)
  not_integer,         ///< an id or timestamp is not an integer
  integer_range,       ///< an id or timestamp is an integer outside the 64-bit range
  not_number,          ///< the label is not a number
  non_finite_label,    ///< the label is NaN, infinite or beyond the float range
  implicit_label,      ///< an implicit-feedback label other than 0 or 1
  unterminated_quote,  ///< a quoted field without its closing quote on the line
  text_after_quote,    ///< something other than blanks between a closing quote and the separator
  stray_quote,         ///< a '"' inside a field that does not start with one
  not_utf8,            ///< a name that is not UTF-8 text
};

/// Which of the columns read a fault is in.
enum class csv_role : unsigned char { none, user, item, label, time };

/// The outcome of reading one row.
struct csv_row_status {
  csv_fault fault = csv_fault::none;  ///< none when the row was read
  csv_role role = csv_role::none;     ///< column at fault
  std::size_t field = 0;  ///< 0-based field at fault; the field count for a field-count fault
  /// True when the row was read.
  explicit operator bool() const noexcept { return fault == csv_fault::none; }
};

/// Splits one line (without its terminator) holding a '"' at `delimiter`, quoted fields as RFC
/// 4180 has them. A quoted field's entry in `out` is the text between its quotes, untrimmed and
/// with doubled quotes as written (`csv_unquote` undoes them); an unquoted field's is its raw
/// text, as `csv_split_fields` gives it. `quoted`, when given, receives 1 per quoted field.
/// @return the quoting fault and its 0-based field, whose raw text then ends `out`; or none.
inline csv_row_status csv_split_quoted(std::string_view line, char delimiter,
                                       std::vector<std::string_view>& out,
                                       std::vector<char>* quoted) {
  out.clear();
  if (quoted != nullptr) quoted->clear();
  const std::size_t n = line.size();
  std::size_t at = 0;
  while (true) {
    const std::size_t field = out.size();
    std::size_t open = at;
    while (open < n && csv_is_blank(line[open], delimiter)) ++open;
    if (open < n && line[open] == '"') {
      std::size_t close = open + 1;
      while (true) {
        close = line.find('"', close);
        if (close == std::string_view::npos) {
          out.push_back(line.substr(open));
          return {csv_fault::unterminated_quote, csv_role::none, field};
        }
        if (close + 1 < n && line[close + 1] == '"') {
          close += 2;
          continue;
        }
        break;
      }
      std::size_t after = close + 1;
      while (after < n && csv_is_blank(line[after], delimiter)) ++after;
      if (after < n && line[after] != delimiter) {
        out.push_back(line.substr(open, line.find(delimiter, after) - open));
        return {csv_fault::text_after_quote, csv_role::none, field};
      }
      out.push_back(line.substr(open + 1, close - open - 1));
      if (quoted != nullptr) quoted->push_back(1);
      if (after == n) return {};
      at = after + 1;
    } else {
      std::size_t end = line.find(delimiter, at);
      std::string_view raw = line.substr(at, end == std::string_view::npos ? n - at : end - at);
      out.push_back(raw);
      if (raw.find('"') != std::string_view::npos)
        return {csv_fault::stray_quote, csv_role::none, field};
      if (quoted != nullptr) quoted->push_back(0);
      if (end == std::string_view::npos) return {};
      at = end + 1;
    }
  }
}

/// Splits one line (without its terminator) at `delimiter`: by `memchr` alone when it holds no
/// '"', which is nearly every line of a large file, else by `csv_split_quoted` (same results).
inline csv_row_status csv_split_line(std::string_view line, char delimiter,
                                     std::vector<std::string_view>& out,
                                     std::vector<char>* quoted = nullptr) {
  if (std::memchr(line.data(), '"', line.size()) != nullptr)
    return csv_split_quoted(line, delimiter, out, quoted);
  csv_split_fields(line, delimiter, out);
  if (quoted != nullptr) quoted->assign(out.size(), 0);
  return {};
}

/// The text between a quoted field's quotes with each doubled quote made one.
inline std::string csv_unquote(std::string_view inner) {
  std::string out;
  out.reserve(inner.size());
  for (std::size_t i = 0; i < inner.size(); ++i) {
    out += inner[i];
    if (inner[i] == '"') ++i;  // the second quote of a pair
  }
  return out;
}

/// The message of a quoting fault in the field whose raw text is `raw`.
inline std::string csv_quote_message(csv_fault fault, char delimiter, std::string_view raw) {
  const std::string got = ", got " + csv_show_field(csv_trim_field(raw, delimiter));
  std::string sep = "a tab";
  if (delimiter != '\t') sep = {'\'', delimiter, '\''};
  switch (fault) {
    case csv_fault::unterminated_quote:
      return "unterminated quoted field: expected a closing '\"' on the same line (line breaks "
             "inside quoted fields are not supported)" +
             got;
    case csv_fault::text_after_quote:
      return "text after a closing quote: expected " + sep + " or the end of the line" + got;
    default:  // stray_quote
      return "quote inside an unquoted field: expected the whole field in quotes, with each '\"' "
             "in it doubled" +
             got;
  }
}

/// Where the requested columns sit, as the header line names them.
struct csv_layout {
  char delim = ',';            ///< field separator
  std::size_t n_cols = 0;      ///< fields per line
  std::size_t user_at = 0;     ///< 0-based field of the user id
  std::size_t item_at = 0;     ///< 0-based field of the item id
  std::size_t label_at = 0;    ///< 0-based field of the label
  std::size_t time_at = 0;     ///< 0-based field of the timestamp; n_cols when there is none
  std::string time_name;       ///< header name of the timestamp column
  std::size_t header_len = 0;  ///< characters in the header line
  /// True when a '"' follows the header; else rows skip even the per-line look for one.
  bool body_has_quote = true;
  bool user_names = false;  ///< user ids are names, not integers
  bool item_names = false;  ///< item ids are names, not integers
  /// True when rows carry a timestamp.
  bool with_time() const noexcept { return time_at < n_cols; }
};

/// Rows `csv_detect_names` looks at.
inline constexpr std::size_t csv_detect_rows = 1000;

/// Reads one integer field (blanks and one leading '+' allowed; a quoted field's blanks too).
inline csv_fault csv_parse_int(std::string_view raw, char delim, std::int64_t& v) {
  std::string_view s = csv_trim_field(raw, delim);
  if (s.empty()) return csv_fault::empty_field;
  std::string_view digits = csv_skip_plus(s);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range) return csv_fault::integer_range;
  if (ec != std::errc{} || end != digits.data() + digits.size()) return csv_fault::not_integer;
  return csv_fault::none;
}

/// Automatic ids: an id column holds names when most of its non-empty ids in the first
/// `csv_detect_rows` rows from offset `pos` are not integers; else integers, and a row whose id
/// is not one is malformed (an error for the strict loader, a rejection for the cleaning one).
inline void csv_detect_names(std::string_view text, std::size_t pos, csv_layout& lay) {
  std::size_t seen[2] = {0, 0}, names[2] = {0, 0};
  std::vector<std::string_view> fields;
  const std::size_t at[2] = {lay.user_at, lay.item_at};
  for (std::size_t rows = 0; rows < csv_detect_rows && pos < text.size(); ++rows) {
    std::size_t next = 0;
    const std::string_view line = csv_next_line(text, pos, next);
    pos = next;
    if (!csv_split_line(line, lay.delim, fields) || fields.size() != lay.n_cols) continue;
    for (int c = 0; c < 2; ++c) {
      std::int64_t v = 0;
      const csv_fault f = csv_parse_int(fields[at[c]], lay.delim, v);
      if (f == csv_fault::empty_field) continue;
      ++seen[c];
      names[c] += f == csv_fault::not_integer;
    }
  }
  lay.user_names = 2 * names[0] > seen[0];
  lay.item_names = 2 * names[1] > seen[1];
}

/// Reads the header line of `text` (BOM already stripped); `body` receives the offset of the
/// first row.
/// @throws tutti::data_error on an empty file, a missing or repeated column.
inline csv_layout csv_read_header(std::string_view text, const data::csv_options& opt, char delim,
                                  const std::string& source, std::size_t& body) {
  if (csv_all_blank(text))
    throw data_error(source, 1, 0, "empty file; expected a header line naming the columns");

  csv_layout lay;
  lay.delim = delim;
  std::string_view header_line = csv_next_line(text, 0, body);
  lay.header_len = header_line.size();
  lay.body_has_quote = std::memchr(text.data() + body, '"', text.size() - body) != nullptr;
  std::vector<std::string_view> fields;
  std::vector<char> quoted;
  if (auto st = csv_split_line(header_line, delim, fields, &quoted); !st)
    throw data_error(source, 1, st.field + 1, csv_quote_message(st.fault, delim, fields.back()));
  // A quoted name keeps its blanks: `" user"` is not `user`.
  std::vector<std::string> header;
  header.reserve(fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i)
    header.push_back(quoted[i] ? csv_unquote(fields[i])
                               : std::string(csv_trim_field(fields[i], delim)));
  const std::size_t n_cols = header.size();
  lay.n_cols = n_cols;

  auto header_list = [&] {
    std::string s;
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (i) s += ", ";
      s += csv_show_field(header[i]);
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
  lay.user_at = find_column(opt.user_col, true);
  lay.item_at = find_column(opt.item_col, true);
  lay.label_at = opt.label_col.empty() ? n_cols : find_column(opt.label_col, true);
  lay.time_at = n_cols;
  lay.time_name = opt.timestamp_col;
  if (opt.timestamp_col == "auto") {
    lay.time_name = "timestamp";
    lay.time_at = find_column(lay.time_name, false);
  } else if (!opt.timestamp_col.empty()) {
    lay.time_at = find_column(lay.time_name, true);
  }
  lay.user_names = lay.item_names = opt.ids == data::id_format::names;
  if (opt.ids == data::id_format::automatic) csv_detect_names(text, body, lay);
  return lay;
}

/// One row's values as the source spells them (ids not yet remapped).
struct csv_row {
  std::int64_t user = 0;  ///< source user id (integer ids)
  std::int64_t item = 0;  ///< source item id (integer ids)
  double label = 0;       ///< label, finite and within the float range
  std::int64_t time = 0;  ///< timestamp, 0 when the layout has none
  /// The user's name when user ids are names: a view into the line or into the scratch of
  /// `csv_parse_row`, valid until the next row is parsed.
  std::string_view user_name;
  std::string_view item_name;  ///< the item's name when item ids are names (as `user_name`)
};

/// Scratch space of `csv_parse_row`: the fields of the line, which of them were quoted, and
/// the unquoted text of a name holding a doubled quote.
struct csv_scratch {
  std::vector<std::string_view> fields;  ///< the line's fields, kept for the caller's message
  std::vector<char> quoted;              ///< 1 per quoted field (lines holding a '"')
  std::string user_name, item_name;      ///< unquoted names with doubled quotes made one
};

/// Reads one name field: a quoted field's text between its quotes (blanks kept, doubled quotes
/// made one, in `buf` when there are any), an unquoted field's text without its blanks. A name
/// must be UTF-8 text: every output (JSON, the export's names) then carries it as it was read.
inline csv_fault csv_parse_name(std::string_view raw, bool quoted, char delim, std::string& buf,
                                std::string_view& name) {
  if (!quoted) {
    name = csv_trim_field(raw, delim);
  } else if (raw.find('"') == std::string_view::npos) {
    name = raw;
  } else {
    buf = csv_unquote(raw);
    name = buf;
  }
  if (name.empty()) return csv_fault::empty_field;
  return utf8_error_at(name) == std::string_view::npos ? csv_fault::none : csv_fault::not_utf8;
}

/// Reads one id field into `id` (integers) or `name` (names).
inline csv_fault csv_parse_id(bool names, std::size_t at, csv_scratch& sc, char delim,
                              std::string& buf, std::int64_t& id, std::string_view& name) {
  if (!names) return csv_parse_int(sc.fields[at], delim, id);
  const bool quoted = at < sc.quoted.size() && sc.quoted[at] != 0;
  return csv_parse_name(sc.fields[at], quoted, delim, buf, name);
}

/// Reads one line (without its terminator) into `row`; `sc` is scratch space and keeps the
/// split fields for the caller's message. The one tokenizer of both the strict and the cleaning
/// Parses a label field into `label`: a finite number (0 or 1 when `implicit`).
inline csv_fault csv_parse_label(std::string_view field, char delim, bool implicit, double& out) {
  std::string_view ls = csv_trim_field(field, delim);
  if (ls.empty()) return csv_fault::empty_field;
  std::string_view lnum = csv_skip_plus(ls);
  double label = 0;
  auto [lend, lec] = std::from_chars(lnum.data(), lnum.data() + lnum.size(), label);
  const bool whole = lend == lnum.data() + lnum.size();
  if (lec == std::errc::result_out_of_range && whole) return csv_fault::non_finite_label;
  if (lec != std::errc{} || !whole) return csv_fault::not_number;
  if (!std::isfinite(label) || std::fabs(label) > std::numeric_limits<float>::max())
    return csv_fault::non_finite_label;
  if (implicit && label != 0.0 && label != 1.0) return csv_fault::implicit_label;
  out = label;
  return csv_fault::none;
}

/// loader, so they cannot disagree about what a well-formed row is.
inline csv_row_status csv_parse_row(std::string_view line, const csv_layout& lay, bool implicit,
                                    csv_scratch& sc, csv_row& row) {
  std::vector<std::string_view>& fields = sc.fields;
  sc.quoted.clear();
  if (!lay.body_has_quote)
    csv_split_fields(line, lay.delim, fields);
  else if (auto st = csv_split_line(line, lay.delim, fields, &sc.quoted); !st)
    return st;
  if (fields.size() != lay.n_cols)
    return {fields.size() < lay.n_cols ? csv_fault::too_few_fields : csv_fault::too_many_fields,
            csv_role::none, fields.size()};
  if (auto f = csv_parse_id(lay.user_names, lay.user_at, sc, lay.delim, sc.user_name, row.user,
                            row.user_name);
      f != csv_fault::none)
    return {f, csv_role::user, lay.user_at};
  if (auto f = csv_parse_id(lay.item_names, lay.item_at, sc, lay.delim, sc.item_name, row.item,
                            row.item_name);
      f != csv_fault::none)
    return {f, csv_role::item, lay.item_at};

  if (lay.label_at == lay.n_cols) {  // no label column: a log of positives
    row.label = 1.0;
  } else if (auto f = csv_parse_label(fields[lay.label_at], lay.delim, implicit, row.label);
             f != csv_fault::none) {
    return {f, csv_role::label, lay.label_at};
  }

  row.time = 0;
  if (lay.with_time())
    if (auto f = csv_parse_int(fields[lay.time_at], lay.delim, row.time); f != csv_fault::none)
      return {f, csv_role::time, lay.time_at};
  return {};
}

/// The message of a blank line with rows after it (the readers stop at it; blank lines at the
/// end of a file are accepted).
inline std::string csv_blank_line_message(const csv_layout& lay) {
  return "blank line before more rows; expected " + std::to_string(lay.n_cols) +
         " fields separated by " +
         (lay.delim == '\t' ? "tabs" : "'" + std::string(1, lay.delim) + "'");
}

/// 1-based column a fault is reported at (as `tutti::data_error::column()`).
inline std::size_t csv_fault_column(const csv_row_status& st, const csv_layout& lay) {
  if (st.fault == csv_fault::too_few_fields) return st.field + 1;
  if (st.fault == csv_fault::too_many_fields) return lay.n_cols + 1;
  return st.field + 1;
}

/// The message of a fault: what the column expected and what the field holds.
inline std::string csv_fault_message(const csv_row_status& st, const csv_layout& lay,
                                     const data::csv_options& opt,
                                     const std::vector<std::string_view>& fields) {
  if (st.fault == csv_fault::unterminated_quote || st.fault == csv_fault::text_after_quote ||
      st.fault == csv_fault::stray_quote)
    return csv_quote_message(st.fault, lay.delim, fields[st.field]);
  if (st.fault == csv_fault::too_few_fields || st.fault == csv_fault::too_many_fields)
    return std::string(st.fault == csv_fault::too_few_fields ? "too few" : "too many") +
           " fields: expected " + std::to_string(lay.n_cols) + " (as in the header), got " +
           std::to_string(st.field);
  const std::string& name = st.role == csv_role::user   ? opt.user_col
                            : st.role == csv_role::item ? opt.item_col
                            : st.role == csv_role::time ? lay.time_name
                                                        : opt.label_col;
  const char* what = st.role == csv_role::time ? "an integer timestamp"
                     : (st.role == csv_role::user ? lay.user_names : lay.item_names)
                         ? "an id"
                         : "an integer id";
  std::string expected;
  switch (st.fault) {
    case csv_fault::integer_range:
      expected = std::string(what) + " within the 64-bit range";
      break;
    case csv_fault::not_number:
      expected = "a number";
      break;
    case csv_fault::non_finite_label:
      expected = "a finite number within the float range";
      break;
    case csv_fault::implicit_label:
      expected = "0 or 1 (implicit feedback)";
      break;
    case csv_fault::not_utf8:
      expected = "UTF-8 text (convert the file, e.g. iconv -f LATIN1 -t UTF-8)";
      break;
    default:  // empty_field, not_integer
      expected = st.role == csv_role::label ? "a number" : what;
  }
  std::string_view got =
      st.field < fields.size() ? csv_trim_field(fields[st.field], lay.delim) : std::string_view{};
  return "column '" + name + "': expected " + expected + ", got " +
         (got.empty() ? std::string("an empty field") : csv_show_field(got));
}

/// The error of a data file the system refused: `fn(): cannot <verb> 'path': <errno's text>`.
inline error csv_file_error(const char* fn, const char* verb, const std::string& path, int err) {
  return error(std::string(fn) + "(): cannot " + verb + " '" + path + "': " + errno_text(err));
}

/// The whole file at `path`; `fn` names the caller in errors.
/// @throws tutti::error when the file cannot be opened or read.
inline std::string csv_read_file(const std::string& path, const char* fn) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw csv_file_error(fn, "open", path, errno);
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
  if (failed) throw csv_file_error(fn, "read", path, err);
  return text;
}

/// The column of a row's ids, as the loaders build it: dense indices in order of first
/// appearance over integer ids or over names (`dense_name_map`, which refuses two names with
/// one code).
class csv_id_column {
 public:
  explicit csv_id_column(bool names) : m_names(names) {}
  bool names() const noexcept { return m_names; }
  std::size_t size() const noexcept { return m_names ? m_by_name.size() : m_by_id.size(); }
  /// Dense index of the row's id (`id` or `name`); -1 on a collision, with `other` set to the
  /// name that has the same code.
  std::int32_t operator()(std::int64_t id, std::string_view name, std::string_view& other) {
    if (!m_names) return m_by_id(id);
    const auto r = m_by_name(name);
    if (r.dense < 0) other = m_by_name.name(r.other);
    return r.dense;
  }
  /// Moves the source ids (and names) into `ids` and `names`.
  void release(std::vector<std::int64_t>& ids, std::shared_ptr<const data::id_names>& names) {
    if (!m_names) {
      ids = m_by_id.release();
      return;
    }
    ids = m_by_name.release_codes();
    names = std::make_shared<const data::id_names>(m_by_name.release_names());
  }

 private:
  bool m_names;
  dense_id_map m_by_id;
  dense_name_map m_by_name;
};

/// The message of two names with one code.
inline std::string csv_collision_message(const char* column, std::string_view a,
                                         std::string_view b) {
  return std::string(column) + " ids " + csv_show_field(a) + " and " + csv_show_field(b) +
         " have the same 64-bit code (tutti::data::name_code); expected distinct codes for "
         "distinct ids (rename one of them)";
}

/// The rows of `text` from offset `pos` (the line after the header) as `lay` reads them.
inline data::interactions csv_parse_rows(std::string_view text, std::size_t pos,
                                         const csv_layout& lay, const data::csv_options& opt,
                                         const std::string& source) {
  const bool with_time = lay.with_time();
  // Rows are built into locals and moved out only once the whole file has parsed.
  std::size_t estimate = text.size() / (lay.header_len + 1) + 1;
  std::vector<std::int32_t> users, items;
  std::vector<float> labels;
  std::vector<std::int64_t> times;
  users.reserve(estimate);
  items.reserve(estimate);
  labels.reserve(estimate);
  if (with_time) times.reserve(estimate);
  csv_id_column user_map(lay.user_names), item_map(lay.item_names);
  csv_scratch sc;
  csv_row row;
  std::string_view other;

  std::size_t line_no = 1;
  while (pos < text.size()) {
    std::size_t next = 0;
    std::string_view line = csv_next_line(text, pos, next);
    ++line_no;
    if (csv_all_blank(line)) {
      if (csv_all_blank(text.substr(next))) break;
      throw data_error(source, line_no, 0, csv_blank_line_message(lay));
    }
    pos = next;
    if (auto st = csv_parse_row(line, lay, opt.implicit, sc, row); !st)
      throw data_error(source, line_no, csv_fault_column(st, lay),
                       csv_fault_message(st, lay, opt, sc.fields));
    if (with_time) times.push_back(row.time);

    if (user_map.size() == static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) ||
        item_map.size() == static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      throw data_error(source, line_no, 0,
                       "more than 2^31-1 distinct users or items; expected fewer");
    const std::int32_t u = user_map(row.user, row.user_name, other);
    if (u < 0)
      throw data_error(source, line_no, lay.user_at + 1,
                       csv_collision_message("user", row.user_name, other));
    const std::int32_t i = item_map(row.item, row.item_name, other);
    if (i < 0)
      throw data_error(source, line_no, lay.item_at + 1,
                       csv_collision_message("item", row.item_name, other));
    users.push_back(u);
    items.push_back(i);
    labels.push_back(static_cast<float>(row.label));
  }

  data::interactions out;
  out.users = std::move(users);
  out.items = std::move(items);
  out.labels = std::move(labels);
  out.timestamps = std::move(times);
  user_map.release(out.user_ids, out.user_names);
  item_map.release(out.item_ids, out.item_names);
  out.implicit = opt.implicit;
  return out;
}

}  // namespace tutti::detail
