// SPDX-License-Identifier: Apache-2.0
/// @file trainer/options.hpp
/// @brief A trainer's run options (`train_options`) and what `fit` returns (`fit_result`,
/// `epoch_record`), with the callbacks' argument types and the policies the options name.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/checkpoint.hpp>
#include <tutti/error.hpp>
#include <tutti/ledger/accounts.hpp>
#include <tutti/memory_accounts.hpp>
#include <tutti/ranking.hpp>
#include <tutti/schedules/scaling.hpp>
#include <tutti/trainer/errors.hpp>
#include <tutti/trainer/negatives.hpp>
#include <tutti/trainer/noise_scale.hpp>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti {

/// Per-step progress handed to `train_options::on_step` (on every rank, after the optimizer).
struct step_progress {
  int rank = 0;
  std::size_t epoch = 0;        ///< 0-based epoch
  std::size_t step = 0;         ///< 0-based step within the epoch
  std::size_t steps = 0;        ///< steps per epoch
  std::size_t global_step = 0;  ///< 0-based step over the run
  std::size_t total_steps = 0;  ///< steps over the run
  double lr = 0;                ///< learning rate used by this step
};

/// A thread-safe JSON-lines sink shared by the ranks of one process.
class json_lines_log {
 public:
  /// Writes to `out`, which must outlive the log.
  explicit json_lines_log(std::ostream& out) : m_out(&out) {}
  /// Appends one record (a complete JSON object without the newline) as a line.
  void write(const std::string& record) {
    std::lock_guard lock(m_mutex);
    *m_out << record << '\n';
    m_out->flush();
  }

 private:
  std::ostream* m_out;
  std::mutex m_mutex;
};

/// The names `eval_result::metric` points to: one object each, so two results that name the same
/// metric hold the same pointer, whichever code path evaluated them.
namespace metric_name {
inline constexpr char none[] = "none";
inline constexpr char rmse[] = "rmse";
inline constexpr char auc[] = "auc";
}  // namespace metric_name

/// A quality to stop at (`train_options::target`): the first epoch whose evaluation reaches it
/// ends the run, as time-to-quality benchmarks measure it (NCF: the time to HR@10 = 0.635).
struct quality_target {
  enum class measure : std::uint8_t {
    rmse,      ///< the test RMSE at or below `value` (squared loss)
    auc,       ///< the test AUC at or above `value` (logistic loss)
    hit_rate,  ///< HR@K at or above `value` (needs `train_options::ranking`)
    ndcg,      ///< NDCG@K at or above `value` (needs `train_options::ranking`)
  };
  measure metric = measure::auc;
  double value = 0;
};

/// When `fit` reached its `train_options::target`.
struct target_result {
  bool reached = false;   ///< some epoch's evaluation reached it
  std::size_t epoch = 0;  ///< the first such epoch (1-based); the run stopped after it
  double seconds = 0;     ///< wall time from the start of `fit` to the end of that epoch
  double value = 0;       ///< the measure at that epoch
};

/// A test-split evaluation: RMSE for squared loss, exact AUC for logistic loss.
struct eval_result {
  const char* metric = metric_name::none;  ///< "rmse", "auc" or "none" (no test rows)
  double value = 0;                        ///< the metric's value
};

/// What the trainer does when a step's loss or gradient is not finite on some rank.
enum class nonfinite_policy : std::uint8_t {
  skip,  ///< skip the optimizer step on every rank; parameters and optimizer state untouched
  stop,  ///< stop with `tutti::nonfinite_error` on every rank
  off,   ///< no check: non-finite values reach the reduction and the parameters
};

