// SPDX-License-Identifier: Apache-2.0
/// @file trainer.hpp
/// @brief `tutti::trainer`: one rank of a data-parallel run, composed from five policies.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/checkpoint.hpp>
#include <tutti/concepts.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/finite.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/error.hpp>
#include <tutti/gradient_ready.hpp>
#include <tutti/layout.hpp>
#include <tutti/ledger/accounts.hpp>
#include <tutti/metrics.hpp>
#include <tutti/optimizers/row_sparse.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/schedules/constant.hpp>
#include <tutti/schedules/scaling.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/trainer/batch_split.hpp>
#include <tutti/trainer/bucket_pipeline.hpp>
#include <tutti/trainer/epoch_summary.hpp>
#include <tutti/trainer/errors.hpp>
#include <tutti/trainer/evaluation.hpp>
#include <tutti/trainer/finite_guard.hpp>
#include <tutti/trainer/log_records.hpp>
#include <tutti/trainer/memory_forecast.hpp>
#include <tutti/trainer/noise_scale.hpp>
#include <tutti/trainer/options.hpp>
#include <tutti/trainer/policy_facts.hpp>
#include <tutti/trainer/row_sparse_step.hpp>
#include <tutti/trainer/run_settings.hpp>
#include <tutti/trainer/sparse_exchange.hpp>
#include <tutti/trainer/step_kernels.hpp>
#include <tutti/trainer/step_replay.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tutti {

/// One rank of a data-parallel training run, all but its optimizer and schedule: the work that
/// depends on the model, the sampler and the reducer alone, compiled once per those three however
/// many optimizers and schedules a program trains them with. It asks `tutti::trainer`, the layer
/// built on it (and the only way to construct it), for the schedule's rate and the optimizer's
/// update; the optimizer's capabilities reach it as `detail::policy_facts`.
///
/// Every rank constructs its own trainer with its own reducer handle and calls `fit` with the
/// same data and options. The trainer owns the parameter, gradient and optimizer-state arenas;
/// it broadcasts rank 0's initial parameters, checks that all ranks agree on what they train,
/// and then runs the step: sampler → gather → loss and gradient → finite check → reduce →
/// optimizer, charging each phase to this rank's ledger.
///
/// The gradient arena holds two floats more than the layout: this rank's finite flag (0, or 1
/// when its loss or gradient was not finite), then its stop request (`train_options::stop`). The
/// mean reduction carries it with the gradient, so every rank learns whether any rank was
/// non-finite, without another collective, and takes the same decision. On a host space the flag is
/// read directly and a skipped step does not call the optimizer; on a device space the optimizer
/// runs and a kernel reverts parameters and state from a snapshot when the flag is set, and the
/// records are resolved at the epoch's end. A skipped step still consumes its step number and its
/// learning-rate schedule step.
///
/// With `train_options::sparse_exchange`, the segments a model reports as row-sparse (its
/// embedding tables) travel as the rows the step touched, gathered and summed on every rank,
/// while the rest of the arena, flags included, still goes through `all_reduce_mean`.
///
/// @tparam Model a `tutti::model` (its `space_type` is where everything runs)
/// @tparam Sampler a `tutti::shard_sampler`
/// @tparam Reducer a `tutti::gradient_reducer` that accepts the model's space
template <class Model, class Sampler, class Reducer>
class trainer_core {
  static_assert(check_model<Model>());
  static_assert(check_shard_sampler<Sampler>());
  static_assert(check_gradient_reducer<Reducer>());

 public:
  using model_type = Model;
  using space_type = typename Model::space_type;
  using value_type = typename Model::value_type;
  static_assert(std::is_same_v<value_type, float> || detail::model_value_type_mismatch<Model>,
                "tutti::trainer: trains float models (value_type = double is meant for gradient "
                "checks); see docs/concepts.md#model");
  static_assert(Reducer::template accepts<space_type>,
                "tutti::trainer: this gradient reducer cannot reduce memory of the model's space "
                "(see docs/concepts.md#gradient-reducer)");

 protected:
  /// Builds the core of one rank's trainer, `facts` read from its optimizer and schedule by
  /// `tutti::trainer`; allocates and initialises the arenas (rank 0's parameters are broadcast
  /// at the start of `fit`).
  trainer_core(Model&& model, Sampler&& sampler, Reducer&& reducer, train_options&& options,
               const detail::policy_facts& facts)
      : m_model(std::move(model)),
        m_sampler(std::move(sampler)),
        m_reducer(std::move(reducer)),
        m_options(std::move(options)),
        m_facts(facts),
        m_space(m_model.space()),
        m_params(m_model.layout().total(), m_space),
        m_state(facts.state_floats, m_space),
        m_step_loss(1, m_space),
        m_guard(m_options.nonfinite, m_space),
        m_sums(2, m_space) {
    detail::check_train_options(m_options, m_reducer.world_size());
    detail::check_target_loss(m_options, m_model.loss());
    detail::check_negatives_loss(m_options, m_model.loss());
    plan_sparse_exchange();
    plan_gradient_slots();
    m_grads = gradient_arena(gradient_values() + trailing_floats);
    plan_row_step();
    check_overlap_options();
    fill(m_space, m_params.span(), 0.f);
    m_model.initialize(m_params.span(), m_options.seed);
    fill(m_space, m_grads, 0.f);
    if (!m_state.empty()) fill(m_space, m_state.span(), 0.f);
    start_state();
    if constexpr (!space_type::host_accessible) m_values_on_host.assign(m_facts.values_words, 0);
  }
  trainer_core(trainer_core&&) = default;
  trainer_core& operator=(trainer_core&&) = default;
  virtual ~trainer_core() = default;

