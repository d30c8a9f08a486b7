// SPDX-License-Identifier: Apache-2.0
/// @file trainer/setup.hpp
/// @brief What `fit` fixes before its first step: the run plan and its buffers, the result it
/// fills, the overlapped reduction, the row-sparse step, the sparse exchange, the agreement of the
/// ranks and the learning-rate report. Part of `tutti::trainer_core` (tutti/trainer.hpp declares
/// these members and includes this file).
#pragma once

#include <tutti/trainer.hpp>

namespace tutti {

template <class Model, class Sampler, class Reducer>
auto trainer_core<Model, Sampler, Reducer>::plan_run(std::size_t n,
                                                     const detail::run_setting_list& config)
    -> run_plan {
  const int world = m_reducer.world_size();
  run_plan p;
  p.split = detail::batch_split{m_options.batch, static_cast<std::size_t>(world)};
  p.n = n;
  p.config = &config;
  // Slots per rank are the same in every epoch, so the step count is known up front. Every
  // rank's prefix of real samples spans the longest shard; a rank whose shard is shorter (tail
  // policy `none`) joins the remaining steps' reductions with nothing to add.
  {
    // Where the positions are dealt elsewhere (on the device, or by step) only the slots are
    // counted; else the first epoch's shard is dealt once, here.
    shard first = outline_only() ? epoch_outline(n, 0, 0)
                                 : m_sampler.shard(n, world, m_reducer.rank(), m_options.seed, 0);
    p.slots = first.longest();
    p.real_counts = gather_real_slots(first, p.split);
    if (!outline_only()) p.first_shard = std::move(first);
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
  // What a dense reduce of the layout's arena would send (a gradient in slots sends nothing:
  // it is one rank's).
  p.wire_bytes = dense_wire_bytes(m_params.size() + trailing_floats);
  return p;
}

namespace detail {

/// `n` rows `row(i)` in `space`'s memory: written in place by every thread on a host, else in
/// host memory and copied once.
template <class Row, class Space, class RowAt>
buffer<Row, Space> rows_in_space(std::size_t n, const Space& space, RowAt row) {
  const auto fill = [&](Row* out) {
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i) out[i] = row(i);
  };
  if constexpr (Space::host_accessible) {
    buffer<Row, Space> rows(n, space);
    fill(rows.data());
    return rows;
  } else {
    std::vector<Row> rows(n);
    fill(rows.data());
    return make_buffer(space, std::span<const Row>(rows));
  }
}

}  // namespace detail

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::copy_rows(const data::interactions& train,
                                                      step_buffers& buf) const {
  if (space_type::host_accessible && m_options.rows_in_place) return;
  const std::int32_t* users = train.users.data();
  const std::int32_t* items = train.items.data();
  const float* labels = train.labels.data();
  if (detail::all_equal(std::span<const float>(train.labels)))  // a log of positives: 8 bytes
    buf.pairs =
        detail::rows_in_space<detail::sample_pair>(train.size(), m_space, [&](std::ptrdiff_t i) {
          return detail::sample_pair{users[i], items[i]};
        });
  else
    buf.records =
        detail::rows_in_space<detail::sample_record>(train.size(), m_space, [&](std::ptrdiff_t i) {
          return detail::sample_record{users[i], items[i], labels[i]};
        });
}

template <class Model, class Sampler, class Reducer>
detail::sample_rows trainer_core<Model, Sampler, Reducer>::row_source(
    const data::interactions& train, const step_buffers& buf) {
  if (!buf.records.empty() || train.size() == 0) return {.records = buf.records.data()};
  if (!buf.pairs.empty()) return {.pairs = buf.pairs.data(), .label = train.labels.front()};
  // `fit` holds `train` until it returns: its arrays are read where they are.
  const bool one_label = detail::all_equal(std::span<const float>(train.labels));
  return {.users = train.users.data(),
          .items = train.items.data(),
          .labels = one_label ? nullptr : train.labels.data(),
          .label = train.labels.front()};
}

template <class Model, class Sampler, class Reducer>
auto trainer_core<Model, Sampler, Reducer>::make_buffers(const data::interactions& train,
                                                         const run_plan& p) const -> step_buffers {
  const std::size_t mb = p.micro_batch;
  // With K negatives a slot gathers 1 + K rows.
  const std::size_t rows = mb * (std::size_t(m_options.negatives.per_positive) + 1);
  // The epoch's slots (a device's copy), one step's positions (dealt by step), or none (the
  // step reads the shard in place).
  const std::size_t positions = shard_by_step()    ? p.split.largest()
                                : shard_in_place() ? 0
                                                   : p.slots;
  step_buffers buf{buffer<detail::sample_record, space_type>(0, m_space),
                   buffer<detail::sample_pair, space_type>(0, m_space),
                   buffer<std::uint64_t, space_type>(positions, m_space),
                   buffer<float, space_type>(shard_in_place() ? 0 : p.slots, m_space),
                   buffer<std::int32_t, space_type>(rows, m_space),
                   buffer<std::int32_t, space_type>(rows, m_space),
                   buffer<float, space_type>(rows, m_space),
                   buffer<float, space_type>(rows, m_space),
                   buffer<std::uint64_t, space_type>(0, m_space),
                   buffer<std::uint32_t, space_type>(0, m_space),
                   buffer<std::int32_t, space_type>(0, m_space),
                   buffer<std::uint64_t, space_type>(0, m_space),
                   buffer<std::uint64_t, space_type>(1, m_space),
                   buffer<float, space_type>(0, m_space)};
  copy_rows(train, buf);
  buf.rows = row_source(train, buf);
  buf.n_items = train.n_items();
  if (m_options.negatives.per_positive > 0) make_negative_buffers(train, buf);
  return buf;
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::make_negative_buffers(const data::interactions& train,
                                                                  step_buffers& buf) const {
  const negative_options& o = m_options.negatives;
  detail::negative_tables t;
  if constexpr (space_type::host_accessible) {  // the lists written where the step reads them
    buf.taken = buffer<std::int32_t, space_type>(train.size(), m_space);
    std::uint64_t kept = 0;
    if (detail::offset_bytes(train.size()) == sizeof(std::uint32_t)) {  // and their offsets
      buf.taken_offsets32 =
          buffer<std::uint32_t, space_type>(static_cast<std::size_t>(train.n_users()) + 1, m_space);
      std::fill_n(buf.taken_offsets32.data(), buf.taken_offsets32.size(), 0u);
      t = detail::make_negative_tables(train, o, buf.taken.data(), buf.taken_offsets32.data());
      kept = buf.taken_offsets32.data()[train.n_users()];
    } else {
      t = detail::make_negative_tables(train, o, buf.taken.data());
      kept = t.offsets.back();
    }
    if (kept < train.size()) {  // repeated pairs dropped: the lists alone are kept
      buffer<std::int32_t, space_type> lists(kept, m_space);
      std::copy_n(buf.taken.data(), kept, lists.data());
      buf.taken = std::move(lists);
    }
  } else {  // each table released once copied, so the two are never held twice at once
    t = detail::make_negative_tables(train, o);
    buf.taken = make_buffer(m_space, std::span<const std::int32_t>(t.taken));
    std::vector<std::int32_t>().swap(t.taken);
  }
  if (!t.offsets.empty()) narrow_or_copy_offsets(t.offsets, buf);  // else written above
  std::vector<std::uint64_t>().swap(t.offsets);
  if (!t.cumulative.empty())
    buf.cumulative = make_buffer(m_space, std::span<const std::uint64_t>(t.cumulative));
  if (!t.log_q.empty() && m_model.loss() == loss_kind::softmax)
    buf.item_log_q = make_buffer(m_space, std::span<const float>(t.log_q));
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::narrow_or_copy_offsets(
    const std::vector<std::uint64_t>& offsets, step_buffers& buf) const {
  if (detail::offset_bytes(offsets.back()) != sizeof(std::uint32_t)) {
    buf.taken_offsets = make_buffer(m_space, std::span<const std::uint64_t>(offsets));
  } else if constexpr (space_type::host_accessible) {
    buf.taken_offsets32 = buffer<std::uint32_t, space_type>(offsets.size(), m_space);
    std::copy(offsets.begin(), offsets.end(), buf.taken_offsets32.data());
  } else {
    buf.taken_offsets32 =
        make_buffer(m_space, std::span<const std::uint32_t>(detail::narrow_offsets(offsets)));
  }
}

template <class Model, class Sampler, class Reducer>
memory_accounts trainer_core<Model, Sampler, Reducer>::memory_of(const step_buffers& buf) const {
  const auto bytes = [](const auto& b) {
    return static_cast<std::uint64_t>(b.size() * sizeof(*b.data()));
  };
  memory_accounts m;
  m.parameters = bytes(m_params);
  m.gradients = bytes(m_grads_storage);
  m.optimizer_state = bytes(m_state);
  m.rows = bytes(buf.records) + bytes(buf.pairs);
  m.step_buffers = bytes(buf.slots) + bytes(buf.slot_weights) + bytes(buf.b_users) +
                   bytes(buf.b_items) + bytes(buf.b_labels) + bytes(buf.b_weights) +
                   bytes(buf.taken_offsets) + bytes(buf.taken_offsets32) + bytes(buf.taken) +
                   bytes(buf.cumulative) + bytes(buf.epoch_key) + bytes(buf.item_log_q);
  return m;
}

template <class Model, class Sampler, class Reducer>
fit_result trainer_core<Model, Sampler, Reducer>::begin_result(const run_plan& p) {
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
    TUTTI_EXPECTS(
        resume->epoch < m_options.epochs && resume->step_in_epoch <= p.steps_per_epoch && !complete,
        "tutti::trainer::fit",
        "the checkpoint is at epoch " + std::to_string(resume->epoch) + ", step " +
            std::to_string(resume->step_in_epoch) + "; this run has " +
            std::to_string(m_options.epochs) + " epochs of " + std::to_string(p.steps_per_epoch) +
            " steps (is the run already complete?)");
    result.resumed_from_step = static_cast<std::size_t>(resume->global_step);
  }
  return result;
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::start_overlap(overlap& pipeline, bool guarded,
                                                          fit_result& result) {
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
                                    m_grads.data() + gradient_values(), m_step_local_flag});
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

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::trace_phases(step_clock& timer,
                                                         clock::time_point fit_start,
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

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::wants_row_step() const {
  return m_facts.wants_row_step;
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::is_row_sparse(std::size_t i) const {
  return detail::segment_row_sparse(m_model, i);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::plan_row_step() {
  if (!wants_row_step()) return;
  TUTTI_EXPECTS(!m_options.overlap_reduce, "tutti::trainer",
                "overlap_reduce with a row-sparse optimizer: the rows to update are known only "
                "after backward; expected one of the two");
  if constexpr (!space_type::host_accessible)
    plan_row_step_on_space();
  else
    plan_row_step_on_host();
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::plan_row_step_on_host() {
  TUTTI_EXPECTS(model_reports_touched_rows<Model> && !m_exchange.empty(), "tutti::trainer",
                "the optimizer takes the row-sparse step, and the model reports no row-sparse "
                "segment (`std::span<const std::int32_t> touched_rows(std::size_t segment) "
                "const` and an embedding segment); expected such a model, or a dense optimizer");
  std::vector<std::size_t> sparse;
  for (const auto& g : m_exchange.segments()) sparse.push_back(g.index);
  m_rows.plan(m_model.layout(), std::move(sparse), m_in_slots ? &m_slot_layout : nullptr);
  if constexpr (model_writes_gradient_slots<Model>)
    if (m_in_slots) m_model.write_gradient_to_slots(m_slot_layout);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::plan_gradient_slots() {
  if constexpr (space_type::host_accessible && model_writes_gradient_slots<Model>) {
    if (!m_facts.fuses_rows || !m_options.compact_gradient || !wants_row_step() ||
        m_exchange.empty() || m_reducer.world_size() != 1 || m_options.accumulation > 1 ||
        m_options.overlap_reduce)
      return;
    // A step's batch gathers 1 + K rows a sample: no table has more distinct rows in it.
    const std::size_t batch_rows =
        m_options.batch * (std::size_t(m_options.negatives.per_positive) + 1);
    std::vector<bool> listed(m_model.layout().segments().size(), false);
    for (const auto& g : m_exchange.segments()) listed[g.index] = true;
    m_slot_layout = detail::gradient_slot_layout(
        m_model.layout(), [&](std::size_t i) { return listed[i]; }, batch_rows);
    m_in_slots = true;
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::plan_row_step_on_space() {
  constexpr const char* fn = "tutti::trainer";
  constexpr const char* no_device_rows_step =
      "the optimizer takes the row-sparse step (it updates only the rows a step touched); on a "
      "device space that needs an optimizer with step_rows_on_space and a model with "
      "touched_rows_on_space; expected both, a host space, or a dense optimizer (sgd, adam)";
  if constexpr (model_reports_touched_rows_on_space<Model>) {
    TUTTI_EXPECTS(m_facts.steps_rows_on_space, fn, no_device_rows_step);
    TUTTI_EXPECTS(m_reducer.world_size() == 1 || reducer_gathers_on_space<Reducer>, fn,
                  "the row-sparse step on " + std::to_string(m_reducer.world_size()) +
                      " device ranks sends the touched rows by all_gather, which this reducer "
                      "does not offer (`all_gather_on_space`); expected a reducer that does "
                      "(nccl_ring), one rank, or a dense optimizer (sgd, adam)");
    TUTTI_EXPECTS(m_options.accumulation <= 1, fn,
                  "the row-sparse step on a device space takes one micro-batch a step; "
                  "expected accumulation = 1, or a dense optimizer");
    std::vector<std::size_t> sparse;
    for (std::size_t i = 0; i < m_model.layout().segments().size(); ++i)
      if (is_row_sparse(i)) sparse.push_back(i);
    TUTTI_EXPECTS(!sparse.empty(), fn,
                  "the optimizer takes the row-sparse step, and the model has no row-sparse "
                  "segment; expected an embedding segment, or a dense optimizer");
    m_rows.plan(m_space, m_model.layout(), std::move(sparse));
  } else {
    TUTTI_EXPECTS(false, fn, no_device_rows_step);
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::plan_sparse_exchange() {
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
    m_exchange.plan(m_model.layout(), [&](std::size_t i) { return is_row_sparse(i); });
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::check_overlap_options() const {
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

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::report_learning_rate(double lr0) const {
  detail::learning_rate_facts facts;
  facts.world_size = m_reducer.world_size();
  facts.global_batch = m_options.batch;
  facts.reference_batch = m_options.reference_batch;
  facts.scaling = m_options.scaling;
  facts.base_lr = m_options.base_lr;
  facts.lr = lr0;
  facts.warmup_steps = m_facts.warmup_steps;
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

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::check_agreement(const data::interactions& train,
                                                            const data::interactions& test,
                                                            std::uint64_t train_digest) {
  const int world = m_reducer.world_size();
  std::uint64_t config = detail::options_digest(m_options);
  std::uint64_t data_digest = train_digest ^ detail::mix64(test.digest());
  if constexpr (rank_local_sampler<Sampler>) {
    data_digest = detail::mix64(static_cast<std::uint64_t>(world));
    for (int r = 0; r < world; ++r) data_digest = detail::mix64(data_digest ^ m_sampler.rows_of(r));
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
      throw mismatch_error("tutti::trainer::fit(): ranks disagree on the " + std::string(names[f]) +
                           ": rank(s) " + differing + " differ from rank 0 (" +
                           std::to_string(all[f]) +
                           "); every rank must train the same data with the same options");
  }
}

}  // namespace tutti