/// Whether the trainer exchanges the row-sparse segments of the gradient (embedding tables) as
/// the rows a step touched instead of reducing them densely; see `train_options::sparse_exchange`.
enum class sparse_exchange_policy : std::uint8_t {
  off,        ///< every value goes through the reducer's dense `all_reduce_mean`
  automatic,  ///< per step and segment, rows when they move fewer bytes than the dense reduce
  on,         ///< always rows (host spaces, models that report `touched_rows`)
  /// as `automatic`, with each path's bytes weighted by its measured cost: the first
  /// `train_options::sparse_trial_steps` steps alternate dense and rows and time them; every
  /// rank then takes the slowest rank's costs per byte, so all decide alike
  measured,
};

/// The policy's name as `tutti train --sparse-exchange` spells it: "off", "auto", "on" or
/// "measured".
constexpr const char* to_string(sparse_exchange_policy p) noexcept {
  switch (p) {
    case sparse_exchange_policy::off:
      return "off";
    case sparse_exchange_policy::automatic:
      return "auto";
    case sparse_exchange_policy::measured:
      return "measured";
    case sparse_exchange_policy::on:
      break;
  }
  return "on";
}

/// The policy `name` spells ("off", "auto", "on", "measured", as `to_string` writes them), or
/// nullopt for any other text.
inline std::optional<sparse_exchange_policy> sparse_exchange_policy_named(std::string_view name) {
  for (const auto p : {sparse_exchange_policy::off, sparse_exchange_policy::automatic,
                       sparse_exchange_policy::on, sparse_exchange_policy::measured})
    if (name == to_string(p)) return p;
  return std::nullopt;
}

/// What happened in one epoch (identical on every rank except `phases` and `step_seconds`).
struct epoch_record {
  std::size_t epoch = 0;                        ///< 1-based epoch number
  double train_loss = 0;                        ///< weighted mean data loss of applied steps
  std::vector<std::uint64_t> samples_per_rank;  ///< real (weight 1) samples each rank used
  /// Real samples of this epoch consumed before the run was resumed from a checkpoint (counted
  /// in `weighted_samples`, not in `samples_per_rank`); 0 unless the epoch was resumed.
  std::uint64_t samples_before_resume = 0;
  double weighted_samples = 0;    ///< sum of sample weights over all ranks
  std::size_t steps = 0;          ///< steps in the epoch (skipped ones included)
  std::size_t skipped_steps = 0;  ///< steps skipped for a non-finite value
  double seconds = 0;             ///< wall time of the epoch on this rank
  double step_seconds = 0;        ///< wall time of its steps on this rank
  double samples_per_second = 0;  ///< weighted_samples / seconds
  eval_result eval;               ///< test metric after the epoch
  /// HR@K and NDCG@K after the epoch (`train_options::ranking`), or none.
  std::optional<ranking_result> ranking;
  phase_seconds phases;              ///< this rank's time per phase
  rank_table ranks;                  ///< every rank's mean step and work time
  noise_scale_estimate noise_scale;  ///< the gradient noise scale as of the epoch's end
};

/// One interval of a rank's step for a timeline (`train_options::on_phase`): step `step` of
/// epoch `epoch` (global step `global_step`) spent [start, start + seconds) on `phase`, in
/// seconds since `fit` began on this rank.
struct phase_event {
  int rank = 0;
  std::size_t epoch = 0, step = 0, global_step = 0;
  account phase = account::other;
  double start = 0, seconds = 0;
};

/// The floats after the gradient arena that travel with every reduction: this rank's
/// non-finite flag, its stop request, and its small-batch squared gradient norm on a step that
/// measures the noise scale (0 otherwise); after the mean over ranks: any rank non-finite, any
/// rank asked to stop, the mean small-batch squared norm. A step reduces (parameters + these)
/// floats.
inline constexpr std::size_t gradient_trailing_floats = 3;

