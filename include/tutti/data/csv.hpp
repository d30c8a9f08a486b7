// SPDX-License-Identifier: Apache-2.0
/// @file data/csv.hpp
/// @brief `tutti::data::load_csv`: reads (user, item, label[, timestamp]) rows from CSV or TSV.
///
/// The whole file is read into memory and parsed with `std::from_chars`; a malformed row stops
/// the load with a `tutti::data_error` naming file, line and column.
///
/// Quoting follows RFC 4180 within a line, as spreadsheet and database exports write it: a field
/// whose first non-blank character is '"' runs to the matching closing quote, `""` inside it is
/// one quote, and the separator may appear inside it. Blanks outside the quotes are trimmed, those
/// inside kept (a number still reads with blanks around it, quoted or not). A line break inside a
/// quoted field is refused, as an unterminated quote: every row is one physical line, so line
/// numbers stay those of the file and the cleaning loader can quarantine a row as its line. An
/// unterminated quote, text between a closing quote and the separator, and a '"' inside an
/// unquoted field are errors at their line and field. A line without '"' is split by `memchr`
/// alone, and a file without one after its header (MovieLens ratings, InstEval, exported logs)
/// does not even look for one per line.
///
/// Ids are integers or names (`csv_options::ids`). By default a column holds names when most of
/// its ids in the first 1,000 rows are not integers: every id of that column is then a name,
/// kept with its text (`interactions::user_names`, data/id_names.hpp), so `u1`, `cs101`, UUIDs
/// and quoted ids load as they are.
#pragma once

#include <tutti/data/csv_options.hpp>
#include <tutti/data/detail/csv_chunked.hpp>
#include <tutti/data/detail/csv_text.hpp>
#include <tutti/data/detail/file_text.hpp>

#include <string>
#include <string_view>

namespace tutti::data {

/// Parses CSV/TSV `text` already in memory; `source` names it in errors and, when
/// `opt.delimiter` is 0, picks the delimiter by its extension.
/// @throws tutti::data_error on malformed input (1-based line, header = line 1; 1-based field).
inline interactions parse_csv(std::string_view text, const csv_options& opt,
                              const std::string& source) {
  const char delim = detail::csv_check_options(opt, source, "tutti::data::parse_csv");
  text = detail::csv_strip_bom(text);
  // A NUL means a binary or truncated file; finding it once up front keeps the row loop lean.
  detail::csv_reject_nul(text, delim, source);
  std::size_t body = 0;
  const detail::csv_layout lay = detail::csv_read_header(text, opt, delim, source, body);
  // Integer ids are read by all threads; names by one (their dictionary keeps their text).
  if (!lay.user_names && !lay.item_names)
    return detail::csv_parse_rows_chunked(text, body, lay, opt, source);
  return detail::csv_parse_rows(text, body, lay, opt, source);
}

/// Loads a CSV or TSV file whose first line is a header; ids are remapped to dense indices in
/// order of first appearance and kept in `user_ids` / `item_ids`.
/// @throws tutti::error when the file cannot be read; tutti::data_error when it is malformed.
inline interactions load_csv(const std::string& path, const csv_options& opt = {}) {
  const detail::file_text text(path, "tutti::data::load_csv");
  return parse_csv(text.view(), opt, path);
}

}  // namespace tutti::data
