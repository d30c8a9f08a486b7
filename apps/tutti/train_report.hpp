// SPDX-License-Identifier: Apache-2.0
// The report `tutti train --json` writes and `tutti plan --from` reads: one type, with
// nlohmann-json's `to_json` and `from_json`. Reading is lenient where older reports lack a part
// (the ledger, the thread count, the noise scale) and strict where the planner needs a value:
// a missing or mistyped one throws `train_report_error` naming the key.
#pragma once

#include <tutti/ledger/accounts.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace tutti::cli {

/// A report that lacks a value the reader needs, or holds one of the wrong kind.
class train_report_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Rank 0's seconds in the four phases a projection needs.
struct report_phases {
  double data = 0, compute = 0, reduce = 0, optimizer = 0;
};

/// The rows the run read, used and trained on.
struct report_dataset {
  std::string source;
  std::uint64_t rows_read = 0, rows_used = 0, rows_rejected = 0;
  std::map<std::string, std::size_t> rejected;  // rejected rows by reason (cleaning)
  std::uint64_t train_rows = 0, test_rows = 0;
  bool rank_local_shards = false;
  std::int32_t users = 0, items = 0;
  bool implicit = false;
  // --feedback implicit: {rows, kept, repeated, not_positive} of reading the log as positives,
  // and {per_positive, sampler, alpha} of the negatives drawn in each step; else null.
  nlohmann::json positives;
  nlohmann::json sampled_negatives;
  // --init-from: {from, users_reused, users_new, items_reused, items_new}; else null.
  nlohmann::json warm_start;
  // Several --data files: {files, history_rows (training rows of pairs the last file lacks),
  // kept_rows (of them, after --replay-share), share}; else null.
  nlohmann::json replay;
};

/// One epoch.
struct report_epoch {
  std::size_t epoch = 0;
  double train_loss = 0;
  std::vector<std::uint64_t> samples_per_rank;
  std::uint64_t samples_before_resume = 0;
  double weighted_samples = 0;
  std::size_t steps = 0;
  nlohmann::json test;  // {metric, value}
  double seconds = 0, step_seconds = 0, samples_per_second = 0;
  nlohmann::json noise_scale;  // as `to_json(noise_scale_estimate)` writes it
  report_phases phases;
  nlohmann::json ranking;  // HR@K and NDCG@K, or null
};

/// The overlapped reduction's settings, when it ran.
struct report_overlap {
  std::size_t bucket_bytes = 0, last_bucket_bytes = 0;
  std::optional<int> comm_thread_nice;
};

/// The ledger: bytes per step, the accounts and the projection.
struct report_ledger {
  std::size_t steps = 0;
  std::uint64_t bytes_reduced_per_step = 0, dense_bytes_per_step = 0;
  std::int64_t bytes_saved_per_step = 0;
  std::size_t sparse_steps = 0;
  std::optional<double> sparse_row_cost_ratio;  // --sparse-exchange measured
  bool overlap = false;
  std::optional<report_overlap> overlap_settings;  // with overlap
  std::optional<std::size_t> param_count, optimizer_state_floats;
  std::optional<double> reduce_exposed_seconds;
  double algbw_bytes_per_s = 0, busbw_bytes_per_s = 0;
  std::map<std::string, account_summary> accounts;  // data, compute, guard, wait, ... step
  std::vector<int> slow_ranks;
  /// The row-sparse segments and the rows a step touched in them ([{segment, name, dense_bytes,
  /// rows_per_step, words, row_bytes, id_bytes, table_rows, cols, updated_rows_per_step}]), or
  /// null where the step did not list them.
  nlohmann::json row_segments;
  /// {link, sparse_exchange, rows[, rows_with_sparse_exchange_auto]}
  nlohmann::json projection;
};