/// Run options of a trainer: an aggregate, set with designated initialisers.
/// A run that continues a model trained before it (a warm start from an export): the optimizer
/// steps that model took, and its optimizer state, row by row where the rows were kept.
struct continuation {
  /// Optimizer steps taken before this run: this run's step t is the optimizer's step
  /// `steps + t` (Adam's bias corrections continue). The schedule is this run's own.
  std::uint64_t steps = 0;
  /// The optimizer-state arena to start from (the trainer's state size; every rank passes the
  /// same); null: zeros.
  std::shared_ptr<const std::vector<float>> optimizer_state{};
  /// Or, where `optimizer_state` is null: writes the state to start from into the zeroed arena,
  /// on the host (in place on a space the host reads; a host copy, copied back, on one it
  /// cannot), so that no second arena is made (a warm start's rows of state:
  /// `models::apply_warm_state`). Every rank must write the same.
  std::function<void(std::span<float>)> write_state{};
  /// Whether the run starts from another state than zeros.
  bool has_state() const noexcept { return optimizer_state != nullptr || bool(write_state); }
};

struct train_options {
  std::size_t batch = 4096;               ///< global batch: samples per step over all ranks
  std::size_t epochs = 3;                 ///< passes over the training data
  double base_lr = 0.05;                  ///< learning rate before scaling and schedule
  lr_scaling scaling = lr_scaling::none;  ///< rule applied to base_lr for the global batch
  std::size_t reference_batch = 256;      ///< batch at which base_lr was tuned (for scaling)
  std::uint64_t seed = 1;                 ///< initialisation and shuffling seed
  bool evaluate_each_epoch = true;        ///< evaluate the test split after every epoch
  /// Ranking lists (`data::sample_candidates`) evaluated with the test split: HR@K and NDCG@K
  /// of the leave-one-out protocol in `epoch_record::ranking`. Every rank passes the same lists,
  /// or, with a rank-local sampler, its own (the metrics then cover their union). None: no
  /// ranking metrics.
  std::shared_ptr<const data::ranking_candidates> ranking{};
  std::size_t ranking_k = 10;  ///< K of HR@K and NDCG@K
  /// Stop after the first epoch whose evaluation reaches this quality (every epoch is then
  /// evaluated); `fit_result::target` says when. None: run every epoch.
  std::optional<quality_target> target{};
  std::size_t log_every = 0;      ///< steps between JSON-lines records; 0: per epoch
  json_lines_log* log = nullptr;  ///< JSON-lines sink (per-rank records), or none
  std::function<void(const step_progress&)> on_step{};  ///< called after each step, or empty
  std::function<void(int rank, const epoch_record&)> on_epoch{};  ///< after each epoch
  /// Called on each rank's thread with every interval the step's clock marks, as it is marked
  /// (the ledger's own clock reads; nothing is added to the step). Host spaces; a device
  /// space's intervals are GPU events resolved in batches and are not traced.
  std::function<void(const phase_event&)> on_phase{};
  /// What a non-finite loss or gradient on any rank does: skip the step, stop, or nothing.
  nonfinite_policy nonfinite = nonfinite_policy::skip;
  /// Steps between replica checks (checksums of parameters and optimizer state compared
  /// across ranks); 0: only at the end of `fit`, which always ends with one.
  std::size_t replica_check_every = 0;
  /// On a replica mismatch, broadcast rank 0's parameters and optimizer state and record the
  /// event, instead of raising `tutti::replica_mismatch_error`.
  bool rebroadcast_on_mismatch = false;
  /// Measure each rank's wait for the slowest one with a one-value `all_reduce_max` before
  /// every gradient reduce, charged to the wait account and kept out of the reduce's. Off by
  /// default: it adds a collective per step, and on reducers whose scalar collectives
  /// synchronise the device (nccl_ring) a synchronisation too. Without it the wait stays
  /// inside the reduce account, unless the reducer reports `double last_wait_seconds()`.
  bool measure_wait = false;
  /// A rank whose work time per step is at least (1 + this) × the median is flagged slow.
  double slow_rank_threshold = 0.2;
  /// Called on every rank before each step with the dataset positions of this rank's slots and
  /// their weights (0 for padding), e.g. to keep an audit trail of who consumed what; or empty.
  std::function<void(const step_progress&, std::span<const std::uint64_t> samples,
                     std::span<const float> weights)>
      on_batch{};
  /// Gradient accumulation: each rank computes its local batch as this many micro-batches
  /// (of ceil(local batch / K) samples) whose gradients add up before the one reduction of the
  /// step; the update is that of the whole batch (up to the order of float sums), with a
  /// K-times smaller batch working set. 1: no accumulation.
  std::size_t accumulation = 1;
  /// Negatives sampled in the step (docs/implicit.md): each positive of a batch is followed by
  /// `negatives.per_positive` courses its learner did not take, drawn from (seed, epoch, the
  /// positive's dataset position, k), with label 0 and the positive's weight, so 1 rank and W
  /// ranks draw the same ones and a resumed run draws what the uninterrupted one did. Needs a
  /// model with the logistic loss. The loss and the gradient of a slot then cover the positive
  /// and its negatives; samples are still counted as positives.
  negative_options negatives{};
  /// Sparse embedding exchange (docs/trainer.md#sparse-embedding-exchange): for the segments a
  /// model reports as row-sparse, each rank sends the rows its step touched (ids and values,
  /// one `all_gather`), every rank sums them in rank order and divides by W; the rest of the
  /// arena goes through `all_reduce_mean` as before. `automatic` decides per step and segment
  /// by bytes; `on` always sends rows. Needs a host space and a model with `touched_rows`
  /// (`on` is refused otherwise; `automatic` stays dense). The result equals the dense path up
  /// to the order of float sums.
  sparse_exchange_policy sparse_exchange = sparse_exchange_policy::off;
  /// `sparse_exchange = measured`: the steps (an even number, at least 4) that alternate the
  /// dense path and the rows before the costs per byte are agreed on and the rule applies; the
  /// first pair warms both paths up (buffers, caches) and is not counted. Every `fit` call
  /// measures anew.
  std::size_t sparse_trial_steps = 10;
  /// Overlapped reduction (docs/trainer.md#overlapped-reduction): the gradient arena is cut
  /// into buckets of `bucket_bytes` from its end, and each bucket is reduced as soon as
  /// backward has made all of it final (models that report `tutti::gradient_ready`), while the
  /// rest of backward runs: on the host by a communication thread per rank, with `nccl_ring` on
  /// its communication stream, ordered by events. The ledger's exposed reduce is then the wait
  /// after backward; on the host its total reduce is the thread's time in collectives. The
  /// result equals the unbucketed path (bitwise with 2 ranks, to the order of float sums with
  /// more). Not with `sparse_exchange`; under MPI, the thread level must be at least
  /// MPI_THREAD_SERIALIZED.
  bool overlap_reduce = false;
  /// The row-sparse step keeps the gradient of the rows a step touched in slots sized by the
  /// batch instead of a gradient arena the size of the tables, where it can: one rank on a host
  /// space, `accumulation` 1, a model with `tutti::model_writes_gradient_slots` and an optimizer
  /// with `tutti::optimizer_fuses_rows`. The parameters are bitwise the same either way; false
  /// keeps the table-sized arena.
  bool compact_gradient = true;
  /// On a host space the step reads the training rows from the `data::interactions` given to
  /// `fit` where they are, instead of the trainer's copy of one record a row: the rows are held
  /// once (8 bytes a row less for a log of positives, whose copy holds no label; 12 for ratings),
  /// and each slot's gather reads two arrays (three where the labels differ) instead of one
  /// record: 1-2 % fewer samples/s measured on a quiet machine, 5-7 %
  /// under load (docs/performance.md). The parameters are bitwise the same either way. A device
  /// space keeps its copy.
  bool rows_in_place = false;
  /// Bucket size of the overlapped reduction, in bytes (PyTorch DDP's default, 25 MB).
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// The overlapped reduction's last bucket, the arena's first values (which backward makes
  /// final last), is cut to at most this many bytes: once backward ends only it and the flags
  /// remain to reduce, so it bounds the exposed part. 0: buckets of `bucket_bytes` throughout.
  /// (PyTorch DDP makes its *first* bucket small, 1 MB, to start communicating early.)
  std::size_t last_bucket_bytes = std::size_t{256} << 10;
  /// Nice value (-20 … 19; Linux) of the overlapped reduction's communication thread on the
  /// host; nullopt keeps the process's. A bucket is reduced only when the thread gets a core,
  /// and where backward keeps every core busy an equal-priority thread gets one late, so the
  /// reduction piles up behind backward and is exposed after it. A lower nice value (a higher
  /// priority) lets the thread preempt backward as each bucket completes: the GPU analogue is
  /// `nccl_ring`'s high-priority communication stream. Lowering a thread's nice below the
  /// process's needs CAP_SYS_NICE or RLIMIT_NICE; when refused the thread keeps the process's
  /// priority, `fit_result::comm_thread_nice` says so and `on_warning` gets the reason.
  std::optional<int> comm_thread_nice = -10;
  /// Steps between measurements of the gradient noise scale B_simple = tr(Σ)/|G|²
  /// (docs/trainer.md#gradient-noise-scale), from the squared norms of each rank's gradient
  /// before the reduction and of the reduced one after it (one rank: of the first micro-batch
  /// and of the whole step, which needs `accumulation` >= 2). It only reads the gradient: the
  /// training is bitwise the same with it off. 0: off. Host spaces.
  std::size_t noise_scale_every = 16;
  /// The moving averages' weight on the past, per measurement (0 < decay < 1).
  double noise_scale_decay = 0.95;
  /// Warn (through `on_warning`, and the log) when the global batch exceeds the reference
  /// batch by this factor or more with no learning-rate scaling rule (`scaling` = none).
  double batch_growth_warning = 4.0;
  /// Receives the trainer's warnings (rank 0 only), e.g. a grown batch with no scaling rule.
  std::function<void(const std::string&)> on_warning{};
  /// Directory rank 0 writes checkpoints to (docs/checkpoints.md); empty: no checkpoints.
  std::string checkpoint_dir{};
  /// Steps between checkpoints; 0: only when stopped through `stop`.
  std::size_t checkpoint_every = 0;
  /// Checkpoints kept in `checkpoint_dir` (the newest).
  std::size_t checkpoint_keep = 3;
  /// The caller's settings that change the result (model, data, ...), as (name, value): written
  /// into every checkpoint next to the trainer's own, and compared when resuming.
  std::vector<std::pair<std::string, std::string>> run_config{};
  /// Continue from this checkpoint (e.g. `find_latest_checkpoint(dir)->state`) instead of
  /// starting afresh; every rank passes one, rank 0's parameters and state are broadcast.
  const checkpoint_state* resume = nullptr;
  /// Continue a model trained before this run (see `continuation`); a resumed checkpoint of
  /// such a run must be given the same `steps`.
  continuation continues{};
  /// Set on any rank (e.g. by a SIGINT/SIGTERM handler) to stop: every rank finishes the step
  /// in progress, rank 0 writes a checkpoint when `checkpoint_dir` is set, and `fit` throws
  /// `tutti::interrupted_error` on every rank. The request travels with the gradient reduce
  /// (one more float), so ranks agree on the step. A device space reads the request (which
  /// waits for the device) every `stop_poll_every` global steps, so it stops within that many
  /// steps of the request; a host space stops at the step in progress.
  const std::atomic<bool>* stop = nullptr;
  /// Device spaces: global steps between reads of the stop request, at least 1.
  std::size_t stop_poll_every = 16;
  /// A device space that records work as a graph (`tutti::space_captures_steps`, a CUDA Graph):
  /// the row-sparse step of one rank is recorded once and replayed, one launch a step, where
  /// its shape repeats (docs/trainer.md#steps-replayed-from-a-graph). The same kernels run
  /// either way, so the parameters are the same bits; false runs every step's kernels one by one.
  bool step_graphs = true;
};

