// SPDX-License-Identifier: Apache-2.0
// `tutti train --json FILE`: the run as one JSON object, section by section. `tutti plan --from`
// reads it back (train_report.hpp: the report's type and its JSON form).
#pragma once

#include "../json_output.hpp"
#include "../resident_memory.hpp"
#include "../train_report.hpp"
#include "report.hpp"

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace tutti::cli::detail {

/// The rows the run read, used and trained on.
inline report_dataset dataset_of(const train_config& c, const loaded_data& d,
                                 const data_stats& stats) {
  nlohmann::json positives, negatives;
  if (d.positives)
    positives = {{"rows", d.positives->rows},
                 {"kept", d.positives->kept},
                 {"repeated", d.positives->repeated},
                 {"not_positive", d.positives->not_positive}};
  if (const negative_options n = negatives_of(c); n.per_positive > 0)
    negatives = {
        {"per_positive", n.per_positive},
        {"sampler", choice_name(c.negatives_from)},
        {"alpha", c.negatives_from == negative_sampler::popularity ? nlohmann::json(n.alpha)
                                                                   : nlohmann::json(nullptr)}};
  nlohmann::json replay;
  if (d.files > 1)
    replay = {{"files", d.files},
              {"history_rows", d.replay.history},
              {"kept_rows", d.replay.kept},
              {"share", d.replay_share}};
  nlohmann::json warm;
  if (const models::warm_start_counts n = d.warm_match.counts(); d.warm)
    warm = {{"from", c.init_from},
            {"users_reused", n.users_reused},
            {"users_new", n.users_new},
            {"items_reused", n.items_reused},
            {"items_new", n.items_new},
            {"optimizer_state",
             {{"carried", d.warm_state}, {"steps", d.warm_steps}, {"why_not", d.warm_state_why}}}};
  return {.source = d.source,
          .rows_read = d.cleaning ? d.cleaning->rows_read : stats.train_rows + stats.test_rows,
          .rows_used = stats.train_rows + stats.test_rows,
          .rows_rejected = d.cleaning ? d.cleaning->rows_rejected : 0,
          .rejected = d.cleaning ? d.cleaning->rejected : std::map<std::string, std::size_t>{},
          .train_rows = stats.train_rows,
          .test_rows = stats.test_rows,
          .rank_local_shards = d.rank_local,
          .users = d.users,
          .items = d.items,
          .implicit = d.all.implicit,
          .positives = std::move(positives),
          .sampled_negatives = std::move(negatives),
          .warm_start = std::move(warm),
          .replay = std::move(replay)};
}

inline report_phases phases_of(const phase_seconds& p) {
  return {.data = p.data, .compute = p.compute, .reduce = p.reduce, .optimizer = p.optimizer};
}

/// One entry per epoch: loss, samples, test metric, time, noise scale and phases.
inline std::vector<report_epoch> epochs_of(const fit_result& r) {
  std::vector<report_epoch> epochs;
  for (const auto& e : r.epochs)
    epochs.push_back({.epoch = e.epoch,
                      .train_loss = e.train_loss,
                      .samples_per_rank = e.samples_per_rank,
                      .samples_before_resume = e.samples_before_resume,
                      .weighted_samples = e.weighted_samples,
                      .steps = e.steps,
                      .test = to_json(e.eval),
                      .seconds = e.seconds,
                      .step_seconds = e.step_seconds,
                      .samples_per_second = e.samples_per_second,
                      .noise_scale = to_json(e.noise_scale),
                      .phases = phases_of(e.phases),
                      .ranking = e.ranking ? to_json(*e.ranking) : nlohmann::json(nullptr)});
  return epochs;
}

/// A projection's rows as the JSON report holds them.
inline nlohmann::json projection_rows_json(const projection& proj) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : proj.rows)
    rows.push_back({{"devices", row.devices},
                    {"step_s", row.step_s},
                    {"samples_per_s", row.samples_per_s},
                    {"speedup", row.speedup},
                    {"efficiency", row.efficiency},
                    {"update_factor", row.update_factor},
                    {"cost_per_epoch", row.cost_per_epoch}});
  return rows;
}

