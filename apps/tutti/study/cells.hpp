// SPDX-License-Identifier: Apache-2.0
// The runs of `tutti study large-batch`: one seed of one cell, the cells' summaries against the
// panel's baseline, and the tuning of the base rates.
#pragma once

#include "../dispatch.hpp"
#include "../run_policies.hpp"
#include "data.hpp"

#include <tutti/tutti.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tutti::cli::detail {

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
    // The trainer holds the recipe's optimizer as its own type.
    return with_optimizer(recipe.optimizer, 0.9f, 0.f, [&](auto optimizer) {
      trainer<Model, shuffled_shards, decltype(reducer), run_schedule, decltype(optimizer)> t(
          make(host_space{}), shuffled_shards{}, std::move(reducer),
          make_schedule(c.schedule, out.warmup_steps), std::move(optimizer), std::move(opt));
      const fit_result r = t.fit(parts.train, eval.lists ? data::interactions{} : parts.test);
      return eval.lists ? eval.of(*r.ranking) : r.eval.value;
    });
  };
  const auto start = std::chrono::steady_clock::now();
  try {
    tutti::run_host_ranks(c.ranks, [&](auto reducer) {
      const int rank = reducer.rank();
      const double v = fit(std::move(reducer));
      if (rank == 0) out.final_metric = v;
    });
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
    trials.push_back({choice_name(recipe.optimizer), lr, r.final_metric});
    std::fprintf(stderr, "  tuning %s at batch %zu: lr %g -> validation %s %s\n",
                 choice_name(recipe.optimizer).c_str(), c.reference_batch, lr, d.metric,
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
                 choice_name(recipe.optimizer).c_str(), best);
  return best;
}

}  // namespace tutti::cli::detail