/// A row-sparse segment of the gradient (an embedding table, a per-row bias) as a sparse
/// exchange would send it (docs/trainer.md#sparse-embedding-exchange): what the dense reduce
/// sends for it, and the rows a step of this rank touched, on the mean over the fit's steps.
/// What a projection to more devices needs to weigh the two (docs/ledger.md).
struct row_segment_traffic {
  std::size_t segment = 0;        ///< the segment's index in the model's layout
  std::string name;               ///< and its name there
  std::uint64_t dense_bytes = 0;  ///< its values (and padding) as the reducer sends them densely
  double rows_per_step = 0;       ///< rows a step of this rank touched, the mean over its steps
  std::size_t words = 0;          ///< 64-bit words a row travels in: its id, then its values
  std::size_t table_rows = 0;     ///< rows of the segment (the table)
  std::size_t cols = 0;           ///< values of a row
  /// Rows the optimizer updated a step, the mean over this rank's steps: the union of every
  /// rank's touched rows in the row-sparse step (this rank's on one), 0 where the optimizer
  /// updates the whole table (a dense optimizer beside a sparse exchange).
  double updated_rows_per_step = 0;
  /// The row-sparse step gathers the ids every rank touched (two to a 64-bit word) to update
  /// their union: what it does on more than one rank, whatever the exchange.
  bool ids_gathered = false;
  /// The bytes this rank's touched rows take in the exchange's gather, per step.
  double row_bytes() const noexcept { return rows_per_step * double(words) * 8.0; }
  /// The bytes their ids take in the row-sparse step's gather, per step (0 without it).
  double id_bytes() const noexcept { return ids_gathered ? rows_per_step * 4.0 : 0.0; }
};

