// SPDX-License-Identifier: Apache-2.0
/// @file trainer/memory_forecast.hpp
/// @brief The trainer's memory accounts forecast before it is built: from the model's layout, the
/// optimizer, the options and the data's shape, by the rules the trainer sizes its arenas and
/// buffers with (which it takes from here: the optimizer's state, the row-sparse segments, the
/// gradient in slots). `tutti plan` answers "does it fit" with it; tests hold it equal to what a
/// fit reports.
#pragma once

#include <tutti/concepts.hpp>
#include <tutti/layout.hpp>
#include <tutti/memory_accounts.hpp>
#include <tutti/space/host.hpp>
#include <tutti/trainer/options.hpp>
#include <tutti/trainer/step_kernels.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

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

/// Whether segment `i` of `model`'s layout is row-sparse: as the model names it, else its
/// embedding segments.
template <class Model>
bool segment_row_sparse(const Model& model, std::size_t i) {
  if constexpr (model_names_row_sparse<Model>)
    return static_cast<bool>(model.row_sparse(i));
  else
    return model.layout().segments()[i].kind == segment_kind::embedding;
}

/// The layout of a gradient in slots: each row-sparse segment (`listed(i)`) keeps at most
/// `batch_rows` rows (a step's batch gathers no more distinct rows), the others all of theirs.
template <class Listed>
parameter_layout gradient_slot_layout(const parameter_layout& layout, Listed&& listed,
                                      std::size_t batch_rows) {
  parameter_layout slots;
  const auto& segs = layout.segments();
  for (std::size_t i = 0; i < segs.size(); ++i)
    slots.add(segs[i].name, listed(i) ? std::min(segs[i].rows, batch_rows) : segs[i].rows,
              segs[i].cols, segs[i].kind);
  return slots;
}

/// Whether the optimizer takes the row-sparse step (its runtime choice, where it has one).
template <class Optimizer>
bool optimizer_wants_row_step(const Optimizer& o) {
  if constexpr (optimizer_steps_rows<Optimizer, host_space>)
    return static_cast<bool>(o.row_sparse());
  else
    return false;
}

}  // namespace detail

/// The data a fit will train on and how its ranks share it, as far as memory goes.
struct memory_run {
  std::uint64_t train_rows = 0;  ///< the training rows (one record and one slot each)
  /// The (learner, course) pairs among them, which the negatives' table lists; 0: `train_rows`
  /// (a log read as positives holds each pair once).
  std::uint64_t distinct_pairs = 0;
  std::uint64_t learners = 0;  ///< the user index space (the negatives' table's offsets)
  /// Every training row has the same label (a log of positives): the step's copy holds a
  /// learner and a course a row (8 bytes), else a label too (12).
  bool one_label = true;
  std::uint64_t courses = 0;  ///< the item index space (the popularity sampler's tables)
  int world = 1;              ///< ranks
  bool pad_tail = true;       ///< a short rank pads its shard (`tail_policy::pad`), else drops
  /// The reducer lends its own gradient arena (a shared-memory reducer), which the trainer then
  /// does not allocate.
  bool reducer_lends_gradients = false;
  /// The sampler writes any run of its slots' positions (`tutti::sampler_fills_slots`, as
  /// `shuffled_shards` does) and holds the whole training set's: on a host, each step deals its
  /// own positions and no shard of a position a slot is held (not with `on_batch`).
  bool positions_by_step = true;
};

/// The accounts `fit_result::memory` reports for a fit of `model` with `optimizer` under
/// `options` on `run`'s data, one rank's, forecast without building anything. The model's space
/// decides where the arenas live and whether the step reads the shard in place (a host space);
/// the samplers are the ones whose shards hold every rank's positions (not rank-local data).
template <class Model, class Optimizer>
memory_accounts forecast_trainer_memory(const Model& model, const Optimizer& optimizer,
                                        const train_options& options, const memory_run& run) {
  using space_type = std::remove_cvref_t<decltype(model.space())>;
  constexpr bool host = space_type::host_accessible;
  constexpr std::uint64_t f32 = sizeof(float);
  const parameter_layout& layout = model.layout();
  const auto world = static_cast<std::uint64_t>(std::max(run.world, 1));
  const std::uint64_t negatives = options.negatives.per_positive;
  memory_accounts m;
  m.parameters = layout.total() * f32;
  m.optimizer_state = detail::optimizer_state_floats(optimizer, layout) * f32;

  // The gradient: in slots sized by the batch where the trainer lays it out so
  // (trainer::plan_gradient_slots), else the layout's arena; both end in the trailing floats.
  bool in_slots = false;
  if constexpr (host && model_writes_gradient_slots<Model> &&
                optimizer_fuses_rows<Optimizer, space_type>)
    in_slots = options.compact_gradient && detail::optimizer_wants_row_step(optimizer) &&
               world == 1 && options.accumulation <= 1 && !options.overlap_reduce;
  const std::size_t values =
      in_slots ? detail::gradient_slot_layout(
                     layout, [&](std::size_t i) { return detail::segment_row_sparse(model, i); },
                     options.batch * (negatives + 1))
                     .total()
               : layout.total();
  if (!(host && run.reducer_lends_gradients && !in_slots))
    m.gradients = (values + gradient_trailing_floats) * f32;

  // The records, and the step's buffers (trainer::make_buffers).
  if (!(host && options.rows_in_place))
    m.rows = run.train_rows *
             (run.one_label ? sizeof(detail::sample_pair) : sizeof(detail::sample_record));
  const std::uint64_t slots =
      run.pad_tail ? (run.train_rows + world - 1) / world : run.train_rows / world;
  const std::uint64_t local_batch = (options.batch + world - 1) / world;
  const std::uint64_t accumulation = std::max<std::size_t>(options.accumulation, 1);
  const std::uint64_t micro_batch = (local_batch + accumulation - 1) / accumulation;
  const std::uint64_t batch_rows = micro_batch * (negatives + 1);
  m.step_buffers = batch_rows * (2 * sizeof(std::int32_t) + 2 * sizeof(float)) +
                   sizeof(std::uint64_t);  // the batch's users, items, labels, weights; the key
  if (!host) m.step_buffers += slots * (sizeof(std::uint64_t) + sizeof(float));  // the copy
  const bool by_step = host && run.positions_by_step && !options.on_batch;
  if (by_step) m.step_buffers += local_batch * sizeof(std::uint64_t);  // one step's positions
  if (negatives > 0) {
    const std::uint64_t pairs = run.distinct_pairs ? run.distinct_pairs : run.train_rows;
    m.step_buffers +=
        (run.learners + 1) * detail::offset_bytes(pairs) + pairs * sizeof(std::int32_t);
    if (options.negatives.sampler == negative_sampler::popularity) {
      m.step_buffers += run.courses * sizeof(std::uint64_t);
      if (model.loss() == loss_kind::softmax) m.step_buffers += run.courses * f32;
    }
  }
  // The shard: a position a slot, none where each step deals its own (the weights are two
  // numbers: real slots lead), and each rank's count of real slots.
  m.shard = (by_step ? 0 : slots * sizeof(std::uint64_t)) + world * sizeof(std::uint64_t);
  return m;
}

}  // namespace tutti
