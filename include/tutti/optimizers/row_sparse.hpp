// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/row_sparse.hpp
/// @brief The row-sparse step: which rows of each segment a step touched (`tutti::row_selection`),
/// the optional optimizer capability that updates only those (`tutti::optimizer_steps_rows`), and
/// the one parallel pass over them that the row-sparse optimizers share.
///
/// A step of a recommender reads a few thousand rows of tables of millions. A dense optimizer
/// pays for the whole table every step; a row-sparse one (`tutti::lazy_adam`,
/// `tutti::rowwise_adagrad`, `tutti::row_sparse_sgd`) visits the rows the step touched and every
/// row of the dense segments, so a step costs O(batch), not O(table). See docs/optimizers.md.
#pragma once

#include <tutti/concepts/optimizer.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/traits.hpp>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tutti {
namespace detail {

/// A run of rows [first, last) of one segment.
struct row_run {
  std::uint32_t segment;
  std::int32_t first;
  std::int32_t last;
};

/// Calls `fn.prefetch(run)` where the run function has one: it asks for the memory the function
/// will read for `run` (the rows of a large table are cache misses; see detail/prefetch.hpp).
template <class Fn>
inline void prefetch_run(const Fn& fn, const row_run& run) {
  if constexpr (requires { fn.prefetch(run); }) fn.prefetch(run);
}

/// The runs of rows a selection covers (adjacent rows merged, whole segments cut into pieces of
/// about `host_block` values), grouped so that one parallel pass over the groups visits each
/// run once with about `host_block` values per group.
class row_runs {
 public:
  void build(const parameter_layout& layout, row_selection sel) {
    const auto& segs = layout.segments();
    TUTTI_EXPECTS(sel.size() == segs.size(), "tutti::row_selection",
                  "the selection has " + std::to_string(sel.size()) + " entries for a layout of " +
                      std::to_string(segs.size()) + " segments; expected one per segment");
    m_runs.clear();
    m_groups.assign(1, 0);
    m_values = 0;
    std::size_t in_group = 0;
    auto push = [&](std::uint32_t s, std::int32_t first, std::int32_t last, std::size_t cols) {
      m_runs.push_back({s, first, last});
      const std::size_t v = static_cast<std::size_t>(last - first) * cols;
      m_values += v;
      in_group += v;
      if (in_group >= host_block) {
        m_groups.push_back(m_runs.size());
        in_group = 0;
      }
    };
    for (std::size_t s = 0; s < segs.size(); ++s) {
      const auto seg = static_cast<std::uint32_t>(s);
      const std::size_t cols = segs[s].cols;
      const auto rows = static_cast<std::int32_t>(segs[s].rows);
      if (sel[s].whole) {
        const auto piece = static_cast<std::int32_t>(
            std::max<std::size_t>(1, host_block / std::max<std::size_t>(cols, 1)));
        for (std::int32_t r = 0; r < rows; r += piece)
          push(seg, r, std::min(rows, r + piece), cols);
        continue;
      }
      const std::span<const std::int32_t> ids = sel[s].rows;
      for (std::size_t j = 0; j < ids.size();) {
        std::size_t k = j + 1;
        while (k < ids.size() && ids[k] == ids[k - 1] + 1) ++k;
        push(seg, ids[j], ids[k - 1] + 1, cols);
        j = k;
      }
    }
    if (m_groups.back() != m_runs.size()) m_groups.push_back(m_runs.size());
  }

  /// Values (rows × cols) the runs cover.
  std::size_t values() const noexcept { return m_values; }
  std::span<const row_run> runs() const noexcept { return m_runs; }

  /// Calls `fn(run)` for every run: one parallel pass over the groups on a host space's policy
  /// (on the calling thread when there is one group, or fewer values than the space runs
  /// serially).
  template <class Space, class Fn>
  requires(Space::host_accessible) void for_each(const Space& space, const Fn& fn) const {
    const std::size_t groups = m_groups.size() - 1;
    bool serial = groups <= 1;
    if constexpr (requires { Space::serial_below; })
      serial = serial || m_values < Space::serial_below;
    if (serial) {
      for (std::size_t i = 0; i < m_runs.size(); ++i) {
        if (i + prefetch_ahead < m_runs.size()) prefetch_run(fn, m_runs[i + prefetch_ahead]);
        fn(m_runs[i]);
      }
      return;
    }
    thrust::for_each_n(space.policy(), thrust::counting_iterator<std::size_t>(0), groups,
                       group_fn<Fn>{fn, m_runs.data(), m_groups.data()});
  }

 private:
  template <class Fn>
  struct group_fn {
    Fn fn;
    const row_run* runs;
    const std::size_t* groups;
    void operator()(std::size_t g) const {
      const std::size_t end = groups[g + 1];
      for (std::size_t i = groups[g]; i < end; ++i) {
        if (i + prefetch_ahead < end) prefetch_run(fn, runs[i + prefetch_ahead]);
        fn(runs[i]);
      }
    }
  };

  std::vector<row_run> m_runs;
  std::vector<std::size_t> m_groups;  // run index where each group starts, then the end
  std::size_t m_values = 0;
};

/// Runs an element-wise kernel (`run(lo, hi)` over arena positions) on the values of a run.
template <class Kernel>
struct elementwise_rows_fn {
  Kernel kernel;
  const segment* segments;
  void operator()(const row_run& r) const {
    const segment& s = segments[r.segment];
    kernel.run(s.offset + static_cast<std::size_t>(r.first) * s.cols,
               s.offset + static_cast<std::size_t>(r.last) * s.cols);
  }
  void prefetch(const row_run& r) const {
    if constexpr (requires { kernel.prefetch(std::size_t{}, std::size_t{}); }) {
      const segment& s = segments[r.segment];
      kernel.prefetch(s.offset + static_cast<std::size_t>(r.first) * s.cols,
                      s.offset + static_cast<std::size_t>(r.last) * s.cols);
    }
  }
};

/// Checks a `step_rows` call's spans against the layout; `fn` names the caller.
inline void check_row_step(const char* fn, const parameter_layout& layout, std::size_t params,
                           row_selection rows) {
  TUTTI_EXPECTS(params == layout.total(), fn,
                "params has " + std::to_string(params) + " values for a layout of " +
                    std::to_string(layout.total()) + "; expected the layout's arena");
  TUTTI_EXPECTS(rows.size() == layout.segments().size(), fn,
                "the row selection has " + std::to_string(rows.size()) +
                    " entries for a layout of " + std::to_string(layout.segments().size()) +
                    " segments; expected one per segment");
}

/// The host's `step_rows` of an optimizer `o` with `with_row_update`: the runs of `rows` built
/// once, the update over them in one parallel pass; `fn` names the caller.
template <class O, class Space>
void step_rows_by_update(const O& o, const char* fn, const Space& space,
                         const parameter_layout& layout, std::span<float> params,
                         std::span<const float> grads, std::span<float> state, row_selection rows,
                         float lr, std::uint64_t step) {
  check_row_step(fn, layout, params.size(), rows);
  row_runs runs;
  runs.build(layout, rows);
  o.with_row_update(layout, params, grads, state, lr, step,
                    [&](const auto& run_fn) { runs.for_each(space, run_fn); });
}

}  // namespace detail
}  // namespace tutti