/// Result of `trainer::fit`.
struct fit_result {
  std::vector<epoch_record> epochs;       ///< one record per epoch
  eval_result eval;                       ///< final test metric
  std::optional<ranking_result> ranking;  ///< final HR@K and NDCG@K, or none
  target_result target;                   ///< when `train_options::target` was reached
  phase_seconds phases;                   ///< this rank's time per phase over the run
  std::size_t steps = 0;                  ///< steps taken (skipped ones included)
  double seconds = 0;                     ///< wall time of fit on this rank
  /// Wall time of fit on this rank before its first step: the checks across ranks, the rows
  /// copied for the step, the negatives' tables (the first epoch's shard counts as the first
  /// step's data).
  double prepare_seconds = 0;
  double lr = 0;                 ///< base learning rate after scaling
  std::size_t global_batch = 0;  ///< samples per step over all ranks
  int world_size = 1;            ///< ranks
  ledger_summary ledger;         ///< this rank's accounts: mean, p50, p95; bandwidths; ranks
  std::size_t param_count = 0;   ///< model parameters (padding excluded)
  std::size_t arena_floats = 0;  ///< floats of the parameter arena (padding included)
  std::size_t optimizer_state_floats = 0;  ///< floats of optimizer state
  memory_accounts memory;                  ///< what this rank's trainer holds, by account
  /// The gradient noise scale at the end of the run (`train_options::noise_scale_every`);
  /// `known()` is false when no step could be measured, and `noise_scale_why` says why.
  noise_scale_estimate noise_scale;
  std::string noise_scale_why;
  /// Gradient bytes each rank reduces per step, the mean over this fit's steps. A sparse
  /// exchange counts as the allreduce payload that moves as many bytes per rank (W / 2 × the
  /// bytes each rank gathers; docs/trainer.md#sparse-embedding-exchange).
  std::uint64_t bytes_reduced_per_step = 0;
  std::uint64_t dense_bytes_per_step = 0;  ///< what the dense reduce of the arena takes per step
  std::int64_t bytes_saved_per_step = 0;   ///< dense_bytes_per_step − bytes_reduced_per_step
  std::size_t sparse_steps = 0;  ///< steps of this fit that sent some segment as touched rows
  /// The row-sparse segments and the rows this rank's steps touched in them, on a host space
  /// where the step lists them (the row-sparse step, a sparse exchange); empty elsewhere.
  std::vector<row_segment_traffic> row_segments;
  /// `sparse_exchange = measured`: the rows' measured cost per byte ÷ the dense path's, agreed
  /// by all ranks after the trial steps (rows travel when their bytes × this are below the dense
  /// bytes); 0 before that or with another policy.
  double sparse_row_cost_ratio = 0;
  std::size_t skipped_steps = 0;              ///< steps skipped for a non-finite value
  std::vector<nonfinite_record> nonfinite;    ///< every rank's non-finite steps (all ranks alike)
  std::size_t replica_checks = 0;             ///< replica checks made (0 with one rank)
  std::vector<replica_event> replica_events;  ///< mismatches repaired by rebroadcast
  std::uint64_t parameters_checksum = 0;      ///< `replica_checksum()` at the end of the run
  std::size_t resumed_from_step = 0;          ///< global step of the checkpoint resumed, or 0
  std::size_t checkpoints_written = 0;        ///< checkpoints written by this rank (rank 0)
  std::string last_checkpoint;                ///< the newest one it wrote, or empty
  /// The overlapped reduction's communication thread's nice value (read back from the thread
  /// as it started), or nullopt without one (no `overlap_reduce`, or a device reducer).
  std::optional<int> comm_thread_nice;
  /// Steps replayed from a recorded graph (`train_options::step_graphs`); 0 where none was.
  std::size_t replayed_steps = 0;
  /// Why the space refused to record the step (then every step ran its kernels one by one);
  /// empty when it did not refuse.
  std::string step_graph_refused;
};

