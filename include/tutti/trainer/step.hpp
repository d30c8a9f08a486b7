// SPDX-License-Identifier: Apache-2.0
/// @file trainer/step.hpp
/// @brief One step of `fit`: its outline first (`take_step`: gradient, check, reduce, commit,
/// update), then one function per named part in the order the step calls them, with the
/// collectives, the finite check and the optimizer they use; `fit` announces the step before it
/// and logs and ends it after. Every part takes the step's `step_context`. Part of
/// `tutti::trainer_core` (tutti/trainer.hpp declares these members and includes this file); the
/// row-sparse step's own work is in trainer/row_sparse_step.hpp, the record and replay of a
/// step in trainer/replayed_step.hpp.
#pragma once

#include <tutti/trainer.hpp>

namespace tutti {

template <class Model, class Sampler, class Reducer>
auto trainer_core<Model, Sampler, Reducer>::take_step(const step_context& c) -> reduced {
  begin_gradient(c);
  c.timer.mark(account::data);
  compute_gradient(c);  // forward and backward of each micro-batch
  finish_gradient(c);   // the rows to step, the finite check
  const reduced r = reduce_step(c);
  const bool skip = commit_step(c);
  if (skip) stop_if_nonfinite(c);
  update(c, skip);
  return r;
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::announce_step(const step_context& c) {
  const epoch_plan& e = c.epoch;
  const step_slots& s = c.slots;
  if constexpr (reducer_tracks_position<Reducer>) m_reducer.set_position(e.epoch, s.step);
  if (m_options.on_batch) {
    const std::vector<float> weights = e.sh.weights_in(s.begin, s.end);
    m_options.on_batch(step_progress{m_reducer.rank(), e.epoch, s.step, c.plan.steps_per_epoch,
                                     c.global_step, c.plan.total_steps, 0.0},
                       std::span<const std::uint64_t>(e.sh.indices).subspan(s.begin, s.count),
                       std::span<const float>(weights));
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::begin_gradient(const step_context& c) {
  overlap& pipeline = c.pipeline;
  if (m_rows.on()) {  // the arena is zero but for the flags (see detail::row_sparse_step)
    clear_flags();
    m_rows.begin();
  } else
    fill(m_space, m_grads, 0.f);
  m_exchange.begin_step();
  if (pipeline) {
    pipeline->begin_step();
    m_bucket_nonfinite = false;
    m_step_local_flag = m_guard.local_entry(c.slots.step);
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::compute_gradient(const step_context& c) {
  const run_plan& p = c.plan;
  step_buffers& buf = c.buf;
  const step_slots& s = c.slots;
  overlap& pipeline = c.pipeline;
  step_clock& timer = c.timer;
  const float scale = gradient_scale(s);
  const bool by_step = shard_by_step();
  if (by_step) deal_step_slots(c);  // the step's positions, from its first slot on
  for (std::size_t mb = s.begin; mb < s.end; mb += p.micro_batch) {
    const std::size_t mb_count = std::min(p.micro_batch, s.end - mb);
    // A device reads the step's first slot from the space's memory (see detail::step_values):
    // its gather starts at the micro-batch's place in the step.
    const std::size_t from = space_type::host_accessible ? mb : mb - s.begin;
    // Weights one a slot, or none where the shard's real slots lead (`shard::real_slots`).
    const std::size_t real = c.epoch.sh.real_slots > from ? c.epoch.sh.real_slots - from : 0;
    // Where the micro-batch's positions are: the step's own, dealt from its first slot on.
    const std::size_t at = by_step ? mb - s.begin : from;
    const detail::gather_batch_fn<float> gather{buf.slot_at + at,
                                                buf.weight_at ? buf.weight_at + at : nullptr,
                                                buf.rows,
                                                buf.b_users.data(),
                                                buf.b_items.data(),
                                                buf.b_labels.data(),
                                                buf.b_weights.data(),
                                                mb_count,
                                                real};
    const std::size_t rows = gather_rows(buf, gather, mb_count);
    batch_view batch{{buf.b_users.data(), rows},
                     {buf.b_items.data(), rows},
                     {buf.b_labels.data(), rows},
                     {buf.b_weights.data(), rows},
                     std::size_t(m_options.negatives.per_positive) + 1,
                     std::span<const float>(buf.item_log_q.span())};
    timer.mark(account::data);
    // Only the last micro-batch's values are final for the overlapped reduction.
    if (s.global_real > 0) {
      backward(batch, scale, pipeline && mb + p.micro_batch >= s.end, pipeline);
      if constexpr (!space_type::host_accessible && model_reports_touched_rows_on_space<Model>)
        if (m_rows.on()) m_rows.select_on_space(m_model);  // one micro-batch a step here
    }
    timer.mark(account::compute);
    if (s.global_real > 0 && !m_exchange.empty()) {
      // The rows of every micro-batch: the step's touched set is their union.
      collect_touched_rows();
      timer.mark(account::reduce);
    }
    if (m_noise_step.first_micro && mb == s.begin) {  // one rank: the smaller batch
      if constexpr (space_type::host_accessible)
        if (m_rows.on()) m_rows.select(m_exchange.touched());
      m_noise_small = arena_squared_norm();
      timer.mark(account::guard);
    }
  }
}

template <class Model, class Sampler, class Reducer>
std::size_t trainer_core<Model, Sampler, Reducer>::gather_rows(
    step_buffers& buf, const detail::gather_batch_fn<float>& gather, std::size_t count) {
  // A device reads the step's first slot from the space's memory (see detail::step_values).
  const std::uint64_t* first = nullptr;
  if constexpr (!space_type::host_accessible) first = detail::first_slot_at(m_values.data());
  const negative_options& neg = m_options.negatives;
  if (neg.per_positive > 0) {
    // The learners' offsets in 32 bits or 64 (see make_buffers): a kernel for each width.
    if (buf.taken_offsets32.empty())
      gather_with_negatives(buf, gather, count, first, buf.taken_offsets.data());
    else
      gather_with_negatives(buf, gather, count, first, buf.taken_offsets32.data());
    return count * (std::size_t(neg.per_positive) + 1);
  }
  if constexpr (space_type::host_accessible)
    parallel_for(m_space, count, gather);
  else
    parallel_for(m_space, count, detail::gather_batch_at_fn<float>{gather, first});
  return count;
}

template <class Model, class Sampler, class Reducer>
template <class Offset>
void trainer_core<Model, Sampler, Reducer>::gather_with_negatives(
    step_buffers& buf, const detail::gather_batch_fn<float>& gather, std::size_t count,
    const std::uint64_t* first, const Offset* offsets) {
  const negative_options& neg = m_options.negatives;
  const detail::negative_draw<Offset> draw{
      offsets,     buf.taken.data(), buf.cumulative.empty() ? nullptr : buf.cumulative.data(),
      buf.n_items, neg.per_positive, neg.max_draws};
  parallel_for(
      m_space, count,
      detail::gather_with_negatives_fn<float, Offset>{gather, first, buf.epoch_key.data(), draw});
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::backward(const batch_view& batch, float scale,
                                                     bool report, overlap& pipeline) {
  const auto params = std::span<const float>(m_params.span());
  const auto grads = m_grads.first(gradient_values());
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

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::finish_gradient(const step_context& c) {
  overlap& pipeline = c.pipeline;
  step_clock& timer = c.timer;
  if (pipeline) {
    pipeline->finish();
    timer.mark(account::reduce);
    timer.reduce_in_background(pipeline->busy_seconds());
  }
  if constexpr (space_type::host_accessible) {
    // This rank's rows of the step, before any merge: what a projection's exchange would send.
    if (!m_exchange.empty() && c.slots.global_real > 0) m_exchange.count_step();
    if (m_rows.on()) m_rows.select(m_exchange.touched());
  }
  record_small_noise(pipeline.has_value());
  if (c.plan.guarded) check_finite(c.slots.step, pipeline.has_value(), m_bucket_nonfinite);
  timer.mark(account::guard);
}

template <class Model, class Sampler, class Reducer>
auto trainer_core<Model, Sampler, Reducer>::reduce_step(const step_context& c) -> reduced {
  step_clock& timer = c.timer;
  const std::size_t arena = gradient_values();
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
  // On several device ranks the row-sparse step's rows travel by all_gather instead.
  const bool rows_travel =
      !space_type::host_accessible && m_rows.on() && m_reducer.world_size() > 1;
  if (rows_travel)
    r.bytes = exchange_rows_on_space(c.plan);
  else
    r.bytes = c.pipeline ? reduce_flags(c.plan.wire_bytes)
                         : reduce_gradients(c.plan.wire_bytes, c.result);
  if (m_rows.on() && m_reducer.world_size() > 1) {
    // The rows any rank touched: what the optimizer updates and the arena zeroes after.
    r.bytes += m_rows.merge_ranks(m_reducer, m_exchange.touched());
  }
  if constexpr (space_type::host_accessible)
    if (m_rows.on()) m_exchange.count_updated();  // the rows the update reads, for the books
  timer.mark(account::reduce);
  if constexpr (space_type::host_accessible) {
    r.stop = m_grads.data()[arena + 1] != 0.f;
  } else if (m_options.stop && (c.global_step + 1) % m_options.stop_poll_every == 0) {
    // Reading the request waits for the device: every stop_poll_every steps (the same steps on
    // every rank, so they stop together).
    float flag = 0.f;
    m_space.copy_to_host(&flag, m_grads.data() + arena + 1, sizeof flag);
    r.stop = flag != 0.f;
  }
  if constexpr (reducer_reports_wait<Reducer>)
    timer.wait_within_reduce(m_reducer.last_wait_seconds());
  return r;
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::commit_step(const step_context& c) {
  const std::uint64_t* entry = nullptr;  // a device logs at the index in the space's memory
  if constexpr (!space_type::host_accessible) entry = detail::entry_at(m_values.data());
  const bool skip = m_guard.commit(c.slots.step, m_grads.data() + gradient_values(),
                                   m_step_loss.data(), m_sums.data(), c.slots.weight, entry);
  if constexpr (!space_type::host_accessible)
    if (!m_rows.on()) m_guard.protect(m_params.span(), m_state.span());
  if (!skip) add_noise_measurement();  // a device waits for the flags, on measured steps only
  c.timer.mark(account::guard);
  return skip;
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::stop_if_nonfinite(const step_context& c) {
  if constexpr (space_type::host_accessible) {
    const std::size_t step = c.slots.step;
    if (m_options.nonfinite != nonfinite_policy::stop) return;
    const int world = m_reducer.world_size();
    const std::uint64_t mine = m_guard.local_bad(step) ? 1 : 0;
    std::vector<std::uint64_t> culprits(static_cast<std::size_t>(world));
    m_reducer.all_gather(std::span<const std::uint64_t>(&mine, 1),
                         std::span<std::uint64_t>(culprits));
    std::vector<std::pair<int, std::size_t>> at;
    for (int r = 0; r < world; ++r)
      if (culprits[static_cast<std::size_t>(r)] != 0) at.emplace_back(r, step);
    throw nonfinite_error(make_records(at, c.plan, c.epoch));
  } else {
    (void)c;
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::update(const step_context& c, bool skip) {
  const std::size_t step = c.slots.step;
  const double lr = c.lr;
  const std::uint64_t t = optimizer_step(c.global_step);
  step_clock& timer = c.timer;
  if (m_rows.on()) {  // checked before the update: nothing to revert
    const auto grads = m_grads.first(gradient_values());
    if constexpr (space_type::host_accessible)
      update_rows(grads, skip, static_cast<float>(lr), t);
    else
      update_rows_on_space(grads, m_guard.skip_flag(step), static_cast<float>(lr), t);
    timer.mark(account::optimizer);
    return;
  }
  if (!skip) apply_optimizer(lr, t);
  timer.mark(account::optimizer);
  if (!space_type::host_accessible && c.plan.guarded) {
    m_guard.revert(step, m_params.span(), m_state.span());
    timer.mark(account::guard);
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::log_step(const step_context& c, step_log& log,
                                                     clock::time_point fit_start) {
  const epoch_plan& e = c.epoch;
  const step_slots& s = c.slots;
  log.since_weight += s.weight;
  const bool last = s.step + 1 == e.last_step;
  if (m_options.log &&
      (last || (m_options.log_every > 0 && (s.step + 1) % m_options.log_every == 0))) {
    // Reading the loss is the one host read of a step; it happens only when logging.
    double sums[2] = {0.0, 0.0};
    m_space.copy_to_host(sums, m_sums.data(), sizeof sums);
    const double applied = sums[1] - log.weight;
    const double interval_loss = applied > 0 ? (sums[0] - log.loss) / applied : 0.0;
    write_log(e.epoch + 1, s.step + 1, c.global_step + 1, interval_loss, log.since_weight, c.lr,
              seconds_since(fit_start));
    log.loss = sums[0];
    log.weight = sums[1];
    log.since_weight = 0;
  }
  if (m_options.on_step)
    m_options.on_step(step_progress{m_reducer.rank(), e.epoch, s.step, c.plan.steps_per_epoch,
                                    c.global_step, c.plan.total_steps, c.lr});
  c.timer.mark(account::other);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::end_step(const step_context& c, bool stop_now) {
  const run_plan& p = c.plan;
  const epoch_plan& e = c.epoch;
  const step_slots& s = c.slots;
  const std::size_t global_step = c.global_step;
  step_clock& timer = c.timer;
  fit_result& result = c.result;
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
                         e.sh.weight_sum(slot(p, e, m_reducer.rank(), e.first_step), s.end),
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
                              std::to_string(e.epoch + 1) + ", step " + std::to_string(s.step + 1) +
                              "); " + where);
}

template <class Model, class Sampler, class Reducer>
std::uint64_t trainer_core<Model, Sampler, Reducer>::dense_wire_bytes(std::size_t floats) const {
  if constexpr (reducer_counts_wire_bytes<Reducer>)
    return m_reducer.wire_bytes(floats);
  else
    return static_cast<std::uint64_t>(floats) * sizeof(float);
}

template <class Model, class Sampler, class Reducer>
std::uint64_t trainer_core<Model, Sampler, Reducer>::exchange_rows_on_space(const run_plan& p) {
  std::uint64_t bytes = 0;
  if constexpr (reducer_gathers_on_space<Reducer>) {
    // The touched rows travel by all_gather; every rank then holds their union and its mean.
    bytes = m_rows.exchange_on_space(m_space, m_reducer, m_model.layout(), p.micro_batch,
                                     m_grads.data());
    const auto& segs = m_model.layout().segments();
    const auto sparse = m_rows.sparse_on_space();
    // The dense segments and the flags: their mean, as the dense step takes it.
    for (std::size_t s = 0; s < segs.size(); ++s) {
      if (std::find(sparse.begin(), sparse.end(), s) != sparse.end()) continue;
      m_reducer.all_reduce_mean(m_grads.subspan(segs[s].offset, segs[s].size()));
      bytes += dense_wire_bytes(segs[s].size());
    }
  }
  m_reducer.all_reduce_mean(m_grads.subspan(gradient_values(), trailing_floats));
  return bytes + dense_wire_bytes(trailing_floats);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::clear_flags() {
  if constexpr (space_type::host_accessible)
    std::fill_n(m_grads.data() + gradient_values(), trailing_floats, 0.f);
  else
    fill(m_space, m_grads.subspan(gradient_values(), trailing_floats), 0.f);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::collect_touched_rows() {
  if constexpr (model_reports_touched_rows<Model>) {
    const auto segments = m_exchange.segments();
    for (std::size_t k = 0; k < segments.size(); ++k)
      m_exchange.add_touched(k, m_model.touched_rows(segments[k].index));
  }
}

template <class Model, class Sampler, class Reducer>
std::uint64_t trainer_core<Model, Sampler, Reducer>::reduce_flags(std::uint64_t dense_bytes) {
  m_reducer.all_reduce_mean(m_grads.subspan(gradient_values(), trailing_floats));
  return dense_bytes;
}

template <class Model, class Sampler, class Reducer>
std::uint64_t trainer_core<Model, Sampler, Reducer>::reduce_gradients(std::uint64_t dense_bytes,
                                                                      fit_result& result) {
  if (m_in_slots) return reduce_flags(dense_bytes);  // one rank: its slots are the gradient
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

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::check_finite(std::size_t step, bool arena_checked,
                                                         bool arena_bad) {
  const std::size_t arena = gradient_values();
  const std::size_t unchecked =
      arena_checked || (m_rows.on() && !space_type::host_accessible) ? 0 : arena;
  m_guard.check(step, m_step_loss.data(), m_grads.data(), unchecked, m_grads.data() + arena,
                arena_bad, [&] {
                  if constexpr (space_type::host_accessible)
                    return m_rows.on() ? rows_nonfinite()
                                       : detail::any_nonfinite(m_space, m_grads.data(), unchecked);
                  else
                    return false;
                });
  if constexpr (!space_type::host_accessible)
    if (m_rows.on())
      m_rows.check_on_space(m_space, m_grads.data(), m_grads.data() + arena,
                            m_guard.local_entry(step));
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::rows_nonfinite() const {
  bool rows_checked = false;
  if constexpr (model_checks_row_gradient<Model>) {
    // One rank, one micro-batch: the touched rows hold exactly what the model wrote and checked.
    rows_checked =
        m_reducer.world_size() == 1 && m_options.accumulation == 1 && m_model.row_gradient_finite();
  }
  return m_rows.nonfinite(m_space, m_grads.data(), rows_checked);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::write_log(std::size_t epoch, std::size_t step,
                                                      std::size_t global_step, double loss,
                                                      double samples, double lr, double seconds) {
  m_options.log->write(
      detail::step_record(m_reducer.rank(), epoch, step, global_step, loss, samples, lr, seconds));
}

}  // namespace tutti
