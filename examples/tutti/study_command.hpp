// SPDX-License-Identifier: Apache-2.0
// `tutti study large-batch`: where learning-rate scaling keeps a recommender's accuracy as the
// global batch grows, and where it stops. Trains MF and NCF on InstEval and the synthetic course
// data, or on the user's own file (--data), at each global batch under five recipes, several
// seeds per cell, a fixed epoch budget; prints a table per model x dataset, writes JSON and an
// SVG/HTML chart. See docs/large-batch.md.
#pragma once

#include "data_options.hpp"
#include "run_policies.hpp"
#include "study_metric.hpp"

#include <tutti/detail/number_format.hpp>
#include <tutti/plan/report.hpp>
#include <tutti/tutti.hpp>
#if TUTTI_HAS_BLAS
#include <tutti/models/neural_cf.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace tutti::cli {

/// Everything `tutti study large-batch` can be told.
struct study_config {
  std::vector<std::string> models = {"mf", "ncf"};
  std::vector<std::string> datasets = {"insteval", "synthetic"};
#if defined(TUTTI_DATASETS_DIR)
  std::string datasets_dir = TUTTI_DATASETS_DIR;
#else
  std::string datasets_dir = "../shared/datasets";
#endif
  data_file_options file;  // --data: the user's own file, in place of --datasets
  std::vector<std::size_t> batches = {256, 1024, 4096, 16384};
  std::vector<std::string> recipes = {"same", "linear", "linear-warmup", "sqrt-warmup", "lamb"};
  std::size_t seeds = 3;
  std::uint64_t first_seed = 1;  // training seeds first_seed, first_seed + 1, ...
  std::uint64_t split_seed = 1;  // the held-out pairs: fixed, so seeds measure optimisation noise
  std::size_t epochs = 10;
  // The base rates at the reference batch: Adam's (recipes same .. sqrt-warmup) and LAMB's.
  // Unset: tuned per model x dataset over the grids below, on a validation split of the
  // training rows, at the reference batch.
  std::optional<double> base_lr;
  std::optional<double> lamb_lr;
  std::vector<double> tune_lrs = {0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03};
  std::vector<double> tune_lamb_lrs = {0.001, 0.003, 0.01, 0.03};
  std::size_t reference_batch = 256;
  double warmup_epochs = 1.0;
  double tolerance = 1.0;           // percent: "reached within" this much of the baseline
  std::string schedule = "cosine";  // after warmup, as tutti train's default
  int ranks = 1;
  std::string json;
  std::string report;
  bool quick = false;
  // Models: MF as tutti train's defaults; NCF small enough for seconds per run on two cores.
  int dim = 32;
  float l2 = 0.03f;
  std::size_t gmf_dim = 16;
  std::vector<std::size_t> layers = {32, 16};
  // The synthetic course data, as tutti train's defaults (implicit 0/1).
  std::int32_t learners = 4000;
  std::int32_t courses = 500;
  std::uint64_t data_seed = 42;
  double test_fraction = 0.1;
  std::string metric = "auto";  // auto (rmse or auc), hr@K or ndcg@K
  std::size_t negatives = 100;  // sampled courses per held-out one, for hr@K and ndcg@K
  CLI::App* app = nullptr;      // to tell options given on the command line from --quick's presets
};