/// The row-sparse segments and the rows a step of rank 0 touched in them, or null.
inline nlohmann::json row_segments_json(const fit_result& r) {
  if (r.row_segments.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const row_segment_traffic& t : r.row_segments)
    out.push_back({{"segment", t.segment},
                   {"name", t.name},
                   {"dense_bytes", t.dense_bytes},
                   {"rows_per_step", t.rows_per_step},
                   {"words", t.words},
                   {"row_bytes", t.row_bytes()},
                   {"id_bytes", t.id_bytes()},
                   {"table_rows", t.table_rows},
                   {"cols", t.cols},
                   {"updated_rows_per_step", t.updated_rows_per_step}});
  return out;
}

/// The ledger: bytes per step, the accounts, the slow ranks, the row-sparse segments and the
/// projection (and `rows_proj`, the same with `--sparse-exchange auto`, where there is one).
inline report_ledger ledger_of(const train_config& c, const fit_result& r, const projection& proj,
                               const projection* rows_proj) {
  const ledger_summary& l = r.ledger;
  report_ledger led{.steps = l.steps,
                    .bytes_reduced_per_step = l.bytes_reduced_per_step,
                    .dense_bytes_per_step = r.dense_bytes_per_step,
                    .bytes_saved_per_step = r.bytes_saved_per_step,
                    .sparse_steps = r.sparse_steps,
                    .sparse_row_cost_ratio = std::nullopt,
                    .overlap = c.overlap,
                    .overlap_settings = std::nullopt,
                    .param_count = r.param_count,
                    .optimizer_state_floats = r.optimizer_state_floats,
                    .reduce_exposed_seconds = l.reduce_exposed.total,
                    .algbw_bytes_per_s = l.algbw,
                    .busbw_bytes_per_s = l.busbw,
                    .accounts = {{"data", l.data},
                                 {"compute", l.compute},
                                 {"guard", l.guard},
                                 {"wait", l.wait},
                                 {"reduce_total", l.reduce_total},
                                 {"reduce_exposed", l.reduce_exposed},
                                 {"optimizer", l.optimizer},
                                 {"other", l.other},
                                 {"step", l.step}},
                    .slow_ranks = l.ranks.slow_ranks(),
                    .row_segments = row_segments_json(r),
                    .projection = nullptr};
  if (c.sparse_exchange == "measured") led.sparse_row_cost_ratio = r.sparse_row_cost_ratio;
  if (c.overlap)
    led.overlap_settings = report_overlap{.bucket_bytes = mib_bytes(c.bucket_mb),
                                          .last_bucket_bytes = mib_bytes(c.last_bucket_mb),
                                          .comm_thread_nice = r.comm_thread_nice};
  led.projection = {{"link", c.link},
                    {"sparse_exchange", c.sparse_exchange},
                    {"rows", projection_rows_json(proj)}};
  if (rows_proj)
    led.projection["rows_with_sparse_exchange_auto"] = projection_rows_json(*rows_proj);
  return led;
}

/// The process's user and system CPU time, seconds.
inline double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

/// Everything the JSON report holds.
struct run_summary {
  const loaded_data& data;
  const data_stats& stats;
  const fit_result& result;
  bool shared_arena;
  const projection& proj;
  const projection* rows_proj = nullptr;  // with --sparse-exchange auto, for a run sent densely
  baseline_score baseline;
  double seconds;
  double init_seconds = 0, first_step_seconds = 0;  // rank 0's (run_output)
  const core_share* share = nullptr;                // rank 0's, where it shared the cores
};

