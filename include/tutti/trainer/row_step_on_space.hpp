// SPDX-License-Identifier: Apache-2.0
/// @file trainer/row_step_on_space.hpp
/// @brief The trainer's row-sparse step on a space the host cannot read (a GPU): the rows a
/// step touched, per segment, as the model found them in the space's memory; the finite check
/// and the zeroing over those rows and the dense segments, as kernels sized by the batch. No
/// count is read back, so a step never waits for the host.
#pragma once

#include <tutti/concepts/model.hpp>
#include <tutti/config.hpp>
#include <tutti/detail/finite.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tutti::detail {

/// Kernel over t < capacity × cols of a listed segment: sets both flags when a value of a
/// touched row is an infinity or a NaN.
struct nonfinite_listed_fn {
  const float* g;  // the segment's first gradient value
  std::size_t cols;
  const std::int32_t* rows;
  const std::int32_t* count;
  float* flag;   // this rank's flag of the step
  float* entry;  // its log entry
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t k = t / cols;
    if (k >= static_cast<std::size_t>(*count)) return;
    if (!finite_value(g[static_cast<std::size_t>(rows[k]) * cols + t % cols])) {
      *flag = 1.f;
      *entry = 1.f;
    }
  }
};

/// Kernel over the values of a whole segment: as `nonfinite_listed_fn`.
struct nonfinite_whole_fn {
  const float* g;
  float* flag;
  float* entry;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    if (!finite_value(g[i])) {
      *flag = 1.f;
      *entry = 1.f;
    }
  }
};

/// Kernel over t < capacity × cols of a listed segment: zeroes the touched rows' gradient.
struct zero_listed_fn {
  float* g;
  std::size_t cols;
  const std::int32_t* rows;
  const std::int32_t* count;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t k = t / cols;
    if (k < static_cast<std::size_t>(*count))
      g[static_cast<std::size_t>(rows[k]) * cols + t % cols] = 0.f;
  }
};

/// What the row-sparse step keeps between its phases on a device space. As on the host
/// (detail::row_step) the gradient arena is zero between steps: the model adds into it, and
/// after the update the touched rows and the dense segments are zeroed again.
template <class Space>
class row_step_on_space {
 public:
  /// `sparse[k]` is the layout index of the k-th row-sparse segment.
  void plan(const Space& space, const parameter_layout& layout, std::vector<std::size_t> sparse) {
    m_none = buffer<std::int32_t, Space>(1, space);
    fill(space, m_none.span(), 0);
    m_layout = layout;
    m_sparse = std::move(sparse);
    m_selection.assign(layout.segments().size(), segment_rows_on_space{});
    clear();
  }

  /// No rows touched (a step whose rank had no samples).
  void clear() {
    for (const std::size_t s : m_sparse)
      m_selection[s] = segment_rows_on_space{false, nullptr, m_none.data(), 0};
  }

  /// The rows the model's last `loss_and_gradient` call touched, whole dense segments.
  template <class Model>
  requires model_reports_touched_rows_on_space<Model>
  void select(const Model& model) {
    for (const std::size_t s : m_sparse) m_selection[s] = model.touched_rows_on_space(s);
  }

  row_selection_on_space selection() const noexcept { return m_selection; }

  /// The layout indices of the row-sparse segments.
  std::span<const std::size_t> sparse() const noexcept { return m_sparse; }

  /// Replaces the rows of segment `s` (the union of every rank's, after an exchange).
  void set(std::size_t s, const segment_rows_on_space& rows) { m_selection[s] = rows; }

  /// Kernels that set `*flag` and `*entry` when a selected gradient value is not finite.
  void check(const Space& space, const float* g, float* flag, float* entry) const {
    const auto& segs = m_layout.segments();
    for (std::size_t s = 0; s < segs.size(); ++s) {
      const segment_rows_on_space& sel = m_selection[s];
      const float* at = g + segs[s].offset;
      if (sel.whole)
        parallel_for(space, segs[s].size(), nonfinite_whole_fn{at, flag, entry});
      else if (sel.capacity > 0)
        parallel_for(space, sel.capacity * segs[s].cols,
                     nonfinite_listed_fn{at, segs[s].cols, sel.rows, sel.count, flag, entry});
    }
  }

  /// Kernels that zero the selected gradient values.
  void zero(const Space& space, float* g) const {
    const auto& segs = m_layout.segments();
    for (std::size_t s = 0; s < segs.size(); ++s) {
      const segment_rows_on_space& sel = m_selection[s];
      float* at = g + segs[s].offset;
      if (sel.whole)
        fill(space, std::span<float>(at, segs[s].size()), 0.f);
      else if (sel.capacity > 0)
        parallel_for(space, sel.capacity * segs[s].cols,
                     zero_listed_fn{at, segs[s].cols, sel.rows, sel.count});
    }
  }

 private:
  parameter_layout m_layout;
  std::vector<std::size_t> m_sparse;
  std::vector<segment_rows_on_space> m_selection;
  buffer<std::int32_t, Space> m_none;  // a count of 0, for a step without rows
};

}  // namespace tutti::detail
