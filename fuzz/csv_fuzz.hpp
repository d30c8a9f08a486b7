// SPDX-License-Identifier: Apache-2.0
/// @file fuzz/csv_fuzz.hpp
/// @brief The CSV/TSV loader's fuzz property: one input through `parse_csv` and
/// `parse_csv_clean`, checked against each other, and integer ids read in small chunks against
/// the one-pass reader.
///
/// Shared by the libFuzzer target (fuzz/csv_fuzz.cpp, which aborts on a broken property) and the
/// unit suite (tests/test_clean.cpp replays fuzz/regressions/csv_fuzz/ through it).
///
/// Input layout: the first byte chooses the options, the rest is the file text.
///   bit 0: ',' (source "fuzz.csv") or '\t' (source "fuzz.tsv")   bit 1: implicit feedback
///   bits 2-3: timestamp column "", "auto", "timestamp", ""        bits 4-5: duplicate policy
///   bit 6: label domain [1, 5]                                    bit 7: max ids 1000
/// A `tutti::error` from either loader is an answer; any other exception, or a broken
/// property, is a bug. Ids are read automatically (integers, or names where most ids of a column
/// are not integers); both loaders must read each column the same way, and a name's id is its
/// code. Quoted fields reach the quoting tokenizer; a file that loads and holds no
/// '"' is loaded once more with every field quoted, which must change nothing.
#pragma once

#include <tutti/data/clean.hpp>
#include <tutti/data/csv.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti_fuzz {

/// The loader options the first input byte selects.
struct csv_case {
  tutti::data::csv_options csv;      ///< strict loader options
  tutti::data::clean_options clean;  ///< cleaning options (no quarantine file, no share limit)
  std::string source;                ///< file name, which picks the delimiter
};

/// Decodes the option byte (layout in this file's description).
inline csv_case csv_case_from(std::uint8_t b) {
  csv_case c;
  c.source = (b & 1) ? "fuzz.tsv" : "fuzz.csv";
  c.csv.implicit = (b & 2) != 0;
  const char* time_cols[] = {"", "auto", "timestamp", ""};
  c.csv.timestamp_col = time_cols[(b >> 2) & 3];
  const tutti::data::duplicate_policy policies[] = {
      tutti::data::duplicate_policy::keep_first, tutti::data::duplicate_policy::keep_last,
      tutti::data::duplicate_policy::average, tutti::data::duplicate_policy::keep_first};
  c.clean.dup = policies[(b >> 4) & 3];
  if (c.csv.implicit && c.clean.dup == tutti::data::duplicate_policy::average)
    c.clean.dup = tutti::data::duplicate_policy::keep_last;
  if (b & 64) {
    c.clean.label_min = 1.0;
    c.clean.label_max = 5.0;
  }
  if (b & 128) {
    c.clean.max_user_id = 1000;
    c.clean.max_item_id = 1000;
  }
  c.clean.max_rejected_share = 1.0;
  return c;
}

/// "" when `d` is a consistent dataset, else what is wrong with it.
inline std::string check_dataset(const tutti::data::interactions& d, bool implicit) {
  if (d.items.size() != d.size() || d.labels.size() != d.size() ||
      (!d.timestamps.empty() && d.timestamps.size() != d.size()))
    return "column arrays of different lengths";
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (d.users[i] < 0 || d.users[i] >= d.n_users() || d.items[i] < 0 || d.items[i] >= d.n_items())
      return "a dense index outside the index space";
    if (!std::isfinite(d.labels[i])) return "a non-finite label";
    if (implicit && d.labels[i] != 0.0f && d.labels[i] != 1.0f) return "an implicit label not 0/1";
  }
  return "";
}

/// Source lines of `text` with their terminators, line 1 first (the BOM, if any, stays on it).
inline std::vector<std::string_view> raw_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    end = end == std::string_view::npos ? text.size() : end + 1;
    lines.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return lines;
}

/// `raw` without "\n" or "\r\n" at its end.
inline std::string_view without_terminator(std::string_view raw) {
  if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
  if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
  return raw;
}

