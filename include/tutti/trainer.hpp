// SPDX-License-Identifier: Apache-2.0
/// @file trainer.hpp
/// @brief `tutti::trainer`: one rank of a data-parallel run, composed from five policies.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/checkpoint.hpp>
#include <tutti/concepts.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/batch_split.hpp>
#include <tutti/detail/bucket_pipeline.hpp>
#include <tutti/detail/finite.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/noise_scale.hpp>
#include <tutti/detail/row_step.hpp>
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
#include <tutti/trainer/epoch_summary.hpp>
#include <tutti/trainer/errors.hpp>
#include <tutti/trainer/evaluation.hpp>
#include <tutti/trainer/finite_guard.hpp>
#include <tutti/trainer/log_records.hpp>
#include <tutti/trainer/options.hpp>
#include <tutti/trainer/run_settings.hpp>
#include <tutti/trainer/sparse_exchange.hpp>
#include <tutti/trainer/step_kernels.hpp>

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

namespace detail {

/// Floats of optimizer state for `layout`: by the layout where the optimizer sizes it so.
template <class O>
std::size_t optimizer_state_floats(const O& o, const parameter_layout& layout) {
  if constexpr (optimizer_sizes_state_by_layout<O>)
    return o.state_size(layout);
  else
    return o.state_size(layout.total());
}

}  // namespace detail

/// One rank of a data-parallel training run, composed at compile time from five policies.
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
/// @tparam Schedule a `tutti::lr_schedule`
/// @tparam Optimizer a `tutti::optimizer` for the model's space
template <class Model, class Sampler, class Reducer, class Schedule = constant,
          class Optimizer = sgd>
class trainer {
  static_assert(check_model<Model>());
  static_assert(check_shard_sampler<Sampler>());
  static_assert(check_gradient_reducer<Reducer>());
  static_assert(check_lr_schedule<Schedule>());

 public:
  using model_type = Model;
  using space_type = typename Model::space_type;
  using value_type = typename Model::value_type;
  static_assert(check_optimizer<Optimizer, space_type>());
  static_assert(std::is_same_v<value_type, float> || detail::model_value_type_mismatch<Model>,
                "tutti::trainer: trains float models (value_type = double is meant for gradient "
                "checks); see docs/concepts.md#model");
  static_assert(Reducer::template accepts<space_type>,
                "tutti::trainer: this gradient reducer cannot reduce memory of the model's space "
                "(see docs/concepts.md#gradient-reducer)");

  /// Builds a trainer for one rank; allocates and initialises the arenas (rank 0's parameters
  /// are broadcast at the start of `fit`).
  trainer(Model model, Sampler sampler, Reducer reducer, Schedule schedule, Optimizer optimizer,
          train_options options)
      : m_model(std::move(model)),
        m_sampler(std::move(sampler)),
        m_reducer(std::move(reducer)),
        m_schedule(std::move(schedule)),
        m_optimizer(std::move(optimizer)),
        m_options(std::move(options)),
        m_space(m_model.space()),
        m_params(m_model.layout().total(), m_space),
        m_grads(gradient_arena(m_model.layout().total() + trailing_floats)),
        m_state(detail::optimizer_state_floats(m_optimizer, m_model.layout()), m_space),
        m_step_loss(1, m_space),
        m_guard(m_options.nonfinite, m_space),
        m_sums(2, m_space) {
    detail::check_train_options(m_options, m_reducer.world_size());
    plan_sparse_exchange();
    plan_row_step();
    check_overlap_options();
    fill(m_space, m_params.span(), 0.f);
    m_model.initialize(m_params.span(), m_options.seed);
    fill(m_space, m_grads, 0.f);
    if (!m_state.empty()) fill(m_space, m_state.span(), 0.f);
  }

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
    if (resume && !m_state.empty()) m_reducer.broadcast(m_state.span(), 0);

    const run_plan plan = plan_run(train.size(), config);
    step_buffers buf = make_buffers(train, plan);
    m_guard.begin_fit(plan.steps_per_epoch, m_params.size(), m_state.size());
    fit_result result = begin_result(plan);
    ledger book;
    step_clock timer(m_space);
    overlap pipeline;
    if (m_options.overlap_reduce) start_overlap(pipeline, plan.guarded, result);
    rank_means run(static_cast<std::size_t>(m_reducer.world_size()));
    std::size_t global_step =
        resume ? static_cast<std::size_t>(resume->global_step) : m_global_step;
    trace_phases(timer, fit_start, global_step);

    const std::size_t start_epoch = resume ? static_cast<std::size_t>(resume->epoch) : 0;
    for (std::size_t epoch = start_epoch; epoch < m_options.epochs; ++epoch) {
      const auto epoch_start = clock::now();
      book.begin_epoch();
      timer.start();  // the shard of the epoch is charged to the first step's data
      const epoch_plan ep =
          begin_epoch(plan, buf, epoch, epoch == start_epoch ? resume : nullptr, global_step);
      step_log log;
      for (std::size_t step = ep.first_step; step < ep.last_step; ++step, ++global_step) {
        const step_slots s = slots_of(plan, ep, step);
        timer.begin_step(epoch, step);
        announce_step(plan, ep, s, global_step);
        m_noise_step = plan_noise_step(global_step, s.global_real, plan.split, step - ep.step_base,
                                       s.count, plan.micro_batch);
        m_noise_small = 0;
        begin_gradient(pipeline, m_guard.local_entry(step));
        timer.mark(account::data);
        compute_gradient(plan, buf, s, pipeline, timer);
        finish_gradient(plan, step, pipeline, timer);
        const reduced r = reduce_step(plan, pipeline, timer, result);
        const bool skip = commit_step(step, s.weight, timer);
        const double lr = m_schedule.lr(global_step, plan.total_steps, plan.lr0);
        if (skip) stop_if_nonfinite(plan, ep, step);
        update(plan, step, skip, lr, global_step, timer);
        log_step(plan, ep, s, global_step, lr, log, fit_start, timer);
        end_step(plan, ep, s, global_step, r.stop, timer, result);
        timer.end_step(r.bytes, book);
      }
      timer.flush(book);
      result.epochs.push_back(
          end_epoch(plan, ep, book, seconds_since(epoch_start), epoch_start, test, run, result));
      if (reached_target(result, fit_start)) break;
    }
    m_global_step = global_step;
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
    const bool mine = rank_local_sampler<Sampler> || m_reducer.rank() == 0;
    return detail::evaluate_ranking_across_ranks(m_model, std::span<const float>(m_params.span()),
                                                 m_reducer, mine ? &candidates : nullptr, k);
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
  /// The reducer handle.
  Reducer& reducer() noexcept { return m_reducer; }
  /// The run options.
  const train_options& options() const noexcept { return m_options; }