/// Registers `tutti study` and its `large-batch` subcommand; returns `study`.
inline CLI::App* add_study_commands(CLI::App& app, study_config& c) {
  CLI::App* study = app.add_subcommand("study", "run a study of training behaviour (large-batch)");
  study->require_subcommand(1);
  CLI::App* lb = study->add_subcommand(
      "large-batch",
      "test metric against global batch under learning-rate recipes (same, linear, "
      "linear-warmup, sqrt-warmup, lamb), several seeds per cell, a fixed epoch budget");
  c.app = lb;
  lb->add_option("--models", c.models, "models: mf, ncf")
      ->delimiter(',')
      ->check(CLI::IsMember({"mf", "ncf"}))
      ->capture_default_str();
  lb->add_option("--datasets", c.datasets,
                 "datasets: insteval (DIR/insteval.tsv, ratings, RMSE), synthetic (course data, "
                 "implicit, AUC); or your own file with --data")
      ->delimiter(',')
      ->check(CLI::IsMember({"insteval", "synthetic"}))
      ->capture_default_str();
  lb->add_option("--datasets-dir", c.datasets_dir, "folder holding insteval.tsv")
      ->capture_default_str();
  add_data_file_options(*lb, c.file,
                        "study this CSV/TSV file (with a header line) instead of --datasets: one "
                        "dataset named after the file, split as the others; AUC with --implicit, "
                        "else RMSE");
  add_cleaning_options(*lb, c.file, "study");
  lb->add_option("--batches", c.batches, "global batches; the smallest gives the baseline")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->capture_default_str();
  lb->add_option("--recipes", c.recipes,
                 "learning-rate recipes: same (base rate), linear (linear scaling, no warmup), "
                 "linear-warmup, sqrt-warmup (Adam), lamb (LAMB, sqrt scaling and warmup)")
      ->delimiter(',')
      ->check(CLI::IsMember({"same", "linear", "linear-warmup", "sqrt-warmup", "lamb"}))
      ->capture_default_str();
  lb->add_option("--metric", c.metric,
                 "the test metric: auto (RMSE for ratings, AUC for implicit labels), or hr@K / "
                 "ndcg@K of each learner's latest interaction among --negatives sampled courses "
                 "(the leave-one-out protocol)")
      ->capture_default_str();
  lb->add_option("--negatives", c.negatives, "sampled courses per held-out one, for hr@K, ndcg@K")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  lb->add_option("--seeds", c.seeds, "training seeds per cell (the split stays fixed)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}))
      ->capture_default_str();
  lb->add_option("--seed", c.first_seed, "first training seed")->capture_default_str();
  lb->add_option("--split-seed", c.split_seed,
                 "seed of the train/test split, the same in every run")
      ->capture_default_str();
  lb->add_option("--epochs", c.epochs, "epoch budget, the same for every cell")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000}))
      ->capture_default_str();
  lb->add_option("--base-lr", c.base_lr,
                 "Adam's rate at the reference batch, for every model and dataset (default: "
                 "tuned per model x dataset over --tune-lrs)")
      ->check(CLI::PositiveNumber);
  lb->add_option("--lamb-lr", c.lamb_lr,
                 "LAMB's rate at the reference batch (default: tuned over --tune-lamb-lrs)")
      ->check(CLI::PositiveNumber);
  lb->add_option("--tune-lrs", c.tune_lrs,
                 "Adam rates tried at the reference batch (recipe same, first seed, validation "
                 "split of the training rows); the best becomes the base rate")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  lb->add_option("--tune-lamb-lrs", c.tune_lamb_lrs,
                 "LAMB rates tried at the reference batch (recipe lamb)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  lb->add_option("--reference-batch", c.reference_batch,
                 "batch the base rates were tuned at (scaling is relative to it)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->capture_default_str();
  lb->add_option("--warmup-epochs", c.warmup_epochs,
                 "linear warmup, in epochs (converted to steps at each batch)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  lb->add_option("--tolerance", c.tolerance,
                 "percent of the baseline metric within which a cell counts as holding it (the "
                 "epochs to reach it are reported next to the epochs to reach the baseline)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  lb->add_option("--schedule", c.schedule, "schedule after warmup: constant, step, cosine, poly")
      ->check(CLI::IsMember({"constant", "step", "cosine", "poly"}))
      ->capture_default_str();
  lb->add_option("--ranks", c.ranks,
                 "data-parallel ranks (threads); the global batch is what matters, so 1")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  lb->add_option("--dim", c.dim, "mf: embedding dimension")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  lb->add_option("--l2", c.l2, "L2 regularisation of both models")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  lb->add_option("--gmf-dim", c.gmf_dim, "ncf: dimension of the GMF branch")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  lb->add_option("--layers", c.layers, "ncf: widths of the MLP's dense layers")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{65536}))
      ->capture_default_str();
  lb->add_option("--learners", c.learners, "synthetic data: learners")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  lb->add_option("--courses", c.courses, "synthetic data: courses")
      ->check(CLI::Range(2, 10000000))
      ->capture_default_str();
  lb->add_option("--test-fraction", c.test_fraction, "share of rows held out")
      ->check(CLI::Range(0.01, 0.9))
      ->capture_default_str();
  lb->add_option("--json", c.json, "write the cells and baselines as JSON to this file");
  lb->add_option("--report", c.report,
                 "write the chart (large-batch.svg) and a page (large-batch.html) to this folder");
  lb->add_flag("--quick", c.quick,
               "a tiny configuration (small synthetic data unless --data, batches 64 and 256, "
               "3 epochs) for tests; options given explicitly still apply");
  lb->footer(
      "Examples (the study of docs/large-batch.md; the same on your own ratings file):\n"
      "  tutti study large-batch --json study.json --report study/\n"
      "  tutti study large-batch --data ratings.csv --user-col userId --item-col movieId "
      "--label-col rating --json study.json --report study/");
  return study;
}

