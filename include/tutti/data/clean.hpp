// SPDX-License-Identifier: Apache-2.0
/// @file data/clean.hpp
/// @brief `tutti::data::load_csv_clean`: loads a CSV/TSV file, setting bad rows aside with a
/// reason instead of stopping, and keeps them verbatim in a quarantine file.
///
/// Rows are read with the strict loader's own tokenizer (`detail::csv_parse_row`), so a row
/// `load_csv` accepts is a row this accepts too, unless a cleaning rule below rejects it.
/// Cleaning happens before ids are remapped to dense indices, so every rank that cleans the
/// same file ends with the same index space and the same N.
///
/// **Rows.** Every line after the header is a row read, except blank lines at the end of the
/// file (which `load_csv` ignores too). Each row read is either used or rejected with exactly one
/// reason, so `rows_read == rows_used + rows_rejected` always. The reason is the first that
/// applies, in this order:
///   1. the fields, column by column (user, item, label, timestamp), as `load_csv` reads them:
///      - `malformed`: wrong number of fields, a field that is not a number, a timestamp outside
///        the 64-bit range, a NUL byte anywhere in the line, a blank line before more rows;
///      - `missing_field`: a field that is read is empty or blank;
///      - `negative_id` / `id_out_of_range`: an id outside the 64-bit range (by its sign);
///      - `non_finite_label`: NaN, infinite, or beyond the float range;
///      - `label_out_of_domain`: an implicit-feedback label other than 0 or 1;
///   2. the ids, user before item: `negative_id` (ids must be >= 0), `id_out_of_range` (above
///      `max_user_id` / `max_item_id`); integer ids only: a column of names (data/csv.hpp's
///      `csv_options::ids`) has neither rule, and its names are never rejected but when empty;
///   3. the label: `label_out_of_domain` (outside [`label_min`, `label_max`]);
///   4. `duplicate`: a (user, item) pair seen on another valid row. Which row stays is the
///      `duplicate_policy`: `keep_first`, `keep_last`, or `average` (the first row stays, with
///      the mean label of all the pair's rows and the first row's timestamp). The rows that do
///      not stay are rejected as `duplicate` and quarantined like any other rejected row, so the
///      quarantine file always holds exactly the rows not used.
/// Used rows keep their order in the file; dense indices follow first appearance among them.
///
/// **Quarantine file** (when `clean_options::quarantine_path` is set; written, replacing any old
/// file, on every load, empty when nothing was rejected): one line per rejected row, in line
/// order, no header line:
///
///     LINE <TAB> REASON <TAB> TEXT <LF>
///
/// LINE is the 1-based line number in the source (the header is line 1, as in
/// `tutti::data_error`), REASON one of the names above, TEXT the source line verbatim without
/// its terminator ("\n" or "\r\n"), with five escapes so a row stays one line: backslash as
/// `\\`, tab as `\t`, line feed as `\n`, carriage return as `\r`, NUL as `\0`. Every other byte
/// is copied as is, so the file holds non-UTF-8 bytes where the input does. `read_quarantine`
/// reads it back.
///
/// **Share limit.** When more than `max_rejected_share` of the rows read are rejected, the
/// quarantine file is written and `rejected_share_error` is thrown with the counts by reason:
/// training on what is left of a mostly broken file is refused.
#pragma once

#include <tutti/data/csv.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/checked_file.hpp>
#include <tutti/detail/number_format.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace tutti::data {

/// Which row of a duplicated (user, item) pair is used.
enum class duplicate_policy : unsigned char {
  keep_first,  ///< the pair's first row; later rows are rejected
  keep_last,   ///< the pair's last row; earlier rows are rejected
  average,     ///< the first row, labelled with the mean of all the pair's labels
};

/// Why a row was rejected; `reason_name` gives the name used in reports and quarantine files.
enum class reject_reason : unsigned char {
  malformed,            ///< wrong field count, unparsable field, NUL byte, blank line
  missing_field,        ///< a field that is read is empty
  negative_id,          ///< a user or item id below 0
  id_out_of_range,      ///< an id above the declared maximum or the 64-bit range
  non_finite_label,     ///< NaN, infinite, or beyond the float range
  label_out_of_domain,  ///< outside [label_min, label_max], or not 0/1 for implicit feedback
  duplicate,            ///< a (user, item) pair that another row supplies
};

