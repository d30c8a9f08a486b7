// SPDX-License-Identifier: Apache-2.0
// What `tutti train` reports when it is done: the outcome lines, the ledger and its projection,
// the ledger's HTML page and the JSON report (read back by `tutti plan --from`).
#pragma once

#include "../noise_report.hpp"
#include "../ranking_options.hpp"
#include "config.hpp"
#include "data.hpp"

#include <tutti/plan/noise_model.hpp>
#include <tutti/plan/projection.hpp>
#include <tutti/plan/report.hpp>
#include <tutti/tutti.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

namespace tutti::cli::detail {

/// What the held-out rows are compared against: the metric's value of a trivial model.
struct baseline_score {
  const char* name;  // "random scores" (AUC) or "global mean" (RMSE)
  double value;
  double random_hit_rate;  // HR@K of a random ranking of each list
  double candidates = 0;   // sampled courses per list, on average (a list holds what there is)
  std::optional<double> popularity_hit_rate;  // HR@K of ranking by training counts
  std::optional<double> popularity_ndcg;
  std::size_t short_lists = 0;  // sampled lists with fewer than --negatives (learners who took
                                // all but a few courses)
};

/// The trivial models of `d`'s labels: random scores on implicit data, the training mean on
/// ratings; with ranking lists, a random ranking (a list of n sampled courses ranks the held-out
/// one in the top K with chance min(1, K / (n + 1)), averaged over the lists as they were drawn)
/// and the popularity ranking (where this process holds the whole training set).
inline baseline_score baseline_of(const train_config& c, const loaded_data& d,
                                  const data_stats& stats) {
  const bool implicit = d.all.implicit;
  baseline_score b{
      .name = implicit ? "random scores" : "global mean",
      .value = implicit ? 0.5 : stats.baseline,
      .random_hit_rate = std::min(1.0, double(c.ranking.top_k) / double(c.ranking.negatives + 1)),
      .candidates = double(c.ranking.negatives),
      .popularity_hit_rate = std::nullopt,
      .popularity_ndcg = std::nullopt};
  if (d.lists && d.lists->size() > 0) {
    double hit = 0, sampled = 0;
    for (const std::uint32_t n : d.lists->negatives) {
      hit += std::min(1.0, double(c.ranking.top_k) / double(n + 1));
      sampled += double(n);
      b.short_lists += c.ranking.eval != "full" && n < d.lists->n_negatives;
    }
    b.random_hit_rate = hit / double(d.lists->size());
    b.candidates = sampled / double(d.lists->size());
    if (!d.rank_local) {
      const ranking_result p = popularity_ranking(d.parts.train, *d.lists, c.ranking.top_k);
      b.popularity_hit_rate = p.hit_rate;
      b.popularity_ndcg = p.ndcg;
    }
  }
  return b;
}

inline nlohmann::json to_json(const eval_result& e) {
  return {{"metric", e.metric}, {"value", e.value}};
}

/// The measured step the projection starts from: rank 0's mean accounts. Guard, wait and
/// other time scale with the work of a device, so they count as compute.
inline measured_step to_measured_step(const fit_result& r, std::size_t train_rows) {
  const ledger_summary& l = r.ledger;
  measured_step m;
  m.data_s = l.data.mean;
  m.compute_s = l.compute.mean + l.guard.mean + l.wait.mean + l.other.mean;
  m.optimizer_s = l.optimizer.mean;
  m.reduce_total_s = l.reduce_total.mean;
  m.reduce_exposed_s = l.reduce_exposed.mean;
  m.bytes_reduced = double(l.bytes_reduced_per_step);
  m.global_batch = double(r.global_batch);
  m.samples_per_epoch = double(train_rows);
  m.world_size = r.world_size;
  m.dense_bytes = double(r.dense_bytes_per_step);
  for (const row_segment_traffic& t : r.row_segments)
    m.row_segments.push_back({.dense_bytes = double(t.dense_bytes),
                              .row_bytes = t.row_bytes(),
                              .id_bytes = t.id_bytes(),
                              .table_rows = double(t.table_rows),
                              .cols = double(t.cols),
                              .rows = t.rows_per_step,
                              .updated_rows = t.updated_rows_per_step});
  return m;
}

/// The rows a step touched in each row-sparse segment, as the ledger prints them.
inline std::string touched_rows_text(const fit_result& r) {
  std::string out;
  for (const row_segment_traffic& t : r.row_segments)
    out += (out.empty() ? "" : ", ") + t.name + tutti::detail::sfmt(" %.0f", t.rows_per_step);
  return out;
}

/// The projection's rows as `tutti train` prints them.
inline void print_projection_rows(const projection& p) {
  std::printf("%8s %12s %14s %9s %11s", "devices", "step ms", "samples/s", "speedup", "efficiency");
  std::printf(p.b_noise ? " %12s %10s %10s\n" : "\n", "global batch", "samples x", "to-loss x");
  for (const auto& row : p.rows) {
    std::printf("%8d %12.3f %14.0f %9.2f %10.0f%%", row.devices, 1e3 * row.step_s,
                row.samples_per_s, row.speedup, 100 * row.efficiency);
    if (p.b_noise)
      std::printf(" %12.0f %10.3f %10.2f\n", row.global_batch, row.samples_factor,
                  row.loss_speedup);
    else
      std::printf("\n");
  }
  if (p.b_noise)
    std::printf(
        "(at the measured B_noise ~ %.0f: samples x = the samples the same loss takes at N's "
        "global batch; to-loss x = one device's time to it over N's; tutti plan --from says "
        "where more devices stop paying)\n",
        *p.b_noise);
  std::fputs(update_factor_note(p).c_str(), stdout);
}

/// The ledger as `tutti train` prints it: the step by account, the bandwidth, the projection (and
/// `with_rows`, the same with the row-sparse segments sent as rows, where the run sent them
/// densely).
inline void print_ledger(const fit_result& r, const projection& p,
                         const std::optional<projection>& with_rows, const std::string& link) {
  const ledger_summary& l = r.ledger;
  std::printf("\nledger (rank 0, milliseconds per step: mean / p50 / p95)\n");
  const std::pair<const char*, const account_summary*> rows[] = {
      {"data", &l.data},           {"compute", &l.compute},     {"guard", &l.guard},
      {"wait", &l.wait},           {"reduce", &l.reduce_total}, {"  exposed", &l.reduce_exposed},
      {"optimizer", &l.optimizer}, {"other", &l.other},         {"step", &l.step}};
  for (const auto& [name, a] : rows)
    std::printf("  %-10s %9.3f %9.3f %9.3f\n", name, 1e3 * a->mean, 1e3 * a->p50, 1e3 * a->p95);
  std::printf(
      "  reduced %.2f MB per step; algbw %.2f GB/s, busbw %.2f GB/s (busbw = algbw x "
      "2(n-1)/n, n = %d)\n",
      double(l.bytes_reduced_per_step) / 1e6, l.algbw / 1e9, l.busbw / 1e9, r.world_size);
  const auto slow = l.ranks.slow_ranks();
  if (!slow.empty()) {
    std::printf("  slow ranks (>= %.0f%% above the median work time):", 100 * l.ranks.threshold);
    for (int s : slow) std::printf(" %d", s);
    std::printf("\n");
  }
  std::printf(
      "\nprojection to devices of this kind on %s (per-device batch kept; see tutti plan)\n",
      link.c_str());
  print_projection_rows(p);
  if (!with_rows) return;
  std::printf(
      "\nwith --sparse-exchange auto: each embedding table as the rows a device's step touched "
      "where they are fewer bytes (rows a step here: %s)\n",
      touched_rows_text(r).c_str());
  print_projection_rows(*with_rows);
}

/// The outcome as `tutti train` prints it: one line with --quiet, else the test metric, the
/// ranking, the target, the noise scale and the time per phase.
inline void print_outcome(const train_config& c, const fit_result& r, const baseline_score& b,
                          double seconds) {
  if (c.quiet) {
    if (r.eval.metric != metric_name::none || !r.ranking)
      std::printf("%s %.5f (%s: %.5f), ", r.eval.metric, r.eval.value, b.name, b.value);
    if (r.ranking)
      std::printf("hr@%zu %.5f ndcg@%zu %.5f (random: hr %.5f%s), ", r.ranking->k,
                  r.ranking->hit_rate, r.ranking->k, r.ranking->ndcg, b.random_hit_rate,
                  b.popularity_hit_rate
                      ? ("; popularity: hr " + std::to_string(*b.popularity_hit_rate)).c_str()
                      : "");
    std::printf("final train loss %.6f, %.1f s\n", r.epochs.back().train_loss, seconds);
    return;
  }
  if (r.eval.metric != metric_name::none || !r.ranking)
    std::printf("\ntest %s %.5f  (%s: %.5f)\n", r.eval.metric, r.eval.value, b.name, b.value);
  if (r.ranking) {
    std::printf(
        "\ntest hr@%zu %.5f  ndcg@%zu %.5f  over %zu learners, %.0f %s courses each "
        "(random scores: hr %.5f",
        r.ranking->k, r.ranking->hit_rate, r.ranking->k, r.ranking->ndcg, r.ranking->lists,
        b.candidates, c.ranking.eval == "full" ? "untaken" : "sampled", b.random_hit_rate);
    if (b.popularity_hit_rate)
      std::printf("; popularity: hr %.5f ndcg %.5f", *b.popularity_hit_rate, *b.popularity_ndcg);
    std::printf(")\n");
    if (b.short_lists > 0)
      std::printf(
          "  %zu of the lists hold fewer than --negatives %zu: their learners took all but a few "
          "courses (each list holds every course its learner did not take)\n",
          b.short_lists, c.ranking.negatives);
  }
  if (c.target)
    std::printf("%s\n", target_sentence(c.ranking, *c.target, r.target, r.epochs.size()).c_str());
  std::printf("%s\n", noise_sentence(r, c.batch).c_str());
  std::printf(
      "time per phase on rank 0: data %.2fs  compute %.2fs  reduce %.2fs  optimizer %.2fs"
      "  (total %.1f s)\n",
      r.phases.data, r.phases.compute, r.phases.reduce, r.phases.optimizer, seconds);
  if (r.replayed_steps > 0)
    std::printf("%zu steps replayed from a CUDA Graph (charged to compute whole)\n",
                r.replayed_steps);
  if (!r.step_graph_refused.empty())
    std::printf(
        "the device refused to record the step as a graph, every step ran kernel by "
        "kernel: %s\n",
        r.step_graph_refused.c_str());
}

/// The projection of the measured step to 1, 2, 4 and 8 devices on `--link`, at the measured
/// noise scale when the run has one.
inline projection project_run(const train_config& c, const fit_result& r, const data_stats& stats,
                              projected_exchange exchange) {
  projection proj =
      project(to_measured_step(r, stats.train_rows), {.devices = {1, 2, 4, 8},
                                                      .intra = find_link(c.link),
                                                      .inter = find_link(c.link),
                                                      .price_per_device_hour = c.price,
                                                      .exchange = exchange});
  if (r.noise_scale.known()) apply_noise_scale(proj, r.noise_scale.b_simple, 0.2);
  return proj;
}

/// The projection with `--sparse-exchange auto`, for a run that sent its row-sparse segments
/// densely (`off`) and listed the rows its steps touched; nullopt for any other run.
inline std::optional<projection> project_rows(const train_config& c, const fit_result& r,
                                              const data_stats& stats) {
  if (c.sparse_exchange != "off" || r.row_segments.empty()) return std::nullopt;
  return project_run(c, r, stats, projected_exchange::rows_when_fewer);
}

/// `--report DIR`: the ledger's HTML page. Returns its path.
inline std::string write_ledger_page(const train_config& c, const loaded_data& d,
                                     const fit_result& r, const projection& proj) {
  double measured = 0;
  report_input page{.title = "tutti train: " + d.source,
                    .proj = proj,
                    .notes = {"measured on " + std::to_string(r.world_size) + " rank(s), " +
                              choice_name(c.space) + " space; projection on " + c.link},
                    .global_batch = double(c.batch)};
  for (const auto& e : r.epochs) {
    measured += e.samples_per_second;
    if (e.noise_scale.known())
      page.noise_scale.emplace_back(double(e.epoch), e.noise_scale.b_simple);
    else if (e.noise_scale.bounded())
      page.noise_scale_at_least.emplace_back(double(e.epoch), e.noise_scale.b_simple_at_least);
  }
  page.measured = {{r.world_size, measured / double(r.epochs.size())}};
  return write_report(c.report, page);
}

}  // namespace tutti::cli::detail