 public:
  /// Trains on `train` for the configured epochs, evaluating on `test` (which may be empty).
  /// Collective: every rank must call it with the same data and options.
  /// Throws `tutti::nonfinite_error` (policy `stop`) or `tutti::replica_mismatch_error` on
  /// every rank alike.
  fit_result fit(const data::interactions& train, const data::interactions& test) {
    const auto fit_start = clock::now();
    TUTTI_EXPECTS(train.size() > 0, "tutti::trainer::fit", "training set is empty; expected rows");
    const checkpoint_state* resume = m_options.resume;
    const std::uint64_t train_digest = train.digest();  // the training set is hashed once
    const detail::run_setting_list config = checkpoint_config(train, train_digest);
    if (resume) restore(*resume, config);
    check_agreement(train, test, train_digest);
    // Identical replicas: rank 0's initial (or restored) parameters and state everywhere.
    m_reducer.broadcast(m_params.span(), 0);
    if ((resume || m_options.continues.has_state()) && !m_state.empty())
      m_reducer.broadcast(m_state.span(), 0);

    const run_plan plan = plan_run(train.size(), config);
    step_buffers buf = make_buffers(train, plan);
    // The row-sparse step checks before it updates: a device keeps no snapshot for it.
    m_guard.begin_fit(plan.steps_per_epoch, m_params.size(), m_state.size(),
                      /*snapshot=*/!m_rows.on());
    fit_result result = begin_result(plan);
    result.memory = memory_of(buf);
    ledger book;
    step_clock timer(m_space);
    // A reducer that keeps a clock (a simulated link in a test) times the steps too.
    if constexpr (reducer_keeps_clock<Reducer> &&
                  requires(step_clock & c) { c.use_clock(std::function<double()>{}); })
      timer.use_clock([this] { return m_reducer.clock_seconds(); });
    m_replay.begin_fit(m_options.step_graphs);
    overlap pipeline;
    if (m_options.overlap_reduce) start_overlap(pipeline, plan.guarded, result);
    rank_means run(static_cast<std::size_t>(m_reducer.world_size()));
    std::size_t global_step =
        resume ? static_cast<std::size_t>(resume->global_step) : m_global_step;
    trace_phases(timer, fit_start, global_step);
    result.prepare_seconds = seconds_since(fit_start);

    const std::size_t start_epoch = resume ? static_cast<std::size_t>(resume->epoch) : 0;
    for (std::size_t epoch = start_epoch; epoch < m_options.epochs; ++epoch) {
      const auto epoch_start = clock::now();
      book.begin_epoch();
      timer.start();  // the shard of the epoch is charged to the first step's data
      const epoch_plan ep =
          begin_epoch(plan, buf, epoch, epoch == start_epoch ? resume : nullptr, global_step);
      result.memory.shard = std::max(result.memory.shard, detail::shard_bytes(ep.sh));
      step_log log;
      for (std::size_t step = ep.first_step; step < ep.last_step; ++step, ++global_step) {
        const step_slots s = slots_of(plan, ep, step);
        timer.begin_step(epoch, step);
        const double lr = rate_at(global_step, plan.total_steps, plan.lr0);
        const step_context c{plan, buf, ep, s, global_step, lr, pipeline, timer, result};
        announce_step(c);
        m_noise_step = plan_noise_step(global_step, s.global_real, plan.split, step - ep.step_base,
                                       s.count, plan.micro_batch);
        m_noise_small = 0;
        const reduced r = run_step(c);
        log_step(c, log, fit_start);
        end_step(c, r.stop);
        timer.end_step(r.bytes, book);
      }
      timer.flush(book);
      result.epochs.push_back(
          end_epoch(plan, ep, book, seconds_since(epoch_start), epoch_start, test, run, result));
      if (reached_target(result, fit_start)) break;
    }
    m_global_step = global_step;
    m_replay.end_fit();
    finish_result(plan, book, run, result);
    result.seconds = seconds_since(fit_start);
    return result;
  }