/// Number of `reject_reason` values.
inline constexpr std::size_t reject_reason_count = 7;

/// The name of a reason, as in reports, JSON and quarantine files.
constexpr std::string_view reason_name(reject_reason r) noexcept {
  constexpr std::array<std::string_view, reject_reason_count> names = {
      "malformed",        "missing_field",       "negative_id", "id_out_of_range",
      "non_finite_label", "label_out_of_domain", "duplicate"};
  return names[static_cast<std::size_t>(r)];
}

/// What cleaning rejects and where rejected rows go; aggregate, use designated initialisers.
struct clean_options {
  std::optional<double> label_min =
      std::nullopt;  ///< smallest valid label (e.g. 1 for 1-5 stars); none: no bound
  std::optional<double> label_max = std::nullopt;  ///< largest valid label (e.g. 5); none: no bound
  duplicate_policy dup = duplicate_policy::keep_first;  ///< which row of a repeated pair is used
  double max_rejected_share = 0.05;  ///< above this share of rejected rows, refuse (0..1)
  std::string quarantine_path = {};  ///< file receiving the rejected rows; empty: none
  std::optional<std::int64_t> max_user_id =
      std::nullopt;  ///< largest valid user id; none: any id >= 0
  std::optional<std::int64_t> max_item_id =
      std::nullopt;  ///< largest valid item id; none: any id >= 0
};

/// Counts of one cleaning pass; `rows_read == rows_used + rows_rejected` always.
struct cleaning_report {
  std::size_t rows_read = 0;      ///< rows after the header (blank lines at the end excluded)
  std::size_t rows_used = 0;      ///< rows in the cleaned data
  std::size_t rows_rejected = 0;  ///< rows set aside, each with one reason
  /// Rejected rows by reason name; every reason is present, zero included.
  std::map<std::string, std::size_t> rejected;
  /// Rows folded into another row of the same (user, item) pair; equals rejected["duplicate"].
  std::size_t duplicates_merged = 0;

  /// rows_rejected / rows_read, 0 when nothing was read.
  double rejected_share() const noexcept {
    return rows_read == 0 ? 0.0
                          : static_cast<double>(rows_rejected) / static_cast<double>(rows_read);
  }
  /// The non-zero counts by reason, in the order of `reject_reason`: "malformed 2, duplicate 1".
  std::string reasons_text() const {
    std::string s;
    for (std::size_t r = 0; r < reject_reason_count; ++r) {
      std::string name(reason_name(static_cast<reject_reason>(r)));
      auto it = rejected.find(name);
      if (it == rejected.end() || it->second == 0) continue;
      if (!s.empty()) s += ", ";
      s += name + " " + std::to_string(it->second);
    }
    return s;
  }
  /// One line for a person: "20 rows read, 14 used, 6 rejected (30.00%): malformed 2, ...".
  std::string summary() const {
    std::string s = std::to_string(rows_read) + " rows read, " + std::to_string(rows_used) +
                    " used, " + std::to_string(rows_rejected) + " rejected (" +
                    detail::percent_text(rejected_share()) + ")";
    if (rows_rejected > 0) s += ": " + reasons_text();
    return s;
  }
};

/// One rejected row: what a quarantine file line holds.
struct rejected_row {
  std::size_t line = 0;  ///< 1-based line in the source (header = line 1)
  std::string reason;    ///< a `reason_name`
  std::string text;      ///< the source line verbatim, without its terminator

  /// Rows are equal when line, reason and text are.
  friend bool operator==(const rejected_row&, const rejected_row&) = default;
};

/// The result of `load_csv_clean`: the data to train on and what was left out.
struct cleaned_data {
  interactions data;                   ///< the rows used, ids remapped densely
  cleaning_report report;              ///< counts by reason
  std::vector<rejected_row> rejected;  ///< the rows not used, in line order
};

