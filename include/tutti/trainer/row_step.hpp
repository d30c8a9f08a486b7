// SPDX-License-Identifier: Apache-2.0
/// @file trainer/row_step.hpp
/// @brief The trainer's row-sparse step: the rows a step touched, per segment, on this rank and
/// over all ranks; the finite check and the zeroing over those rows and the dense segments.
#pragma once

#include <tutti/detail/finite.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/layout.hpp>
#include <tutti/optimizers/row_sparse.hpp>
#include <tutti/trainer/noise_scale.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tutti::detail {

/// Values of a run's gradient.
inline std::size_t run_values(const segment* segments, const row_run& r) {
  return static_cast<std::size_t>(r.last - r.first) * segments[r.segment].cols;
}

/// Host: asks for the first lines of a run's gradient rows (see detail/prefetch.hpp).
inline void prefetch_gradient_run(const float* g, const segment* segments, const row_run& r,
                                  bool write) {
  prefetch_bytes(g + r.grad, run_values(segments, r) * sizeof(float), write);
}

/// Host: 1 when a run of rows of the gradient holds an infinity or a NaN.
struct nonfinite_run_fn {
  const float* g;
  const segment* segments;
  std::atomic<unsigned>* bad;
  void operator()(const row_run& r) const {
    const std::size_t lo = r.grad, hi = r.grad + run_values(segments, r);
    unsigned found = 0;
    for (std::size_t i = lo; i < hi; ++i) found |= finite_value(g[i]) ? 0u : 1u;
    if (found) bad->store(1u, std::memory_order_relaxed);
  }
  void prefetch(const row_run& r) const { prefetch_gradient_run(g, segments, r, false); }
};

/// Host: adds Σ g² over a run of rows of the gradient to `sum`.
struct squared_run_fn {
  const float* g;
  const segment* segments;
  std::atomic<double>* sum;
  void operator()(const row_run& r) const {
    const std::size_t lo = r.grad, hi = r.grad + run_values(segments, r);
    sum->fetch_add(squared_sum(g, lo, hi), std::memory_order_relaxed);
  }
  void prefetch(const row_run& r) const { prefetch_gradient_run(g, segments, r, false); }
};

/// Host: zeroes a run of rows of the gradient.
struct zero_run_fn {
  float* g;
  const segment* segments;
  void operator()(const row_run& r) const { std::fill_n(g + r.grad, run_values(segments, r), 0.f); }
  void prefetch(const row_run& r) const { prefetch_gradient_run(g, segments, r, true); }
};

/// Host: a run function, then the run's gradient zeroed while it is in cache.
template <class Fn>
struct then_zero_run_fn {
  Fn fn;
  float* g;
  const segment* segments;
  void operator()(const row_run& r) const {
    fn(r);
    zero_run_fn{g, segments}(r);
  }
  void prefetch(const row_run& r) const { prefetch_run(fn, r); }
};

/// What the row-sparse step keeps between its phases. The gradient arena is all zeros between
/// steps: the model adds into it, and after the optimizer the rows it touched (on any rank) and
/// the dense segments are zeroed again, so no step pays for the whole table. The arena is the
/// layout's, or a gradient in slots sized by the batch (`tutti::model_writes_gradient_slots`):
/// the k-th touched row of a segment at row k of that segment in `slots`.
class row_step {
 public:
  /// `sparse[k]` is the layout index of the k-th row-sparse segment; `slots`, where given, the
  /// layout of a gradient in slots.
  void plan(const parameter_layout& layout, std::vector<std::size_t> sparse,
            const parameter_layout* slots = nullptr) {
    m_layout = layout;
    m_in_slots = slots != nullptr;
    if (slots != nullptr) m_slots = *slots;
    m_sparse = std::move(sparse);
    m_selection.assign(layout.segments().size(), segment_rows{});
    std::vector<segment_rows> dense(m_selection);
    for (std::size_t k : m_sparse) dense[k] = segment_rows{false, {}};
    m_dense_runs.build(m_layout, dense, slots_layout());
  }

  /// The selection of `touched[k]` for the k-th row-sparse segment, whole dense segments; its
  /// runs are built once here for the check, the optimizer's caller and the zeroing.
  row_selection select(std::span<const std::vector<std::int32_t>> touched) {
    for (std::size_t k = 0; k < m_sparse.size(); ++k)
      m_selection[m_sparse[k]] = segment_rows{false, touched[k]};
    m_runs.build(m_layout, m_selection, slots_layout());
    return m_selection;
  }

  /// The current selection.
  row_selection selection() const noexcept { return m_selection; }

  /// Values the current selection covers.
  std::size_t values() const noexcept { return m_runs.values(); }

  /// True when the current selection's gradient values hold an infinity or a NaN.
  template <class Space>
  bool any_nonfinite(const Space& space, const float* grads) const {
    return any_nonfinite_in(space, m_runs, grads);
  }