/// `text` (which holds no '"') with every field of every non-blank line quoted, blanks around a
/// field moved out of its quotes; the BOM and line terminators stay where they were.
inline std::string quote_every_field(std::string_view text, char delim) {
  std::string out;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") {
    out += text.substr(0, 3);
    text.remove_prefix(3);
  }
  for (std::string_view raw : raw_lines(text)) {
    const std::string_view line = without_terminator(raw);
    if (tutti::detail::csv_all_blank(line)) {
      out += raw;
      continue;
    }
    std::size_t pos = 0;
    while (true) {
      const std::size_t end = line.find(delim, pos);
      out += '"';
      out += tutti::detail::csv_trim_field(line.substr(pos, end - pos), delim);
      out += '"';
      if (end == std::string_view::npos) break;
      out += delim;
      pos = end + 1;
    }
    out += raw.substr(line.size());
  }
  return out;
}

/// Runs one input; "" when every property holds, else a description of the first that broke.
/// "" when the reader of integer ids by chunks, cut every `bytes` bytes, gives what the one-pass
/// reader gives (the same rows and indices, or the same error: line, column, message); else what
/// differs. Texts whose header or ids the chunked reader does not take are "" too.
inline std::string chunked_differs(std::string_view text, const csv_case& c, std::size_t bytes) {
  namespace d = tutti::detail;
  std::size_t body = 0;
  d::csv_layout lay;
  try {
    const char delim = d::csv_check_options(c.csv, c.source, "fuzz");
    text = d::csv_strip_bom(text);
    d::csv_reject_nul(text, delim, c.source);
    lay = d::csv_read_header(text, c.csv, delim, c.source, body);
  } catch (const tutti::data_error&) {
    return "";
  }
  if (lay.user_names || lay.item_names) return "";
  auto read = [&](bool chunked) -> std::pair<tutti::data::interactions, std::string> {
    try {
      return {chunked ? d::csv_parse_rows_chunked(text, body, lay, c.csv, c.source, bytes)
                      : d::csv_parse_rows(text, body, lay, c.csv, c.source),
              ""};
    } catch (const tutti::data_error& e) {
      return {{}, std::to_string(e.line()) + ":" + std::to_string(e.column()) + " " + e.what()};
    }
  };
  const auto [one, one_error] = read(false);
  const auto [cut, cut_error] = read(true);
  if (one_error != cut_error)
    return "chunked reader's error '" + cut_error + "', not '" + one_error + "'";
  if (one.users != cut.users || one.items != cut.items || one.labels != cut.labels ||
      one.timestamps != cut.timestamps || one.user_ids != cut.user_ids ||
      one.item_ids != cut.item_ids)
    return "chunked reader's rows differ from the one-pass reader's";
  return "";
}