  /// Evaluates the current parameters on `test`: RMSE for squared loss, exact AUC for logistic
  /// loss; computed on rank 0 and shared, or, when each rank holds its own rows, over the union
  /// of every rank's `test` rows. Every rank returns the same value. Collective.
  eval_result evaluate(const data::interactions& test) {
    const auto params = std::span<const float>(m_params.span());
    if constexpr (rank_local_sampler<Sampler>)
      return detail::evaluate_across_ranks(m_model, m_space, params, m_reducer, test);
    else
      return detail::evaluate_on_rank0(m_model, m_space, params, m_reducer, test);
  }

  /// HR@K and NDCG@K of the current parameters on the ranking lists `candidates` (with a
  /// rank-local sampler each rank passes its own, and the metrics cover their union; else rank
  /// 0's are ranked). Every rank returns the same value. Collective.
  ranking_result evaluate_ranking(const data::ranking_candidates& candidates, std::size_t k) {
    std::optional<ranking_lists_on<space_type>> lists;
    if (ranks_lists()) lists.emplace(m_space, candidates);
    return detail::evaluate_ranking_across_ranks(m_model, std::span<const float>(m_params.span()),
                                                 m_reducer, lists ? &*lists : nullptr, k);
  }

  /// Predictions of the current parameters for every row of `rows` (copied to the host).
  std::vector<float> predict(const data::interactions& rows) {
    return to_host_vector(m_space, std::span<const float>(predict_on_space(rows).span()));
  }

  /// Predictions of the current parameters for every row of `rows`, in the space's memory.
  buffer<float, space_type> predict_on_space(const data::interactions& rows) {
    return detail::predict_on_space(m_model, m_space, std::span<const float>(m_params.span()),
                                    rows);
  }

  /// A 64-bit checksum of the parameters and the optimizer state (on the space; a device space
  /// synchronises to return it). Equal on every rank while the replicas are identical.
  std::uint64_t replica_checksum() const {
    return transform_reduce(
        m_space, m_params.size() + m_state.size(),
        detail::replica_hash_fn{m_params.data(), m_params.size(), m_state.data()}, std::uint64_t{0},
        detail::sum_u64_fn{});
  }

  /// The parameter arena (memory of the model's space).
  std::span<const float> parameters() const noexcept { return m_params.span(); }
  /// The parameter arena, writable (memory of the model's space). For restoring checkpoints and
  /// for tests: a write on some ranks only makes the replicas differ, which the replica checks
  /// report.
  std::span<float> parameters_mutable() noexcept { return m_params.span(); }
  /// The parameter arena, copied to the host.
  std::vector<float> parameters_on_host() const { return to_host_vector(m_space, m_params.span()); }
  /// The optimizer-state arena (memory of the model's space; empty when the optimizer has none).
  std::span<const float> optimizer_state() const noexcept { return m_state.span(); }
  /// The model.
  const Model& model() const noexcept { return m_model; }
  /// Optimizer steps the parameters have taken: this trainer's, after those of the model a
  /// continued run started from (`train_options::continues`).
  std::uint64_t optimizer_steps() const noexcept {
    return m_options.continues.steps + static_cast<std::uint64_t>(m_global_step);
  }
  /// The reducer handle.
  Reducer& reducer() noexcept { return m_reducer; }
  /// The run options.
  const train_options& options() const noexcept { return m_options; }

 protected:
  static constexpr std::size_t trailing_floats = gradient_trailing_floats;

  using clock = std::chrono::steady_clock;
  using step_clock = detail::ledger_impl::step_clock<space_type>;
  using overlap = std::optional<detail::bucket_pipeline<Reducer>>;

  // What fit fixes before its first step.
  struct run_plan {
    detail::batch_split split;
    std::size_t n = 0;            // rows of `train`: this rank's, with rank-local data
    std::size_t slots = 0;        // this rank's slots per epoch
    std::size_t micro_batch = 0;  // samples per micro-batch of gradient accumulation
    std::size_t steps_per_epoch = 0, total_steps = 0;
    std::vector<std::uint64_t> real_counts;  // split unevenly: every rank's real slots
    double lr0 = 0;                          // the base rate scaled for the global batch
    bool guarded = false;                    // the finite guard is on
    std::uint64_t wire_bytes = 0;            // what the dense reduce moves per step
    const detail::run_setting_list* config = nullptr;
    // The shard of epoch 0 drawn to count the slots, kept for the first epoch that starts at
    // its beginning (moved out once: a shard of a large log takes a second to deal).
    mutable std::optional<shard> first_shard;
  };

