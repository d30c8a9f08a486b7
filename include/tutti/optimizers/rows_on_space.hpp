// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/rows_on_space.hpp
/// @brief The row-sparse step on a space the host cannot read (a GPU): kernels over the rows a
/// step touched, sized by the batch and bounded by a count that stays in the space's memory,
/// and skipped in the kernel when the step's finite guard says so. Nothing waits for the host.
#pragma once

#include <tutti/concepts/optimizer.hpp>
#include <tutti/config.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/algorithms.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

namespace tutti::detail {

/// Kernel over k < capacity: `fn(rows[k])` for the first `*count` rows, unless `*skip` is set.
template <class RowFn>
struct listed_rows_fn {
  RowFn fn;
  const std::int32_t* rows;
  const std::int32_t* count;
  const float* skip;  // the step's skip flag, or null
  TUTTI_HOST_DEVICE void operator()(std::size_t k) const {
    if (skip != nullptr && *skip != 0.f) return;
    if (k >= static_cast<std::size_t>(*count)) return;
    fn(static_cast<std::size_t>(rows[k]));
  }
};

/// Kernel over every row r of a segment: `fn(r)`, unless `*skip` is set.
template <class RowFn>
struct every_row_fn {
  RowFn fn;
  const float* skip;
  TUTTI_HOST_DEVICE void operator()(std::size_t r) const {
    if (skip != nullptr && *skip != 0.f) return;
    fn(r);
  }
};

/// Row function: an element kernel (`kernel(i)` over arena positions) on every value of row
/// `r` of the segment at `offset` with `cols` columns.
template <class Kernel>
struct row_values_fn {
  Kernel kernel;
  std::size_t offset;
  std::size_t cols;
  TUTTI_HOST_DEVICE void operator()(std::size_t r) const {
    const std::size_t lo = offset + r * cols;
    for (std::size_t c = 0; c < cols; ++c) kernel(lo + c);
  }
};

/// Row function: as `row_values_fn`, with the element kernel read from the space's memory (an
/// optimizer's `row_step_values`), so the same kernel serves every step.
template <class Kernel>
struct row_values_at_fn {
  const Kernel* kernel;
  std::size_t offset;
  std::size_t cols;
  TUTTI_HOST_DEVICE void operator()(std::size_t r) const {
    const Kernel k = *kernel;
    const std::size_t lo = offset + r * cols;
    for (std::size_t c = 0; c < cols; ++c) k(lo + c);
  }
};

/// Checks a selection on the space against the layout; `fn` names the caller.
inline void check_rows_on_space(const char* fn, const parameter_layout& layout,
                                row_selection_on_space rows) {
  TUTTI_EXPECTS(rows.size() == layout.segments().size(), fn,
                "the row selection has " + std::to_string(rows.size()) +
                    " entries for a layout of " + std::to_string(layout.segments().size()) +
                    " segments; expected one per segment");
}

/// For every segment k of `layout`: the row function `make(k)` over the selection's rows of k
/// (every row of a whole segment), one kernel per segment on `space`; every kernel returns at
/// once when `skip` is set.
template <class Space, class MakeRowFn>
void for_each_row_on_space(const Space& space, const parameter_layout& layout,
                           row_selection_on_space sel, const float* skip, const MakeRowFn& make) {
  const auto& segs = layout.segments();
  for (std::size_t k = 0; k < segs.size(); ++k) {
    auto fn = make(k);
    if (sel[k].whole)
      parallel_for(space, segs[k].rows, every_row_fn<decltype(fn)>{fn, skip});
    else if (sel[k].capacity > 0)
      parallel_for(space, sel[k].capacity,
                   listed_rows_fn<decltype(fn)>{fn, sel[k].rows, sel[k].count, skip});
  }
}

/// `step_rows_on_space` of an element-wise optimizer `o` (its `with_row_update` hands an
/// `elementwise_rows_fn`): the element kernel over every value of the selected rows, a kernel
/// per segment; `fn` names the caller.
template <class O, class Space>
void elementwise_step_rows_on_space(const O& o, const char* fn, const Space& space,
                                    const parameter_layout& layout, std::span<float> params,
                                    std::span<const float> grads, std::span<float> state,
                                    row_selection_on_space rows, const float* skip, float lr,
                                    std::uint64_t step) {
  check_rows_on_space(fn, layout, rows);
  o.with_row_update(layout, params, grads, state, lr, step, [&](const auto& run_fn) {
    using kernel_t = std::decay_t<decltype(run_fn.kernel)>;
    const kernel_t kernel = run_fn.kernel;
    for_each_row_on_space(space, layout, rows, skip, [&](std::size_t k) {
      const segment& s = layout.segments()[k];
      return row_values_fn<kernel_t>{kernel, s.offset, s.cols};
    });
  });
}

/// `step_rows_on_space` of an element-wise optimizer whose element kernel `*kernel` is in the
/// space's memory (`tutti::optimizer_steps_rows_from_memory`); `fn` names the caller.
template <class Kernel, class Space>
void elementwise_step_rows_at(const char* fn, const Space& space, const parameter_layout& layout,
                              row_selection_on_space rows, const float* skip,
                              const Kernel* kernel) {
  check_rows_on_space(fn, layout, rows);
  for_each_row_on_space(space, layout, rows, skip, [&](std::size_t k) {
    const segment& s = layout.segments()[k];
    return row_values_at_fn<Kernel>{kernel, s.offset, s.cols};
  });
}

}  // namespace tutti::detail
