// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/rowwise_adagrad.hpp
/// @brief `tutti::rowwise_adagrad`: Adagrad with one accumulator per embedding row.
#pragma once

#include <tutti/config.hpp>
#include <tutti/error.hpp>
#include <tutti/optimizers/row_sparse.hpp>
#include <tutti/optimizers/rows_on_space.hpp>
#include <tutti/optimizers/sgd.hpp>  // detail::check_optimizer_step
#include <tutti/space/algorithms.hpp>
#include <tutti/space/traits.hpp>
#include <tutti/state_map.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tutti {
namespace detail {

/// Row-wise Adagrad on row `r` of a `cols`-wide table: one accumulator for the row.
struct rowwise_adagrad_row_fn {
  float* p;        // the table's first value
  const float* g;  // its gradient
  float* acc;      // one float per row
  std::size_t cols;
  float lr;
  float eps;
  TUTTI_HOST_DEVICE void operator()(std::size_t r) const { update(r, g + r * cols); }

  /// Row r with gradient `gr`.
  TUTTI_HOST_DEVICE void update(std::size_t r, const float* gr) const {
    float* pr = p + r * cols;
    float sq = 0.f;
    for (std::size_t c = 0; c < cols; ++c) sq += gr[c] * gr[c];
    const float a = acc[r] + sq / static_cast<float>(cols);
    acc[r] = a;
    const float rate = lr / (std::sqrt(a) + eps);
    for (std::size_t c = 0; c < cols; ++c) pr[c] -= rate * gr[c];
  }
};

/// Element-wise Adagrad on value `i`.
struct adagrad_value_fn {
  float* p;
  const float* g;
  float* acc;  // one float per value
  float lr;
  float eps;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { update(i, g[i]); }

  /// Value i with gradient `d`.
  TUTTI_HOST_DEVICE void update(std::size_t i, float d) const {
    const float a = acc[i] + d * d;
    acc[i] = a;
    p[i] -= lr * d / (std::sqrt(a) + eps);
  }
};

/// A run of rows of one segment: row-wise for an embedding table, value-wise otherwise.
/// Kernel over one row r of a segment: the row-wise update on an embedding table, element-wise
/// Adagrad on each value of the row elsewhere (a device's row-sparse step).
struct rowwise_adagrad_any_row_fn {
  rowwise_adagrad_row_fn row;  // the segment's values, gradient and accumulators
  bool per_row;                // an embedding table: one accumulator per row
  TUTTI_HOST_DEVICE void operator()(std::size_t r) const {
    if (per_row) {
      row(r);
      return;
    }
    const adagrad_value_fn f{row.p, row.g, row.acc, row.lr, row.eps};
    for (std::size_t c = 0; c < row.cols; ++c) f(r * row.cols + c);
  }
};

/// What changes from step to step in row-wise Adagrad (`rowwise_adagrad::row_step_values`).
struct rowwise_adagrad_values {
  float lr;
};

/// `rowwise_adagrad_any_row_fn` with the rate read from the space's memory.
struct rowwise_adagrad_any_row_at_fn {
  rowwise_adagrad_any_row_fn fn;  // its rate is not read
  const rowwise_adagrad_values* values;
  TUTTI_HOST_DEVICE void operator()(std::size_t r) const {
    rowwise_adagrad_any_row_fn f = fn;
    f.row.lr = values->lr;
    f(r);
  }
};

struct rowwise_adagrad_run_fn {
  float* p;
  const float* g;
  float* state;
  const segment* segments;
  const std::size_t* state_offsets;
  float lr;
  float eps;
  void operator()(const row_run& run) const {
    const segment& s = segments[run.segment];
    float* acc = state + state_offsets[run.segment];
    const float* gr = g + run.grad;  // the run's gradient, row after row
    if (s.kind == segment_kind::embedding) {
      const rowwise_adagrad_row_fn f{p + s.offset, nullptr, acc, s.cols, lr, eps};
      for (auto r = run.first; r < run.last; ++r, gr += s.cols) f.update(std::size_t(r), gr);
    } else {
      const adagrad_value_fn f{p + s.offset, nullptr, acc, lr, eps};
      const std::size_t hi = static_cast<std::size_t>(run.last) * s.cols;
      for (std::size_t i = static_cast<std::size_t>(run.first) * s.cols; i < hi; ++i, ++gr)
        f.update(i, *gr);
    }
  }
  void prefetch(const row_run& run) const {
    const segment& s = segments[run.segment];
    const std::size_t at = s.offset + static_cast<std::size_t>(run.first) * s.cols;
    const std::size_t bytes =
        static_cast<std::size_t>(run.last - run.first) * s.cols * sizeof(float);
    prefetch_bytes(p + at, bytes, true);
    prefetch_bytes(g + run.grad, bytes);
    const std::size_t per_row = s.kind == segment_kind::embedding ? 1 : s.cols;
    prefetch_bytes(
        state + state_offsets[run.segment] + static_cast<std::size_t>(run.first) * per_row,
        sizeof(float), true, 1);
  }
};

}  // namespace detail