/// Everything `tutti train --json` reports.
struct train_report {
  report_dataset dataset;
  std::string model;
  std::string loss;  // squared, logistic, bpr or softmax ("" in reports written before it)
  int world_size = 1;
  bool shared_arena = false;
  std::size_t global_batch = 0;
  double lr = 0;
  std::string optimizer, schedule;
  std::uint64_t seed = 0;
  std::uint64_t split_seed = 0;  // the held-out rows' and the ranking lists' seed
  std::vector<report_epoch> epochs;
  nlohmann::json noise_scale;  // the run's, with why it is unknown when it is
  nlohmann::json eval;         // {metric, value, baseline}
  std::string holdout;
  nlohmann::json ranking, target;  // null when none
  report_phases phases;            // rank 0's over the run
  std::optional<report_ledger> ledger;
  std::size_t skipped_steps = 0;
  std::string space;
  std::string parameters_checksum;  // 16 hex digits
  std::size_t replayed_steps = 0;   // steps replayed from a CUDA Graph
  std::string step_graph_refused;   // why the device refused to record the step; empty: did not
  std::size_t resumed_from_step = 0, checkpoints_written = 0;
  std::string last_checkpoint;
  double seconds = 0;
  std::optional<int> omp_threads;  // OpenMP threads of the measured process
  double cpu_seconds = 0;
  std::string omp_wait_policy;  // OMP_WAIT_POLICY of the measured process; empty: not set
  std::string gomp_spincount;   // GOMP_SPINCOUNT of the measured process; empty: not set
  // The wait before training, rank 0's: {read_seconds (the data read, ids mapped, cleaned),
  // split_seconds (the split and the ranking lists), init_seconds (the trainer built: arenas
  // allocated, tables initialised), prepare_seconds (the trainer's fit before its first step:
  // the rows copied for the step, the negatives' tables), first_step_seconds (from the start to
  // the end of the first step)}; null in reports written before it was (prepare_seconds: absent).
  nlohmann::json setup;
  // What rank 0's trainer held, by account, in bytes ({parameters, gradients, optimizer_state,
  // rows, step_buffers, shard, total}), and the process's peak resident memory
  // (peak_resident_bytes); null in reports written before it was.
  nlohmann::json memory;
  // How rank 0's threads followed the machine (`--share-cores`): {most_threads, fewest_threads,
  // changes, steps, steps_below_most}; null where they did not, or in older reports.
  nlohmann::json cores;
};

namespace detail {

/// `j[key]`, which must be there.
inline const nlohmann::json& report_need(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key))
    throw train_report_error(std::string("lacks '") + key + "'");
  return j.at(key);
}

/// `j[key]` as a `T`, which must be there and be one.
template <class T>
T report_get(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = report_need(j, key);
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
    if (!v.is_number()) throw train_report_error(std::string("'") + key + "' is not a number");
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    throw train_report_error(std::string("'") + key + "' is not of the expected kind");
  }
}

/// `j[key]` as a `T` when it is there, else `fallback`.
template <class T>
T report_get_or(const nlohmann::json& j, const char* key, T fallback) {
  return j.is_object() && j.contains(key) && !j.at(key).is_null() ? report_get<T>(j, key)
                                                                  : fallback;
}

/// `j[key]` when it is there, else null.
inline nlohmann::json report_json_or_null(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j.at(key) : nlohmann::json(nullptr);
}

}  // namespace detail

inline void to_json(nlohmann::json& j, const report_phases& p) {
  j = {{"data", p.data}, {"compute", p.compute}, {"reduce", p.reduce}, {"optimizer", p.optimizer}};
}

inline void from_json(const nlohmann::json& j, report_phases& p) {
  using detail::report_get;
  p = {report_get<double>(j, "data"), report_get<double>(j, "compute"),
       report_get<double>(j, "reduce"), report_get<double>(j, "optimizer")};
}

inline void to_json(nlohmann::json& j, const report_dataset& d) {
  j = {{"source", d.source},
       {"rows_read", d.rows_read},
       {"rows_used", d.rows_used},
       {"rows_rejected", d.rows_rejected},
       {"rejected", d.rejected},
       {"train_rows", d.train_rows},
       {"test_rows", d.test_rows},
       {"rank_local_shards", d.rank_local_shards},
       {"users", d.users},
       {"items", d.items},
       {"implicit", d.implicit},
       {"positives", d.positives},
       {"sampled_negatives", d.sampled_negatives},
       {"warm_start", d.warm_start},
       {"replay", d.replay}};
}

