// SPDX-License-Identifier: Apache-2.0
// What `tutti study large-batch` writes: the command line that reproduces it, the dataset lines,
// the HTML page and the JSON report.
#pragma once

#include "../json_output.hpp"
#include "chart.hpp"
#include "config.hpp"
#include "data.hpp"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace tutti::cli::detail {

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += ',';
    s += x;
  }
  return s;
}

inline std::string join(const std::vector<std::size_t>& v) {
  std::string s;
  for (const auto x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

inline std::string join(const std::vector<double>& v) {
  std::string s;
  for (const auto x : v) {
    if (!s.empty()) s += ',';
    s += tutti::detail::sfmt("%g", x);
  }
  return s;
}

/// `s` as one shell word: as is when it needs no quoting, else in single quotes.
inline std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) ||
           std::string_view("+-./_:=@,%").find(ch) != std::string_view::npos;
  });
  if (plain) return s;
  std::string q = "'";
  for (const char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

/// The options that read the --data file, as the command line spells them.
inline std::string data_file_arguments(const data_file_options& f) {
  using tutti::detail::sfmt;
  std::string s = " --data " + shell_word(f.path) + " --user-col " + shell_word(f.user_col) +
                  " --item-col " + shell_word(f.item_col) + " --label-col " +
                  shell_word(f.label_col);
  if (!f.timestamp_col.empty()) s += " --timestamp-col " + shell_word(f.timestamp_col);
  if (f.implicit) s += " --implicit";
  if (f.cleaning()) {
    if (f.clean) s += " --clean";
    if (!f.quarantine.empty()) s += " --quarantine " + shell_word(f.quarantine);
    if (f.label_min) s += sfmt(" --label-min %g", *f.label_min);
    if (f.label_max) s += sfmt(" --label-max %g", *f.label_max);
    s += " --duplicates " + f.duplicates + sfmt(" --max-rejected-share %g", f.max_rejected_share);
  }
  return s;
}

/// The command line that reruns this study exactly (every setting spelled out).
inline std::string study_command_line(const study_config& c) {
  using tutti::detail::sfmt;
  std::string s =
      "tutti study large-batch --models " + join(c.models) +
      (c.file.path.empty() ? " --datasets " + join(c.datasets) : data_file_arguments(c.file)) +
      " --batches " + join(c.batches) + " --recipes " + join(c.recipes) +
      sfmt(" --seeds %zu --seed %llu --split-seed %llu --epochs %zu", c.seeds,
           static_cast<unsigned long long>(c.first_seed),
           static_cast<unsigned long long>(c.split_seed), c.epochs);
  s += c.base_lr ? sfmt(" --base-lr %g", *c.base_lr) : " --tune-lrs " + join(c.tune_lrs);
  s += c.lamb_lr ? sfmt(" --lamb-lr %g", *c.lamb_lr) : " --tune-lamb-lrs " + join(c.tune_lamb_lrs);
  s += sfmt(" --reference-batch %zu --warmup-epochs %g --schedule %s --ranks %d", c.reference_batch,
            c.warmup_epochs, choice_name(c.schedule).c_str(), c.ranks);
  s += sfmt(" --dim %d --l2 %g --gmf-dim %zu --layers %s", c.dim, double(c.l2), c.gmf_dim,
            join(c.layers).c_str());
  if (c.file.path.empty())
    for (const auto& d : c.datasets)
      if (d == "synthetic") s += sfmt(" --learners %d --courses %d", c.learners, c.courses);
  s += sfmt(" --test-fraction %g --tolerance %g", c.test_fraction, c.tolerance);
  return s;
}

/// One line on a dataset: its name, where it came from (the file's path for --data), its rows.
inline std::string dataset_line(const study_data& d) {
  using tutti::detail::sfmt;
  const std::string metric =
      d.k ? sfmt("%s@%zu of the latest interaction among %zu sampled courses", d.metric, d.k,
                 d.test_eval.lists->n_negatives)
          : std::string(d.metric);
  return sfmt("%s: %s, %s, %s; %zu train / %zu test rows (tuning: %zu / %zu), %d users, %d items",
              d.name.c_str(), d.source.c_str(), d.implicit ? "implicit 0/1" : "ratings",
              metric.c_str(), d.parts.train.size(), d.parts.test.size(), d.tune.train.size(),
              d.tune.test.size(), d.all.n_users(), d.all.n_items());
}

inline nlohmann::json json_value(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

/// What the study produced, for its page and its JSON report.
struct study_outcome {
  std::string date;
  double seconds = 0;
  std::vector<std::string> models;  // the models run (a model this build lacks is skipped)
  std::vector<study_data> data;
  std::vector<study_cell> cells;
  std::vector<study_baseline> baselines;
  std::vector<std::vector<study_trial>> tuning;  // per panel, the rates tried
  std::vector<std::string> skipped;
};

/// Writes the string `text` to `path` whole (detail/checked_file.hpp); throws naming the file
/// and the reason when it cannot.
inline void write_text_file(const std::filesystem::path& path, const std::string& text) {
  tutti::detail::write_file_replacing(path, text, "tutti study --report");
}

/// `--report DIR`: the chart (large-batch.svg) and the page (large-batch.html) in DIR.
inline void write_study_page(const study_config& c, const study_outcome& o) {
  using tutti::detail::sfmt;
  using tutti::detail::xml_escape;
  std::error_code ec;
  std::filesystem::create_directories(c.report, ec);
  if (ec) throw error("tutti study: cannot create '" + c.report + "': " + ec.message());
  const std::string svg = study_svg(o.baselines, o.cells, c.recipes, c.batches);
  const auto svg_path = std::filesystem::path(c.report) / "large-batch.svg";
  write_text_file(svg_path, svg);
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>tutti study large-batch</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\n"
      "pre{background:#f6f6f6;padding:8px;overflow-x:auto}\n</style>\n</head>\n<body>\n"
      "<h1>tutti study large-batch</h1>\n<p>" +
      xml_escape(o.date) + "; " + sfmt("%.0f", o.seconds) + " s</p>\n<pre>" +
      xml_escape(study_command_line(c)) + "</pre>\n<ul>\n";
  for (const auto& d : o.data) html += "<li>" + xml_escape(dataset_line(d)) + "</li>\n";
  html += "</ul>\n" + svg;
  for (const auto& b : o.baselines)
    html += "<pre>" + xml_escape(panel_table(b, o.cells)) + "</pre>\n";
  html += "</body>\n</html>\n";
  const auto html_path = std::filesystem::path(c.report) / "large-batch.html";
  write_text_file(html_path, html);
  std::printf("chart: %s, page: %s\n", svg_path.string().c_str(), html_path.string().c_str());
}

/// The settings the study ran with.
inline nlohmann::json study_settings_json(const study_config& c, const study_outcome& o) {
  nlohmann::json j = {{"models", o.models},
                      {"datasets", c.datasets},
                      {"batches", c.batches},
                      {"recipes", c.recipes},
                      {"seeds", c.seeds},
                      {"first_seed", c.first_seed},
                      {"split_seed", c.split_seed},
                      {"epochs", c.epochs},
                      {"base_lr", c.base_lr ? nlohmann::json(*c.base_lr) : nlohmann::json("tuned")},
                      {"lamb_lr", c.lamb_lr ? nlohmann::json(*c.lamb_lr) : nlohmann::json("tuned")},
                      {"tune_lrs", c.tune_lrs},
                      {"tune_lamb_lrs", c.tune_lamb_lrs},
                      {"reference_batch", c.reference_batch},
                      {"warmup_epochs", c.warmup_epochs},
                      {"tolerance_percent", c.tolerance},
                      {"schedule", choice_name(c.schedule)},
                      {"ranks", c.ranks},
                      {"mf", {{"dim", c.dim}, {"l2", c.l2}}},
                      {"ncf", {{"gmf_dim", c.gmf_dim}, {"layers", c.layers}, {"l2", c.l2}}},
                      {"quick", c.quick}};
  if (!c.file.path.empty())
    j["data"] = {{"file", c.file.path},
                 {"user_col", c.file.user_col},
                 {"item_col", c.file.item_col},
                 {"label_col", c.file.label_col},
                 {"timestamp_col", c.file.timestamp_col},
                 {"implicit", c.file.implicit},
                 {"clean", c.file.cleaning()}};
  return j;
}

/// One entry per dataset: its source, sizes, metric and trivial predictor.
inline nlohmann::json study_datasets_json(const study_config& c, const study_outcome& o) {
  nlohmann::json ds = nlohmann::json::array();
  for (const auto& d : o.data) {
    nlohmann::json e = {{"name", d.name},
                        {"source", d.source},
                        {"labels", d.implicit ? "implicit" : "ratings"},
                        {"train_rows", d.parts.train.size()},
                        {"test_rows", d.parts.test.size()},
                        {"tuning_train_rows", d.tune.train.size()},
                        {"validation_rows", d.tune.test.size()},
                        {"users", d.all.n_users()},
                        {"items", d.all.n_items()},
                        {"metric", d.metric},
                        {"trivial", d.trivial}};
    if (d.test_eval.lists)
      e["ranking"] = {{"k", d.k},
                      {"negatives", c.negatives},
                      {"test_lists", d.test_eval.lists->size()},
                      {"validation_lists", d.tune_eval.lists->size()}};
    if (!d.file.empty()) e["file"] = d.file;
    if (d.cleaning)
      e["cleaning"] = {{"rows_read", d.cleaning->rows_read},
                       {"rows_used", d.cleaning->rows_used},
                       {"rows_rejected", d.cleaning->rows_rejected},
                       {"rejected", d.cleaning->rejected}};
    ds.push_back(std::move(e));
  }
  return ds;
}

/// One entry per panel: its baseline and the rates tuned for it.
inline nlohmann::json study_baselines_json(const study_outcome& o) {
  nlohmann::json bs = nlohmann::json::array();
  for (std::size_t i = 0; i < o.baselines.size(); ++i) {
    const auto& b = o.baselines[i];
    nlohmann::json trials = nlohmann::json::array();
    for (const auto& t : o.tuning[i])
      trials.push_back(
          {{"optimizer", t.optimizer}, {"lr", t.lr}, {"validation", json_value(t.validation)}});
    bs.push_back({{"model", b.model},
                  {"dataset", b.dataset},
                  {"metric", b.metric},
                  {"batch", b.batch},
                  {"recipe", b.recipe},
                  {"value", json_value(b.value)},
                  {"trivial", b.trivial},
                  {"base_lr", b.base_lr},
                  {"lamb_lr", b.lamb_lr},
                  {"tuning", trials}});
  }
  return bs;
}

/// One cell: its setting, the metric per seed and per epoch, and how it compares.
inline nlohmann::json study_cell_json(const study_cell& cell) {
  nlohmann::json per_seed = nlohmann::json::array(), curves = nlohmann::json::array(),
                 mean_curve = nlohmann::json::array(), failures = nlohmann::json::array();
  std::size_t skipped_steps = 0;
  for (const auto& r : cell.runs) {
    per_seed.push_back(json_value(r.final_metric));
    nlohmann::json curve = nlohmann::json::array();
    for (const double v : r.curve) curve.push_back(json_value(v));
    curves.push_back(curve);
    if (!r.failure.empty()) failures.push_back(r.failure);
    skipped_steps += r.skipped_steps;
  }
  for (const double v : cell.mean_curve) mean_curve.push_back(json_value(v));
  const auto optional_epochs = [](const std::optional<std::size_t>& e) {
    return e ? nlohmann::json(*e) : nlohmann::json(nullptr);
  };
  const auto& first = cell.runs.front();
  return {{"model", cell.model},
          {"dataset", cell.dataset},
          {"batch", cell.batch},
          {"recipe", cell.recipe.name},
          {"optimizer", choice_name(cell.recipe.optimizer)},
          {"scaling", to_string(cell.recipe.scaling)},
          {"lr", first.lr},
          {"warmup_steps", first.warmup_steps},
          {"steps_per_epoch", first.steps_per_epoch},
          {"seeds", cell.seeds},
          {"metric", cell.metric},
          {"mean", json_value(cell.mean)},
          {"std", json_value(cell.stdev)},
          {"per_seed", per_seed},
          {"mean_curve", mean_curve},
          {"per_seed_curves", curves},
          {"epochs_to_baseline", optional_epochs(cell.epochs_to_baseline)},
          {"epochs_to_tolerance", optional_epochs(cell.epochs_to_tolerance)},
          {"gap_percent", json_value(cell.gap_percent)},
          {"samples_per_s", cell.samples_per_s},
          {"skipped_steps", skipped_steps},
          {"failures", failures},
          {"seconds", cell.seconds}};
}

/// `--json FILE`: the whole study.
inline void write_study_json(const study_config& c, const study_outcome& o) {
  nlohmann::json j;
  j["study"] = "large-batch";
  j["command"] = study_command_line(c);
  j["date"] = o.date;
  j["seconds"] = o.seconds;
  j["settings"] = study_settings_json(c, o);
  j["datasets"] = study_datasets_json(c, o);
  j["baselines"] = study_baselines_json(o);
  nlohmann::json cs = nlohmann::json::array();
  for (const auto& cell : o.cells) cs.push_back(study_cell_json(cell));
  j["cells"] = cs;
  j["skipped"] = o.skipped;
  write_json_file(c.json, j, "tutti study --json");
}

}  // namespace tutti::cli::detail