/// The report of a run.
inline train_report report_of(const train_config& c, const run_summary& s) {
  const fit_result& r = s.result;
  train_report rep{.dataset = dataset_of(c, s.data, s.stats),
                   .model = choice_name(c.model),
                   .loss = to_string(loss_of(c, s.data.all.implicit)),
                   .world_size = r.world_size,
                   .shared_arena = s.shared_arena,
                   .global_batch = r.global_batch,
                   .lr = r.lr,
                   .optimizer = choice_name(c.optimizer),
                   .schedule = choice_name(c.schedule),
                   .seed = c.seed,
                   .split_seed = c.held_out_seed(),
                   .epochs = epochs_of(r),
                   .noise_scale = to_json(r.noise_scale, r.noise_scale_why),
                   .eval = to_json(r.eval),
                   .holdout = c.ranking.holdout,
                   .ranking = nullptr,
                   .target = nullptr,
                   .phases = phases_of(r.phases),
                   .ledger = ledger_of(c, r, s.proj, s.rows_proj),
                   .skipped_steps = r.skipped_steps,
                   .space = choice_name(c.space),
                   .parameters_checksum = {},
                   .replayed_steps = r.replayed_steps,
                   .step_graph_refused = r.step_graph_refused,
                   .resumed_from_step = r.resumed_from_step,
                   .checkpoints_written = r.checkpoints_written,
                   .last_checkpoint = r.last_checkpoint,
                   .seconds = s.seconds,
                   .omp_threads = std::nullopt,
                   .cpu_seconds = cpu_seconds(),
                   .omp_wait_policy = {},
                   .gomp_spincount = {},
                   .setup = {},
                   .memory = {},
                   .cores = nullptr};
  rep.eval["baseline"] = {{"name", s.baseline.name}, {"value", s.baseline.value}};
  if (r.ranking) {
    rep.ranking = to_json(*r.ranking);
    rep.ranking["negatives"] =
        c.ranking.eval == "full" ? nlohmann::json(nullptr) : nlohmann::json(c.ranking.negatives);
    rep.ranking["eval"] = c.ranking.eval;
    rep.ranking["sampled_per_list"] = s.baseline.candidates;
    rep.ranking["short_lists"] = s.baseline.short_lists;
    rep.ranking["random_hit_rate"] = s.baseline.random_hit_rate;
    if (s.baseline.popularity_hit_rate) {
      rep.ranking["popularity_hit_rate"] = *s.baseline.popularity_hit_rate;
      rep.ranking["popularity_ndcg"] = *s.baseline.popularity_ndcg;
    }
  }
  if (c.target) rep.target = to_json(*c.target, r.target);
  rep.setup = {{"read_seconds", s.data.read_seconds},
               {"split_seconds", s.data.split_seconds},
               {"init_seconds", s.init_seconds},
               {"prepare_seconds", r.prepare_seconds},
               {"first_step_seconds", s.first_step_seconds}};
  const memory_accounts& m = r.memory;
  rep.memory = {{"parameters", m.parameters},
                {"gradients", m.gradients},
                {"optimizer_state", m.optimizer_state},
                {"rows", m.rows},
                {"step_buffers", m.step_buffers},
                {"shard", m.shard},
                {"total", m.total()},
                {"peak_resident_bytes", peak_resident_bytes()}};
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(r.parameters_checksum));
  rep.parameters_checksum = sum;
  // What `tutti plan --from` needs to model ranks that share a host: threads and CPU time.
#if defined(_OPENMP)
  rep.omp_threads = omp_get_max_threads();
#endif
  if (const core_share* share = s.share) {
    rep.omp_threads = share->most();  // what an idle machine gets, not where the run ended
    rep.cores = {{"most_threads", share->most()},
                 {"fewest_threads", share->fewest()},
                 {"changes", share->changes()},
                 {"steps", share->steps()},
                 {"steps_below_most", share->steps_below()}};
  }
  if (const char* wait = std::getenv("OMP_WAIT_POLICY")) rep.omp_wait_policy = wait;
  if (const char* spins = std::getenv("GOMP_SPINCOUNT")) rep.gomp_spincount = spins;
  return rep;
}

/// Writes the JSON report to `c.json`.
inline void write_json_report(const train_config& c, const run_summary& s) {
  write_json_file(c.json, report_of(c, s), "tutti train --json");
}

}  // namespace tutti::cli::detail