inline void from_json(const nlohmann::json& j, report_dataset& d) {
  using detail::report_get;
  using detail::report_get_or;
  d.train_rows = report_get<std::uint64_t>(j, "train_rows");
  d.source = report_get_or<std::string>(j, "source", "");
  d.rows_read = report_get_or<std::uint64_t>(j, "rows_read", 0);
  d.rows_used = report_get_or<std::uint64_t>(j, "rows_used", 0);
  d.rows_rejected = report_get_or<std::uint64_t>(j, "rows_rejected", 0);
  d.rejected = report_get_or<std::map<std::string, std::size_t>>(j, "rejected", {});
  d.test_rows = report_get_or<std::uint64_t>(j, "test_rows", 0);
  d.rank_local_shards = report_get_or<bool>(j, "rank_local_shards", false);
  d.users = report_get_or<std::int32_t>(j, "users", 0);
  d.items = report_get_or<std::int32_t>(j, "items", 0);
  d.implicit = report_get_or<bool>(j, "implicit", false);
  d.positives = j.value("positives", nlohmann::json(nullptr));
  d.sampled_negatives = j.value("sampled_negatives", nlohmann::json(nullptr));
  d.warm_start = j.value("warm_start", nlohmann::json(nullptr));
  d.replay = j.value("replay", nlohmann::json(nullptr));
}

inline void to_json(nlohmann::json& j, const report_epoch& e) {
  j = {{"epoch", e.epoch},
       {"train_loss", e.train_loss},
       {"samples_per_rank", e.samples_per_rank},
       {"samples_before_resume", e.samples_before_resume},
       {"weighted_samples", e.weighted_samples},
       {"steps", e.steps},
       {"test", e.test},
       {"seconds", e.seconds},
       {"step_seconds", e.step_seconds},
       {"samples_per_second", e.samples_per_second},
       {"noise_scale", e.noise_scale},
       {"phases_rank0", e.phases}};
  if (!e.ranking.is_null()) j["ranking"] = e.ranking;
}

inline void from_json(const nlohmann::json& j, report_epoch& e) {
  using detail::report_get;
  using detail::report_get_or;
  e.steps = report_get<std::size_t>(j, "steps");
  e.epoch = report_get_or<std::size_t>(j, "epoch", 0);
  e.train_loss = report_get_or<double>(j, "train_loss", 0);
  e.samples_per_rank = report_get_or<std::vector<std::uint64_t>>(j, "samples_per_rank", {});
  e.samples_before_resume = report_get_or<std::uint64_t>(j, "samples_before_resume", 0);
  e.weighted_samples = report_get_or<double>(j, "weighted_samples", 0);
  e.test = detail::report_json_or_null(j, "test");
  e.seconds = report_get_or<double>(j, "seconds", 0);
  e.step_seconds = report_get_or<double>(j, "step_seconds", 0);
  e.samples_per_second = report_get_or<double>(j, "samples_per_second", 0);
  e.noise_scale = detail::report_json_or_null(j, "noise_scale");
  e.phases = report_get_or<report_phases>(j, "phases_rank0", {});
  e.ranking = detail::report_json_or_null(j, "ranking");
}

namespace detail {

/// An account as the report holds it (`account_summary` is the library's, so its JSON form is
/// written here rather than found by nlohmann's lookup).
inline nlohmann::json account_json(const account_summary& a) {
  return {{"mean", a.mean}, {"p50", a.p50}, {"p95", a.p95}, {"total", a.total}};
}

inline account_summary account_of(const nlohmann::json& j) {
  return {.mean = report_get<double>(j, "mean"),
          .p50 = report_get_or<double>(j, "p50", 0),
          .p95 = report_get_or<double>(j, "p95", 0),
          .total = report_get_or<double>(j, "total", 0)};
}

}  // namespace detail