 private:
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
  };

  // fit's memory on the space: the training set, this rank's slots of the epoch and their
  // weights, and one micro-batch.
  struct step_buffers {
    buffer<std::int32_t, space_type> users, items;
    buffer<float, space_type> labels;
    buffer<std::uint64_t, space_type> slots;
    buffer<float, space_type> slot_weights;
    buffer<std::int32_t, space_type> b_users, b_items;
    buffer<float, space_type> b_labels, b_weights;
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

  // Every rank's mean step, work and wait seconds, summed over the epochs.
  struct rank_means {
    explicit rank_means(std::size_t world) : step(world), work(world), wait(world) {}
    std::vector<double> step, work, wait;
  };

  // The split of the global batch, the steps, the rate; collective (uneven splits gather
  // every rank's real slots).
  run_plan plan_run(std::size_t n, const detail::run_setting_list& config) {
    const int world = m_reducer.world_size();
    run_plan p;
    p.split = detail::batch_split{m_options.batch, static_cast<std::size_t>(world)};
    p.n = n;
    p.config = &config;
    // Slots per rank are the same in every epoch, so the step count is known up front. Every
    // rank's `real_prefix` spans the longest shard; a rank whose shard is shorter (tail policy
    // `none`) joins the remaining steps' reductions with nothing to add.
    {
      const shard first = m_sampler.shard(n, world, m_reducer.rank(), m_options.seed, 0);
      p.slots = first.real_prefix.size() - 1;
      p.real_counts = gather_real_slots(first, p.split);
    }
    TUTTI_EXPECTS(p.slots > 0, "tutti::trainer::fit",
                  "each of " + std::to_string(world) + " ranks gets 0 of " + std::to_string(n) +
                      " samples; expected fewer ranks or the pad tail policy");
    const std::size_t local_batch = p.split.largest();
    p.steps_per_epoch = p.split.even() ? (p.slots + local_batch - 1) / local_batch
                                       : p.split.steps_to_cover(p.real_counts);
    p.total_steps = p.steps_per_epoch * m_options.epochs;
    p.lr0 =
        scaled_lr(m_options.base_lr, m_options.batch, m_options.reference_batch, m_options.scaling);
    if (m_reducer.rank() == 0 && !m_options.resume) report_learning_rate(p.lr0);
    p.guarded = m_options.nonfinite != nonfinite_policy::off;
    p.micro_batch = (local_batch + m_options.accumulation - 1) / m_options.accumulation;
    p.wire_bytes = dense_wire_bytes(m_grads.size());
    return p;
  }

  step_buffers make_buffers(const data::interactions& train, const run_plan& p) const {
    const std::size_t mb = p.micro_batch;
    return {make_buffer(m_space, std::span<const std::int32_t>(train.users)),
            make_buffer(m_space, std::span<const std::int32_t>(train.items)),
            make_buffer(m_space, std::span<const float>(train.labels)),
            buffer<std::uint64_t, space_type>(p.slots, m_space),
            buffer<float, space_type>(p.slots, m_space),
            buffer<std::int32_t, space_type>(mb, m_space),
            buffer<std::int32_t, space_type>(mb, m_space),
            buffer<float, space_type>(mb, m_space),
            buffer<float, space_type>(mb, m_space)};
  }

  fit_result begin_result(const run_plan& p) {
    fit_result result;
    m_exchange.begin_fit();  // sparse_exchange = measured: every fit measures anew
    m_noise = detail::noise_scale_tracker(m_options.noise_scale_decay);
    result.lr = p.lr0;
    result.global_batch = m_options.batch;
    result.world_size = m_reducer.world_size();
    result.param_count = m_model.layout().parameter_count();
    result.arena_floats = m_params.size();
    result.optimizer_state_floats = m_state.size();
    result.bytes_reduced_per_step = p.wire_bytes;
    result.dense_bytes_per_step = p.wire_bytes;
    if (const checkpoint_state* resume = m_options.resume) {
      const bool complete =
          resume->epoch + 1 >= m_options.epochs && resume->step_in_epoch >= p.steps_per_epoch;
      TUTTI_EXPECTS(resume->epoch < m_options.epochs &&
                        resume->step_in_epoch <= p.steps_per_epoch && !complete,
                    "tutti::trainer::fit",
                    "the checkpoint is at epoch " + std::to_string(resume->epoch) + ", step " +
                        std::to_string(resume->step_in_epoch) + "; this run has " +
                        std::to_string(m_options.epochs) + " epochs of " +
                        std::to_string(p.steps_per_epoch) +
                        " steps (is the run already complete?)");
      result.resumed_from_step = static_cast<std::size_t>(resume->global_step);
    }
    return result;
  }

  // The overlapped reduction's buckets and communication thread (joined when fit returns).
  // Each bucket is checked for non-finite values as it leaves, while it holds this rank's own
  // values: on the host into `m_bucket_nonfinite`, on a device into the step's flags by a
  // kernel.
  void start_overlap(overlap& pipeline, bool guarded, fit_result& result) {
    std::function<void(std::size_t, std::size_t)> check;
    if constexpr (space_type::host_accessible) {
      // The noise scale's small-batch norm is taken here too, while the bucket is this rank's.
      check = [this, guarded](std::size_t begin, std::size_t end) {
        if (guarded && !m_bucket_nonfinite)
          m_bucket_nonfinite = detail::any_nonfinite(m_space, m_grads.data() + begin, end - begin);
        if (m_noise_step.active() && !m_noise_step.first_micro)
          m_noise_small += detail::squared_norm(m_space, m_grads.data() + begin, end - begin);
      };
    } else if (guarded || m_options.noise_scale_every > 0) {
      check = [this, guarded](std::size_t begin, std::size_t end) {
        if (guarded)
          parallel_for(
              m_space, end - begin,
              detail::finite_check_fn{m_grads.data() + begin, end - begin, m_step_loss.data(),
                                      m_grads.data() + m_params.size(), m_step_local_flag});
        if (m_noise_step.active() && !m_noise_step.first_micro)  // waits, on measured steps
          m_noise_small += detail::squared_norm(m_space, m_grads.data() + begin, end - begin);
      };
    }
    pipeline.emplace(m_reducer, m_grads.data(), m_model.layout(),
                     m_options.bucket_bytes / sizeof(float), std::move(check),
                     m_options.comm_thread_nice, m_options.last_bucket_bytes / sizeof(float));
    if (const auto priority = pipeline->priority()) {
      result.comm_thread_nice = priority->nice;
      if (m_options.comm_thread_nice && !priority->applied && m_reducer.rank() == 0 &&
          m_options.on_warning)
        m_options.on_warning("the overlapped reduction's communication thread runs at nice " +
                             std::to_string(priority->nice) + ", not the " +
                             std::to_string(*m_options.comm_thread_nice) + " asked for (" +
                             priority->why +
                             "); it competes with backward for cores on equal terms, so more of "
                             "the reduction may be exposed after backward");
    }
  }

  // The timeline (`on_phase`): every interval the step's clock marks, as it is marked.
  void trace_phases(step_clock& timer, clock::time_point fit_start,
                    const std::size_t& global_step) {
    if constexpr (requires { timer.trace({}, fit_start); }) {
      if (m_options.on_phase)
        timer.trace(
            [this, rank = m_reducer.rank(), &global_step](const auto& s) {
              m_options.on_phase(
                  phase_event{rank, s.epoch, s.step, global_step, s.phase, s.start, s.seconds});
            },
            fit_start);
    }
  }

  // The epoch's shard, its slots copied to the space, and the epoch's sums reset (a resumed
  // epoch starts from the checkpoint's). A resumed epoch starts at the checkpoint's step. On the
  // world size that wrote it the shards are the same and the first steps are skipped; on
  // another, the positions not yet consumed, [s·B, n), are dealt anew (`shard_from`), so each
  // sample still counts once. Collective when the split is uneven.
  epoch_plan begin_epoch(const run_plan& p, step_buffers& buf, std::size_t epoch,
                         const checkpoint_state* resumed, std::size_t global_step) {
    const int world = m_reducer.world_size();
    epoch_plan e;
    e.epoch = epoch;
    e.resumed = resumed;
    e.first_step = resumed ? static_cast<std::size_t>(resumed->step_in_epoch) : 0;
    e.start_pos =
        resumed && resumed->world_size != world ? std::min(p.n, e.first_step * m_options.batch) : 0;
    // Steps are counted from the first step of the shard: the epoch's first, or the resumed
    // step when its positions were dealt anew.
    e.step_base = e.start_pos > 0 ? e.first_step : 0;
    e.epoch_first_step = global_step - e.first_step;
    e.sh = epoch_shard(p.n, m_reducer.rank(), epoch, e.start_pos);
    check_shard(p, e);
    e.epoch_slots = e.sh.real_prefix.size() - 1;
    e.real = p.real_counts;
    if (!p.split.even() && (epoch > 0 || e.start_pos > 0))
      e.real = gather_real_slots(e.sh, p.split);
    TUTTI_EXPECTS(e.start_pos > 0 || e.real == p.real_counts, "tutti::trainer::fit",
                  "the sampler's ranks hold other counts of real slots in epoch " +
                      std::to_string(epoch) +
                      " than in epoch 0; expected the same in every "
                      "epoch, so every epoch takes the same steps");
    const std::size_t local_batch = p.split.largest();
    e.last_step = e.start_pos == 0 ? p.steps_per_epoch
                  : p.split.even() ? e.first_step + (e.epoch_slots + local_batch - 1) / local_batch
                                   : e.first_step + p.split.steps_to_cover(e.real);
    load_shard(buf, e.sh);
    e.before_resume = resumed ? resumed->samples_in_epoch : 0;
    if (resumed && m_reducer.rank() == 0) {
      // The epoch's loss so far travels with rank 0 into the epoch's sums.
      const double sums[2] = {resumed->epoch_loss_sum, resumed->epoch_weight_sum};
      copy_from_host(m_space, std::span<const double>(sums), m_sums.span());
    }
    for (std::size_t i = slot(p, e, m_reducer.rank(), e.first_step); i < e.sh.size(); ++i)
      e.local_weight += e.sh.weights[i];
    return e;
  }

  void check_shard(const run_plan& p, const epoch_plan& e) const {
    const shard& sh = e.sh;
    if (e.start_pos == 0)
      TUTTI_EXPECTS(
          sh.size() <= p.slots && sh.real_prefix.size() == p.slots + 1, "tutti::trainer::fit",
          "the sampler returned a shard of " + std::to_string(sh.size()) + " slots over " +
              std::to_string(sh.real_prefix.size()) + " prefix entries in epoch " +
              std::to_string(e.epoch) + "; expected at most " + std::to_string(p.slots) +
              " slots over " + std::to_string(p.slots + 1) + " entries in every epoch");
    TUTTI_EXPECTS(
        !sh.real_prefix.empty() && sh.size() < sh.real_prefix.size(), "tutti::trainer::fit",
        "the sampler's real_prefix has " + std::to_string(sh.real_prefix.size()) + " entries for " +
            std::to_string(sh.size()) + " slots; expected at least slots + 1");
  }

  // The shard's slots and weights into the space; the epoch's flags, loss and sums zeroed.
  void load_shard(step_buffers& buf, const shard& sh) {
    if (sh.first == 0) {
      copy_from_host(m_space, std::span<const std::uint64_t>(sh.indices),
                     buf.slots.span().first(sh.size()));
    } else {
      // Rank-local rows: training-set positions become positions in this rank's rows.
      std::vector<std::uint64_t> local(sh.indices);
      for (auto& i : local) i -= sh.first;
      copy_from_host(m_space, std::span<const std::uint64_t>(local),
                     buf.slots.span().first(sh.size()));
    }
    copy_from_host(m_space, std::span<const float>(sh.weights),
                   buf.slot_weights.span().first(sh.size()));
    m_guard.begin_epoch();
    fill(m_space, m_step_loss.span(), 0.f);
    fill(m_space, m_sums.span(), 0.0);
  }

  // The first slot of `rank`'s part of step `s` of the epoch's shard.
  static std::size_t slot(const run_plan& p, const epoch_plan& e, int rank, std::size_t s) {
    return p.split.first(static_cast<std::size_t>(rank), s - e.step_base);
  }

  step_slots slots_of(const run_plan& p, const epoch_plan& e, std::size_t step) const {
    const int rank = m_reducer.rank();
    step_slots s;
    s.step = step;
    s.slot_begin = slot(p, e, rank, step);
    s.slot_end = std::min(e.epoch_slots, slot(p, e, rank, step + 1));
    s.begin = std::min(e.sh.size(), s.slot_begin);
    s.end = std::min(e.sh.size(), s.slot_end);
    s.count = s.end - s.begin;
    s.global_real = p.split.even() ? e.sh.global_real(s.slot_begin, s.slot_end)
                                   : p.split.global_real(e.real, step - e.step_base);
    for (std::size_t i = s.begin; i < s.end; ++i) s.weight += e.sh.weights[i];
    return s;
  }

  // Tells the reducer where the step is (for the message of a collective's timeout) and the
  // caller which samples it takes.
  void announce_step(const run_plan& p, const epoch_plan& e, const step_slots& s,
                     std::size_t global_step) {
    if constexpr (reducer_tracks_position<Reducer>) m_reducer.set_position(e.epoch, s.step);
    if (m_options.on_batch)
      m_options.on_batch(step_progress{m_reducer.rank(), e.epoch, s.step, p.steps_per_epoch,
                                       global_step, p.total_steps, 0.0},
                         std::span<const std::uint64_t>(e.sh.indices).subspan(s.begin, s.count),
                         std::span<const float>(e.sh.weights).subspan(s.begin, s.count));
  }

  // A zero gradient arena, no touched rows, and the overlapped reduction's buckets ready.
  void begin_gradient(overlap& pipeline, float* step_local_flag) {
    if (m_row_step)  // the arena is zero but for the flags (see detail::row_step)
      clear_flags();
    else
      fill(m_space, m_grads, 0.f);
    m_exchange.begin_step();
    if (pipeline) {
      pipeline->begin_step();
      m_bucket_nonfinite = false;
      m_step_local_flag = step_local_flag;
    }
  }

  // This rank's gradient of the step. Each rank scales by W / (real samples in the global
  // step), so the mean over ranks is the gradient of the mean loss over the global batch,
  // whatever the padding. With accumulation the local batch runs as micro-batches whose
  // gradients add up in the arena (models add, never overwrite), and the step still reduces
  // once.
  void compute_gradient(const run_plan& p, step_buffers& buf, const step_slots& s,
                        overlap& pipeline, step_clock& timer) {
    const float scale =
        s.global_real > 0
            ? static_cast<float>(double(m_reducer.world_size()) / double(s.global_real))
            : 0.f;
    for (std::size_t mb = s.begin; mb < s.end; mb += p.micro_batch) {
      const std::size_t mb_count = std::min(p.micro_batch, s.end - mb);
      parallel_for(m_space, mb_count,
                   detail::gather_batch_fn<float>{
                       buf.slots.data() + mb, buf.slot_weights.data() + mb, buf.users.data(),
                       buf.items.data(), buf.labels.data(), buf.b_users.data(), buf.b_items.data(),
                       buf.b_labels.data(), buf.b_weights.data()});
      batch_view batch{{buf.b_users.data(), mb_count},
                       {buf.b_items.data(), mb_count},
                       {buf.b_labels.data(), mb_count},
                       {buf.b_weights.data(), mb_count}};
      timer.mark(account::data);
      // Only the last micro-batch's values are final for the overlapped reduction.
      if (s.global_real > 0)
        backward(batch, scale, pipeline && mb + p.micro_batch >= s.end, pipeline);
      timer.mark(account::compute);
      if (s.global_real > 0 && !m_exchange.empty()) {
        // The rows of every micro-batch: the step's touched set is their union.
        collect_touched_rows();
        timer.mark(account::reduce);
      }
      if (m_noise_step.first_micro && mb == s.begin) {  // one rank: the smaller batch
        if constexpr (space_type::host_accessible)
          if (m_row_step) m_rows.select(m_exchange.touched());
        m_noise_small = arena_squared_norm();
        timer.mark(account::guard);
      }
    }
  }

  // The model's loss and gradient of one micro-batch; with `report`, it tells the overlapped
  // reduction which values are final as backward makes them so.
  void backward(const batch_view& batch, float scale, bool report, overlap& pipeline) {
    const auto params = std::span<const float>(m_params.span());
    const auto grads = m_grads.first(m_params.size());
    if constexpr (model_reports_gradient_ready<Model>) {
      if (report) {
        auto ready = [&pipeline](std::size_t offset, std::size_t values) {
          pipeline->ready(offset, values);
        };
        m_model.loss_and_gradient(params, batch, grads, scale, m_step_loss.data(),
                                  gradient_ready(ready));
        return;
      }
    }
    (void)report;
    (void)pipeline;
    m_model.loss_and_gradient(params, batch, grads, scale, m_step_loss.data());
  }

  // After backward: the wait for the buckets still in flight, the rows to step, the noise
  // scale's small-batch norm and the finite check (each bucket was checked as it left).
  void finish_gradient(const run_plan& p, std::size_t step, overlap& pipeline, step_clock& timer) {
    if (pipeline) {
      pipeline->finish();
      timer.mark(account::reduce);
      timer.reduce_in_background(pipeline->busy_seconds());
    }
    if (m_row_step) m_rows.select(m_exchange.touched());
    record_small_noise(pipeline.has_value());
    if (p.guarded) check_finite(step, pipeline.has_value(), m_bucket_nonfinite);
    timer.mark(account::guard);
  }

  // The step's collectives: the measured wait, this rank's stop request into its trailing
  // float, the reduction (the flags alone after the overlapped one), and on the row-sparse
  // step the union of the rows every rank touched.
  reduced reduce_step(const run_plan& p, overlap& pipeline, step_clock& timer, fit_result& result) {
    const std::size_t arena = m_params.size();
    if (m_options.measure_wait) {
      double arrive[1] = {0.0};
      m_reducer.all_reduce_max(std::span<double>(arrive));
      timer.mark(account::wait);
    }
    if (m_options.stop && m_options.stop->load()) {
      if constexpr (space_type::host_accessible)
        m_grads.data()[arena + 1] = 1.f;
      else
        fill(m_space, m_grads.subspan(arena + 1, 1), 1.f);
    }
    reduced r;
    r.bytes = pipeline ? reduce_flags(p.wire_bytes) : reduce_gradients(p.wire_bytes, result);
    if (m_row_step && m_reducer.world_size() > 1) {
      // The rows any rank touched: what the optimizer updates and the arena zeroes after.
      r.bytes += m_rows.merge_ranks(m_reducer, m_exchange.touched());
      m_rows.select(m_exchange.touched());
    }
    timer.mark(account::reduce);
    if constexpr (space_type::host_accessible) {
      r.stop = m_grads.data()[arena + 1] != 0.f;
    } else if (m_options.stop) {
      float flag = 0.f;
      m_space.copy_to_host(&flag, m_grads.data() + arena + 1, sizeof flag);
      r.stop = flag != 0.f;
    }
    if constexpr (reducer_reports_wait<Reducer>)
      timer.wait_within_reduce(m_reducer.last_wait_seconds());
    return r;
  }

  // The guard's verdict on the reduced flag: logged, and the step's loss added to the epoch's
  // sums when it is applied. On the host a skipped step is known here; a device snapshots the
  // parameters and state, for `update` to revert. Returns whether the host skips the step.
  bool commit_step(std::size_t step, double step_weight, step_clock& timer) {
    const bool skip = m_guard.commit(step, m_grads.data() + m_params.size(), m_step_loss.data(),
                                     m_sums.data(), step_weight);
    if constexpr (!space_type::host_accessible) m_guard.protect(m_params.span(), m_state.span());
    if (!skip) add_noise_measurement();  // a device waits for the flags, on measured steps only
    timer.mark(account::guard);
    return skip;
  }

  // The stop policy on the host, at a skipped step: every rank stops here; one gather tells
  // them which ranks were non-finite.
  void stop_if_nonfinite(const run_plan& p, const epoch_plan& e, std::size_t step) {
    if constexpr (space_type::host_accessible) {
      if (m_options.nonfinite != nonfinite_policy::stop) return;
      const int world = m_reducer.world_size();
      const std::uint64_t mine = m_guard.local_bad(step) ? 1 : 0;
      std::vector<std::uint64_t> culprits(static_cast<std::size_t>(world));
      m_reducer.all_gather(std::span<const std::uint64_t>(&mine, 1),
                           std::span<std::uint64_t>(culprits));
      std::vector<std::pair<int, std::size_t>> at;
      for (int r = 0; r < world; ++r)
        if (culprits[static_cast<std::size_t>(r)] != 0) at.emplace_back(r, step);
      throw nonfinite_error(make_records(at, p, e));
    } else {
      (void)p, (void)e, (void)step;
    }
  }

  // The optimizer's step (unless skipped), then the row-sparse step's zeroing, or on a device
  // the guard's revert of a skipped step.
  void update(const run_plan& p, std::size_t step, bool skip, double lr, std::size_t global_step,
              step_clock& timer) {
    if (!skip) apply_optimizer(lr, global_step + 1);
    if constexpr (space_type::host_accessible)  // the row-sparse step runs on the host only
      if (m_row_step) m_rows.zero(m_space, m_grads.data());
    timer.mark(account::optimizer);
    if (!space_type::host_accessible && p.guarded) {
      m_guard.revert(step, m_params.span(), m_state.span());
      timer.mark(account::guard);
    }
  }

  // The JSON-lines record (every `log_every` steps and at the epoch's end) and `on_step`.
  void log_step(const run_plan& p, const epoch_plan& e, const step_slots& s,
                std::size_t global_step, double lr, step_log& log, clock::time_point fit_start,
                step_clock& timer) {
    log.since_weight += s.weight;
    const bool last = s.step + 1 == e.last_step;
    if (m_options.log &&
        (last || (m_options.log_every > 0 && (s.step + 1) % m_options.log_every == 0))) {
      // Reading the loss is the one host read of a step; it happens only when logging.
      double sums[2] = {0.0, 0.0};
      m_space.copy_to_host(sums, m_sums.data(), sizeof sums);
      const double applied = sums[1] - log.weight;
      const double interval_loss = applied > 0 ? (sums[0] - log.loss) / applied : 0.0;
      write_log(e.epoch + 1, s.step + 1, global_step + 1, interval_loss, log.since_weight, lr,
                seconds_since(fit_start));
      log.loss = sums[0];
      log.weight = sums[1];
      log.since_weight = 0;
    }
    if (m_options.on_step)
      m_options.on_step(step_progress{m_reducer.rank(), e.epoch, s.step, p.steps_per_epoch,
                                      global_step, p.total_steps, lr});
    timer.mark(account::other);
  }

  // The step's whole-model work when due: the replica check, the checkpoint; and the stop a
  // rank asked for.
  void end_step(const run_plan& p, const epoch_plan& e, const step_slots& s,
                std::size_t global_step, bool stop_now, step_clock& timer, fit_result& result) {
    const bool periodic =
        m_options.replica_check_every > 0 && (global_step + 1) % m_options.replica_check_every == 0;
    const bool final_step = s.step + 1 == e.last_step && e.epoch + 1 == m_options.epochs;
    if (m_reducer.world_size() > 1 && (periodic || final_step)) {
      replica_check(e.epoch, s.step, global_step, result);
      timer.mark(account::guard);
    }
    const bool checkpoint_due =
        m_options.checkpoint_every > 0 && (global_step + 1) % m_options.checkpoint_every == 0;
    if (!m_options.checkpoint_dir.empty() && (checkpoint_due || stop_now)) {
      write_checkpoint_now(*p.config, e.epoch, s.step + 1, global_step + 1, e.before_resume,
                           std::span<const float>(e.sh.weights).first(s.end),
                           slot(p, e, m_reducer.rank(), e.first_step),
                           stop_now ? "stop requested" : "periodic", result);
      timer.mark(account::other);
    }
    if (!stop_now) return;
    const std::string where =
        result.last_checkpoint.empty()
            ? std::string(m_options.checkpoint_dir.empty() ? "no checkpoint directory was set"
                                                           : "checkpoint written by rank 0")
            : "checkpoint " + result.last_checkpoint;
    throw interrupted_error(global_step + 1, result.last_checkpoint,
                            "tutti::trainer::fit(): stopped on request after global step " +
                                std::to_string(global_step + 1) + " (epoch " +
                                std::to_string(e.epoch + 1) + ", step " +
                                std::to_string(s.step + 1) + "); " + where);
  }

  // The epoch's record: the skipped steps and their records, every rank's samples and times
  // (one gather), the loss (one reduction), the test metric.
  epoch_record end_epoch(const run_plan& p, const epoch_plan& e, ledger& book, double step_seconds,
                         clock::time_point epoch_start, const data::interactions& test,
                         rank_means& run, fit_result& result) {
    const detail::epoch_skips skips = m_guard.skips();
    const step_account& totals = book.epoch_totals();
    const detail::epoch_ranks ranks = detail::gather_epoch_ranks(
        m_reducer, e.local_weight, totals, book.epoch_steps(), skips.mine.size());
    for (std::size_t r = 0; r < run.step.size(); ++r) {
      run.step[r] += ranks.step_mean[r];
      run.work[r] += ranks.work_mean[r];
      run.wait[r] += ranks.wait_mean[r];
    }
    if (skips.count > 0) {
      auto records = gather_nonfinite(skips.mine, ranks.bad_counts, p, e);
      if (m_options.nonfinite == nonfinite_policy::stop) {
        // Only a device space gets here: its steps after the first bad one were skipped too.
        std::erase_if(records, [&](const nonfinite_record& r) { return r.step != skips.first; });
        throw nonfinite_error(std::move(records));
      }
      for (auto& r : records) result.nonfinite.push_back(std::move(r));
    }
    double applied[2] = {0.0, 0.0};
    m_space.copy_to_host(applied, m_sums.data(), sizeof applied);
    double sums[3] = {applied[0], applied[1], e.local_weight};
    m_reducer.all_reduce_sum(std::span<double>(sums));
    sums[2] += double(e.before_resume);

    epoch_record rec;
    rec.epoch = e.epoch + 1;
    rec.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    rec.samples_per_rank = ranks.samples;
    rec.samples_before_resume = e.before_resume;
    rec.weighted_samples = sums[2];
    rec.steps = e.last_step - e.first_step;
    rec.skipped_steps = skips.count;
    rec.step_seconds = step_seconds;
    rec.ranks = make_rank_table(ranks.step_mean, ranks.work_mean, ranks.wait_mean,
                                m_options.slow_rank_threshold);
    if (m_options.evaluate_each_epoch || m_options.target || e.epoch + 1 == m_options.epochs) {
      rec.eval = evaluate(test);
      if (m_options.ranking)
        rec.ranking = evaluate_ranking(*m_options.ranking, m_options.ranking_k);
    }
    rec.seconds = seconds_since(epoch_start);
    rec.samples_per_second = rec.seconds > 0 ? rec.weighted_samples / rec.seconds : 0.0;
    rec.phases = to_phases(totals);
    rec.noise_scale = m_noise.estimate();
    add_phases(result.phases, rec.phases);
    result.skipped_steps += skips.count;
    if (m_options.on_epoch) m_options.on_epoch(m_reducer.rank(), rec);
    return rec;
  }

  // The run's totals: steps, noise scale, final metric, the ledger's summary and bytes, every
  // rank's mean times, and the replicas' checksum.
  void finish_result(const run_plan& p, ledger& book, rank_means& run, fit_result& result) {
    result.steps = p.total_steps;
    result.noise_scale = m_noise.estimate();
    result.noise_scale_why = noise_scale_why(p.total_steps);
    result.eval = result.epochs.back().eval;
    result.ranking = result.epochs.back().ranking;
    result.ledger = book.summarize(m_reducer.world_size());
    if (result.ledger.steps > 0)
      result.bytes_reduced_per_step = result.ledger.bytes_reduced_per_step;
    result.bytes_saved_per_step = static_cast<std::int64_t>(result.dense_bytes_per_step) -
                                  static_cast<std::int64_t>(result.bytes_reduced_per_step);
    const double epochs = double(result.epochs.back().epoch);  // fewer when a target stopped it
    for (std::size_t r = 0; r < run.step.size(); ++r) {
      run.step[r] /= epochs;
      run.work[r] /= epochs;
      run.wait[r] /= epochs;
    }
    result.ledger.ranks =
        make_rank_table(run.step, run.work, run.wait, m_options.slow_rank_threshold);
    result.parameters_checksum = replica_checksum();
  }

  // Whether the epoch just recorded reaches `train_options::target`; the first that does is
  // noted in `result.target`. Every rank sees the same metrics, so every rank stops alike.
  bool reached_target(fit_result& result, clock::time_point fit_start) const {
    if (!m_options.target) return false;
    const quality_target& t = *m_options.target;
    const epoch_record& rec = result.epochs.back();
    using m = quality_target::measure;
    double v = 0;
    bool reached = false;
    if (t.metric == m::rmse || t.metric == m::auc) {
      const char* want = t.metric == m::rmse ? metric_name::rmse : metric_name::auc;
      TUTTI_EXPECTS(rec.eval.metric == want, "tutti::trainer::fit",
                    std::string("the target is the test ") + want + ", but the evaluation gave " +
                        rec.eval.metric + "; expected a target that matches the loss (rmse for " +
                        "squared, auc for logistic) and a non-empty test split");
      v = rec.eval.value;
      reached = t.metric == m::rmse ? v <= t.value : v >= t.value;
    } else {
      v = t.metric == m::hit_rate ? rec.ranking->hit_rate : rec.ranking->ndcg;
      reached = v >= t.value;
    }
    if (!reached) return false;
    result.target = {true, rec.epoch, seconds_since(fit_start), v};
    return true;
  }

  // Whether this step measures the noise scale, and how: every `noise_scale_every`-th global
  // step whose batch is full, from each rank's local gradient (W
  // ranks; rank r took the `first(r, s)` split's slots) or from the first micro-batch's (one
  // rank with accumulation); `count` is this rank's slots in the step.
  detail::noise_step plan_noise_step(std::size_t global_step, std::uint64_t global_real,
                                     const detail::batch_split& split, std::size_t s,
                                     std::size_t count, std::size_t micro_batch) const {
    const std::size_t every = m_options.noise_scale_every;
    if (every == 0 || global_step % every != 0 || global_real != m_options.batch || count == 0)
      return {};
    const double batch = double(m_options.batch), world = double(split.world);
    if (split.world > 1) {
      double inv = 0;
      for (std::size_t r = 0; r < split.world; ++r)
        inv += 1.0 / double(split.first(r, s + 1) - split.first(r, s));
      const double to_mean = batch / (world * double(count));
      return {inv / world, to_mean * to_mean, false};
    }
    if (count <= micro_batch) return {};  // one batch size only
    const double to_mean = batch / double(micro_batch);
    return {1.0 / double(micro_batch), to_mean * to_mean, true};
  }

  // Σ g² over what this rank's arena holds: the selected rows and the dense segments on the
  // row-sparse step (the rest is zero; host), else the whole arena. A device waits for it.
  double arena_squared_norm() const {
    if constexpr (space_type::host_accessible)
      if (m_row_step) return m_rows.squared_norm(m_space, m_grads.data());
    return detail::squared_norm(m_space, m_grads.data(), m_params.size());
  }

  // A step that measures the noise scale: this rank's small-batch squared norm into its
  // trailing float, taken now from the arena, or already from the first micro-batch or from
  // the buckets as they left.
  void record_small_noise(bool from_buckets) {
    if (!m_noise_step.active()) return;
    if (!m_noise_step.first_micro && !from_buckets) m_noise_small = arena_squared_norm();
    const auto small = static_cast<float>(m_noise_small * m_noise_step.factor);
    if constexpr (space_type::host_accessible)
      m_grads.data()[m_params.size() + 2] = small;
    else
      fill(m_space, m_grads.subspan(m_params.size() + 2, 1), small);
  }

  // After the reduction of a measured step that is applied (the host calls it for those only; a
  // device reads the reduced flag itself): the mean small-batch squared norm over the ranks and
  // the reduced gradient's give one estimate.
  void add_noise_measurement() {
    if (!m_noise_step.active()) return;
    float trailing[3] = {0.f, 0.f, 0.f};  // non-finite flag, stop request, small-batch norm
    if constexpr (space_type::host_accessible) {
      trailing[2] = m_grads.data()[m_params.size() + 2];
    } else {
      m_space.copy_to_host(trailing, m_grads.data() + m_params.size(), sizeof trailing);
      if (trailing[0] != 0.f) return;  // a skipped step
    }
    m_noise.add(trailing[2], m_noise_step.inv_small, arena_squared_norm(), double(m_options.batch));
  }

  // Why a run has no noise-scale estimate; empty when it has one.
  std::string noise_scale_why(std::size_t steps) const {
    if (m_noise.estimate().known()) return {};
    if (m_options.noise_scale_every == 0) return "off (noise_scale_every = 0)";
    if (m_reducer.world_size() == 1 && m_options.accumulation < 2)
      return "one rank has one batch size per step; measure with accumulation >= 2";
    if (m_noise.estimate().measurements == 0)
      return "no full step measured in " + std::to_string(steps) + " steps (every " +
             std::to_string(m_options.noise_scale_every) + ")";
    const noise_scale_estimate e = m_noise.estimate();
    if (e.bounded())
      return "|G|^2 is not resolved after " + std::to_string(e.measurements) +
             " measurements: at this batch the mean gradient is lost in its noise, and B_simple "
             "is at least " +
             std::to_string(static_cast<long long>(e.b_simple_at_least)) + " samples";
    return "too few measurements (" + std::to_string(e.measurements) + ") to judge |G|^2 by";
  }

  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  static phase_seconds to_phases(const step_account& a) {
    phase_seconds p;
    p.data = a.data;
    p.compute = a.compute;
    p.reduce = a.reduce_exposed;
    p.optimizer = a.optimizer;
    p.guard = a.guard;
    p.wait = a.wait;
    p.other = a.other;
    return p;
  }

  static void add_phases(phase_seconds& to, const phase_seconds& p) {
    to.data += p.data;
    to.compute += p.compute;
    to.reduce += p.reduce;
    to.optimizer += p.optimizer;
    to.guard += p.guard;
    to.wait += p.wait;
    to.other += p.other;
  }

  // Bytes the dense reduce of `floats` gradient values moves, as the ledger counts them (a
  // compressing reducer, `compressed<R, bf16>`, says what travels).
  std::uint64_t dense_wire_bytes(std::size_t floats) const {
    if constexpr (reducer_counts_wire_bytes<Reducer>)
      return m_reducer.wire_bytes(floats);
    else
      return static_cast<std::uint64_t>(floats) * sizeof(float);
  }

  // Applies the optimizer to the reduced gradient: to the touched rows and dense segments on the
  // row-sparse step; with the layout for layout-aware optimizers (LARS, LAMB: a trust ratio per
  // segment); else over the arena.
  void apply_optimizer(double lr, std::uint64_t t) {
    const auto grads = std::span<const float>(m_grads.first(m_params.size()));
    const auto rate = static_cast<float>(lr);
    if constexpr (optimizer_steps_rows<Optimizer, space_type>) {
      if (m_row_step) {
        m_optimizer.step_rows(m_space, m_model.layout(), m_params.span(), grads, m_state.span(),
                              m_rows.selection(), rate, t);
        return;
      }
    }
    if constexpr (optimizer_steps_by_layout<Optimizer, space_type>)
      m_optimizer.step(m_space, m_model.layout(), m_params.span(), grads, m_state.span(), rate, t);
    else
      m_optimizer.step(m_space, m_params.span(), grads, m_state.span(), rate, t);
  }

  // True when the optimizer asks for the row-sparse step (`optimizer_steps_rows`), on any space:
  // where the step cannot run, `plan_row_step` says so.
  bool wants_row_step() const {
    if constexpr (optimizer_steps_rows<Optimizer, host_space>)
      return m_optimizer.row_sparse();
    else
      return false;
  }

  // Takes the row-sparse step when the optimizer asks for it, or refuses where it cannot run:
  // the rows are host memory, and the model must say which rows a step touched. A dense step
  // would change the optimizer's semantics (lazy Adam would move untouched rows), so there is
  // no silent fallback.
  void plan_row_step() {
    if (!wants_row_step()) return;
    TUTTI_EXPECTS(space_type::host_accessible, "tutti::trainer",
                  "the optimizer takes the row-sparse step (it updates only the rows a step "
                  "touched), which runs on host spaces; expected a host space, or a dense "
                  "optimizer (sgd, adam) on this one");
    TUTTI_EXPECTS(model_reports_touched_rows<Model> && !m_exchange.empty(), "tutti::trainer",
                  "the optimizer takes the row-sparse step, and the model reports no row-sparse "
                  "segment (`std::span<const std::int32_t> touched_rows(std::size_t segment) "
                  "const` and an embedding segment); expected such a model, or a dense optimizer");
    TUTTI_EXPECTS(!m_options.overlap_reduce, "tutti::trainer",
                  "overlap_reduce with a row-sparse optimizer: the rows to update are known only "
                  "after backward; expected one of the two");
    std::vector<std::size_t> sparse;
    for (const auto& g : m_exchange.segments()) sparse.push_back(g.index);
    m_rows.plan(m_model.layout(), std::move(sparse));
    m_row_step = true;
  }

  // The row-sparse step's start: the arena is zero already but for the trailing floats.
  void clear_flags() {
    if constexpr (space_type::host_accessible)
      std::fill_n(m_grads.data() + m_params.size(), trailing_floats, 0.f);
  }

  // Finds the row-sparse segments the exchange may send as rows, or refuses `on` where it
  // cannot run: on a device space, or with a model that does not report its touched rows.
  void plan_sparse_exchange() {
    const sparse_exchange_policy policy = m_options.sparse_exchange;
    if (policy == sparse_exchange_policy::off && !wants_row_step()) return;
    if constexpr (!space_type::host_accessible) {
      TUTTI_EXPECTS(policy != sparse_exchange_policy::on, "tutti::trainer",
                    "sparse_exchange = on: the exchange packs rows in host memory, and the "
                    "model's space is not host accessible; expected off, or automatic (which "
                    "stays dense on a device space)");
    } else if constexpr (!model_reports_touched_rows<Model>) {
      TUTTI_EXPECTS(policy != sparse_exchange_policy::on, "tutti::trainer",
                    "sparse_exchange = on: the model does not report the rows a step touched "
                    "(`std::span<const std::int32_t> touched_rows(std::size_t segment) const`); "
                    "expected off, or automatic (which stays dense for such a model)");
    } else {
      const auto& segs = m_model.layout().segments();
      m_exchange.plan(m_model.layout(), [&](std::size_t i) {
        if constexpr (model_names_row_sparse<Model>)
          return static_cast<bool>(m_model.row_sparse(i));
        else
          return segs[i].kind == segment_kind::embedding;
      });
    }
  }

  // Adds the rows the last `loss_and_gradient` call touched to the step's touched sets.
  void collect_touched_rows() {
    if constexpr (model_reports_touched_rows<Model>) {
      const auto segments = m_exchange.segments();
      for (std::size_t k = 0; k < segments.size(); ++k)
        m_exchange.add_touched(k, m_model.touched_rows(segments[k].index));
    }
  }

  // The overlapped path's last collective: the trailing floats after the arena (its buckets are
  // reduced already); returns the bytes the ledger charges the step.
  std::uint64_t reduce_flags(std::uint64_t dense_bytes) {
    m_reducer.all_reduce_mean(m_grads.subspan(m_params.size(), trailing_floats));
    return dense_bytes;
  }

  void check_overlap_options() const {
    if (!m_options.overlap_reduce) return;
    TUTTI_EXPECTS(m_options.bucket_bytes >= sizeof(float), "tutti::trainer",
                  "bucket_bytes = " + std::to_string(m_options.bucket_bytes) +
                      "; expected at least one float (4 bytes)");
    TUTTI_EXPECTS(!m_options.comm_thread_nice ||
                      (*m_options.comm_thread_nice >= -20 && *m_options.comm_thread_nice <= 19),
                  "tutti::trainer",
                  "comm_thread_nice = " + std::to_string(m_options.comm_thread_nice.value_or(0)) +
                      "; expected a nice value from -20 to 19, or nullopt to keep the process's");
    TUTTI_EXPECTS(space_type::host_accessible || reducer_starts_collectives<Reducer>,
                  "tutti::trainer",
                  "overlap_reduce on a device space needs a reducer that starts collectives "
                  "without waiting (start_all_reduce_mean, finish_started: nccl_ring); expected "
                  "nccl_ring or a host space");
    TUTTI_EXPECTS(m_options.sparse_exchange == sparse_exchange_policy::off, "tutti::trainer",
                  "overlap_reduce with sparse_exchange: the sparse exchange decides after "
                  "backward which rows to send, so nothing can leave during it; expected one of "
                  "the two");
    if constexpr (reducer_says_thread_safety<Reducer>) {
      TUTTI_EXPECTS(m_reducer.callable_from_another_thread(), "tutti::trainer",
                    "overlap_reduce: the reducer's collectives would run on a communication "
                    "thread, which this reducer does not allow (MPI initialised below "
                    "MPI_THREAD_SERIALIZED); expected tutti::mpi_session(MPI_THREAD_SERIALIZED)");
    }
  }

  // Averages the gradient arena (the trailing floats included) over the ranks, the row-sparse
  // segments as touched rows when the sparse exchange is on; returns the bytes the ledger
  // charges the step.
  std::uint64_t reduce_gradients(std::uint64_t dense_bytes, fit_result& result) {
    if constexpr (space_type::host_accessible) {
      if (m_options.sparse_exchange != sparse_exchange_policy::off && !m_exchange.empty()) {
        const auto done = m_exchange.exchange(
            m_reducer, m_grads, m_options.sparse_exchange, m_options.sparse_trial_steps,
            [this](std::size_t floats) { return dense_wire_bytes(floats); });
        if (done.sent_rows) ++result.sparse_steps;
        if (done.agreed_ratio > 0) result.sparse_row_cost_ratio = done.agreed_ratio;
        return done.bytes;
      }
    }
    (void)result;
    m_reducer.all_reduce_mean(m_grads);
    return dense_bytes;
  }

  // Sets this rank's finite flag (the float after the arena) and its entry of the step log from
  // the step's loss and gradient. With `arena_checked` (the overlapped reduction checked every
  // bucket as it left) only the loss is left to check: on the host `arena_bad` is the buckets'
  // verdict; on a device their kernels have already set the flags.
  void check_finite(std::size_t step, bool arena_checked, bool arena_bad) {
    const std::size_t arena = m_params.size();
    const std::size_t unchecked = arena_checked ? 0 : arena;
    m_guard.check(step, m_step_loss.data(), m_grads.data(), unchecked, m_grads.data() + arena,
                  arena_bad, [&] {
                    if constexpr (space_type::host_accessible)
                      return m_row_step ? m_rows.any_nonfinite(m_space, m_grads.data())
                                        : detail::any_nonfinite(m_space, m_grads.data(), unchecked);
                    else
                      return false;
                  });
  }

  // The records of (rank, step) pairs of the epoch `e`.
  std::vector<nonfinite_record> make_records(std::vector<std::pair<int, std::size_t>> at,
                                             const run_plan& p, const epoch_plan& e) const {
    std::map<int, shard> others;
    const auto shard_of = [&](int r) -> const shard& {
      if (r == m_reducer.rank()) return e.sh;
      auto it = others.find(r);
      if (it == others.end())
        it = others.emplace(r, epoch_shard(rows_of(r, p.n), r, e.epoch, e.start_pos)).first;
      return it->second;
    };
    return detail::nonfinite_records(std::move(at), shard_of, p.split, e.step_base, e.epoch,
                                     e.epoch_first_step);
  }

  // Every rank's non-finite steps of the epoch, as records. Collective.
  std::vector<nonfinite_record> gather_nonfinite(const std::vector<std::uint64_t>& mine,
                                                 const std::vector<std::uint64_t>& counts,
                                                 const run_plan& p, const epoch_plan& e) {
    return make_records(detail::gather_bad_steps(m_reducer, mine, counts), p, e);
  }

  // Compares the replicas' checksums (one gather of one value); on a mismatch raises on every
  // rank, or repairs from rank 0 and records the event.
  void replica_check(std::size_t epoch, std::size_t step, std::size_t global_step,
                     fit_result& result) {
    const int world = m_reducer.world_size();
    const std::uint64_t mine[1] = {replica_checksum()};
    std::vector<std::uint64_t> all(static_cast<std::size_t>(world));
    m_reducer.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
    ++result.replica_checks;
    replica_event event{epoch, step, global_step, {}};
    for (int r = 1; r < world; ++r)
      if (all[static_cast<std::size_t>(r)] != all[0]) event.ranks.push_back(r);
    if (event.ranks.empty()) return;
    if (!m_options.rebroadcast_on_mismatch)
      throw replica_mismatch_error(
          event, "tutti::trainer::fit(): parameter replicas diverged after epoch " +
                     std::to_string(epoch) + ", step " + std::to_string(step) + " (global step " +
                     std::to_string(global_step) + "): rank(s) " + detail::rank_list(event.ranks) +
                     " differ from rank 0; set rebroadcast_on_mismatch to repair from rank 0");
    m_reducer.broadcast(m_params.span(), 0);
    if (!m_state.empty()) m_reducer.broadcast(m_state.span(), 0);
    result.replica_events.push_back(std::move(event));
  }

  // The global-batch guard: logs the rate derived for this global batch (rule, reference,
  // warmup) and warns when the batch grew well past the reference with no scaling rule — the
  // usual way a data-parallel run silently trains at the small batch's rate.
  void report_learning_rate(double lr0) const {
    detail::learning_rate_facts facts;
    facts.world_size = m_reducer.world_size();
    facts.global_batch = m_options.batch;
    facts.reference_batch = m_options.reference_batch;
    facts.scaling = m_options.scaling;
    facts.base_lr = m_options.base_lr;
    facts.lr = lr0;
    if constexpr (schedule_has_warmup<Schedule>)
      facts.warmup_steps = static_cast<std::size_t>(m_schedule.warmup_steps);
    if (m_options.log) m_options.log->write(detail::learning_rate_record(facts));
    const double growth = double(m_options.batch) / double(m_options.reference_batch);
    if (m_options.scaling == lr_scaling::none && growth >= m_options.batch_growth_warning &&
        m_options.on_warning) {
      const detail::batch_split split{m_options.batch,
                                      static_cast<std::size_t>(m_reducer.world_size())};
      const std::string local =
          split.even() ? std::to_string(split.smallest())
                       : std::to_string(split.smallest()) + "-" + std::to_string(split.largest());
      m_options.on_warning(detail::batch_growth_warning(facts, growth, local));
    }
  }

  // Every rank's count of real slots in its shard (one gather) when `split` is uneven; empty
  // when every rank takes the same slots, where the shard's `real_prefix` gives a step's weight.
  // Collective; throws on every rank alike when a sampler puts padding before a real slot.
  std::vector<std::uint64_t> gather_real_slots(const shard& sh, const detail::batch_split& split) {
    if (split.even()) return {};
    const std::uint64_t mine = detail::leading_real_slots(sh);
    std::vector<std::uint64_t> all(split.world);
    m_reducer.all_gather(std::span<const std::uint64_t>(&mine, 1), std::span<std::uint64_t>(all));
    const auto bad = std::find(all.begin(), all.end(), detail::misplaced);
    TUTTI_EXPECTS(bad == all.end(), "tutti::trainer::fit",
                  "rank " + std::to_string(bad - all.begin()) +
                      "'s sampler put a real sample after a padded slot; a global batch that is "
                      "not a multiple of the world size needs each rank's real slots first and "
                      "its padding last");
    return all;
  }

  // `rank`'s shard of `epoch`, or of what is left of it after its first `start_pos` positions
  // (a resume on another world size).
  shard epoch_shard(std::size_t n, int rank, std::size_t epoch, std::size_t start_pos) const {
    const int world = m_reducer.world_size();
    if constexpr (sampler_can_reshard<Sampler>) {
      if (start_pos > 0)
        return m_sampler.shard_from(n, world, rank, m_options.seed, epoch, start_pos);
    }
    return m_sampler.shard(n, world, rank, m_options.seed, epoch);
  }

  // What a checkpoint records of this run's settings, and compares when resuming: the
  // trainer's options and shapes, the training data, and the caller's `run_config`.
  detail::run_setting_list checkpoint_config(const data::interactions& train,
                                             std::uint64_t train_digest) const {
    std::uint64_t data = train_digest;
    std::uint64_t rows = train.size();
    if constexpr (rank_local_sampler<Sampler>) {
      // Each rank holds its own rows: the counts, not one rank's digest, describe the data.
      data = detail::mix64(static_cast<std::uint64_t>(m_reducer.world_size()));
      rows = 0;
      for (int r = 0; r < m_reducer.world_size(); ++r) {
        data = detail::mix64(data ^ m_sampler.rows_of(r));
        rows += m_sampler.rows_of(r);
      }
    }
    return detail::checkpoint_settings(
        m_options, {m_model.layout().digest(), m_state.size(), rows, data, m_reducer.world_size()});
  }

  // Loads a checkpoint's parameters and optimizer state after checking that it belongs to this
  // run: the same settings (world size aside), shapes and a sampler that can re-shard.
  void restore(const checkpoint_state& ck,
               const std::vector<std::pair<std::string, std::string>>& now) {
    static constexpr const char* fn = "tutti::trainer::fit";
    detail::check_resume_settings(ck.config, now);
    TUTTI_EXPECTS(
        ck.parameters.size() == m_params.size() && ck.optimizer_state.size() == m_state.size(), fn,
        "the checkpoint holds " + std::to_string(ck.parameters.size()) + " parameters and " +
            std::to_string(ck.optimizer_state.size()) + " optimizer-state floats; this model has " +
            std::to_string(m_params.size()) + " and " + std::to_string(m_state.size()));
    if (ck.world_size != m_reducer.world_size() && ck.step_in_epoch > 0) {
      constexpr bool can_reshard = !rank_local_sampler<Sampler> && sampler_can_reshard<Sampler>;
      TUTTI_EXPECTS(can_reshard, fn,
                    "the checkpoint was written by " + std::to_string(ck.world_size) +
                        " ranks in the middle of an epoch; resuming on " +
                        std::to_string(m_reducer.world_size()) +
                        " needs a sampler that can deal the rest of the epoch anew (shard_from, "
                        "e.g. shuffled_shards); expected the same world size");
    }
    copy_from_host(m_space, std::span<const float>(ck.parameters), m_params.span());
    if (!m_state.empty())
      copy_from_host(m_space, std::span<const float>(ck.optimizer_state), m_state.span());
  }

  // Collective: adds up the epoch's loss and samples so far, then rank 0 writes the checkpoint
  // of the state after `global_step` steps (`step_in_epoch` of them in `epoch`).
  void write_checkpoint_now(const std::vector<std::pair<std::string, std::string>>& config,
                            std::size_t epoch, std::size_t step_in_epoch, std::size_t global_step,
                            std::uint64_t before_resume, std::span<const float> visited,
                            std::size_t skip_slots, const char* note, fit_result& result) {
    double sums[3] = {0.0, 0.0, 0.0};
    m_space.copy_to_host(sums, m_sums.data(), 2 * sizeof(double));
    for (std::size_t i = skip_slots; i < visited.size(); ++i) sums[2] += visited[i];
    m_reducer.all_reduce_sum(std::span<double>(sums));
    if (m_reducer.rank() != 0) return;
    checkpoint_state st;
    st.config = config;
    st.config_digest = detail::settings_digest(config);
    st.world_size = m_reducer.world_size();
    st.seed = m_options.seed;
    st.epoch = epoch;
    st.step_in_epoch = step_in_epoch;
    st.global_step = global_step;
    st.samples_in_epoch = before_resume + static_cast<std::uint64_t>(std::llround(sums[2]));
    st.epoch_loss_sum = sums[0];
    st.epoch_weight_sum = sums[1];
    st.rng = {m_options.seed, epoch};  // every draw is a function of (seed, epoch, position)
    st.parameters = parameters_on_host();
    st.optimizer_state = to_host_vector(m_space, std::span<const float>(m_state.span()));
    st.note = note;
    result.last_checkpoint =
        write_checkpoint(m_options.checkpoint_dir, st, m_options.checkpoint_keep).string();
    ++result.checkpoints_written;
  }

  // The rows `rank` holds: its sampler entry for rank-local data, else the whole set (`n`).
  std::size_t rows_of(int rank, std::size_t n) const {
    if constexpr (rank_local_sampler<Sampler>)
      return static_cast<std::size_t>(m_sampler.rows_of(rank));
    else
      return n;
  }

  // Every rank must train the same thing: compare what each rank believes before any step.
  // Ranks holding their own rows cannot compare data; they compare the sampler's row counts,
  // and each checks that it holds the rows the sampler says it does.
  void check_agreement(const data::interactions& train, const data::interactions& test,
                       std::uint64_t train_digest) {
    const int world = m_reducer.world_size();
    std::uint64_t config = detail::options_digest(m_options);
    std::uint64_t data_digest = train_digest ^ detail::mix64(test.digest());
    if constexpr (rank_local_sampler<Sampler>) {
      data_digest = detail::mix64(static_cast<std::uint64_t>(world));
      for (int r = 0; r < world; ++r)
        data_digest = detail::mix64(data_digest ^ m_sampler.rows_of(r));
      TUTTI_EXPECTS(train.size() == m_sampler.rows_of(m_reducer.rank()), "tutti::trainer::fit",
                    "rank " + std::to_string(m_reducer.rank()) + " holds " +
                        std::to_string(train.size()) + " training rows, its sampler says " +
                        std::to_string(m_sampler.rows_of(m_reducer.rank())) +
                        "; expected the rows the sampler lists for this rank");
    }
    const std::uint64_t mine[5] = {m_options.seed, static_cast<std::uint64_t>(world), data_digest,
                                   m_model.layout().digest(), config};
    static constexpr const char* names[5] = {
        "seed", "world size", rank_local_sampler<Sampler> ? "rows per rank" : "dataset digest",
        "parameter layout", "training options"};
    std::vector<std::uint64_t> all(5 * static_cast<std::size_t>(world));
    m_reducer.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
    for (std::size_t f = 0; f < 5; ++f) {
      std::string differing;
      for (int r = 1; r < world; ++r)
        if (all[static_cast<std::size_t>(r) * 5 + f] != all[f])
          differing += (differing.empty() ? "" : ", ") + std::to_string(r);
      if (!differing.empty())
        throw mismatch_error("tutti::trainer::fit(): ranks disagree on the " +
                             std::string(names[f]) + ": rank(s) " + differing +
                             " differ from rank 0 (" + std::to_string(all[f]) +
                             "); every rank must train the same data with the same options");
    }
  }

  void write_log(std::size_t epoch, std::size_t step, std::size_t global_step, double loss,
                 double samples, double lr, double seconds) {
    m_options.log->write(detail::step_record(m_reducer.rank(), epoch, step, global_step, loss,
                                             samples, lr, seconds));
  }

  // The gradient arena of `count` floats: memory the reducer lends, when it offers some it can
  // reduce without copies (mpi_reducer's shared-memory window per host) and the model's
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
  Schedule m_schedule;
  Optimizer m_optimizer;
  train_options m_options;
  space_type m_space;
  buffer<float, space_type> m_params;
  // The gradient arena: layout().total() gradients, then this rank's finite flag and stop
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
  bool m_row_step = false;
  detail::row_step m_rows;
  // The gradient noise scale: the run's estimate, and this step's small-batch squared norm.
  detail::noise_scale_tracker m_noise;
  detail::noise_step m_noise_step;
  double m_noise_small = 0;
  // The overlapped reduction's step: whether a bucket held a non-finite value (host), and this
  // step's entry of the local finite flags (device).
  bool m_bucket_nonfinite = false;
  float* m_step_local_flag = nullptr;
};

}  // namespace tutti
