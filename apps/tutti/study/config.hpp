// SPDX-License-Identifier: Apache-2.0
// `tutti study large-batch`'s settings and command line.
#pragma once

#include "../data_options.hpp"
#include "../names.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
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
  double tolerance = 1.0;  // percent: "reached within" this much of the baseline
  schedule_choice schedule = schedule_choice::cosine;  // after warmup, as tutti train's default
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

/// Registers what the study crosses: the models, datasets, batches, recipes and metric.
inline void add_study_grid_options(CLI::App* lb, study_config& c) {
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
}

/// Registers how each cell runs: the seeds, epochs, rates and their tuning, the schedule and the
/// ranks.
inline void add_study_run_options(CLI::App* lb, study_config& c) {
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
  add_choice(*lb, "--schedule", c.schedule, "schedule after warmup: constant, step, cosine, poly");
  lb->add_option("--ranks", c.ranks,
                 "data-parallel ranks (threads); the global batch is what matters, so 1")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
}

/// Registers the models' sizes and the synthetic data.
inline void add_study_model_options(CLI::App* lb, study_config& c) {
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
}

/// Registers what the study writes, and `--quick`.
inline void add_study_output_options(CLI::App* lb, study_config& c) {
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
}

/// Registers `tutti study` and its `large-batch` subcommand; returns `study`.
inline CLI::App* add_study_commands(CLI::App& app, study_config& c) {
  CLI::App* study = app.add_subcommand("study", "run a study of training behaviour (large-batch)");
  study->require_subcommand(1);
  CLI::App* lb = study->add_subcommand(
      "large-batch",
      "test metric against global batch under learning-rate recipes (same, linear, "
      "linear-warmup, sqrt-warmup, lamb), several seeds per cell, a fixed epoch budget");
  c.app = lb;
  add_study_grid_options(lb, c);
  add_study_run_options(lb, c);
  add_study_model_options(lb, c);
  add_study_output_options(lb, c);
  return study;
}

}  // namespace tutti::cli
