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

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tutti {
namespace detail {

/// A run of rows [first, last) of one segment; its gradient starts at value `grad` of the
/// gradient arena (the rows' own place, or their slots in a gradient sized by the batch).
struct row_run {
  std::uint32_t segment;
  std::int32_t first;
  std::int32_t last;
  std::size_t grad;
};

/// Calls `fn.prefetch(run)` where the run function has one: it asks for the memory the function
/// will read for `run` (the rows of a large table are cache misses; see detail/prefetch.hpp).
template <class Fn>
inline void prefetch_run(const Fn& fn, const row_run& run) {
  if constexpr (requires { fn.prefetch(run); }) fn.prefetch(run);
}

/// The runs of rows a selection covers (adjacent rows merged, whole segments cut into pieces of
/// about `host_block` values). One parallel pass gives each thread the same share of every
/// segment (a stripe): the rows of a large table are cache misses and those of a small one hits,
/// so an equal share of each keeps the threads equally busy, and a thread visits the same part
/// of each table as the model's grouped backward gave it (sorted rows, cut in equal halves).
class row_runs {
 public:
  /// Runs of `sel`. With `slots` (a gradient sized by the batch: the layout's segments, the
  /// listed ones with as many rows as they list), the gradient of the k-th row a segment lists
  /// is row k of that segment in `slots`, and a whole segment's is at its offset there.
  void build(const parameter_layout& layout, row_selection sel,
             const parameter_layout* slots = nullptr) {
    const auto& segs = layout.segments();
    TUTTI_EXPECTS(sel.size() == segs.size(), "tutti::row_selection",
                  "the selection has " + std::to_string(sel.size()) + " entries for a layout of " +
                      std::to_string(segs.size()) + " segments; expected one per segment");
    m_runs.clear();
    m_before.clear();
    m_segment_first.assign(1, 0);
    m_values = 0;
    if (slots != nullptr)
      TUTTI_EXPECTS(slots->segments().size() == segs.size(), "tutti::row_selection",
                    "the gradient slots have " + std::to_string(slots->segments().size()) +
                        " segments for a layout of " + std::to_string(segs.size()) +
                        "; expected one per segment");
    auto push = [&](std::uint32_t s, std::int32_t first, std::int32_t last, std::size_t cols,
                    std::size_t grad) {
      m_runs.push_back({s, first, last, grad});
      m_before.push_back(m_values);
      m_values += static_cast<std::size_t>(last - first) * cols;
    };
    for (std::size_t s = 0; s < segs.size(); ++s) {
      const auto seg = static_cast<std::uint32_t>(s);
      const std::size_t cols = segs[s].cols;
      const auto rows = static_cast<std::int32_t>(segs[s].rows);
      const std::size_t grad_offset =
          slots != nullptr ? slots->segments()[s].offset : segs[s].offset;
      const auto at = [&](std::size_t row) {
        return grad_offset + row * cols;
      };
      if (sel[s].whole) {
        const auto piece = static_cast<std::int32_t>(
            std::max<std::size_t>(1, host_block / std::max<std::size_t>(cols, 1)));
        for (std::int32_t r = 0; r < rows; r += piece)
          push(seg, r, std::min(rows, r + piece), cols, at(static_cast<std::size_t>(r)));
      } else {
        const std::span<const std::int32_t> ids = sel[s].rows;
        if (slots != nullptr)
          TUTTI_EXPECTS(ids.size() <= slots->segments()[s].rows, "tutti::row_selection",
                        "segment " + std::to_string(s) + " lists " + std::to_string(ids.size()) +
                            " rows for " + std::to_string(slots->segments()[s].rows) +
                            " gradient slots; expected at most one row per slot");
        for (std::size_t j = 0; j < ids.size();) {
          std::size_t k = j + 1;
          while (k < ids.size() && ids[k] == ids[k - 1] + 1) ++k;
          push(seg, ids[j], ids[k - 1] + 1, cols,
               slots != nullptr ? at(j) : at(static_cast<std::size_t>(ids[j])));
          j = k;
        }
      }
      m_segment_first.push_back(m_runs.size());
    }
    m_before.push_back(m_values);
  }

  /// Values (rows × cols) the runs cover.
  std::size_t values() const noexcept { return m_values; }
  std::span<const row_run> runs() const noexcept { return m_runs; }

  /// Calls `fn(run)` for every run: one parallel pass on a host space's policy, a stripe per
  /// thread (on the calling thread when there are fewer values than the space runs serially,
  /// or fewer than `host_block`).
  template <class Space, class Fn>
  requires(Space::host_accessible) void for_each(const Space& space, const Fn& fn) const {
    bool serial = m_values < host_block;
    if constexpr (requires { Space::serial_below; })
      serial = serial || m_values < Space::serial_below;
    const std::size_t stripes = serial ? 1 : host_threads();
    if (stripes <= 1) {
      visit(fn, 0, m_runs.size());
      return;
    }
    thrust::for_each_n(space.policy(), thrust::counting_iterator<std::size_t>(0), stripes,
                       stripe_fn<Fn>{fn, this, stripes});
  }

 private:
  template <class Fn>
  struct stripe_fn {
    Fn fn;
    const row_runs* runs;
    std::size_t stripes;
    void operator()(std::size_t t) const {
      for (std::size_t s = 0; s + 1 < runs->m_segment_first.size(); ++s) {
        const auto [lo, hi] = runs->stripe(s, t, stripes);
        runs->visit(fn, lo, hi);
      }
    }
  };

  /// Threads a parallel region of the calling thread runs on.
  static std::size_t host_threads() {
#if defined(_OPENMP)
    return static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
#else
    return 1;
#endif
  }

  /// Runs [lo, hi) of segment s that stripe t of `stripes` visits: those whose first value lies
  /// in the t-th of `stripes` equal shares of the segment's values.
  std::pair<std::size_t, std::size_t> stripe(std::size_t s, std::size_t t,
                                             std::size_t stripes) const {
    const std::size_t a = m_segment_first[s], b = m_segment_first[s + 1];
    const std::size_t v0 = m_before[a], span = m_before[b] - v0;
    auto at = [&](std::size_t share) {
      const std::size_t v = v0 + span / stripes * share + span % stripes * share / stripes;
      return static_cast<std::size_t>(std::lower_bound(m_before.begin() + std::ptrdiff_t(a),
                                                       m_before.begin() + std::ptrdiff_t(b), v) -
                                      m_before.begin());
    };
    return {t == 0 ? a : at(t), t + 1 == stripes ? b : at(t + 1)};
  }

  /// `fn(run)` for runs [lo, hi), asking for the memory of the run `prefetch_ahead` on.
  template <class Fn>
  void visit(const Fn& fn, std::size_t lo, std::size_t hi) const {
    for (std::size_t i = lo; i < hi; ++i) {
      if (i + prefetch_ahead < hi) prefetch_run(fn, m_runs[i + prefetch_ahead]);
      fn(m_runs[i]);
    }
  }

  std::vector<row_run> m_runs;
  std::vector<std::size_t> m_before;         // values before each run, then the total
  std::vector<std::size_t> m_segment_first;  // index of each segment's first run, then the end
  std::size_t m_values = 0;
};

/// Runs an element-wise kernel (`run(lo, hi, g)` over arena positions, the gradient of
/// position lo at g[0]) on the values of a run; the kernel's `g` is the gradient arena.
template <class Kernel>
struct elementwise_rows_fn {
  Kernel kernel;
  const segment* segments;
  void operator()(const row_run& r) const {
    const segment& s = segments[r.segment];
    kernel.run(s.offset + static_cast<std::size_t>(r.first) * s.cols,
               s.offset + static_cast<std::size_t>(r.last) * s.cols, kernel.g + r.grad);
  }
  void prefetch(const row_run& r) const {
    if constexpr (requires { kernel.prefetch(std::size_t{}, std::size_t{}, kernel.g); }) {
      const segment& s = segments[r.segment];
      kernel.prefetch(s.offset + static_cast<std::size_t>(r.first) * s.cols,
                      s.offset + static_cast<std::size_t>(r.last) * s.cols, kernel.g + r.grad);
    }
  }
};

/// `with_row_update` of an element-wise optimizer: `use` gets its element kernel of the step
/// (`kernel`, checked for a gradient that may be in slots) over runs of rows.
template <class Kernel, class Use>
void elementwise_row_update(const Kernel& kernel, const parameter_layout& layout, Use&& use) {
  use(elementwise_rows_fn<Kernel>{kernel, layout.segments().data()});
}

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