/// More rows were rejected than `clean_options::max_rejected_share` allows; training refuses.
class rejected_share_error : public error {
 public:
  /// `what` is the full message; `report` the counts that caused it.
  rejected_share_error(std::string file, cleaning_report report, double limit,
                       const std::string& what)
      : error(what), m_file(std::move(file)), m_report(std::move(report)), m_limit(limit) {}
  /// The file being cleaned.
  const std::string& file() const noexcept { return m_file; }
  /// The counts of the refused file.
  const cleaning_report& report() const noexcept { return m_report; }
  /// The share that was exceeded.
  double limit() const noexcept { return m_limit; }

 private:
  std::string m_file;
  cleaning_report m_report;
  double m_limit;
};

}  // namespace tutti::data

namespace tutti::detail {

/// `s` with backslash, tab, LF, CR and NUL escaped, so it fits one TSV field.
inline std::string quarantine_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\0':
        out += "\\0";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// Inverse of `quarantine_escape`; false on a lone or unknown escape.
inline bool quarantine_unescape(std::string_view s, std::string& out) {
  out.clear();
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return false;
    switch (s[i]) {
      case '\\':
        out += '\\';
        break;
      case 't':
        out += '\t';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case '0':
        out += '\0';
        break;
      default:
        return false;
    }
  }
  return true;
}

/// The reason for a row the tokenizer refused.
inline data::reject_reason clean_reason_of(const csv_row_status& st,
                                           const std::vector<std::string_view>& fields,
                                           char delim) {
  using data::reject_reason;
  switch (st.fault) {
    case csv_fault::empty_field:
      return reject_reason::missing_field;
    case csv_fault::non_finite_label:
      return reject_reason::non_finite_label;
    case csv_fault::implicit_label:
      return reject_reason::label_out_of_domain;
    case csv_fault::integer_range:
      if (st.role == csv_role::time) return reject_reason::malformed;
      return csv_trim_field(fields[st.field], delim).front() == '-'
                 ? reject_reason::negative_id
                 : reject_reason::id_out_of_range;
    default:
      return reject_reason::malformed;
  }
}

/// Open-addressing set of (user, item) pairs, each pointing at the row that holds it.
class pair_index {
 public:
  /// Sized for `n` pairs.
  explicit pair_index(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    m_slots.assign(cap, npos);
  }
  /// The row already holding (user, item), or npos after recording `row` as its holder.
  std::size_t find_or_insert(const std::vector<csv_row>& rows, std::size_t row) {
    const std::int64_t u = rows[row].user, i = rows[row].item;
    const std::size_t mask = m_slots.size() - 1;
    std::size_t at =
        mix64(static_cast<std::uint64_t>(u) ^ mix64(static_cast<std::uint64_t>(i))) & mask;
    while (m_slots[at] != npos) {
      const csv_row& held = rows[m_slots[at]];
      if (held.user == u && held.item == i) return m_slots[at];
      at = (at + 1) & mask;
    }
    m_slots[at] = row;
    return npos;
  }
  /// No row.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

 private:
  std::vector<std::size_t> m_slots;
};

}  // namespace tutti::detail

namespace tutti::data {

/// The quarantine file text for `rows` (format in this header's description).
inline std::string format_quarantine(const std::vector<rejected_row>& rows) {
  std::string out;
  for (const auto& r : rows) {
    out += std::to_string(r.line);
    out += '\t';
    out += r.reason;
    out += '\t';
    out += detail::quarantine_escape(r.text);
    out += '\n';
  }
  return out;
}

/// Reads quarantine file text back into rows; `source` names it in errors.
/// @throws tutti::data_error on a line that is not `LINE<TAB>REASON<TAB>TEXT` with a known
/// reason and valid escapes.
inline std::vector<rejected_row> parse_quarantine(std::string_view text,
                                                  const std::string& source) {
  std::vector<rejected_row> rows;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos)
      throw data_error(source, line_no, 0, "last line has no line feed; expected a whole file");
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    std::size_t tab1 = line.find('\t');
    std::size_t tab2 = tab1 == std::string_view::npos ? tab1 : line.find('\t', tab1 + 1);
    if (tab2 == std::string_view::npos)
      throw data_error(source, line_no, 0, "expected LINE<TAB>REASON<TAB>TEXT");
    rejected_row r;
    std::string_view num = line.substr(0, tab1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), r.line);
    if (ec != std::errc{} || p != num.data() + num.size() || r.line == 0)
      throw data_error(source, line_no, 1,
                       "expected a line number >= 1, got " + detail::csv_show_field(num));
    r.reason = std::string(line.substr(tab1 + 1, tab2 - tab1 - 1));
    bool known = false;
    for (std::size_t k = 0; k < reject_reason_count; ++k)
      known = known || r.reason == reason_name(static_cast<reject_reason>(k));
    if (!known)
      throw data_error(source, line_no, 2,
                       "unknown reason " + detail::csv_show_field(r.reason) +
                           "; expected one of malformed, missing_field, negative_id, "
                           "id_out_of_range, non_finite_label, label_out_of_domain, duplicate");
    if (!detail::quarantine_unescape(line.substr(tab2 + 1), r.text))
      throw data_error(source, line_no, 3,
                       "bad escape; expected only \\\\, \\t, \\n, \\r and \\0 after a backslash");
    rows.push_back(std::move(r));
  }
  return rows;
}

