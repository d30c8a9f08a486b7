// SPDX-License-Identifier: Apache-2.0
/// @file trainer.hpp
/// @brief `tutti::trainer`: one rank of a data-parallel run, composed from five policies.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/concepts.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/error.hpp>
#include <tutti/metrics.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/schedules/constant.hpp>
#include <tutti/schedules/scaling.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
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

/// Seconds a rank spent in each phase of its steps.
struct phase_seconds {
  double data = 0;       ///< sampling and gathering the batch into the space
  double compute = 0;    ///< loss and gradient (forward + backward)
  double reduce = 0;     ///< averaging gradients across ranks
  double optimizer = 0;  ///< applying the update
  /// Sum of the phases.
  double total() const noexcept { return data + compute + reduce + optimizer; }
};

/// A test-split evaluation: RMSE for squared loss, exact AUC for logistic loss.
struct eval_result {
  const char* metric = "none";  ///< "rmse", "auc" or "none" (no test rows)
  double value = 0;             ///< the metric's value
};

/// What happened in one epoch (identical on every rank except `phases`).
struct epoch_record {
  std::size_t epoch = 0;                        ///< 1-based epoch number
  double train_loss = 0;                        ///< weighted mean data loss over all ranks
  std::vector<std::uint64_t> samples_per_rank;  ///< real (weight 1) samples each rank used
  double weighted_samples = 0;                  ///< sum of sample weights over all ranks
  std::size_t steps = 0;                        ///< optimizer steps in the epoch
  double seconds = 0;                           ///< wall time of the epoch on this rank
  double samples_per_second = 0;                ///< weighted_samples / seconds
  eval_result eval;                             ///< test metric after the epoch
  phase_seconds phases;                         ///< this rank's time per phase
};

/// Run options of a trainer: an aggregate, set with designated initialisers.
struct train_options {
  std::size_t batch = 4096;               ///< global batch: samples per step over all ranks
  std::size_t epochs = 3;                 ///< passes over the training data
  double base_lr = 0.05;                  ///< learning rate before scaling and schedule
  lr_scaling scaling = lr_scaling::none;  ///< rule applied to base_lr for the global batch
  std::size_t reference_batch = 256;      ///< batch at which base_lr was tuned (for scaling)
  std::uint64_t seed = 1;                 ///< initialisation and shuffling seed
  bool evaluate_each_epoch = true;        ///< evaluate the test split after every epoch
  std::size_t log_every = 0;              ///< steps between JSON-lines records; 0: per epoch
  json_lines_log* log = nullptr;          ///< JSON-lines sink (per-rank records), or none
  std::function<void(const step_progress&)> on_step{};  ///< called after each step, or empty
  std::function<void(int rank, const epoch_record&)> on_epoch{};  ///< after each epoch
};

/// Result of `trainer::fit`.
struct fit_result {
  std::vector<epoch_record> epochs;  ///< one record per epoch
  eval_result eval;                  ///< final test metric
  phase_seconds phases;              ///< this rank's time per phase over the run
  std::size_t steps = 0;             ///< optimizer steps taken
  double seconds = 0;                ///< wall time of fit on this rank
  double lr = 0;                     ///< base learning rate after scaling
  std::size_t global_batch = 0;      ///< samples per step over all ranks
  int world_size = 1;                ///< ranks
};

namespace detail {

template <class T>
struct gather_batch_fn {
  const std::uint64_t* slots;  // dataset positions of this step's slots
  const float* slot_weights;
  const std::int32_t* users;
  const std::int32_t* items;
  const float* labels;
  std::int32_t* out_users;
  std::int32_t* out_items;
  float* out_labels;
  float* out_weights;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    std::uint64_t k = slots[i];
    out_users[i] = users[k];
    out_items[i] = items[k];
    out_labels[i] = labels[k];
    out_weights[i] = slot_weights[i];
  }
};