inline std::string csv_check(const std::uint8_t* data, std::size_t size) {
  using tutti::data::cleaned_data;
  using tutti::data::duplicate_policy;
  using tutti::data::interactions;
  if (size == 0) return "";
  const csv_case c = csv_case_from(data[0]);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  try {
    // 1. The strict loader: a dataset or a data_error with a line number.
    bool strict_ok = false;
    std::size_t strict_line = 0;
    interactions strict;
    try {
      strict = tutti::data::parse_csv(text, c.csv, c.source);
      strict_ok = true;
      if (auto bad = check_dataset(strict, c.csv.implicit); !bad.empty())
        return "parse_csv: " + bad;
    } catch (const tutti::data_error& e) {
      strict_line = e.line();
      if (strict_line == 0) return "parse_csv: data_error without a line";
    }

    // 1b. Integer ids read in chunks cut every few bytes: the one-pass reader's result.
    if (auto bad = chunked_differs(text, c, 1 + size % 13); !bad.empty()) return bad;

    // 2. The cleaning loader: fails only on the header, as the strict one does.
    cleaned_data cl;
    try {
      cl = tutti::data::parse_csv_clean(text, c.csv, c.clean, c.source);
    } catch (const tutti::data_error& e) {
      if (e.line() != 1)
        return "parse_csv_clean: a data_error outside the header: " + std::string(e.what());
      if (strict_ok) return "parse_csv_clean refused a header parse_csv accepted";
      return "";
    }
    if (!strict_ok && strict_line == 1)
      return "parse_csv refused the header, parse_csv_clean accepted it";

    // 3. Bookkeeping: every row read is used or rejected, once.
    const auto& rep = cl.report;
    if (rep.rows_read != rep.rows_used + rep.rows_rejected) return "rows_read != used + rejected";
    if (cl.data.size() != rep.rows_used) return "data size != rows_used";
    if (cl.rejected.size() != rep.rows_rejected) return "rejected rows != rows_rejected";
    if (rep.rejected.size() != tutti::data::reject_reason_count) return "a reason is missing";
    std::size_t by_reason = 0;
    for (const auto& [reason, n] : rep.rejected) by_reason += n;
    if (by_reason != rep.rows_rejected) return "counts by reason do not add up";
    if (rep.duplicates_merged != rep.rejected.at("duplicate")) return "duplicates_merged";
    if (auto bad = check_dataset(cl.data, c.csv.implicit); !bad.empty())
      return "parse_csv_clean: " + bad;
    std::set<std::pair<std::int32_t, std::int32_t>> pairs;
    for (std::size_t i = 0; i < cl.data.size(); ++i) {
      if (!pairs.emplace(cl.data.users[i], cl.data.items[i]).second)
        return "a duplicate pair survived cleaning";
      const double label = cl.data.labels[i];
      if ((c.clean.label_min && label < *c.clean.label_min - 1e-6) ||
          (c.clean.label_max && label > *c.clean.label_max + 1e-6))
        return "a label outside the domain survived cleaning";
    }
    // Integer ids are bounded by the rules; names have codes, each the code of its name.
    if (!cl.data.user_names)
      for (auto id : cl.data.user_ids)
        if (id < 0 || (c.clean.max_user_id && id > *c.clean.max_user_id))
          return "a user id outside the range survived cleaning";
    if (!cl.data.item_names)
      for (auto id : cl.data.item_ids)
        if (id < 0 || (c.clean.max_item_id && id > *c.clean.max_item_id))
          return "an item id outside the range survived cleaning";
    for (const auto* side : {&cl.data, &strict}) {
      if (!side->user_names && !side->item_names) continue;
      if (side->user_names && side->user_names->size() != side->user_ids.size())
        return "user names and ids of different counts";
      if (side->item_names && side->item_names->size() != side->item_ids.size())
        return "item names and ids of different counts";
      for (std::size_t k = 0; side->user_names && k < side->user_ids.size(); ++k)
        if (tutti::data::name_code((*side->user_names)[k]) != side->user_ids[k])
          return "a user name whose id is not its code";
      for (std::size_t k = 0; side->item_names && k < side->item_ids.size(); ++k)
        if (tutti::data::name_code((*side->item_names)[k]) != side->item_ids[k])
          return "an item name whose id is not its code";
    }
    if (strict_ok &&
        (static_cast<bool>(strict.user_names) != static_cast<bool>(cl.data.user_names) ||
         static_cast<bool>(strict.item_names) != static_cast<bool>(cl.data.item_names)))
      return "parse_csv and parse_csv_clean read the id columns differently";

    // 4. The rejected rows are the source lines, verbatim, in order, and survive the file format.
    const std::vector<std::string_view> lines = raw_lines(text);
    std::vector<char> rejected_line(lines.size() + 1, 0);
    std::size_t previous = 1;
    for (const auto& r : cl.rejected) {
      if (r.line <= previous || r.line > lines.size()) return "rejected line numbers not in order";
      previous = r.line;
      rejected_line[r.line] = 1;
      std::string_view want = without_terminator(lines[r.line - 1]);
      if (r.text != want) return "a rejected row's text is not its source line";
    }
    const std::string file = tutti::data::format_quarantine(cl.rejected);
    if (tutti::data::parse_quarantine(file, "q.tsv") != cl.rejected)
      return "the quarantine format does not round-trip";
    std::size_t file_lines = 0;
    for (char ch : file) file_lines += ch == '\n';
    if (file_lines != cl.rejected.size()) return "the quarantine file has extra lines";

    // 5. The two loaders agree: a row load_csv would stop at is rejected, and a file whose
    // only rejections are the cleaning rules' own loads strictly.
    if (!strict_ok && strict_line >= 2 &&
        (strict_line > lines.size() || !rejected_line[strict_line]))
      return "parse_csv stopped at line " + std::to_string(strict_line) +
             ", which parse_csv_clean used";
    // (A negative id may also be one below the 64-bit range, which parse_csv refuses.)
    const bool no_domain_rules = !c.clean.label_min && !c.clean.max_user_id;
    if (no_domain_rules && rep.rows_rejected == rep.rejected.at("duplicate") && !strict_ok)
      return "parse_csv_clean found only duplicates, parse_csv refused the file";
    if (strict_ok) {
      std::size_t rule_rejections =
          rep.rejected.at("negative_id") + rep.rejected.at("duplicate") +
          (c.clean.label_min ? rep.rejected.at("label_out_of_domain") : 0) +
          (c.clean.max_user_id ? rep.rejected.at("id_out_of_range") : 0);
      if (rule_rejections != rep.rows_rejected)
        return "parse_csv accepted a row parse_csv_clean called malformed";
      if (rep.rows_read != strict.size()) return "the loaders count different rows";
      if (rep.rows_rejected == 0 && cl.data.digest() != strict.digest())
        return "clean input, yet the cleaned data differ from parse_csv's";
    }
    // Without averaging, the cleaned data are exactly the file minus its rejected lines, its ids
    // read as the cleaning read them (automatic ids judge the rows they see, and the lines left
    // are others; a file of one column of names and one of integers is not compared).
    const bool user_names = static_cast<bool>(cl.data.user_names);
    if (c.clean.dup != duplicate_policy::average && !lines.empty() &&
        user_names == static_cast<bool>(cl.data.item_names)) {
      tutti::data::csv_options same_ids = c.csv;
      same_ids.ids = user_names ? tutti::data::id_format::names : tutti::data::id_format::integers;
      std::string kept(lines[0]);
      if (kept.back() != '\n') kept += '\n';
      for (std::size_t l = 2; l <= lines.size(); ++l)
        if (!rejected_line[l]) kept += lines[l - 1];
      interactions again = tutti::data::parse_csv(kept, same_ids, c.source);
      if (again.digest() != cl.data.digest() || again.timestamps != cl.data.timestamps ||
          again.user_ids != cl.data.user_ids || again.item_ids != cl.data.item_ids)
        return "the cleaned data differ from the file without its rejected lines";
    }

    // 6. The share limit refuses exactly when the share is above it.
    tutti::data::clean_options strict_share = c.clean;
    strict_share.max_rejected_share = 0.05;
    bool refused = false;
    try {
      (void)tutti::data::parse_csv_clean(text, c.csv, strict_share, c.source);
    } catch (const tutti::data::rejected_share_error& e) {
      refused = true;
      if (e.report().rows_rejected != rep.rows_rejected) return "the refusal's counts differ";
    }
    if (refused != (rep.rejected_share() > 0.05)) return "the share limit misfired";

    // 7. Quoting every field of a file that loads changes neither loader's result.
    if (strict_ok && text.find('"') == std::string_view::npos) {
      const std::string quoted = quote_every_field(text, c.source == "fuzz.tsv" ? '\t' : ',');
      interactions again;
      try {
        again = tutti::data::parse_csv(quoted, c.csv, c.source);
      } catch (const tutti::data_error& e) {
        return "parse_csv refused the file with every field quoted: " + std::string(e.what());
      }
      if (again.digest() != strict.digest() || again.timestamps != strict.timestamps ||
          again.user_ids != strict.user_ids || again.item_ids != strict.item_ids)
        return "quoting every field changed what parse_csv reads";
      const cleaned_data cq = tutti::data::parse_csv_clean(quoted, c.csv, c.clean, c.source);
      if (cq.report.rejected != rep.rejected || cq.data.digest() != cl.data.digest())
        return "quoting every field changed what parse_csv_clean reads";
    }
  } catch (const tutti::error& e) {
    return std::string("an unexpected tutti::error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("a non-tutti exception: ") + e.what();
  }
  return "";
}

}  // namespace tutti_fuzz