/// Writes `rows` to the quarantine file at `path`, replacing it whole or not at all
/// (detail/checked_file.hpp).
/// @throws tutti::error naming the file and the reason when it cannot be written.
inline void write_quarantine(const std::string& path, const std::vector<rejected_row>& rows) {
  detail::write_file_replacing(path, format_quarantine(rows), "tutti::data::write_quarantine()");
}

/// Reads the quarantine file at `path`.
/// @throws tutti::error when it cannot be read; tutti::data_error when it is malformed.
inline std::vector<rejected_row> read_quarantine(const std::string& path) {
  return parse_quarantine(detail::csv_read_file(path, "tutti::data::read_quarantine"), path);
}

}  // namespace tutti::data

namespace tutti::detail {

/// The index of `name` among the names read so far (a row then carries it as its id).
/// @throws tutti::data_error when another name has the same code.
inline std::int64_t clean_name_index(dense_name_map& names, std::string_view name,
                                     const char* column, const std::string& source,
                                     std::size_t line, std::size_t field) {
  const auto r = names(name);
  if (r.dense < 0)
    throw data_error(source, line, field + 1,
                     csv_collision_message(column, name, names.name(r.other)));
  return r.dense;
}

/// Moves the source ids of the used rows out of `map` into `ids`: the rows' integer ids, or,
/// when `names` is given, the codes and names of the indices the rows carry.
inline void clean_release_ids(dense_id_map& map, const dense_name_map* names,
                              std::vector<std::int64_t>& ids,
                              std::shared_ptr<const data::id_names>& out) {
  ids = map.release();
  if (names == nullptr) return;
  data::id_names kept;
  for (std::int64_t& id : ids) {
    const auto at = static_cast<std::int32_t>(id);
    kept.push_back(names->name(at));
    id = names->code(at);
  }
  out = std::make_shared<const data::id_names>(std::move(kept));
}

/// The cleaning pass over `text`; `fn` names the public caller in errors.
inline data::cleaned_data clean_csv_text(std::string_view text, const data::csv_options& opt,
                                         const data::clean_options& copt, const std::string& source,
                                         const char* fn) {
  using data::duplicate_policy;
  using data::reject_reason;
  const char delim = csv_check_options(opt, source, fn);
  TUTTI_EXPECTS(copt.max_rejected_share >= 0.0 && copt.max_rejected_share <= 1.0, fn,
                "clean_options::max_rejected_share is " + std::to_string(copt.max_rejected_share) +
                    "; expected a share in [0, 1]");
  TUTTI_EXPECTS((!copt.label_min || std::isfinite(*copt.label_min)) &&
                    (!copt.label_max || std::isfinite(*copt.label_max)),
                fn, "clean_options::label_min/label_max is not finite; expected finite bounds");
  TUTTI_EXPECTS(!copt.label_min || !copt.label_max || *copt.label_min <= *copt.label_max, fn,
                "clean_options::label_min is above label_max; expected min <= max");
  TUTTI_EXPECTS((!copt.max_user_id || *copt.max_user_id >= 0) &&
                    (!copt.max_item_id || *copt.max_item_id >= 0),
                fn, "clean_options::max_user_id/max_item_id is negative; expected ids >= 0");
  TUTTI_EXPECTS(!(opt.implicit && copt.dup == duplicate_policy::average), fn,
                "duplicate_policy::average on implicit feedback makes labels other than 0 or 1; "
                "expected keep_first or keep_last");

  text = csv_strip_bom(text);
  // A broken header leaves nothing to clean: no column can be found, so it stays fatal.
  csv_reject_nul(text.substr(0, text.find('\n')), delim, source);
  std::size_t pos = 0;
  const csv_layout lay = csv_read_header(text, opt, delim, source, pos);

  struct rejection {
    std::size_t line;
    reject_reason reason;
    std::string_view text;
  };
  std::vector<rejection> rejections;
  std::vector<csv_row> rows;  // rows valid before the duplicate check
  std::vector<std::size_t> row_line;
  std::vector<std::string_view> row_text;
  csv_scratch sc;
  // Names get an index here as their rows are read (the rows then carry it as their id); the
  // rows used get their dense indices below, in order of first appearance among them.
  dense_name_map user_names, item_names;
  const std::size_t estimate = text.size() / (lay.header_len + 1) + 1;
  rows.reserve(estimate);
  row_line.reserve(estimate);
  row_text.reserve(estimate);
  std::size_t rows_read = 0;

  std::size_t line_no = 1;
  while (pos < text.size()) {
    std::size_t next = 0;
    std::string_view line = csv_next_line(text, pos, next);
    ++line_no;
    if (csv_all_blank(line) && csv_all_blank(text.substr(next))) break;
    pos = next;
    ++rows_read;
    auto reject = [&](reject_reason r) {
      rejections.push_back({line_no, r, line});
    };
    if (csv_all_blank(line) || std::memchr(line.data(), '\0', line.size()) != nullptr) {
      reject(reject_reason::malformed);
      continue;
    }
    csv_row row;
    if (auto st = csv_parse_row(line, lay, opt.implicit, sc, row); !st) {
      reject(clean_reason_of(st, sc.fields, delim));
      continue;
    }
    if ((!lay.user_names && row.user < 0) || (!lay.item_names && row.item < 0)) {
      reject(reject_reason::negative_id);
      continue;
    }
    if ((!lay.user_names && copt.max_user_id && row.user > *copt.max_user_id) ||
        (!lay.item_names && copt.max_item_id && row.item > *copt.max_item_id)) {
      reject(reject_reason::id_out_of_range);
      continue;
    }
    if ((copt.label_min && row.label < *copt.label_min) ||
        (copt.label_max && row.label > *copt.label_max)) {
      reject(reject_reason::label_out_of_domain);
      continue;
    }
    if (lay.user_names)
      row.user = clean_name_index(user_names, row.user_name, "user", source, line_no, lay.user_at);
    if (lay.item_names)
      row.item = clean_name_index(item_names, row.item_name, "item", source, line_no, lay.item_at);
    row.user_name = row.item_name = {};  // views into the scratch: not kept
    rows.push_back(row);
    row_line.push_back(line_no);
    row_text.push_back(line);
  }

  // Duplicates: `keep[i]` says whether valid row i is used.
  const std::size_t n = rows.size();
  std::vector<char> keep(n, 1);
  std::size_t duplicates = 0;
  {
    pair_index seen(n);
    std::vector<std::uint32_t> count;
    if (copt.dup == duplicate_policy::average) count.assign(n, 1);
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = copt.dup == duplicate_policy::keep_last ? n - 1 - k : k;
      const std::size_t holder = seen.find_or_insert(rows, i);
      if (holder == pair_index::npos) continue;
      keep[i] = 0;
      ++duplicates;
      rejections.push_back({row_line[i], reject_reason::duplicate, row_text[i]});
      if (copt.dup == duplicate_policy::average) {
        rows[holder].label += rows[i].label;
        ++count[holder];
      }
    }
    if (copt.dup == duplicate_policy::average)
      for (std::size_t i = 0; i < n; ++i)
        if (keep[i] && count[i] > 1) rows[i].label /= count[i];
  }