namespace detail {

/// Checks the options a trainer of `world` ranks is built with; throws `tutti::invalid_argument`
/// naming the first one out of range.
inline void check_train_options(const train_options& o, int world) {
  TUTTI_EXPECTS(o.batch > 0, "tutti::trainer", "global batch is 0; expected >= 1");
  TUTTI_EXPECTS(o.batch >= static_cast<std::size_t>(world), "tutti::trainer",
                "global batch " + std::to_string(o.batch) + " is smaller than the " +
                    std::to_string(world) +
                    " ranks; expected at least one sample per rank and step");
  TUTTI_EXPECTS(o.epochs > 0, "tutti::trainer", "epochs is 0; expected >= 1");
  TUTTI_EXPECTS(o.accumulation >= 1 && o.accumulation <= o.batch / static_cast<std::size_t>(world),
                "tutti::trainer",
                "accumulation = " + std::to_string(o.accumulation) +
                    "; expected 1 .. the smallest local batch (" +
                    std::to_string(o.batch / static_cast<std::size_t>(world)) + ")");
  TUTTI_EXPECTS(o.stop_poll_every >= 1, "tutti::trainer",
                "stop_poll_every is 0; expected >= 1 (global steps between reads of the stop "
                "request on a device space)");
  TUTTI_EXPECTS(std::isfinite(o.base_lr) && o.base_lr > 0, "tutti::trainer",
                "base_lr is " + std::to_string(o.base_lr) + "; expected > 0");
  TUTTI_EXPECTS(o.nonfinite == nonfinite_policy::skip || o.nonfinite == nonfinite_policy::stop ||
                    o.nonfinite == nonfinite_policy::off,
                "tutti::trainer",
                "nonfinite is not a tutti::nonfinite_policy; expected skip, "
                "stop or off");
  TUTTI_EXPECTS(std::isfinite(o.slow_rank_threshold) && o.slow_rank_threshold >= 0,
                "tutti::trainer",
                "slow_rank_threshold is " + std::to_string(o.slow_rank_threshold) +
                    "; expected a finite value >= 0");
  TUTTI_EXPECTS(o.sparse_exchange == sparse_exchange_policy::off ||
                    o.sparse_exchange == sparse_exchange_policy::automatic ||
                    o.sparse_exchange == sparse_exchange_policy::on ||
                    o.sparse_exchange == sparse_exchange_policy::measured,
                "tutti::trainer",
                "sparse_exchange is not a tutti::sparse_exchange_policy; expected off, "
                "automatic, on or measured");
  TUTTI_EXPECTS(o.sparse_exchange != sparse_exchange_policy::measured ||
                    (o.sparse_trial_steps >= 4 && o.sparse_trial_steps % 2 == 0),
                "tutti::trainer",
                "sparse_trial_steps = " + std::to_string(o.sparse_trial_steps) +
                    "; expected an even number of at least 4 (dense and rows alternate, the "
                    "first pair warms up)");
  TUTTI_EXPECTS(o.ranking_k >= 1, "tutti::trainer", "ranking_k = 0; expected K >= 1");
  TUTTI_EXPECTS(!o.target || std::isfinite(o.target->value), "tutti::trainer",
                "the target's value is not finite; expected a number");
  TUTTI_EXPECTS(!o.target || o.ranking ||
                    (o.target->metric != quality_target::measure::hit_rate &&
                     o.target->metric != quality_target::measure::ndcg),
                "tutti::trainer",
                "the target is a ranking metric but no ranking lists were given; expected "
                "train_options::ranking (data::sample_candidates)");
  TUTTI_EXPECTS(o.noise_scale_decay > 0 && o.noise_scale_decay < 1, "tutti::trainer",
                "noise_scale_decay = " + std::to_string(o.noise_scale_decay) +
                    "; expected a weight strictly between 0 and 1");
}

/// Checks that an RMSE or AUC target matches the model's loss: squared losses are evaluated by
/// RMSE, the others (logistic, bpr, softmax) by AUC.
inline void check_target_loss(const train_options& o, loss_kind loss) {
  using m = quality_target::measure;
  if (!o.target || (o.target->metric != m::rmse && o.target->metric != m::auc)) return;
  const bool squared = loss == loss_kind::squared;
  TUTTI_EXPECTS((o.target->metric == m::rmse) == squared, "tutti::trainer",
                std::string("the target is the test ") +
                    (o.target->metric == m::rmse ? "RMSE" : "AUC") + ", but the model's loss is " +
                    to_string(loss) + (squared ? " (evaluated by RMSE)" : " (evaluated by AUC)") +
                    "; expected a target that matches the loss");
}

/// Refuses sampled negatives for a model whose loss cannot learn from them (a negative is a 0
/// label, which the squared loss reads as a rating of 0), and a list loss without them (it
/// ranks each positive above its sampled negatives).
inline void check_negatives_loss(const train_options& o, loss_kind loss) {
  TUTTI_EXPECTS(o.negatives.per_positive > 0 || !is_list_loss(loss), "tutti::trainer",
                std::string("the model's loss is ") + to_string(loss) +
                    " and negatives.per_positive is 0; expected at least one sampled negative "
                    "per positive (the loss ranks each positive above its negatives)");
  if (o.negatives.per_positive == 0) return;
  TUTTI_EXPECTS(loss != loss_kind::squared, "tutti::trainer",
                "negatives.per_positive is " + std::to_string(o.negatives.per_positive) +
                    " but the model's loss is squared; expected a model with the logistic, bpr "
                    "or softmax loss (sampled negatives are 0 labels beside each positive's 1)");
  TUTTI_EXPECTS(o.negatives.max_draws >= 1, "tutti::trainer",
                "negatives.max_draws is 0; expected at least one draw per negative");
}

}  // namespace detail

}  // namespace tutti