  // fit's memory on the space: the training set, this rank's slots of the epoch and their
  // weights, and one micro-batch.
  struct step_buffers {
    // This rank's training rows, one record each, or one pair each where every row has the
    // same label (the other empty); both empty where the step reads the caller's rows in place
    // (`train_options::rows_in_place` on a host space).
    buffer<detail::sample_record, space_type> records;
    buffer<detail::sample_pair, space_type> pairs;
    // The epoch's slots and their weights in the space's memory: empty where the step reads
    // the shard itself (a host space, positions in the whole training set).
    buffer<std::uint64_t, space_type> slots;
    buffer<float, space_type> slot_weights;
    buffer<std::int32_t, space_type> b_users, b_items;
    buffer<float, space_type> b_labels, b_weights;
    // Sampled negatives (train_options::negatives): each learner's courses (their offsets in
    // 32 bits where fewer than 2^32 pairs, else in 64), the popularity sampler's cumulative
    // weights, the epoch's key of the draws; empty without negatives.
    buffer<std::uint64_t, space_type> taken_offsets;
    buffer<std::uint32_t, space_type> taken_offsets32;
    buffer<std::int32_t, space_type> taken;
    buffer<std::uint64_t, space_type> cumulative;
    buffer<std::uint64_t, space_type> epoch_key;
    buffer<float, space_type> item_log_q;    // the softmax loss's log-Q correction, or empty
    std::int32_t n_items = 0;                // the courses negatives are drawn from
    const std::uint64_t* slot_at = nullptr;  // the epoch's slots: `slots`, or the shard's
    const float* weight_at = nullptr;        // their weights: `slot_weights`, or the shard's
    detail::sample_rows rows{};              // where the gather reads the rows
  };

  // One epoch: where it starts (a resumed one at the checkpoint's step), this rank's shard and
  // every rank's real slots.
  struct epoch_plan {
    std::size_t epoch = 0;
    const checkpoint_state* resumed = nullptr;  // the checkpoint this epoch resumes, or none
    std::size_t first_step = 0, last_step = 0;
    std::size_t start_pos = 0;         // positions of the epoch consumed before a resharded resume
    std::size_t step_base = 0;         // the step the shard's first slot belongs to
    std::size_t epoch_first_step = 0;  // global step of the epoch's step 0
    std::size_t epoch_slots = 0;       // slots of the epoch on the longest rank
    std::uint64_t before_resume = 0;   // real samples consumed before the resume
    double local_weight = 0;           // this rank's real samples in the slots this run visits
    shard sh;
    std::vector<std::uint64_t> real;  // split unevenly: every rank's real slots
  };

  // This rank's part of one step; empty once a shorter shard has run out.
  struct step_slots {
    std::size_t step = 0;
    std::size_t slot_begin = 0, slot_end = 0;   // the step's slots on this rank
    std::size_t begin = 0, end = 0, count = 0;  // of them, those the shard holds
    std::uint64_t global_real = 0;              // real samples of the step over all ranks
    double weight = 0;                          // this rank's sample weight in the step
  };

  struct reduced {
    std::uint64_t bytes = 0;  // what the ledger charges the step
    bool stop = false;        // some rank asked to stop
  };

  // The loss written to the JSON-lines log so far in the epoch.
  struct step_log {
    double loss = 0, weight = 0, since_weight = 0;
  };

  // What one step works with, handed from part to part (trainer/step.hpp): the run's plan and
  // buffers, the epoch and this rank's slots of the step, the global step and its rate, the
  // overlapped reduction, the step's clock and the run's result.
  struct step_context {
    const run_plan& plan;
    step_buffers& buf;
    const epoch_plan& epoch;
    const step_slots& slots;
    std::size_t global_step;
    double lr;
    overlap& pipeline;
    step_clock& timer;
    fit_result& result;
  };

  // Every rank's mean step, work and wait seconds, summed over the epochs.
  struct rank_means {
    explicit rank_means(std::size_t world) : step(world), work(world), wait(world) {}
    std::vector<double> step, work, wait;
  };