  data::cleaned_data out;
  data::cleaning_report& rep = out.report;
  rep.rows_read = rows_read;
  rep.rows_used = n - duplicates;
  rep.rows_rejected = rejections.size();
  rep.duplicates_merged = duplicates;
  for (std::size_t r = 0; r < data::reject_reason_count; ++r)
    rep.rejected[std::string(data::reason_name(static_cast<reject_reason>(r)))] = 0;
  for (const auto& r : rejections) ++rep.rejected[std::string(data::reason_name(r.reason))];

  std::sort(rejections.begin(), rejections.end(),
            [](const rejection& a, const rejection& b) { return a.line < b.line; });
  out.rejected.reserve(rejections.size());
  for (const auto& r : rejections)
    out.rejected.push_back({r.line, std::string(data::reason_name(r.reason)), std::string(r.text)});
  rejections = {};

  if (!copt.quarantine_path.empty()) data::write_quarantine(copt.quarantine_path, out.rejected);
  if (rep.rejected_share() > copt.max_rejected_share)
    throw data::rejected_share_error(
        source, rep, copt.max_rejected_share,
        std::string(fn) + "(): '" + source + "': " + std::to_string(rep.rows_rejected) + " of " +
            std::to_string(rep.rows_read) + " rows rejected (" +
            percent_text(rep.rejected_share()) + "), above the limit of " +
            percent_text(copt.max_rejected_share) +
            "; refusing to train. Rejected by reason: " + rep.reasons_text() + ". " +
            (copt.quarantine_path.empty()
                 ? std::string("No quarantine file was requested.")
                 : "The rejected rows are in '" + copt.quarantine_path + "'."));