namespace detail {

/// A recipe: how the rate follows the global batch, whether it warms up, which optimizer.
struct study_recipe {
  std::string name;
  lr_scaling scaling = lr_scaling::none;
  bool warmup = false;
  std::string optimizer = "adam";
};

inline study_recipe recipe_named(const std::string& name) {
  if (name == "same") return {name, lr_scaling::none, false, "adam"};
  if (name == "linear") return {name, lr_scaling::linear, false, "adam"};
  if (name == "linear-warmup") return {name, lr_scaling::linear, true, "adam"};
  if (name == "sqrt-warmup") return {name, lr_scaling::sqrt, true, "adam"};
  if (name == "lamb") return {name, lr_scaling::sqrt, true, "lamb"};
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

inline double label_mean(const data::interactions& d) {
  double s = 0;
  for (float y : d.labels) s += y;
  return d.size() ? s / double(d.size()) : 0.0;
}

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
  d.mean = static_cast<float>(label_mean(d.parts.train));
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
  d.mean = static_cast<float>(label_mean(d.parts.train));
  d.metric = d.implicit ? "auc" : "rmse";
  if (d.implicit) {
    d.trivial = 0.5;
  } else {
    std::vector<float> p(d.parts.test.size(), d.mean);
    d.trivial = rmse(p, std::span<const float>(d.parts.test.labels));
  }
  return d;
}

/// True when metric `a` is at least as good as `b` (lower RMSE, higher AUC, HR and NDCG).
inline bool at_least_as_good(const char* metric, double a, double b) {
  return higher_is_better(metric) ? a >= b : a <= b;
}

/// What one training run (one seed of one cell) produced.
struct seed_run {
  std::vector<double> curve;  // test metric after each epoch (NaN where it could not be taken)
  double final_metric = std::numeric_limits<double>::quiet_NaN();
  double samples = 0;       // weighted training samples over the run
  double step_seconds = 0;  // wall time of the steps (evaluation excluded)
  double seconds = 0;       // wall time of the run
  double lr = 0;            // rate after scaling
  std::size_t steps_per_epoch = 0;
  std::size_t warmup_steps = 0;
  std::size_t skipped_steps = 0;
  std::string failure;  // why the run stopped early, or empty
};

/// Steps per epoch of `n` training rows at global batch `batch` over `ranks` ranks with
/// shuffled_shards' pad tail: what the trainer computes, so warmup in epochs becomes the right
/// number of steps. When W divides B every rank takes B/W of its ceil(n/W) slots per step; when
/// it does not, step s takes positions [s*B, (s+1)*B) of the dealt ones and the epoch ends with
/// the last real one (detail::batch_split).
inline std::size_t study_steps_per_epoch(std::size_t n, std::size_t batch, int ranks) {
  const auto w = static_cast<std::size_t>(ranks);
  const tutti::detail::batch_split split{batch, w};
  if (split.even()) return ((n + w - 1) / w + split.largest() - 1) / split.largest();
  std::vector<std::uint64_t> real(w);  // rank r's real slots: the positions r, r + W, ... < n
  for (std::size_t r = 0; r < w; ++r) real[r] = (n + w - 1 - r) / w;
  return split.steps_to_cover(real);
}

/// Trains one seed of one cell at base rate `base` (at the reference batch) on `parts` (train,
/// evaluation). `make(space)` builds a fresh model.
template <class MakeModel>
seed_run run_study_seed(const study_config& c, const data::split_result& parts,
                        const study_eval& eval, MakeModel make, std::size_t batch,
                        const study_recipe& recipe, double base, std::uint64_t seed) {
  seed_run out;
  out.steps_per_epoch = study_steps_per_epoch(parts.train.size(), batch, c.ranks);
  out.warmup_steps =
      recipe.warmup
          ? static_cast<std::size_t>(std::llround(c.warmup_epochs * double(out.steps_per_epoch)))
          : 0;
  out.lr = scaled_lr(base, batch, c.reference_batch, recipe.scaling);
  std::mutex mutex;
  auto fit = [&](auto reducer) {
    using Model = decltype(make(host_space{}));
    train_options opt{.batch = batch,
                      .epochs = c.epochs,
                      .base_lr = base,
                      .scaling = recipe.scaling,
                      .reference_batch = c.reference_batch,
                      .seed = seed,
                      .ranking = eval.lists,
                      .ranking_k = eval.lists ? eval.k : std::size_t{10}};
    // The study runs the unscaled recipe on purpose: the guard's warning would only repeat it.
    opt.on_epoch = [&](int rank, const epoch_record& e) {
      if (rank != 0) return;
      std::lock_guard lock(mutex);
      out.curve.push_back(eval.lists ? eval.of(*e.ranking) : e.eval.value);
      out.samples += e.weighted_samples;
      out.step_seconds += e.step_seconds;
      out.skipped_steps += e.skipped_steps;
    };
    trainer<Model, shuffled_shards, decltype(reducer), run_schedule, run_optimizer> t(
        make(host_space{}), shuffled_shards{}, std::move(reducer),
        make_schedule(c.schedule, out.warmup_steps), make_optimizer(recipe.optimizer, 0.9f, 0.f),
        std::move(opt));
    const fit_result r = t.fit(parts.train, eval.lists ? data::interactions{} : parts.test);
    return eval.lists ? eval.of(*r.ranking) : r.eval.value;
  };
  const auto start = std::chrono::steady_clock::now();
  try {
    if (c.ranks == 1) {
      out.final_metric = fit(no_op_reducer{});
    } else {
      run_local(c.ranks, [&](local_ring ring) {
        const int rank = ring.rank();
        const double v = fit(std::move(ring));
        if (rank == 0) out.final_metric = v;
      });
    }
  } catch (const nonfinite_error& e) {
    // A run that diverged is a result of the study, not an error of the program.
    out.failure = e.what();
    out.final_metric = std::numeric_limits<double>::quiet_NaN();
  } catch (const invalid_argument& e) {
    // So is one whose scores are no longer finite (AUC cannot rank them); any other argument
    // error is the program's and propagates.
    if (std::string_view(e.what()).find("not finite") == std::string_view::npos) throw;
    out.failure = e.what();
    out.final_metric = std::numeric_limits<double>::quiet_NaN();
  }
  while (out.curve.size() < c.epochs) out.curve.push_back(std::numeric_limits<double>::quiet_NaN());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

/// One cell: a model, a dataset, a global batch and a recipe over the seeds.
struct study_cell {
  std::string model, dataset;
  std::size_t batch = 0;
  study_recipe recipe;
  const char* metric = "";
  std::vector<std::uint64_t> seeds;
  std::vector<seed_run> runs;
  double mean = 0, stdev = 0;      // of the final metric over seeds (NaN if any run diverged)
  std::vector<double> mean_curve;  // the metric after each epoch, averaged over seeds
  std::optional<std::size_t> epochs_to_baseline;
  std::optional<std::size_t> epochs_to_tolerance;  // to within the tolerance of the baseline
  double gap_percent = 0;  // how much worse than the baseline, in percent (negative: better)
  double samples_per_s = 0;
  double seconds = 0;
};

inline void summarize(study_cell& cell) {
  const std::size_t n = cell.runs.size();
  double s = 0;
  for (const auto& r : cell.runs) s += r.final_metric;
  cell.mean = s / double(n);
  double sq = 0;
  for (const auto& r : cell.runs) sq += (r.final_metric - cell.mean) * (r.final_metric - cell.mean);
  cell.stdev = n > 1 ? std::sqrt(sq / double(n - 1)) : 0.0;
  const std::size_t epochs = cell.runs.front().curve.size();
  cell.mean_curve.assign(epochs, 0.0);
  for (std::size_t e = 0; e < epochs; ++e) {
    for (const auto& r : cell.runs) cell.mean_curve[e] += r.curve[e];
    cell.mean_curve[e] /= double(n);
  }
  // The last epoch's mean is the final metric's mean, bit for bit (the same sum), so the
  // baseline cell always reaches its own baseline.
  if (std::isfinite(cell.mean)) cell.mean_curve.back() = cell.mean;
  double samples = 0, seconds = 0;
  for (const auto& r : cell.runs) {
    samples += r.samples;
    seconds += r.step_seconds;
    cell.seconds += r.seconds;
  }
  cell.samples_per_s = seconds > 0 ? samples / seconds : 0.0;
}

/// The first epoch (1-based) whose seed-mean metric is at least as good as `target`, if any.
inline std::optional<std::size_t> first_epoch_reaching(const study_cell& cell, double target) {
  for (std::size_t e = 0; e < cell.mean_curve.size(); ++e)
    if (std::isfinite(cell.mean_curve[e]) &&
        at_least_as_good(cell.metric, cell.mean_curve[e], target))
      return e + 1;
  return std::nullopt;
}

/// Epochs to the baseline and to within `tolerance` percent of it; the final gap in percent.
inline void compare_to_baseline(study_cell& cell, double baseline, double tolerance) {
  const bool auc = higher_is_better(cell.metric);
  cell.epochs_to_baseline = first_epoch_reaching(cell, baseline);
  cell.epochs_to_tolerance =
      first_epoch_reaching(cell, baseline * (auc ? 1 - tolerance / 100 : 1 + tolerance / 100));
  const double worse = auc ? baseline - cell.mean : cell.mean - baseline;
  cell.gap_percent = 100.0 * worse / baseline;
}

/// The baseline of a panel: recipe `same` at the smallest batch (or the first recipe listed).
struct study_baseline {
  std::string model, dataset, recipe;
  const char* metric = "";
  std::size_t batch = 0;
  double value = 0;
  double trivial = 0;
  double base_lr = 0;    // Adam's rate at the reference batch (given or tuned)
  double lamb_lr = 0;    // LAMB's
  double tolerance = 1;  // percent
};

/// One rate tried while tuning: the validation metric after the epoch budget.
struct study_trial {
  std::string optimizer;
  double lr = 0;
  double validation = 0;
};

inline std::string thousands(double v) {
  if (!std::isfinite(v)) return "-";
  if (v >= 1e6) return tutti::detail::sfmt("%.2fM", v / 1e6);
  if (v >= 1e4) return tutti::detail::sfmt("%.0fk", v / 1e3);
  return tutti::detail::sfmt("%.0f", v);
}

inline std::string metric_text(double v) {
  return std::isfinite(v) ? tutti::detail::sfmt("%.4f", v) : std::string("diverged");
}

/// The table of one panel, as printed and as the HTML page shows it.
inline std::string panel_table(const study_baseline& b, const std::vector<study_cell>& cells) {
  using tutti::detail::sfmt;
  std::string s =
      sfmt("%s on %s: test %s (%s is better); baseline %.4f = %s at batch %zu; %s %.4f\n",
           b.model.c_str(), b.dataset.c_str(), b.metric,
           higher_is_better(b.metric) ? "higher" : "lower", b.value, b.recipe.c_str(), b.batch,
           higher_is_better(b.metric) ? "random scores" : "global mean", b.trivial);
  s += sfmt("%7s  %-13s  %9s  %-17s  %8s  %-26s  %11s  %11s  %10s\n", "batch", "recipe", "lr",
            "mean +- std", "vs base", "seeds", "to base", sfmt("to %g%%", b.tolerance).c_str(),
            "samples/s");
  for (const auto& c : cells) {
    if (c.model != b.model || c.dataset != b.dataset) continue;
    std::string seeds;
    for (const auto& r : c.runs) seeds += (seeds.empty() ? "" : " ") + metric_text(r.final_metric);
    const std::string ms =
        std::isfinite(c.mean) ? sfmt("%.4f +- %.4f", c.mean, c.stdev) : std::string("diverged");
    const std::string gap = std::isfinite(c.gap_percent) ? sfmt("%+.2f%%", c.gap_percent) : "-";
    const auto epochs = [&](const std::optional<std::size_t>& e) {
      return e ? sfmt("%zu ep", *e) : std::string("not reached");
    };
    s += sfmt("%7zu  %-13s  %9.4g  %-17s  %8s  %-26s  %11s  %11s  %10s\n", c.batch,
              c.recipe.name.c_str(), c.runs.front().lr, ms.c_str(), gap.c_str(), seeds.c_str(),
              epochs(c.epochs_to_baseline).c_str(), epochs(c.epochs_to_tolerance).c_str(),
              thousands(c.samples_per_s).c_str());
  }
  return s;
}

inline const char* recipe_color(const std::string& name) {
  if (name == "same") return "#4e79a7";
  if (name == "linear") return "#e15759";
  if (name == "linear-warmup") return "#f28e2b";
  if (name == "sqrt-warmup") return "#59a14f";
  return "#b07aa1";  // lamb
}

// A "nice" axis over [lo, hi]: bounds on whole ticks and the tick step.
inline std::tuple<double, double, double> study_axis(double lo, double hi) {
  if (!(hi > lo)) {
    const double pad = std::max(std::abs(lo) * 0.01, 1e-3);
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / 4.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (const double f : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (f * mag >= raw) {
      step = f * mag;
      break;
    }
  return {step * std::floor(lo / step + 1e-9), step * std::ceil(hi / step - 1e-9), step};
}

/// The chart: one panel per model x dataset, the test metric (mean, with +-std bars) against the
/// global batch on a log2 axis, one line per recipe, the baseline dashed. Every line carries
/// `data-series="MODEL/DATASET/RECIPE"` and `data-points="batch:mean,..."` so a script or a
/// test can read the numbers back. Means beyond the trivial predictor are drawn at its line.
inline std::string study_svg(const std::vector<study_baseline>& panels,
                             const std::vector<study_cell>& cells,
                             const std::vector<std::string>& recipes,
                             const std::vector<std::size_t>& batches) {
  using namespace tutti::detail::plan;  // the report's chart styles and series
  using tutti::detail::sfmt;
  using tutti::detail::xml_escape;
  const double pw = 400, ph = 280, left = 58, right = 12, top = 30, bottom = 44;
  const int columns = panels.size() > 1 ? 2 : 1;
  const int rows = static_cast<int>((panels.size() + 1) / std::size_t(columns));
  const double legend_h = 28;
  const double width = pw * columns, height = legend_h + ph * std::max(rows, 1);
  std::string out = sfmt(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
      "font-family=\"sans-serif\">\n<rect width=\"%g\" height=\"%g\" fill=\"#ffffff\"/>\n",
      width, height, width, height, width, height);
  // One legend for all panels.
  double lx = 10;
  for (const auto& r : recipes) {
    out += sfmt(
        "<line x1=\"%.1f\" y1=\"14\" x2=\"%.1f\" y2=\"14\" stroke=\"%s\" stroke-width=\"2\"/>"
        "<text %s x=\"%.1f\" y=\"18\">%s</text>\n",
        lx, lx + 16, recipe_color(r), tick_style, lx + 20, xml_escape(r).c_str());
    lx += 28 + 7.0 * double(r.size());
  }
  out += sfmt(
      "<line x1=\"%.1f\" y1=\"14\" x2=\"%.1f\" y2=\"14\" stroke=\"#222222\" "
      "stroke-dasharray=\"5 3\"/><text %s x=\"%.1f\" y=\"18\">baseline</text>\n",
      lx, lx + 16, tick_style, lx + 20);
  const double bmin = double(*std::min_element(batches.begin(), batches.end()));
  const double bmax = double(*std::max_element(batches.begin(), batches.end()));
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const study_baseline& b = panels[p];
    const bool auc = higher_is_better(b.metric);
    const double ox = pw * double(int(p) % columns), oy = legend_h + ph * double(int(p) / columns);
    // The y range: every finite mean +- std, capped at the trivial predictor.
    double lo = b.value, hi = b.value;
    for (const auto& c : cells) {
      if (c.model != b.model || c.dataset != b.dataset || !std::isfinite(c.mean)) continue;
      lo = std::min(lo, c.mean - c.stdev);
      hi = std::max(hi, c.mean + c.stdev);
    }
    if (auc)
      lo = std::max(lo, b.trivial);
    else
      hi = std::min(hi, b.trivial);
    const auto [y0, y1, ystep] = study_axis(lo, hi);
    const double x_left = ox + left, x_right = ox + pw - right;
    const double y_top = oy + top, y_bottom = oy + ph - bottom;
    // The smallest and largest batch sit 14 px inside the axes, clear of them.
    const auto px = [&](double x) {
      const double span = std::log2(bmax / bmin), inset = 14;
      return span > 0 ? x_left + inset + (x_right - x_left - 2 * inset) * std::log2(x / bmin) / span
                      : (x_left + x_right) / 2;
    };
    const auto clip = [&](double y) {
      return std::clamp(y, y0, y1);
    };
    const auto py = [&](double y) {
      return y_bottom - (y_bottom - y_top) * (clip(y) - y0) / (y1 - y0);
    };
    out += sfmt("<g data-panel=\"%s/%s\">\n", xml_escape(b.model).c_str(),
                xml_escape(b.dataset).c_str());
    out += sfmt("<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s on %s</text>\n",
                label_style, (x_left + x_right) / 2, oy + 16, xml_escape(b.model).c_str(),
                xml_escape(b.dataset).c_str());
    for (double y = y0; y <= y1 + 1e-9 * std::abs(y1); y += ystep)
      out += sfmt(
          "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
          "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
          grid_style, x_left, py(y), x_right, py(y), tick_style, x_left - 5, py(y) + 4,
          std::round(y / ystep) * ystep);
    for (const std::size_t x : batches)
      out += sfmt(
          "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
          "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%zu</text>\n",
          grid_style, px(double(x)), y_top, px(double(x)), y_bottom, tick_style, px(double(x)),
          y_bottom + 15, x);
    out += sfmt(
        "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
        "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
        axis_style, x_left, y_bottom, x_right, y_bottom, axis_style, x_left, y_top, x_left,
        y_bottom);
    out +=
        sfmt("<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">global batch (log2)</text>\n",
             tick_style, (x_left + x_right) / 2, y_bottom + 32);
    out += sfmt(
        "<text %s transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\">test %s "
        "(%s is better)</text>\n",
        tick_style, ox + 14, (y_top + y_bottom) / 2, b.metric, auc ? "higher" : "lower");
    out += sfmt(
        "<line data-series=\"%s/%s/baseline\" data-points=\"%zu:%.9g\" x1=\"%.1f\" y1=\"%.1f\" "
        "x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222222\" stroke-dasharray=\"5 3\"/>\n",
        xml_escape(b.model).c_str(), xml_escape(b.dataset).c_str(), b.batch, b.value, x_left,
        py(b.value), x_right, py(b.value));
    for (std::size_t ri = 0; ri < recipes.size(); ++ri) {
      const std::string& r = recipes[ri];
      // Recipes that coincide (same and linear at the reference batch) stay visible side by side.
      const double dx = (double(ri) - double(recipes.size() - 1) / 2) * 3.0;
      series_points pts;
      std::string marks, line;
      for (const auto& c : cells) {
        if (c.model != b.model || c.dataset != b.dataset || c.recipe.name != r ||
            !std::isfinite(c.mean))
          continue;
        pts.emplace_back(double(c.batch), c.mean);
        const double x = px(double(c.batch)) + dx;
        line += sfmt("%s%.1f,%.1f", line.empty() ? "" : " ", x, py(c.mean));
        const bool clipped = clip(c.mean) != c.mean;
        marks += sfmt(
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s, batch %zu: %.4f +- "
            "%.4f</title></circle>",
            x, py(c.mean - c.stdev), x, py(c.mean + c.stdev), x, py(c.mean),
            clipped ? "#ffffff" : recipe_color(r), xml_escape(r).c_str(), c.batch, c.mean, c.stdev);
      }
      out += sfmt(
          "<g data-series=\"%s/%s/%s\" data-points=\"%s\" stroke=\"%s\" fill=\"none\">"
          "<polyline points=\"%s\" stroke-width=\"2\"/>%s</g>\n",
          xml_escape(b.model).c_str(), xml_escape(b.dataset).c_str(), xml_escape(r).c_str(),
          points_attr(pts).c_str(), recipe_color(r), line.c_str(), marks.c_str());
    }
    out += "</g>\n";
  }
  return out + "</svg>\n";
}

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

inline std::string join(const std::vector<std::size_t>& v) {
  std::string s;
  for (const auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

inline std::string join(const std::vector<double>& v) {
  std::string s;
  for (const auto x : v) s += (s.empty() ? "" : ",") + tutti::detail::sfmt("%g", x);
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
            c.warmup_epochs, c.schedule.c_str(), c.ranks);
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

/// The runs of one model: `run(parts, eval, batch, recipe, base, seed)` trains one seed.
template <class MakeModel>
auto study_runner(const study_config& c, MakeModel make) {
  return [&c, make](const data::split_result& parts, const study_eval& eval, std::size_t batch,
                    const study_recipe& recipe, double base, std::uint64_t seed) {
    return run_study_seed(c, parts, eval, make, batch, recipe, base, seed);
  };
}

/// Picks the rate of `grid` whose run (first seed, reference batch) does best on the validation
/// rows; records every trial.
template <class Run>
double tune_rate(const study_config& c, const study_data& d, Run& run, const study_recipe& recipe,
                 const std::vector<double>& grid, std::vector<study_trial>& trials) {
  double best = grid.front(), best_metric = std::numeric_limits<double>::quiet_NaN();
  for (const double lr : grid) {
    const seed_run r = run(d.tune, d.tune_eval, c.reference_batch, recipe, lr, c.first_seed);
    trials.push_back({recipe.optimizer, lr, r.final_metric});
    std::fprintf(stderr, "  tuning %s at batch %zu: lr %g -> validation %s %s\n",
                 recipe.optimizer.c_str(), c.reference_batch, lr, d.metric,
                 metric_text(r.final_metric).c_str());
    if (std::isfinite(r.final_metric) &&
        (!std::isfinite(best_metric) || !at_least_as_good(d.metric, best_metric, r.final_metric))) {
      best = lr;
      best_metric = r.final_metric;
    }
  }
  if (grid.size() > 1 && (best == grid.front() || best == grid.back()))
    std::fprintf(stderr,
                 "  note: the best %s rate %g is at the edge of the grid; the optimum may lie "
                 "beyond it\n",
                 recipe.optimizer.c_str(), best);
  return best;
}

}  // namespace detail

/// Runs `tutti study large-batch`; returns the process exit code.
inline int run_study_large_batch(study_config c) {
  using detail::study_cell;
  using tutti::detail::sfmt;
  const auto start = std::chrono::steady_clock::now();
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const auto given = [&](const char* name) {
    return c.app && c.app->count(name) > 0;
  };
  const char* fn = "tutti study large-batch";
  const bool from_file = !c.file.path.empty();
  TUTTI_EXPECTS(!from_file || !given("--datasets"), fn,
                "--data " + c.file.path +
                    " and --datasets: the study runs on your file or on the built-in datasets, "
                    "not both; expected one of --data and --datasets");
  for (const char* o : {"--user-col", "--item-col", "--label-col", "--timestamp-col", "--implicit",
                        "--ids", "--clean", "--quarantine", "--label-min", "--label-max",
                        "--duplicates", "--max-rejected-share"})
    TUTTI_EXPECTS(from_file || !given(o), fn,
                  std::string(o) +
                      " describes the file of --data, and no --data was given; "
                      "expected --data FILE with it");
  if (c.quick) {
    if (!given("--datasets")) c.datasets = {"synthetic"};
    if (!given("--learners")) c.learners = 500;
    if (!given("--courses")) c.courses = 100;
    if (!given("--batches")) c.batches = {64, 256};
    if (!given("--reference-batch")) c.reference_batch = 64;
    if (!given("--epochs")) c.epochs = 3;
    if (!given("--layers")) c.layers = {16, 8};
    if (!given("--gmf-dim")) c.gmf_dim = 8;
    if (!given("--dim")) c.dim = 16;
    if (!given("--tune-lrs")) c.tune_lrs = {0.003, 0.01};
    if (!given("--tune-lamb-lrs")) c.tune_lamb_lrs = {0.01, 0.03};
  }
  if (from_file) c.datasets = {detail::file_dataset_name(c.file.path)};
  std::sort(c.batches.begin(), c.batches.end());
  c.batches.erase(std::unique(c.batches.begin(), c.batches.end()), c.batches.end());
  // A global batch need not be a multiple of the ranks (each takes ceil(B/W) or floor(B/W)
  // samples a step), but every rank needs at least one.
  const auto ranks = static_cast<std::size_t>(c.ranks);
  for (const std::size_t b : c.batches)
    TUTTI_EXPECTS(b >= ranks, fn,
                  "--batches: " + std::to_string(b) + " is below --ranks " +
                      std::to_string(c.ranks) +
                      "; expected global batches of at least one sample per rank");
  TUTTI_EXPECTS(c.reference_batch >= ranks, fn,
                "--reference-batch " + std::to_string(c.reference_batch) + " is below --ranks " +
                    std::to_string(c.ranks) +
                    "; expected at least one sample per rank (the rates are tuned there)");
  TUTTI_EXPECTS(c.warmup_epochs < double(c.epochs), fn,
                sfmt("--warmup-epochs %g is not below --epochs %zu; expected a warmup shorter "
                     "than the run",
                     c.warmup_epochs, c.epochs));
  TUTTI_EXPECTS(!c.models.empty() && !c.datasets.empty() && !c.recipes.empty() &&
                    !c.tune_lrs.empty() && !c.tune_lamb_lrs.empty(),
                fn,
                "--models, --datasets, --recipes, --tune-lrs and --tune-lamb-lrs need at least "
                "one entry each");
  std::vector<detail::study_recipe> recipes;
  for (const auto& r : c.recipes) recipes.push_back(detail::recipe_named(r));
  const bool uses_adam = std::any_of(recipes.begin(), recipes.end(),
                                     [](const auto& r) { return r.optimizer == "adam"; });
  const bool uses_lamb = std::any_of(recipes.begin(), recipes.end(),
                                     [](const auto& r) { return r.optimizer == "lamb"; });

  std::vector<std::string> skipped;
  std::vector<detail::study_data> data;
  for (const auto& name : c.datasets) {
    auto d = detail::load_study_data(c, name);
    if (!d) {
      skipped.push_back("dataset insteval: no insteval.tsv in " + c.datasets_dir +
                        " (see --datasets-dir)");
      std::fprintf(stderr, "tutti study: skipping %s\n", skipped.back().c_str());
      continue;
    }
    data.push_back(std::move(*d));
  }
  std::vector<std::string> models;
  for (const auto& m : c.models) {
#if !TUTTI_HAS_BLAS
    if (m == "ncf") {
      skipped.push_back("model ncf: this tutti was built without a CBLAS (neural_cf needs one)");
      std::fprintf(stderr, "tutti study: skipping %s\n", skipped.back().c_str());
      continue;
    }
#endif
    models.push_back(m);
  }
  const std::size_t total_cells = models.size() * data.size() * c.batches.size() * recipes.size();
  std::printf("tutti study large-batch (%s)\n  %s\n", date, detail::study_command_line(c).c_str());
  for (const auto& d : data) {
    std::printf("  %s\n", detail::dataset_line(d).c_str());
    if (d.cleaning) {
      std::printf("    cleaning: read %zu rows, used %zu, rejected %zu", d.cleaning->rows_read,
                  d.cleaning->rows_used, d.cleaning->rows_rejected);
      for (const auto& [reason, n] : d.cleaning->rejected)
        if (n) std::printf(", %s %zu", reason.c_str(), n);
      std::printf("\n");
    }
  }
  std::printf("  %zu cells x %zu seeds, %zu epochs each, %d rank(s)\n\n", total_cells, c.seeds,
              c.epochs, c.ranks);
  std::fflush(stdout);

  std::vector<study_cell> cells;
  std::vector<detail::study_baseline> baselines;
  std::vector<std::vector<detail::study_trial>> tuning;
  std::size_t done = 0;
  // One panel: tune the base rates at the reference batch, then every batch x recipe x seed.
  auto panel = [&](const std::string& model, const detail::study_data& d, auto run) {
    std::vector<detail::study_trial> trials;
    const double base_lr =
        c.base_lr   ? *c.base_lr
        : uses_adam ? detail::tune_rate(c, d, run, detail::recipe_named("same"), c.tune_lrs, trials)
                    : 0.0;
    const double lamb_lr = c.lamb_lr   ? *c.lamb_lr
                           : uses_lamb ? detail::tune_rate(c, d, run, detail::recipe_named("lamb"),
                                                           c.tune_lamb_lrs, trials)
                                       : 0.0;
    std::fprintf(stderr, "%s on %s: base rates at batch %zu: adam %g, lamb %g\n", model.c_str(),
                 d.name.c_str(), c.reference_batch, base_lr, lamb_lr);
    const std::size_t first = cells.size();
    for (const std::size_t batch : c.batches) {
      for (const auto& recipe : recipes) {
        study_cell cell;
        cell.model = model;
        cell.dataset = d.name;
        cell.batch = batch;
        cell.recipe = recipe;
        cell.metric = d.metric;
        const double base = recipe.optimizer == "lamb" ? lamb_lr : base_lr;
        for (std::size_t s = 0; s < c.seeds; ++s) {
          cell.seeds.push_back(c.first_seed + s);
          cell.runs.push_back(run(d.parts, d.test_eval, batch, recipe, base, c.first_seed + s));
        }
        detail::summarize(cell);
        ++done;
        std::fprintf(stderr, "[%zu/%zu] %s %s batch %zu %s: %s %s +- %.4f (%.1f s)\n", done,
                     total_cells, model.c_str(), d.name.c_str(), batch, recipe.name.c_str(),
                     d.metric, detail::metric_text(cell.mean).c_str(), cell.stdev, cell.seconds);
        for (const auto& r : cell.runs)
          if (!r.failure.empty())
            std::fprintf(stderr, "  a seed stopped early: %s\n", r.failure.c_str());
        std::fflush(stderr);
        cells.push_back(std::move(cell));
      }
    }
    // The baseline: recipe `same` (or the first recipe listed) at the smallest batch.
    const std::string base_recipe =
        std::find(c.recipes.begin(), c.recipes.end(), "same") != c.recipes.end()
            ? "same"
            : c.recipes.front();
    detail::study_baseline b{model, d.name,    base_recipe, d.metric, c.batches.front(),
                             0.0,   d.trivial, base_lr,     lamb_lr,  c.tolerance};
    for (std::size_t i = first; i < cells.size(); ++i)
      if (cells[i].batch == b.batch && cells[i].recipe.name == base_recipe) b.value = cells[i].mean;
    for (std::size_t i = first; i < cells.size(); ++i)
      detail::compare_to_baseline(cells[i], b.value, c.tolerance);
    baselines.push_back(b);
    tuning.push_back(std::move(trials));
    std::printf("%s\n", detail::panel_table(b, cells).c_str());
    std::fflush(stdout);
  };
  for (const auto& model : models) {
    for (const auto& d : data) {
      const loss_kind loss = d.implicit ? loss_kind::logistic : loss_kind::squared;
      const float bias = d.implicit ? 0.f : d.mean;
      const std::int32_t users = d.all.n_users(), items = d.all.n_items();
      if (model == "mf") {
        panel(model, d, detail::study_runner(c, [=, &c](host_space space) {
                return models::matrix_factorization<host_space>(
                    {.dim = c.dim, .l2 = c.l2, .loss = loss, .global_bias_init = bias}, users,
                    items, space);
              }));
      } else {
#if TUTTI_HAS_BLAS
        panel(model, d, detail::study_runner(c, [=, &c](host_space space) {
                return models::neural_cf<host_space>({.gmf_dim = c.gmf_dim,
                                                      .layers = c.layers,
                                                      .l2 = c.l2,
                                                      .loss = loss,
                                                      .output_bias_init = bias},
                                                     users, items, space);
              }));
#endif
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu cells, %zu runs in %.0f s\n", cells.size(), cells.size() * c.seeds, seconds);

  if (!c.report.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(c.report, ec);
    if (ec) throw error("tutti study: cannot create '" + c.report + "': " + ec.message());
    const std::string svg = detail::study_svg(baselines, cells, c.recipes, c.batches);
    const auto svg_path = std::filesystem::path(c.report) / "large-batch.svg";
    std::ofstream f(svg_path);
    f << svg;
    if (!f) throw error("tutti study: cannot write '" + svg_path.string() + "'");
    using tutti::detail::xml_escape;
    std::string html =
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>tutti study large-batch</title>\n<style>\n"
        "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\n"
        "pre{background:#f6f6f6;padding:8px;overflow-x:auto}\n</style>\n</head>\n<body>\n"
        "<h1>tutti study large-batch</h1>\n<p>" +
        xml_escape(date) + "; " + sfmt("%.0f", seconds) + " s</p>\n<pre>" +
        xml_escape(detail::study_command_line(c)) + "</pre>\n<ul>\n";
    for (const auto& d : data) html += "<li>" + xml_escape(detail::dataset_line(d)) + "</li>\n";
    html += "</ul>\n" + svg;
    for (const auto& b : baselines)
      html += "<pre>" + xml_escape(detail::panel_table(b, cells)) + "</pre>\n";
    html += "</body>\n</html>\n";
    const auto html_path = std::filesystem::path(c.report) / "large-batch.html";
    std::ofstream h(html_path);
    h << html;
    if (!h) throw error("tutti study: cannot write '" + html_path.string() + "'");
    std::printf("chart: %s, page: %s\n", svg_path.string().c_str(), html_path.string().c_str());
  }

  if (!c.json.empty()) {
    using detail::json_value;
    nlohmann::json j;
    j["study"] = "large-batch";
    j["command"] = detail::study_command_line(c);
    j["date"] = date;
    j["seconds"] = seconds;
    j["settings"] = {{"models", models},
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
                     {"schedule", c.schedule},
                     {"ranks", c.ranks},
                     {"mf", {{"dim", c.dim}, {"l2", c.l2}}},
                     {"ncf", {{"gmf_dim", c.gmf_dim}, {"layers", c.layers}, {"l2", c.l2}}},
                     {"quick", c.quick}};
    if (from_file)
      j["settings"]["data"] = {{"file", c.file.path},
                               {"user_col", c.file.user_col},
                               {"item_col", c.file.item_col},
                               {"label_col", c.file.label_col},
                               {"timestamp_col", c.file.timestamp_col},
                               {"implicit", c.file.implicit},
                               {"clean", c.file.cleaning()}};
    nlohmann::json ds = nlohmann::json::array();
    for (const auto& d : data) {
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
    j["datasets"] = ds;
    nlohmann::json bs = nlohmann::json::array();
    for (std::size_t i = 0; i < baselines.size(); ++i) {
      const auto& b = baselines[i];
      nlohmann::json trials = nlohmann::json::array();
      for (const auto& t : tuning[i])
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
    j["baselines"] = bs;
    nlohmann::json cs = nlohmann::json::array();
    for (const auto& cell : cells) {
      nlohmann::json per_seed = nlohmann::json::array(), curves = nlohmann::json::array(),
                     mean_curve = nlohmann::json::array(), failures = nlohmann::json::array();
      for (const auto& r : cell.runs) {
        per_seed.push_back(json_value(r.final_metric));
        nlohmann::json curve = nlohmann::json::array();
        for (const double v : r.curve) curve.push_back(json_value(v));
        curves.push_back(curve);
        if (!r.failure.empty()) failures.push_back(r.failure);
      }
      for (const double v : cell.mean_curve) mean_curve.push_back(json_value(v));
      const auto& first = cell.runs.front();
      std::size_t skipped_steps = 0;
      for (const auto& r : cell.runs) skipped_steps += r.skipped_steps;
      cs.push_back(
          {{"model", cell.model},
           {"dataset", cell.dataset},
           {"batch", cell.batch},
           {"recipe", cell.recipe.name},
           {"optimizer", cell.recipe.optimizer},
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
           {"epochs_to_baseline", cell.epochs_to_baseline ? nlohmann::json(*cell.epochs_to_baseline)
                                                          : nlohmann::json(nullptr)},
           {"epochs_to_tolerance", cell.epochs_to_tolerance
                                       ? nlohmann::json(*cell.epochs_to_tolerance)
                                       : nlohmann::json(nullptr)},
           {"gap_percent", json_value(cell.gap_percent)},
           {"samples_per_s", cell.samples_per_s},
           {"skipped_steps", skipped_steps},
           {"failures", failures},
           {"seconds", cell.seconds}});
    }
    j["cells"] = cs;
    j["skipped"] = skipped;
    std::ofstream f(c.json);
    if (!f) throw error("tutti study: cannot write the JSON report '" + c.json + "'");
    f << j.dump(2) << '\n';
  }
  return 0;
}

}  // namespace tutti::cli