/// Row-wise Adagrad, the default optimizer of production recommender trainers (FBGEMM's
/// `EXACT_ROWWISE_ADAGRAD`, TorchRec): an embedding row keeps **one** accumulator, the running
/// sum of its gradient's mean square, and every value of the row steps by the same rate:
///
///     G_r += mean_c(g_rc²)
///     p_rc -= lr · g_rc / (sqrt(G_r) + eps)
///
/// Every other segment (dense layers, biases) takes element-wise Adagrad (`G_i += g_i²`,
/// PyTorch's `Adagrad` with `initial_accumulator_value = 0`, `lr_decay = 0`, but with `eps` as
/// here). State is one float per embedding row and one per other value: for a 64-wide table
/// 1/128 of Adam's. On a row-sparse step only touched rows move; a row that is not touched
/// has a zero gradient, so its update would be nothing anyway: row-wise Adagrad on a row-sparse
/// step **is** row-wise Adagrad, without approximation.
struct rowwise_adagrad {
  /// Added to the denominator; finite and > 0.
  float eps = 1e-8f;

  void validate() const {
    TUTTI_EXPECTS(std::isfinite(eps) && eps > 0.f, "tutti::rowwise_adagrad",
                  "eps is " + std::to_string(eps) + "; expected a finite value > 0");
  }

  /// Without a layout every value is its own row: n floats.
  std::size_t state_size(std::size_t parameters) const { return parameters; }
  /// One float per row of an embedding segment, one per value elsewhere.
  std::size_t state_size(const parameter_layout& layout) const {
    return state_offsets(layout).back();
  }
  /// Where each row's state lies: one accumulator per embedding row, one per value elsewhere,
  /// segment after segment (tutti/state_map.hpp).
  tutti::state_map state_map(const parameter_layout& layout) const {
    const std::vector<std::size_t> at = state_offsets(layout);
    tutti::state_map map;
    for (std::size_t s = 0; s < layout.segments().size(); ++s) {
      const segment& seg = layout.segments()[s];
      map.push_back({{at[s], seg.kind == segment_kind::embedding ? 1 : seg.cols}});
    }
    return map;
  }
  /// Wants the row-sparse step.
  bool row_sparse() const noexcept { return true; }

  /// Element-wise Adagrad over the arena (no layout: no rows).
  template <execution_space Space>
  void step(const Space& space, std::span<float> params, std::span<const float> grads,
            std::span<float> state, float lr, std::uint64_t /*step*/) const {
    validate();
    const std::size_t n = params.size();
    detail::check_optimizer_step("tutti::rowwise_adagrad::step", n, grads.size(), state.size(),
                                 state_size(n), lr);
    parallel_for(space, n,
                 detail::adagrad_value_fn{params.data(), grads.data(), state.data(), lr, eps});
  }

  /// Every row of every segment of `layout` (the trainer's dense step, and a device space's).
  template <execution_space Space>
  void step(const Space& space, const parameter_layout& layout, std::span<float> params,
            std::span<const float> grads, std::span<float> state, float lr,
            std::uint64_t /*step*/) const {
    validate();
    const std::vector<std::size_t> at = state_offsets(layout);
    detail::check_optimizer_step("tutti::rowwise_adagrad::step", params.size(), grads.size(),
                                 state.size(), at.back(), lr);
    for (std::size_t k = 0; k < layout.segments().size(); ++k) {
      const segment& s = layout.segments()[k];
      if (s.kind == segment_kind::embedding)
        parallel_for(
            space, s.rows,
            detail::rowwise_adagrad_row_fn{params.data() + s.offset, grads.data() + s.offset,
                                           state.data() + at[k], s.cols, lr, eps});
      else
        parallel_for(space, s.size(),
                     detail::adagrad_value_fn{params.data() + s.offset, grads.data() + s.offset,
                                              state.data() + at[k], lr, eps});
    }
  }