inline void to_json(nlohmann::json& j, const report_ledger& l) {
  j = {{"steps", l.steps},
       {"bytes_reduced_per_step", l.bytes_reduced_per_step},
       {"dense_bytes_per_step", l.dense_bytes_per_step},
       {"bytes_saved_per_step", l.bytes_saved_per_step},
       {"sparse_steps", l.sparse_steps},
       {"overlap", l.overlap},
       {"algbw_bytes_per_s", l.algbw_bytes_per_s},
       {"busbw_bytes_per_s", l.busbw_bytes_per_s},
       {"slow_ranks", l.slow_ranks},
       {"projection", l.projection}};
  if (l.sparse_row_cost_ratio) j["sparse_row_cost_ratio"] = *l.sparse_row_cost_ratio;
  if (!l.row_segments.is_null()) j["row_segments"] = l.row_segments;
  if (l.overlap_settings) {
    j["bucket_bytes"] = l.overlap_settings->bucket_bytes;
    j["last_bucket_bytes"] = l.overlap_settings->last_bucket_bytes;
    j["comm_thread_nice"] = l.overlap_settings->comm_thread_nice
                                ? nlohmann::json(*l.overlap_settings->comm_thread_nice)
                                : nlohmann::json(nullptr);
  }
  if (l.reduce_exposed_seconds) j["reduce_exposed_seconds"] = *l.reduce_exposed_seconds;
  if (l.param_count) j["param_count"] = *l.param_count;
  if (l.optimizer_state_floats) j["optimizer_state_floats"] = *l.optimizer_state_floats;
  nlohmann::json accounts = nlohmann::json::object();
  for (const auto& [name, a] : l.accounts) accounts[name] = detail::account_json(a);
  j["accounts"] = accounts;
}

inline void from_json(const nlohmann::json& j, report_ledger& l) {
  using detail::report_get_or;
  l.steps = report_get_or<std::size_t>(j, "steps", 0);
  l.bytes_reduced_per_step = report_get_or<std::uint64_t>(j, "bytes_reduced_per_step", 0);
  l.dense_bytes_per_step = report_get_or<std::uint64_t>(j, "dense_bytes_per_step", 0);
  l.bytes_saved_per_step = report_get_or<std::int64_t>(j, "bytes_saved_per_step", 0);
  l.sparse_steps = report_get_or<std::size_t>(j, "sparse_steps", 0);
  if (j.contains("sparse_row_cost_ratio"))
    l.sparse_row_cost_ratio = detail::report_get<double>(j, "sparse_row_cost_ratio");
  l.overlap = report_get_or<bool>(j, "overlap", false);
  if (j.contains("bucket_bytes")) {
    report_overlap o{.bucket_bytes = detail::report_get<std::size_t>(j, "bucket_bytes"),
                     .last_bucket_bytes = report_get_or<std::size_t>(j, "last_bucket_bytes", 0),
                     .comm_thread_nice = std::nullopt};
    if (j.contains("comm_thread_nice") && !j.at("comm_thread_nice").is_null())
      o.comm_thread_nice = detail::report_get<int>(j, "comm_thread_nice");
    l.overlap_settings = o;
  }
  if (j.contains("param_count")) l.param_count = detail::report_get<std::size_t>(j, "param_count");
  if (j.contains("optimizer_state_floats"))
    l.optimizer_state_floats = detail::report_get<std::size_t>(j, "optimizer_state_floats");
  if (j.contains("reduce_exposed_seconds"))
    l.reduce_exposed_seconds = detail::report_get<double>(j, "reduce_exposed_seconds");
  l.algbw_bytes_per_s = report_get_or<double>(j, "algbw_bytes_per_s", 0);
  l.busbw_bytes_per_s = report_get_or<double>(j, "busbw_bytes_per_s", 0);
  if (j.contains("accounts"))
    for (const auto& [name, a] : detail::report_need(j, "accounts").items())
      l.accounts[name] = detail::account_of(a);
  l.slow_ranks = report_get_or<std::vector<int>>(j, "slow_ranks", {});
  l.row_segments = detail::report_json_or_null(j, "row_segments");
  l.projection = detail::report_json_or_null(j, "projection");
}