  /// True when the dense segments' gradient values hold an infinity or a NaN (the row-sparse
  /// segments' rows left to a model that checked them as it wrote them).
  template <class Space>
  bool any_nonfinite_dense(const Space& space, const float* grads) const {
    return any_nonfinite_in(space, m_dense_runs, grads);
  }

  /// Σ g² over the current selection's gradient values (the rest of the arena is zero).
  template <class Space>
  double squared_norm(const Space& space, const float* grads) const {
    std::atomic<double> sum{0.0};
    m_runs.for_each(space, squared_run_fn{grads, m_layout.segments().data(), &sum});
    return sum.load();
  }

  /// Zeroes the current selection's gradient values.
  template <class Space>
  void zero(const Space& space, float* grads) const {
    m_runs.for_each(space, zero_run_fn{grads, m_layout.segments().data()});
  }

  /// `fn(run)` for every run of the current selection, each run's gradient zeroed right after
  /// (one pass where `fn`'s and `zero`'s would be two).
  template <class Space, class Fn>
  void visit_then_zero(const Space& space, const Fn& fn, float* grads) const {
    m_runs.for_each(space, then_zero_run_fn<Fn>{fn, grads, m_layout.segments().data()});
  }

  /// Replaces `touched` by the union of every rank's touched rows (one all_gather of the counts,
  /// one of the ids, two to a 64-bit word, padded to the largest count); returns the bytes in the
  /// ledger's convention (a gather of b bytes per rank counts as an allreduce of W·b/2).
  template <class Reducer>
  std::uint64_t merge_ranks(Reducer& reducer, std::vector<std::vector<std::int32_t>>& touched) {
    const auto world = static_cast<std::size_t>(reducer.world_size());
    const std::size_t segs = touched.size();
    if (world == 1 || segs == 0) return 0;
    TUTTI_EXPECTS(!m_in_slots, "tutti::trainer",
                  "a gradient in slots is one rank's; expected the layout's arena on " +
                      std::to_string(world) + " ranks");
    m_counts.resize(segs);
    m_all_counts.resize(segs * world);
    for (std::size_t k = 0; k < segs; ++k) m_counts[k] = touched[k].size();
    reducer.all_gather(std::span<const std::uint64_t>(m_counts),
                       std::span<std::uint64_t>(m_all_counts));
    m_width.assign(segs + 1, 0);
    for (std::size_t k = 0; k < segs; ++k) {
      std::uint64_t most = 0;
      for (std::size_t r = 0; r < world; ++r) most = std::max(most, m_all_counts[r * segs + k]);
      m_width[k + 1] = m_width[k] + static_cast<std::size_t>((most + 1) / 2);
    }
    const std::size_t block = m_width[segs];
    std::uint64_t bytes = world * segs * sizeof(std::uint64_t) / 2;
    if (block == 0) return bytes;
    m_mine.assign(block, 0);
    for (std::size_t k = 0; k < segs; ++k)
      for (std::size_t j = 0; j < touched[k].size(); ++j)
        m_mine[m_width[k] + j / 2] |= std::uint64_t(std::uint32_t(touched[k][j])) << (32 * (j % 2));
    m_all.resize(block * world);
    reducer.all_gather(std::span<const std::uint64_t>(m_mine), std::span<std::uint64_t>(m_all));
    bytes += world * block * sizeof(std::uint64_t) / 2;
    for (std::size_t k = 0; k < segs; ++k) {
      std::vector<std::int32_t>& out = touched[k];
      out.clear();
      for (std::size_t r = 0; r < world; ++r) {
        const std::uint64_t* from = m_all.data() + r * block + m_width[k];
        for (std::uint64_t j = 0; j < m_all_counts[r * segs + k]; ++j)
          out.push_back(std::int32_t(std::uint32_t(from[j / 2] >> (32 * (j % 2)))));
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
    }
    return bytes;
  }

 private:
  const parameter_layout* slots_layout() const noexcept { return m_in_slots ? &m_slots : nullptr; }

  template <class Space>
  bool any_nonfinite_in(const Space& space, const row_runs& runs, const float* grads) const {
    std::atomic<unsigned> bad{0};
    runs.for_each(space, nonfinite_run_fn{grads, m_layout.segments().data(), &bad});
    return bad.load() != 0;
  }

  parameter_layout m_layout;
  bool m_in_slots = false;   // a gradient in slots, or the layout's own arena
  parameter_layout m_slots;  // the slots' layout
  std::vector<std::size_t> m_sparse;
  std::vector<segment_rows> m_selection;
  row_runs m_runs;
  row_runs m_dense_runs;  // the dense segments alone
  std::vector<std::uint64_t> m_counts, m_all_counts, m_mine, m_all;
  std::vector<std::size_t> m_width;
};

}  // namespace tutti::detail