  /// The selected rows and whole segments of `layout`; nothing else is read or written.
  template <execution_space Space>
  requires(Space::host_accessible) void step_rows(const Space& space,
                                                  const parameter_layout& layout,
                                                  std::span<float> params,
                                                  std::span<const float> grads,
                                                  std::span<float> state, row_selection rows,
                                                  float lr, std::uint64_t step) const {
    detail::step_rows_by_update(*this, "tutti::rowwise_adagrad::step_rows", space, layout, params,
                                grads, state, rows, lr, step);
  }

  /// The same step on a space the host cannot read (`tutti::optimizer_steps_rows_on_space`).
  template <execution_space Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout,
                          std::span<float> params, std::span<const float> grads,
                          std::span<float> state, row_selection_on_space rows, const float* skip,
                          float lr, std::uint64_t step) const {
    detail::check_rows_on_space("tutti::rowwise_adagrad::step_rows_on_space", layout, rows);
    // The host's run function holds the checked arrays and each segment's accumulators.
    with_row_update(layout, params, grads, state, lr, step, [&](const auto& run) {
      detail::for_each_row_on_space(space, layout, rows, skip, [&](std::size_t k) {
        const segment& s = layout.segments()[k];
        return detail::rowwise_adagrad_any_row_fn{
            {run.p + s.offset, run.g + s.offset, run.state + run.state_offsets[k], s.cols, run.lr,
             run.eps},
            s.kind == segment_kind::embedding};
      });
    });
  }

  /// The same step with the rate in the space's memory, `*values`
  /// (`tutti::optimizer_steps_rows_from_memory`).
  template <execution_space Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout,
                          std::span<float> params, std::span<const float> grads,
                          std::span<float> state, row_selection_on_space rows, const float* skip,
                          const detail::rowwise_adagrad_values* values) const {
    detail::check_rows_on_space("tutti::rowwise_adagrad::step_rows_on_space", layout, rows);
    const std::vector<std::size_t> at = state_offsets(layout);
    detail::for_each_row_on_space(space, layout, rows, skip, [&](std::size_t k) {
      const segment& s = layout.segments()[k];
      const detail::rowwise_adagrad_row_fn row{params.data() + s.offset,
                                               grads.data() + s.offset,
                                               state.data() + at[k],
                                               s.cols,
                                               0.f,
                                               eps};
      return detail::rowwise_adagrad_any_row_at_fn{{row, s.kind == segment_kind::embedding},
                                                   values};
    });
  }

  /// The rate of a step, checked against the arenas.
  detail::rowwise_adagrad_values row_step_values(const parameter_layout& layout,
                                                 std::span<float> params,
                                                 std::span<const float> grads,
                                                 std::span<float> state, float lr,
                                                 std::uint64_t /*step*/) const {
    validate();
    detail::check_optimizer_step("tutti::rowwise_adagrad", params.size(), grads.size(),
                                 state.size(), state_size(layout), lr);
    return {lr};
  }

  /// `use(fn)` with this step as a function of one run of rows (`tutti::optimizer_fuses_rows`).
  template <class Use>
  void with_row_update(const parameter_layout& layout, std::span<float> params,
                       std::span<const float> grads, std::span<float> state, float lr,
                       std::uint64_t /*step*/, Use&& use) const {
    validate();
    const std::vector<std::size_t> at = state_offsets(layout);
    detail::check_optimizer_step("tutti::rowwise_adagrad::with_row_update", params.size(),
                                 grads.size(), state.size(), at.back(), lr, true);
    use(detail::rowwise_adagrad_run_fn{params.data(), grads.data(), state.data(),
                                       layout.segments().data(), at.data(), lr, eps});
  }

 private:
  // Where each segment's accumulators start in the state, then the total.
  static std::vector<std::size_t> state_offsets(const parameter_layout& layout) {
    std::vector<std::size_t> at{0};
    for (const segment& s : layout.segments())
      at.push_back(at.back() + (s.kind == segment_kind::embedding ? s.rows : s.size()));
    return at;
  }
};

}  // namespace tutti