inline void to_json(nlohmann::json& j, const train_report& r) {
  j = {{"dataset", r.dataset},
       {"model", r.model},
       {"loss", r.loss},
       {"world_size", r.world_size},
       {"shared_arena", r.shared_arena},
       {"global_batch", r.global_batch},
       {"lr", r.lr},
       {"optimizer", r.optimizer},
       {"schedule", r.schedule},
       {"seed", r.seed},
       {"split_seed", r.split_seed},
       {"epochs", r.epochs},
       {"noise_scale", r.noise_scale},
       {"eval", r.eval},
       {"holdout", r.holdout},
       {"phases_rank0", r.phases},
       {"skipped_steps", r.skipped_steps},
       {"space", r.space},
       {"parameters_checksum", r.parameters_checksum},
       {"replayed_steps", r.replayed_steps},
       {"resumed_from_step", r.resumed_from_step},
       {"checkpoints_written", r.checkpoints_written},
       {"last_checkpoint", r.last_checkpoint},
       {"seconds", r.seconds},
       {"cpu_seconds", r.cpu_seconds}};
  if (!r.ranking.is_null()) j["ranking"] = r.ranking;
  if (!r.target.is_null()) j["target"] = r.target;
  if (r.ledger) j["ledger"] = *r.ledger;
  if (r.omp_threads) j["omp_threads"] = *r.omp_threads;
  if (!r.omp_wait_policy.empty()) j["omp_wait_policy"] = r.omp_wait_policy;
  if (!r.gomp_spincount.empty()) j["gomp_spincount"] = r.gomp_spincount;
  if (!r.step_graph_refused.empty()) j["step_graph_refused"] = r.step_graph_refused;
  if (!r.setup.is_null()) j["setup"] = r.setup;
  if (!r.memory.is_null()) j["memory"] = r.memory;
  if (!r.cores.is_null()) j["cores"] = r.cores;
}

/// Reads a report; what the planner needs must be there (the rank-0 phases, the epochs' steps,
/// the batch, the world size and the training rows), the rest is read when present.
inline void from_json(const nlohmann::json& j, train_report& r) {
  using detail::report_get;
  using detail::report_get_or;
  r.phases = report_get<report_phases>(j, "phases_rank0");
  r.epochs = report_get<std::vector<report_epoch>>(j, "epochs");
  r.global_batch = report_get<std::size_t>(j, "global_batch");
  r.world_size = report_get<int>(j, "world_size");
  r.dataset = report_get<report_dataset>(j, "dataset");
  if (j.contains("ledger") && j.at("ledger").is_object())
    r.ledger = report_get<report_ledger>(j, "ledger");
  r.model = report_get_or<std::string>(j, "model", "");
  r.loss = report_get_or<std::string>(j, "loss", "");
  r.shared_arena = report_get_or<bool>(j, "shared_arena", false);
  r.lr = report_get_or<double>(j, "lr", 0);
  r.optimizer = report_get_or<std::string>(j, "optimizer", "");
  r.schedule = report_get_or<std::string>(j, "schedule", "");
  r.seed = report_get_or<std::uint64_t>(j, "seed", 0);
  r.split_seed = report_get_or<std::uint64_t>(j, "split_seed", r.seed);  // older reports: seed
  r.noise_scale = detail::report_json_or_null(j, "noise_scale");
  r.eval = detail::report_json_or_null(j, "eval");
  r.holdout = report_get_or<std::string>(j, "holdout", "random");
  r.ranking = detail::report_json_or_null(j, "ranking");
  r.target = detail::report_json_or_null(j, "target");
  r.skipped_steps = report_get_or<std::size_t>(j, "skipped_steps", 0);
  r.space = report_get_or<std::string>(j, "space", "host");
  r.parameters_checksum = report_get_or<std::string>(j, "parameters_checksum", "");
  r.replayed_steps = report_get_or<std::size_t>(j, "replayed_steps", 0);
  r.step_graph_refused = report_get_or<std::string>(j, "step_graph_refused", "");
  r.resumed_from_step = report_get_or<std::size_t>(j, "resumed_from_step", 0);
  r.checkpoints_written = report_get_or<std::size_t>(j, "checkpoints_written", 0);
  r.last_checkpoint = report_get_or<std::string>(j, "last_checkpoint", "");
  r.seconds = report_get_or<double>(j, "seconds", 0);
  if (j.contains("omp_threads") && j.at("omp_threads").is_number())
    r.omp_threads = report_get<int>(j, "omp_threads");
  r.cpu_seconds = report_get_or<double>(j, "cpu_seconds", 0);
  r.omp_wait_policy = report_get_or<std::string>(j, "omp_wait_policy", "");
  r.gomp_spincount = report_get_or<std::string>(j, "gomp_spincount", "");
  r.setup = detail::report_json_or_null(j, "setup");
  r.memory = detail::report_json_or_null(j, "memory");
  r.cores = detail::report_json_or_null(j, "cores");
}

}  // namespace tutti::cli