  // The split of the global batch, the steps, the rate; collective (uneven splits gather
  // every rank's real slots).
  run_plan plan_run(std::size_t n, const detail::run_setting_list& config);
  step_buffers make_buffers(const data::interactions& train, const run_plan& p) const;
  void copy_rows(const data::interactions& train, step_buffers& buf) const;
  void make_negative_buffers(const data::interactions& train, step_buffers& buf) const;
  void narrow_or_copy_offsets(const std::vector<std::uint64_t>& offsets, step_buffers& buf) const;
  // Where the step reads the training rows: `buf.records` or `buf.pairs`, or `train` in place.
  static detail::sample_rows row_source(const data::interactions& train, const step_buffers& buf);
  memory_accounts memory_of(const step_buffers& buf) const;
  fit_result begin_result(const run_plan& p);
  // The overlapped reduction's buckets and communication thread (joined when fit returns).
  // Each bucket is checked for non-finite values as it leaves, while it holds this rank's own
  // values: on the host into `m_bucket_nonfinite`, on a device into the step's flags by a
  // kernel.
  void start_overlap(overlap& pipeline, bool guarded, fit_result& result);
  // The timeline (`on_phase`): every interval the step's clock marks, as it is marked.
  void trace_phases(step_clock& timer, clock::time_point fit_start, const std::size_t& global_step);
  // The epoch's shard, its slots copied to the space, and the epoch's sums reset (a resumed
  // epoch starts from the checkpoint's). A resumed epoch starts at the checkpoint's step. On the
  // world size that wrote it the shards are the same and the first steps are skipped; on
  // another, the positions not yet consumed, [s·B, n), are dealt anew (`shard_from`), so each
  // sample still counts once. Collective when the split is uneven.
  epoch_plan begin_epoch(const run_plan& p, step_buffers& buf, std::size_t epoch,
                         const checkpoint_state* resumed, std::size_t global_step);
  void check_shard(const run_plan& p, const epoch_plan& e) const;
  // The shard's slots and weights into the space (written there by the sampler when
  // `shard_on_space()`); the epoch's flags, loss and sums zeroed.
  void load_shard(step_buffers& buf, const run_plan& p, const epoch_plan& e);
  // True when the sampler writes each epoch's shard into the device's memory and the host keeps
  // only its outline: a device space and a sampler with `sampler_fills_on_space`, and no
  // `on_batch` callback (it hands the host each step's positions).
  bool shard_on_space() const;
  // True when each step deals its own slots' positions as it takes them: a host space, a
  // sampler with `sampler_fills_slots` whose positions are the whole training set's, and no
  // `on_batch` callback (it is handed the epoch's positions). The epoch's shard is then an
  // outline and the step buffers hold one step's positions.
  bool shard_by_step() const;
  // True when the host keeps only the epoch's outline (`shard_on_space()` or
  // `shard_by_step()`): its slots, real slots and `rank_real`, no position.
  bool outline_only() const;
  // The outline of the shard of `epoch` from position `start_pos` on (`outline_only()`).
  shard epoch_outline(std::size_t n, std::size_t epoch, std::size_t start_pos) const;
  // The positions of the step's slots into the step buffers (`shard_by_step()`).
  void deal_step_slots(const step_context& c);
  // True when the step reads the epoch's shard in place (a host space, and a sampler whose
  // positions are the whole training set's): no copy of its slots.
  static constexpr bool shard_in_place() {
    return space_type::host_accessible && !rank_local_sampler<Sampler>;
  }
  // The first slot of `rank`'s part of step `s` of the epoch's shard.
  static std::size_t slot(const run_plan& p, const epoch_plan& e, int rank, std::size_t s);
  step_slots slots_of(const run_plan& p, const epoch_plan& e, std::size_t step) const;
  // Tells the reducer where the step is (for the message of a collective's timeout) and the
  // caller which samples it takes.
  void announce_step(const step_context& c);
  // One step from the gradient to the update: its kernels one by one (`take_step`, the step's
  // outline in trainer/step.hpp), or on a space that records them, the steady step's record
  // replayed (trainer/replayed_step.hpp).
  reduced run_step(const step_context& c);
  reduced take_step(const step_context& c);
  // Whether this step may be recorded and replayed: a space that records, the row-sparse step
  // of one rank with an optimizer and a model that allow it, no host read in the step (the stop
  // request's poll, the noise scale's measure, the measured wait) and one full micro-batch.
  bool replayable(const step_context& c) const;
  // Device spaces: the step's first slot, its index and the optimizer's values into the space's
  // memory (`detail::step_values`), where the step's kernels read them.
  void write_step_values(const step_context& c);
  // The factor on this rank's gradient: world size ÷ real samples of the global step.
  float gradient_scale(const step_slots& s) const;
  // A zero gradient arena, no touched rows, and the overlapped reduction's buckets ready.
  void begin_gradient(const step_context& c);
  // This rank's gradient of the step. Each rank scales by W / (real samples in the global
  // step), so the mean over ranks is the gradient of the mean loss over the global batch,
  // whatever the padding. With accumulation the local batch runs as micro-batches whose
  // gradients add up in the arena (models add, never overwrite), and the step still reduces
  // once.
  void compute_gradient(const step_context& c);
  // The model's loss and gradient of one micro-batch; with `report`, it tells the overlapped
  // reduction which values are final as backward makes them so.
  void backward(const batch_view& batch, float scale, bool report, overlap& pipeline);
  // Gathers `count` slots of `gather` into the batch buffers, each followed by its sampled
  // negatives (train_options::negatives); returns the rows gathered.
  std::size_t gather_rows(step_buffers& buf, const detail::gather_batch_fn<float>& gather,
                          std::size_t count);
  // gather_rows' kernel with negatives, for the learners' offsets in `Offset` (32 or 64 bits).
  template <class Offset>
  void gather_with_negatives(step_buffers& buf, const detail::gather_batch_fn<float>& gather,
                             std::size_t count, const std::uint64_t* first, const Offset* offsets);
  // After backward: the wait for the buckets still in flight, the rows to step, the noise
  // scale's small-batch norm and the finite check (each bucket was checked as it left).
  void finish_gradient(const step_context& c);
  // The step's collectives: the measured wait, this rank's stop request into its trailing
  // float, the reduction (the flags alone after the overlapped one), and on the row-sparse
  // step the union of the rows every rank touched.
  reduced reduce_step(const step_context& c);
  // The guard's verdict on the reduced flag: logged, and the step's loss added to the epoch's
  // sums when it is applied. On the host a skipped step is known here; a device snapshots the
  // parameters and state, for `update` to revert. Returns whether the host skips the step.
  bool commit_step(const step_context& c);
  // The stop policy on the host, at a skipped step: every rank stops here; one gather tells
  // them which ranks were non-finite.
  void stop_if_nonfinite(const step_context& c);
  // The optimizer's step (unless skipped), then the row-sparse step's zeroing, or on a device
  // the guard's revert of a skipped step.
  void update(const step_context& c, bool skip);
  // The JSON-lines record (every `log_every` steps and at the epoch's end) and `on_step`.
  void log_step(const step_context& c, step_log& log, clock::time_point fit_start);
  // The step's whole-model work when due: the replica check, the checkpoint; and the stop a
  // rank asked for.
  void end_step(const step_context& c, bool stop_now);
  // The epoch's record: the skipped steps and their records, every rank's samples and times
  // (one gather), the loss (one reduction), the test metric.
  epoch_record end_epoch(const run_plan& p, const epoch_plan& e, ledger& book, double step_seconds,
                         clock::time_point epoch_start, const data::interactions& test,
                         rank_means& run, fit_result& result);
  // The run's totals: steps, noise scale, final metric, the ledger's summary and bytes, every
  // rank's mean times, and the replicas' checksum.
  void finish_result(const run_plan& p, ledger& book, rank_means& run, fit_result& result);
  // Whether the epoch just recorded reaches `train_options::target`; the first that does is
  // noted in `result.target`. Every rank sees the same metrics, so every rank stops alike.
  bool reached_target(fit_result& result, clock::time_point fit_start) const;
  /// Whether this rank ranks its lists: each rank its own under a rank-local sampler, else rank 0.
  bool ranks_lists() const { return rank_local_sampler<Sampler> || m_reducer.rank() == 0; }
  /// HR@K and NDCG@K of the current parameters on `train_options::ranking`, whose lists are
  /// copied to the space at the first call and kept there. Collective.
  ranking_result evaluate_option_ranking();
  // Whether this step measures the noise scale, and how: every `noise_scale_every`-th global
  // step whose batch is full, from each rank's local gradient (W
  // ranks; rank r took the `first(r, s)` split's slots) or from the first micro-batch's (one
  // rank with accumulation); `count` is this rank's slots in the step.
  detail::noise_step plan_noise_step(std::size_t global_step, std::uint64_t global_real,
                                     const detail::batch_split& split, std::size_t s,
                                     std::size_t count, std::size_t micro_batch) const;
  // Σ g² over what this rank's arena holds: the selected rows and the dense segments on the
  // row-sparse step (the rest is zero; host), else the whole arena. A device waits for it.
  double arena_squared_norm() const;
  // A step that measures the noise scale: this rank's small-batch squared norm into its
  // trailing float, taken now from the arena, or already from the first micro-batch or from
  // the buckets as they left.
  void record_small_noise(bool from_buckets);
  // After the reduction of a measured step that is applied (the host calls it for those only; a
  // device reads the reduced flag itself): the mean small-batch squared norm over the ranks and
  // the reduced gradient's give one estimate.
  void add_noise_measurement();
  // Why a run has no noise-scale estimate; empty when it has one.
  std::string noise_scale_why(std::size_t steps) const;
  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  // Bytes the dense reduce of `floats` gradient values moves, as the ledger counts them (a
  // compressing reducer, `compressed<R, bf16>`, says what travels).
  std::uint64_t dense_wire_bytes(std::size_t floats) const;
  // What the trainer asks of its optimizer and schedule (`tutti::trainer` answers):
  // The schedule's rate at global step `step` of `total`, from the base rate `base`.
  virtual double rate_at(std::size_t step, std::size_t total, double base) const = 0;
  // Applies the optimizer to the reduced gradient of the dense step (the row-sparse step's update
  // is detail::row_sparse_step's): with the layout for layout-aware optimizers (LARS, LAMB: a
  // trust ratio per segment); else over the arena.
  virtual void apply_optimizer(double lr, std::uint64_t t) = 0;
  // The row-sparse step's update of `grads`' rows to step, then their zeroing: on the host
  // (unless `skip`), or on a device space (its kernels read the step's skip flag at `skip`).
  virtual void update_rows(std::span<float> grads, bool skip, float rate, std::uint64_t t) = 0;
  virtual void update_rows_on_space(std::span<float> grads, const float* skip, float rate,
                                    std::uint64_t t) = 0;
  // The optimizer's `row_step_values` of the step into the words of a `detail::step_values`
  // (device spaces, `policy_facts::rows_from_memory`).
  virtual void write_row_values(std::uint64_t* values, float rate, std::uint64_t t) = 0;
  // The row-sparse step's plan on each kind of space (its work is detail::row_sparse_step's);
  // on a space the host cannot read, the exchange of the step's rows and dense segments between
  // ranks.
  void plan_row_step_on_host();
  void plan_row_step_on_space();
  std::uint64_t exchange_rows_on_space(const run_plan& p);
  // Whether segment i is row-sparse: the model says, or else its kind is embedding.
  bool is_row_sparse(std::size_t i) const;
  // Lays out a gradient in slots sized by the batch, where the row-sparse step can take
  // one (`train_options::compact_gradient`: one rank on a host space, one micro-batch a step, a
  // model that writes its gradient to slots, an optimizer that updates runs of rows); else none.
  void plan_gradient_slots();
  // Values of the gradient arena before its trailing floats: the layout's, or the slots'.
  std::size_t gradient_values() const noexcept {
    return m_in_slots ? m_slot_layout.total() : m_params.size();
  }
  // True when the optimizer asks for the row-sparse step (`optimizer_steps_rows`), on any space:
  // where the step cannot run, `plan_row_step` says so.
  bool wants_row_step() const;
  // Takes the row-sparse step when the optimizer asks for it, or refuses where it cannot run:
  // the rows are host memory, and the model must say which rows a step touched. A dense step
  // would change the optimizer's semantics (lazy Adam would move untouched rows), so there is
  // no silent fallback.
  void plan_row_step();
  // The row-sparse step's start: the arena is zero already but for the trailing floats.
  void clear_flags();
  // Finds the row-sparse segments the exchange may send as rows, or refuses `on` where it
  // cannot run: on a device space, or with a model that does not report its touched rows.
  void plan_sparse_exchange();
  // Adds the rows the last `loss_and_gradient` call touched to the step's touched sets.
  void collect_touched_rows();
  // The overlapped path's last collective: the trailing floats after the arena (its buckets are
  // reduced already); returns the bytes the ledger charges the step.
  std::uint64_t reduce_flags(std::uint64_t dense_bytes);
  void check_overlap_options() const;
  // Averages the gradient arena (the trailing floats included) over the ranks, the row-sparse
  // segments as touched rows when the sparse exchange is on; returns the bytes the ledger
  // charges the step.
  std::uint64_t reduce_gradients(std::uint64_t dense_bytes, fit_result& result);
  // Sets this rank's finite flag (the float after the arena) and its entry of the step log from
  // the step's loss and gradient. With `arena_checked` (the overlapped reduction checked every
  // bucket as it left) only the loss is left to check: on the host `arena_bad` is the buckets'
  // verdict; on a device their kernels have already set the flags.
  void check_finite(std::size_t step, bool arena_checked, bool arena_bad);
  // Host, row-sparse step: true when the step's touched rows or dense segments hold an infinity
  // or a NaN; the rows are left to a model that checked them as it wrote them
  // (`model_checks_row_gradient`) where they hold just what it wrote (one rank, one micro-batch).
  bool rows_nonfinite() const;
  // The records of (rank, step) pairs of the epoch `e`.
  std::vector<nonfinite_record> make_records(std::vector<std::pair<int, std::size_t>> at,
                                             const run_plan& p, const epoch_plan& e) const;
  // Every rank's non-finite steps of the epoch, as records. Collective.
  std::vector<nonfinite_record> gather_nonfinite(const std::vector<std::uint64_t>& mine,
                                                 const std::vector<std::uint64_t>& counts,
                                                 const run_plan& p, const epoch_plan& e);
  // Compares the replicas' checksums (one gather of one value); on a mismatch raises on every
  // rank, or repairs from rank 0 and records the event.
  void replica_check(std::size_t epoch, std::size_t step, std::size_t global_step,
                     fit_result& result);
  // The global-batch guard: logs the rate derived for this global batch (rule, reference,
  // warmup) and warns when the batch grew well past the reference with no scaling rule — the
  // usual way a data-parallel run silently trains at the small batch's rate.
  void report_learning_rate(double lr0) const;
  // Every rank's count of real slots in its shard (one gather) when `split` is uneven; empty
  // when every rank takes the same slots, where the shard's prefix of real samples gives a step's
  // weight. Collective; throws on every rank alike when a sampler puts padding before a real slot.
  std::vector<std::uint64_t> gather_real_slots(const shard& sh, const detail::batch_split& split);
  // `rank`'s shard of `epoch`, or of what is left of it after its first `start_pos` positions
  // (a resume on another world size).
  shard epoch_shard(std::size_t n, int rank, std::size_t epoch, std::size_t start_pos) const;
  // What a checkpoint records of this run's settings, and compares when resuming: the
  // trainer's options and shapes, the training data, and the caller's `run_config`.
  detail::run_setting_list checkpoint_config(const data::interactions& train,
                                             std::uint64_t train_digest) const;
  // Loads a checkpoint's parameters and optimizer state after checking that it belongs to this
  // run: the same settings (world size aside), shapes and a sampler that can re-shard.
  void restore(const checkpoint_state& ck,
               const std::vector<std::pair<std::string, std::string>>& now);
  // The optimizer state a continued run starts from (train_options::continues), checked to be
  // of this trainer's size.
  void start_state();
  // The optimizer's 1-based step count at 0-based `global_step` of this trainer: after the
  // steps a continued model took before it.
  std::uint64_t optimizer_step(std::size_t global_step) const noexcept {
    return m_options.continues.steps + static_cast<std::uint64_t>(global_step) + 1;
  }
  // Collective: adds up the epoch's loss and samples so far (`visited`: this rank's weight of
  // the slots this run visited), then rank 0 writes the checkpoint of the state after
  // `global_step` steps (`step_in_epoch` of them in `epoch`).
  void write_checkpoint_now(const std::vector<std::pair<std::string, std::string>>& config,
                            std::size_t epoch, std::size_t step_in_epoch, std::size_t global_step,
                            std::uint64_t before_resume, double visited, const char* note,
                            fit_result& result);
  // The rows `rank` holds: its sampler entry for rank-local data, else the whole set (`n`).
  std::size_t rows_of(int rank, std::size_t n) const;
  // Every rank must train the same thing: compare what each rank believes before any step.
  // Ranks holding their own rows cannot compare data; they compare the sampler's row counts,
  // and each checks that it holds the rows the sampler says it does.
  void check_agreement(const data::interactions& train, const data::interactions& test,
                       std::uint64_t train_digest);
  void write_log(std::size_t epoch, std::size_t step, std::size_t global_step, double loss,
                 double samples, double lr, double seconds);
  // The gradient arena of `count` floats: memory the reducer lends, when it offers some it can
  // reduce without copies (mpi_allreduce's shared-memory window per host) and the model's
  // space is the host's; otherwise this trainer's own buffer. Called once, from the
  // constructor, after m_reducer and m_space are built and before m_grads_storage is used.
  std::span<float> gradient_arena(std::size_t count) {
    if constexpr (space_type::host_accessible && reducer_lends_gradient_arena<Reducer>) {
      const std::span<float> lent = m_reducer.shared_gradient_arena(count);
      if (lent.size() == count) return lent;
    }
    m_grads_storage = buffer<float, space_type>(count, m_space);
    return m_grads_storage.span();
  }

