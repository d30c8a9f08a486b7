// SPDX-License-Identifier: Apache-2.0
// The datasets of `tutti study large-batch`: loaded, split once with the fixed split seed, and
// the trivial predictor each metric is compared against.
#pragma once

#include "../data_options.hpp"
#include "../study_metric.hpp"
#include "config.hpp"

#include <tutti/tutti.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tutti::cli::detail {

/// A recipe: how the rate follows the global batch, whether it warms up, which optimizer.
struct study_recipe {
  std::string name;
  lr_scaling scaling = lr_scaling::none;
  bool warmup = false;
  optimizer_choice optimizer = optimizer_choice::adam;
};

inline study_recipe recipe_named(const std::string& name) {
  using enum optimizer_choice;
  if (name == "same") return {name, lr_scaling::none, false, adam};
  if (name == "linear") return {name, lr_scaling::linear, false, adam};
  if (name == "linear-warmup") return {name, lr_scaling::linear, true, adam};
  if (name == "sqrt-warmup") return {name, lr_scaling::sqrt, true, adam};
  if (name == "lamb") return {name, lr_scaling::sqrt, true, lamb};
  tutti::detail::throw_invalid("tutti study large-batch", "unknown recipe '" + name + "'");
}

/// One dataset, split once with the fixed split seed.
struct study_data {
  std::string name;
  std::string source;
  std::string file;                               // the --data file, or empty
  std::optional<data::cleaning_report> cleaning;  // when the --data file was cleaned
  data::interactions all;
  data::split_result parts;
  data::split_result tune;  // the training rows split again: tuning never sees the test rows
  bool implicit = false;
  float mean = 0;           // of the training labels
  double trivial = 0;       // the metric of a trivial predictor: global mean RMSE, AUC 0.5, or
                            // a random ranking's HR@K / NDCG@K
  const char* metric = "";  // rmse, auc, hr or ndcg
  std::size_t k = 0;        // K of hr and ndcg
  study_eval test_eval;     // the ranking lists of the test rows (null for rmse and auc)
  study_eval tune_eval;     // those of the validation rows
};

/// The dataset name of a --data file: its stem ("ratings" for data/ratings.csv).
inline std::string file_dataset_name(const std::string& path) {
  const std::filesystem::path p(path);
  std::string name = p.stem().string();
  if (name.empty()) name = p.filename().string();
  return name.empty() ? std::string("data") : name;
}

/// Leave-one-out for HR@K / NDCG@K: each learner's latest interaction held out of the rows
/// (test), and again of the training rows (validation), each ranked among sampled courses.
inline void split_for_ranking(const study_config& c, const study_metric_choice& m, study_data& d) {
  d.parts = data::leave_one_out(d.all, {.seed = c.split_seed});
  d.tune = data::leave_one_out(d.parts.train, {.seed = c.split_seed + 1});
  d.mean = static_cast<float>(mean_label(d.parts.train));
  d.metric = m.ranking;
  d.k = m.k;
  const bool ndcg = std::string_view(m.ranking) == "ndcg";
  const auto lists = [&](const data::split_result& p, std::uint64_t seed) {
    return std::make_shared<const data::ranking_candidates>(
        data::sample_candidates(p.train, p.test, {.negatives = c.negatives, .seed = seed}));
  };
  d.test_eval = {lists(d.parts, c.split_seed), m.k, ndcg};
  d.tune_eval = {lists(d.tune, c.split_seed + 1), m.k, ndcg};
  d.trivial = random_ranking_metric(*d.test_eval.lists, m.k, ndcg);
}

/// Loads dataset `name` (the --data file when one is given) and splits it.
inline std::optional<study_data> load_study_data(const study_config& c, const std::string& name) {
  study_data d;
  d.name = name;
  if (!c.file.path.empty()) {
    // As `tutti train --data` reads it: a bad file stops here with its file:line:column.
    loaded_file f = load_data_file(c.file);
    d.all = std::move(f.rows);
    d.cleaning = std::move(f.cleaning);
    d.source = c.file.path;
    d.file = c.file.path;
  } else if (name == "insteval") {
    const std::filesystem::path path = std::filesystem::path(c.datasets_dir) / "insteval.tsv";
    if (!std::filesystem::exists(path)) return std::nullopt;
    d.all = data::load_csv(path.string(), {.user_col = "s", .item_col = "d", .label_col = "y"});
    d.source = path.string();
  } else {
    d.all = data::synthetic_courses(
        {.learners = c.learners, .courses = c.courses, .implicit = true, .seed = c.data_seed});
    d.source = "synthetic courses (" + std::to_string(c.learners) + " learners, " +
               std::to_string(c.courses) + " courses, implicit, data seed " +
               std::to_string(c.data_seed) + ")";
  }
  d.implicit = d.all.implicit;
  const study_metric_choice m = parse_study_metric(c.metric);
  if (m.ranking) {
    split_for_ranking(c, m, d);
    return d;
  }
  d.parts = data::split(d.all, {.test_fraction = c.test_fraction, .seed = c.split_seed});
  d.tune = data::split(d.parts.train, {.test_fraction = c.test_fraction, .seed = c.split_seed + 1});
  d.mean = static_cast<float>(mean_label(d.parts.train));
  d.metric = d.implicit ? "auc" : "rmse";
  if (d.implicit) {
    d.trivial = 0.5;
  } else {
    std::vector<float> p(d.parts.test.size(), d.mean);
    d.trivial = rmse(p, std::span<const float>(d.parts.test.labels));
  }
  return d;
}

}  // namespace tutti::cli::detail
