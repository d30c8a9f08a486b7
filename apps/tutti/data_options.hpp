// SPDX-License-Identifier: Apache-2.0
// The user's own CSV/TSV file as the `tutti` commands read it: `--data`, the column options,
// `--implicit`, the cleaning options, and the loader they select (the strict `load_csv`, or
// `load_csv_clean` when any cleaning option is given). One copy, so every command reads a file
// the same way and reports a bad one with the same file:line:column messages.
#pragma once

#include <tutti/data/clean.hpp>
#include <tutti/data/csv.hpp>
#include <tutti/data/interactions.hpp>

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tutti::cli {

/// A data file and how to read it: what `--data` and its companion options say.
struct data_file_options {
  std::string path;  // empty: no file given
  // tutti train: the further --data files, read after `path` in order (the days after its).
  std::vector<std::string> more_paths;
  std::string user_col = "userId";
  std::string item_col = "movieId";
  std::string label_col = "rating";
  bool label_col_given = false;  // --label-col was on the command line
  std::string timestamp_col;     // empty: none
  bool implicit = false;
  std::string ids = "auto";  // auto, integer or name
  bool clean = false;        // set bad rows aside instead of stopping at the first
  std::string quarantine;    // file receiving the rejected rows verbatim (implies clean)
  std::optional<double> label_min, label_max;
  std::string duplicates = "keep_first";
  double max_rejected_share = 0.05;
  bool cleaning_given = false;  // --duplicates or --max-rejected-share was on the command line

  /// True when any cleaning option was given (even at its default value): the file is then read
  /// by `load_csv_clean`, which sets bad rows aside, rather than by `load_csv`, which stops at
  /// one.
  bool cleaning() const {
    return clean || !quarantine.empty() || label_min || label_max || cleaning_given ||
           duplicates != "keep_first" || max_rejected_share != 0.05;
  }
};

/// Registers `--ids` on `app`: how the user and item ids read (`ids` receives auto, integer or
/// name; `id_format_of` turns it into the loader's option).
inline void add_ids_option(CLI::App& app, std::string& ids) {
  app.add_option("--ids", ids,
                 "how user and item ids read: auto (names such as u1 or a UUID where most ids of "
                 "a column are not integers), integer, or name")
      ->check(CLI::IsMember({"auto", "integer", "name"}))
      ->capture_default_str();
}

/// The loader's `id_format` for what `--ids` said.
inline data::id_format id_format_of(const std::string& ids) {
  return ids == "integer" ? data::id_format::integers
         : ids == "name"  ? data::id_format::names
                          : data::id_format::automatic;
}

/// Registers `--data` (with `data_help` saying what the command does with it), `--user-col`,
/// `--item-col`, `--label-col`, `--timestamp-col`, `--implicit` and `--ids`.
inline void add_data_file_options(CLI::App& app, data_file_options& o, const std::string& data_help,
                                  bool several = false) {
  if (several)
    app.add_option_function<std::vector<std::string>>(
           "--data",
           [&o](const std::vector<std::string>& paths) {
             o.path = paths.front();
             o.more_paths.assign(paths.begin() + 1, paths.end());
           },
           data_help)
        ->check(CLI::ExistingFile);
  else
    app.add_option("--data", o.path, data_help)->check(CLI::ExistingFile);
  app.add_option("--user-col", o.user_col, "name of the user id column")->capture_default_str();
  app.add_option("--item-col", o.item_col, "name of the item id column")->capture_default_str();
  app.add_option("--label-col", o.label_col,
                 "name of the label column (with --feedback implicit: optional, rows whose "
                 "label is above 0 are the positives)")
      ->each([&o](const std::string&) { o.label_col_given = true; })
      ->capture_default_str();
  app.add_option("--timestamp-col", o.timestamp_col, "name of an optional timestamp column");
  app.add_flag("--implicit", o.implicit, "labels are implicit 0/1 feedback (logistic loss, AUC)");
  add_ids_option(app, o.ids);
}

/// Registers `--clean`, `--quarantine`, `--label-min`, `--label-max`, `--duplicates` and
/// `--max-rejected-share`; `refuse` names what a too-dirty file stops (e.g. "train").
inline void add_cleaning_options(CLI::App& app, data_file_options& o, const std::string& refuse) {
  app.add_flag("--clean", o.clean,
               "set malformed, out-of-range and duplicate rows aside (counted by reason) instead "
               "of stopping at the first");
  app.add_option(
      "--quarantine", o.quarantine,
      "write each rejected row, with its line and reason, to this file (implies --clean)");
  app.add_option("--label-min", o.label_min, "smallest valid label, e.g. 1 (implies --clean)");
  app.add_option("--label-max", o.label_max, "largest valid label, e.g. 5 (implies --clean)");
  app.add_option("--duplicates", o.duplicates,
                 "repeated (user, item) pairs: keep_first, keep_last or average (implies --clean)")
      ->check(CLI::IsMember({"keep_first", "keep_last", "average"}))
      ->each([&o](const std::string&) { o.cleaning_given = true; })
      ->capture_default_str();
  app.add_option("--max-rejected-share", o.max_rejected_share,
                 "refuse to " + refuse + " when more than this share of rows is rejected")
      ->check(CLI::Range(0.0, 1.0))
      ->each([&o](const std::string&) { o.cleaning_given = true; })
      ->capture_default_str();
}

/// The rows of a data file, and how cleaning went when it was cleaned.
struct loaded_file {
  data::interactions rows;
  std::optional<data::cleaning_report> cleaning;
};

/// Reads `o.path` as `o` says. A malformed file throws `tutti::data_error` (file:line:column)
/// from the strict loader; with cleaning, bad rows are counted and a file with too many of them
/// throws `data::rejected_share_error`.
inline loaded_file load_data_file(const data_file_options& o) {
  const data::csv_options csv{.user_col = o.user_col,
                              .item_col = o.item_col,
                              .label_col = o.label_col,
                              .timestamp_col = o.timestamp_col,
                              .implicit = o.implicit,
                              .ids = id_format_of(o.ids)};
  loaded_file out;
  if (o.cleaning()) {
    const data::duplicate_policy dup =
        o.duplicates == "keep_last" ? data::duplicate_policy::keep_last
        : o.duplicates == "average" ? data::duplicate_policy::average
                                    : data::duplicate_policy::keep_first;
    data::cleaned_data cleaned = data::load_csv_clean(o.path, csv,
                                                      {.label_min = o.label_min,
                                                       .label_max = o.label_max,
                                                       .dup = dup,
                                                       .max_rejected_share = o.max_rejected_share,
                                                       .quarantine_path = o.quarantine});
    out.rows = std::move(cleaned.data);
    out.cleaning = std::move(cleaned.report);
  } else {
    out.rows = data::load_csv(o.path, csv);
  }
  if (out.rows.size() == 0)
    throw data_error(o.path, 2, 0,
                     out.cleaning && out.cleaning->rows_read > 0
                         ? "every one of its " + std::to_string(out.cleaning->rows_read) +
                               " data rows was rejected (" + out.cleaning->reasons_text() +
                               "); expected at least one row to train on"
                         : "no data rows after the header; expected one row per "
                           "interaction (learner, course and, when named, a label)");
  return out;
}

/// The mean of the rows' labels (0 for no rows): a ratings model's initial bias.
inline double mean_label(const data::interactions& d) {
  double s = 0;
  for (float y : d.labels) s += y;
  return d.size() ? s / double(d.size()) : 0.0;
}

}  // namespace tutti::cli