inline std::uint64_t hash_double(std::uint64_t h, double v) {
  std::uint64_t bits;
  static_assert(sizeof bits == sizeof v);
  std::memcpy(&bits, &v, sizeof bits);
  return mix64(h ^ bits);
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace detail

/// One rank of a data-parallel training run, composed at compile time from five policies.
///
/// Every rank constructs its own trainer with its own reducer handle and calls `fit` with the
/// same data and options. The trainer owns the parameter, gradient and optimizer-state arenas;
/// it broadcasts rank 0's initial parameters, checks that all ranks agree on what they train,
/// and then runs the step: sampler → gather → loss and gradient → reduce → optimizer.
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
  static_assert(std::is_same_v<value_type, float>,
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
        m_grads(m_model.layout().total(), m_space),
        m_state(m_optimizer.state_size(m_model.layout().total()), m_space),
        m_loss(1, m_space) {
    const int world = m_reducer.world_size();
    TUTTI_EXPECTS(m_options.batch > 0, "tutti::trainer", "global batch is 0; expected >= 1");
    TUTTI_EXPECTS(m_options.batch % static_cast<std::size_t>(world) == 0, "tutti::trainer",
                  "global batch " + std::to_string(m_options.batch) +
                      " is not a multiple of the world size " + std::to_string(world) +
                      "; expected a multiple, so every rank gets the same batch");
    TUTTI_EXPECTS(m_options.epochs > 0, "tutti::trainer", "epochs is 0; expected >= 1");
    TUTTI_EXPECTS(std::isfinite(m_options.base_lr) && m_options.base_lr > 0, "tutti::trainer",
                  "base_lr is " + std::to_string(m_options.base_lr) + "; expected > 0");
    fill(m_space, m_params.span(), 0.f);
    m_model.initialize(m_params.span(), m_options.seed);
    fill(m_space, m_grads.span(), 0.f);
    if (!m_state.empty()) fill(m_space, m_state.span(), 0.f);
  }

  /// Trains on `train` for the configured epochs, evaluating on `test` (which may be empty).
  /// Collective: every rank must call it with the same data and options.
  fit_result fit(const data::interactions& train, const data::interactions& test) {
    using clock = std::chrono::steady_clock;
    const auto fit_start = clock::now();
    const int world = m_reducer.world_size();
    const int rank = m_reducer.rank();
    TUTTI_EXPECTS(train.size() > 0, "tutti::trainer::fit", "training set is empty; expected rows");
    check_agreement(train, test);

    // Identical replicas: rank 0's initial parameters everywhere.
    m_reducer.broadcast(m_params.span(), 0);

    auto d_users = make_buffer(m_space, std::span<const std::int32_t>(train.users));
    auto d_items = make_buffer(m_space, std::span<const std::int32_t>(train.items));
    auto d_labels = make_buffer(m_space, std::span<const float>(train.labels));

    const std::size_t local_batch = m_options.batch / static_cast<std::size_t>(world);
    const std::size_t n = train.size();
    // Slots per rank are the same in every epoch, so the step count is known up front.
    const std::size_t slots = m_sampler.shard(n, world, rank, m_options.seed, 0).size();
    TUTTI_EXPECTS(slots > 0, "tutti::trainer::fit",
                  "each of " + std::to_string(world) + " ranks gets 0 of " + std::to_string(n) +
                      " samples; expected fewer ranks or the pad tail policy");
    const std::size_t steps_per_epoch = (slots + local_batch - 1) / local_batch;
    const std::size_t total_steps = steps_per_epoch * m_options.epochs;
    const double lr0 =
        scaled_lr(m_options.base_lr, m_options.batch, m_options.reference_batch, m_options.scaling);

    buffer<std::uint64_t, space_type> d_slots(slots, m_space);
    buffer<float, space_type> d_slot_weights(slots, m_space);
    buffer<std::int32_t, space_type> b_users(local_batch, m_space), b_items(local_batch, m_space);
    buffer<float, space_type> b_labels(local_batch, m_space), b_weights(local_batch, m_space);

    fit_result result;
    result.lr = lr0;
    result.global_batch = m_options.batch;
    result.world_size = world;
    std::size_t global_step = m_global_step;
    for (std::size_t epoch = 0; epoch < m_options.epochs; ++epoch) {
      const auto epoch_start = clock::now();
      phase_seconds phases;
      auto t0 = clock::now();
      shard sh = m_sampler.shard(n, world, rank, m_options.seed, epoch);
      TUTTI_EXPECTS(sh.size() == slots && sh.real_prefix.size() == slots + 1, "tutti::trainer::fit",
                    "the sampler returned a shard of " + std::to_string(sh.size()) +
                        " slots in epoch " + std::to_string(epoch) + "; expected " +
                        std::to_string(slots) + " in every epoch");
      copy_from_host(m_space, std::span<const std::uint64_t>(sh.indices), d_slots.span());
      copy_from_host(m_space, std::span<const float>(sh.weights), d_slot_weights.span());
      fill(m_space, m_loss.span(), 0.f);
      double local_weight = 0;
      for (float w : sh.weights) local_weight += w;
      phases.data += seconds_since(t0);

      double logged_loss = 0, since_log_weight = 0;
      for (std::size_t step = 0; step < steps_per_epoch; ++step, ++global_step) {
        const std::size_t begin = step * local_batch;
        const std::size_t end = std::min(slots, begin + local_batch);
        const std::size_t count = end - begin;

        t0 = clock::now();
        parallel_for(m_space, count,
                     detail::gather_batch_fn<float>{
                         d_slots.data() + begin, d_slot_weights.data() + begin, d_users.data(),
                         d_items.data(), d_labels.data(), b_users.data(), b_items.data(),
                         b_labels.data(), b_weights.data()});
        batch_view batch{{b_users.data(), count},
                         {b_items.data(), count},
                         {b_labels.data(), count},
                         {b_weights.data(), count}};
        const std::uint64_t global_real = sh.global_real(begin, end);
        auto t1 = clock::now();
        phases.data += std::chrono::duration<double>(t1 - t0).count();

        // Each rank scales by W / (real samples in the global step), so the mean over ranks is
        // the gradient of the mean loss over the global batch, whatever the padding.
        fill(m_space, m_grads.span(), 0.f);
        if (global_real > 0) {
          const float scale = static_cast<float>(double(world) / double(global_real));
          m_model.loss_and_gradient(std::span<const float>(m_params.span()), batch, m_grads.span(),
                                    scale, m_loss.data());
        }
        auto t2 = clock::now();
        phases.compute += std::chrono::duration<double>(t2 - t1).count();

        m_reducer.all_reduce_mean(m_grads.span());
        auto t3 = clock::now();
        phases.reduce += std::chrono::duration<double>(t3 - t2).count();

        const double lr = m_schedule.lr(global_step, total_steps, lr0);
        m_optimizer.step(m_space, m_params.span(), std::span<const float>(m_grads.span()),
                         m_state.span(), static_cast<float>(lr), global_step + 1);
        phases.optimizer += seconds_since(t3);

        double step_weight = 0;
        for (std::size_t i = begin; i < end; ++i) step_weight += sh.weights[i];
        since_log_weight += step_weight;
        const bool last = step + 1 == steps_per_epoch;
        if (m_options.log &&
            (last || (m_options.log_every > 0 && (step + 1) % m_options.log_every == 0))) {
          // Reading the loss is the one host read of a step; it happens only when logging.
          float loss_now = 0;
          m_space.copy_to_host(&loss_now, m_loss.data(), sizeof loss_now);
          const double interval_loss =
              since_log_weight > 0 ? (double(loss_now) - logged_loss) / since_log_weight : 0.0;
          write_log(epoch + 1, step + 1, global_step + 1, interval_loss, since_log_weight, lr,
                    seconds_since(fit_start));
          logged_loss = loss_now;
          since_log_weight = 0;
        }
        if (m_options.on_step)
          m_options.on_step(
              step_progress{rank, epoch, step, steps_per_epoch, global_step, total_steps, lr});
      }

      // Epoch summary: one small reduction for the loss, one gather for per-rank counts.
      float loss_sum = 0;
      m_space.copy_to_host(&loss_sum, m_loss.data(), sizeof loss_sum);
      double sums[2] = {double(loss_sum), local_weight};
      m_reducer.all_reduce_sum(std::span<double>(sums));
      std::uint64_t mine[1] = {static_cast<std::uint64_t>(std::llround(local_weight))};
      std::vector<std::uint64_t> per_rank(static_cast<std::size_t>(world));
      m_reducer.all_gather(std::span<const std::uint64_t>(mine),
                           std::span<std::uint64_t>(per_rank));

      epoch_record rec;
      rec.epoch = epoch + 1;
      rec.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
      rec.samples_per_rank = std::move(per_rank);
      rec.weighted_samples = sums[1];
      rec.steps = steps_per_epoch;
      if (m_options.evaluate_each_epoch || epoch + 1 == m_options.epochs) rec.eval = evaluate(test);
      rec.seconds = seconds_since(epoch_start);
      rec.samples_per_second = rec.seconds > 0 ? rec.weighted_samples / rec.seconds : 0.0;
      rec.phases = phases;
      result.phases.data += phases.data;
      result.phases.compute += phases.compute;
      result.phases.reduce += phases.reduce;
      result.phases.optimizer += phases.optimizer;
      if (m_options.on_epoch) m_options.on_epoch(rank, rec);
      result.epochs.push_back(std::move(rec));
    }
    m_global_step = global_step;
    result.steps = total_steps;
    result.eval = result.epochs.back().eval;
    result.seconds = seconds_since(fit_start);
    return result;
  }

  /// Evaluates the current parameters on `test`: RMSE for squared loss, exact AUC for logistic
  /// loss; computed on rank 0 and shared, so every rank returns the same value. Collective.
  eval_result evaluate(const data::interactions& test) {
    eval_result r;
    if (test.size() == 0) return r;
    r.metric = m_model.loss() == loss_kind::squared ? "rmse" : "auc";
    double value[1] = {0.0};
    if (m_reducer.rank() == 0) {
      std::vector<float> predictions = predict(test);
      value[0] = m_model.loss() == loss_kind::squared
                     ? rmse(predictions, std::span<const float>(test.labels))
                     : auc(predictions, std::span<const float>(test.labels));
    }
    m_reducer.all_reduce_sum(std::span<double>(value));
    r.value = value[0];
    return r;
  }

  /// Predictions of the current parameters for every row of `rows` (copied to the host).
  std::vector<float> predict(const data::interactions& rows) {
    auto d_users = make_buffer(m_space, std::span<const std::int32_t>(rows.users));
    auto d_items = make_buffer(m_space, std::span<const std::int32_t>(rows.items));
    buffer<float, space_type> out(rows.size(), m_space);
    m_model.predict(std::span<const float>(m_params.span()),
                    std::span<const std::int32_t>(d_users.span()),
                    std::span<const std::int32_t>(d_items.span()), out.span());
    return to_host_vector(m_space, out.span());
  }

  /// The parameter arena (memory of the model's space).
  std::span<const float> parameters() const noexcept { return m_params.span(); }
  /// The parameter arena, copied to the host.
  std::vector<float> parameters_on_host() const { return to_host_vector(m_space, m_params.span()); }
  /// The model.
  const Model& model() const noexcept { return m_model; }
  /// The reducer handle.
  Reducer& reducer() noexcept { return m_reducer; }
  /// The run options.
  const train_options& options() const noexcept { return m_options; }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  // Every rank must train the same thing: compare what each rank believes before any step.
  void check_agreement(const data::interactions& train, const data::interactions& test) {
    const int world = m_reducer.world_size();
    std::uint64_t config = mix_options();
    const std::uint64_t mine[5] = {m_options.seed, static_cast<std::uint64_t>(world),
                                   train.digest() ^ detail::mix64(test.digest()),
                                   m_model.layout().digest(), config};
    static constexpr const char* names[5] = {"seed", "world size", "dataset digest",
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

  std::uint64_t mix_options() const {
    std::uint64_t h = detail::mix64(m_options.batch);
    h = detail::mix64(h ^ m_options.epochs);
    h = detail::hash_double(h, m_options.base_lr);
    h = detail::mix64(h ^ static_cast<std::uint64_t>(m_options.scaling));
    h = detail::mix64(h ^ m_options.reference_batch);
    return h;
  }

  void write_log(std::size_t epoch, std::size_t step, std::size_t global_step, double loss,
                 double samples, double lr, double seconds) {
    std::string rec =
        "{\"rank\":" + std::to_string(m_reducer.rank()) + ",\"epoch\":" + std::to_string(epoch) +
        ",\"step\":" + std::to_string(step) + ",\"global_step\":" + std::to_string(global_step) +
        ",\"loss\":" + detail::json_number(loss) + ",\"samples\":" + detail::json_number(samples) +
        ",\"lr\":" + detail::json_number(lr) + ",\"seconds\":" + detail::json_number(seconds) + "}";
    m_options.log->write(rec);
  }

  Model m_model;
  Sampler m_sampler;
  Reducer m_reducer;
  Schedule m_schedule;
  Optimizer m_optimizer;
  train_options m_options;
  space_type m_space;
  buffer<float, space_type> m_params;
  buffer<float, space_type> m_grads;
  buffer<float, space_type> m_state;
  buffer<float, space_type> m_loss;
  std::size_t m_global_step = 0;
};

}  // namespace tutti