  Model m_model;
  Sampler m_sampler;
  Reducer m_reducer;
  train_options m_options;
  detail::policy_facts m_facts;  // what the optimizer and the schedule offer
  space_type m_space;
  buffer<float, space_type> m_params;
  // A gradient in slots (`plan_gradient_slots`) and its layout, or the layout's arena.
  bool m_in_slots = false;
  parameter_layout m_slot_layout;
  // The gradient arena: gradient_values() gradients, then this rank's finite flag and stop
  // request. It is m_grads_storage, or memory the reducer lends (`shared_gradient_arena`).
  buffer<float, space_type> m_grads_storage;
  std::span<float> m_grads;
  buffer<float, space_type> m_state;
  buffer<float, space_type> m_step_loss;     // this rank's loss of the step in progress
  detail::finite_guard<space_type> m_guard;  // the finite flags of the steps, the device snapshot
  buffer<double, space_type> m_sums;         // loss and weight of the epoch's applied steps
  std::size_t m_global_step = 0;
  // Sparse exchange (host spaces; empty when off or unavailable): the row-sparse segments and
  // the rows each step touched in them.
  detail::sparse_exchange m_exchange;
  // The row-sparse step (`optimizer_steps_rows`): taken when the optimizer asks for it.
  detail::row_sparse_step<space_type> m_rows;
  // The gradient noise scale: the run's estimate, and this step's small-batch squared norm.
  std::optional<ranking_lists_on<space_type>> m_ranking_lists;  // train_options::ranking's
  detail::noise_scale_tracker m_noise;
  detail::noise_step m_noise_step;
  double m_noise_small = 0;
  // The overlapped reduction's step: whether a bucket held a non-finite value (host), and this
  // step's entry of the local finite flags (device).
  bool m_bucket_nonfinite = false;
  float* m_step_local_flag = nullptr;
  // Device spaces: what changes from step to step, where the step's kernels read it (the words
  // of a `detail::step_values`, and the host's copy they are written from); and the steady
  // step's record on a space that replays it.
  buffer<std::uint64_t, space_type> m_values{space_type::host_accessible ? 0 : m_facts.values_words,
                                             m_space};
  std::vector<std::uint64_t> m_values_on_host;
  detail::step_replay<space_type> m_replay;
};

}  // namespace tutti

// The trainer's member functions, one header per concern: before the first step, an epoch,
// a step, the noise probe, the replicas and checkpoints; and `tutti::trainer`, the layer that
// holds the schedule and the optimizer.
#include <tutti/trainer/checkpointing.hpp>
#include <tutti/trainer/epoch.hpp>
#include <tutti/trainer/noise_probe.hpp>
#include <tutti/trainer/policy_layer.hpp>
#include <tutti/trainer/replayed_step.hpp>
#include <tutti/trainer/setup.hpp>
#include <tutti/trainer/step.hpp>