  // Only the rows used reach the index space, so N depends on the cleaned data alone.
  data::interactions& d = out.data;
  d.users.reserve(rep.rows_used);
  d.items.reserve(rep.rows_used);
  d.labels.reserve(rep.rows_used);
  if (lay.with_time()) d.timestamps.reserve(rep.rows_used);
  dense_id_map user_map, item_map;
  for (std::size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    if (user_map.size() == static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) ||
        item_map.size() == static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      throw data_error(source, row_line[i], 0,
                       "more than 2^31-1 distinct users or items; expected fewer");
    d.users.push_back(user_map(rows[i].user));
    d.items.push_back(item_map(rows[i].item));
    d.labels.push_back(static_cast<float>(rows[i].label));
    if (lay.with_time()) d.timestamps.push_back(rows[i].time);
  }
  clean_release_ids(user_map, lay.user_names ? &user_names : nullptr, d.user_ids, d.user_names);
  clean_release_ids(item_map, lay.item_names ? &item_names : nullptr, d.item_ids, d.item_names);
  d.implicit = opt.implicit;
  return out;
}

}  // namespace tutti::detail

namespace tutti::data {

/// Cleans CSV/TSV `text` already in memory (rules in this header's description); `source`
/// names it in errors and, when `opt.delimiter` is 0, picks the delimiter by its extension.
/// @throws tutti::invalid_argument on inconsistent options; tutti::data_error when the header
/// is unusable (empty file, missing column, NUL byte); tutti::error when the quarantine file
/// cannot be written; rejected_share_error above `copt.max_rejected_share`.
inline cleaned_data parse_csv_clean(std::string_view text, const csv_options& opt,
                                    const clean_options& copt, const std::string& source) {
  return detail::clean_csv_text(text, opt, copt, source, "tutti::data::parse_csv_clean");
}

/// Loads a CSV/TSV file like `load_csv`, but sets malformed, out-of-range and duplicate rows
/// aside with their reason (and in `copt.quarantine_path`) instead of stopping at the first.
/// @throws as `parse_csv_clean`; also tutti::error when the file cannot be read, and
/// tutti::invalid_argument when the quarantine file is the input file.
inline cleaned_data load_csv_clean(const std::string& path, const csv_options& opt = {},
                                   const clean_options& copt = {}) {
  constexpr const char* fn = "tutti::data::load_csv_clean";
  if (!copt.quarantine_path.empty()) {
    std::error_code ec;
    TUTTI_EXPECTS(copt.quarantine_path != path &&
                      !std::filesystem::equivalent(path, copt.quarantine_path, ec),
                  fn,
                  "the quarantine file '" + copt.quarantine_path +
                      "' is the input file; expected another path");
  }
  const detail::file_text text(path, fn);
  return detail::clean_csv_text(text.view(), opt, copt, path, fn);
}

}  // namespace tutti::data
