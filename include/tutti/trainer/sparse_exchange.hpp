// SPDX-License-Identifier: Apache-2.0
/// @file trainer/sparse_exchange.hpp
/// @brief The sparse exchange of the gradient: the row-sparse segments (embedding tables) travel
/// as the rows a step touched, gathered and summed on every rank, the rest of the arena through
/// the reducer's dense mean (docs/trainer.md#sparse-embedding-exchange). Host memory.
#pragma once

#include <tutti/concepts/reducer.hpp>
#include <tutti/detail/median.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/trainer/options.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tutti::detail {

/// One row-sparse segment of the gradient arena, and this step's plan for it.
struct sparse_segment {
  std::size_t index = 0;   // in the layout
  std::size_t offset = 0;  // first value in the arena
  std::size_t rows = 0, cols = 0;
  std::size_t extent = 0;  // values up to the next segment: rows·cols and the alignment padding
  std::size_t words = 0;   // 64-bit words per sent row: the id and the values, two to a word
  // This step:
  std::uint64_t max_rows = 0;  // the most rows any rank sends
  std::size_t block_offset = 0;
  bool as_rows = false;
};

/// What one step's exchange did, for the caller's accounts.
struct sparse_exchange_step {
  std::uint64_t bytes = 0;  ///< the step's bytes in the ledger's convention (allreduce payload)
  bool sent_rows = false;   ///< some segment travelled as rows
  /// `measured`: the rows' cost per byte ÷ the dense path's, agreed by every rank at this step
  /// (the last trial step); 0 on every other step.
  double agreed_ratio = 0;
};

/// The row-sparse segments of a layout, the rows each step touched in them, and the scratch
/// and trial state of their exchange, kept between steps.
class sparse_exchange {
 public:
  /// Takes the segments for which `row_sparse(index)` holds.
  template <class RowSparse>
  void plan(const parameter_layout& layout, RowSparse&& row_sparse) {
    const auto& segs = layout.segments();
    for (std::size_t i = 0; i < segs.size(); ++i) {
      if (!row_sparse(i)) continue;
      sparse_segment g;
      g.index = i;
      g.offset = segs[i].offset;
      g.rows = segs[i].rows;
      g.cols = segs[i].cols;
      g.extent = (i + 1 < segs.size() ? segs[i + 1].offset : layout.total()) - g.offset;
      g.words = (g.cols + 2) / 2;
      m_segments.push_back(g);
    }
    m_touched.resize(m_segments.size());
  }

  bool empty() const noexcept { return m_segments.empty(); }
  std::span<const sparse_segment> segments() const noexcept { return m_segments; }
  /// Per segment, the rows the step touched (on this rank, or on any rank once the row-sparse
  /// step merged them).
  std::vector<std::vector<std::int32_t>>& touched() noexcept { return m_touched; }

  /// A new step: no row touched yet.
  void begin_step() {
    for (auto& rows : m_touched) rows.clear();
  }

  /// A new fit: `measured` times its trial steps anew.
  void begin_fit() {
    m_trial_costs[0].clear();
    m_trial_costs[1].clear();
    m_trial_step = 0;
    m_row_cost_ratio = 0;
    m_rows_counted.assign(m_segments.size(), 0);
    m_rows_updated.assign(m_segments.size(), 0);
    m_steps_counted = 0;
    m_step_counted = false;
  }

  /// Counts the rows of the step so far touched on this rank (call it before a merge across
  /// ranks), for `traffic`'s mean; `begin_fit` starts the count.
  void count_step() {
    for (std::size_t k = 0; k < m_segments.size(); ++k) m_rows_counted[k] += m_touched[k].size();
    ++m_steps_counted;
    m_step_counted = true;
  }

  /// Counts the rows the optimizer updates in the step `count_step` counted (call it once the
  /// touched rows are every rank's union, as the row-sparse step updates them).
  void count_updated() {
    if (!m_step_counted) return;
    for (std::size_t k = 0; k < m_segments.size(); ++k) m_rows_updated[k] += m_touched[k].size();
    m_step_counted = false;
  }

  /// Per segment, the dense reduce's bytes for it and the rows a counted step touched on the
  /// mean; empty before any step was counted.
  template <class DenseBytes>
  std::vector<row_segment_traffic> traffic(const DenseBytes& dense_wire_bytes) const {
    std::vector<row_segment_traffic> out;
    if (m_steps_counted == 0) return out;
    for (std::size_t k = 0; k < m_segments.size(); ++k) {
      row_segment_traffic& t = out.emplace_back();
      t.segment = m_segments[k].index;
      t.dense_bytes = dense_wire_bytes(m_segments[k].extent);
      t.rows_per_step = double(m_rows_counted[k]) / double(m_steps_counted);
      t.words = m_segments[k].words;
      t.table_rows = m_segments[k].rows;
      t.cols = m_segments[k].cols;
      t.updated_rows_per_step = double(m_rows_updated[k]) / double(m_steps_counted);
    }
    return out;
  }

  /// Adds `ids`, the rows of the k-th segment one `loss_and_gradient` call touched, to the
  /// step's set (a union over the micro-batches of gradient accumulation), checking them: a row
  /// outside the segment would be written out of bounds on every rank.
  void add_touched(std::size_t k, std::span<const std::int32_t> ids) {
    const sparse_segment& g = m_segments[k];
    for (std::size_t j = 0; j < ids.size(); ++j)
      TUTTI_EXPECTS(ids[j] >= 0 && static_cast<std::size_t>(ids[j]) < g.rows &&
                        (j == 0 || ids[j - 1] < ids[j]),
                    "tutti::trainer::fit",
                    "the model's touched_rows(" + std::to_string(g.index) + ") holds " +
                        std::to_string(ids[j]) + " at position " + std::to_string(j) +
                        "; expected unique ascending row ids in [0, " + std::to_string(g.rows) +
                        ")");
    std::vector<std::int32_t>& acc = m_touched[k];
    if (acc.empty()) {
      acc.assign(ids.begin(), ids.end());
    } else {
      m_union.clear();
      std::set_union(acc.begin(), acc.end(), ids.begin(), ids.end(), std::back_inserter(m_union));
      acc.swap(m_union);
    }
  }

  // The exchange of one step. Every rank takes the same decisions from the same gathered
  // counts, so the collectives match:
  //   1. one all_gather of each rank's touched-row count per row-sparse segment;
  //   2. per segment, rows when `on`, or (`automatic`) when W·max_rows·words·8 / 2 bytes, the
  //      allreduce payload that moves as many bytes per rank as the gather, is below the dense
  //      reduce's bytes for the segment;
  //   3. everything else (dense and bias segments, padding, the trailing floats) through one
  //      all_reduce_mean: in place when it is one contiguous run, else packed;
  //   4. one all_gather of every rank's rows (id and values, padded to the largest count);
  //   5. per segment, each row touched anywhere is the sum of its senders' rows in rank order,
  //      divided by W, written over this rank's own; rows nobody touched stay 0, as in the mean.
  //
  // With `measured`, until the ratio is agreed the steps alternate all-dense and all-rows
  // (trial k even: dense) and each after the first pair records its seconds per byte (the
  // allreduce-equivalent bytes the step moved); after the last trial step every rank takes the
  // largest median of each path over the ranks (one all_reduce_max), so all compute the same
  // ratio and take the same decisions from then on.
  //
  // `dense_wire_bytes(floats)` is what the reducer's dense mean of that many floats moves.
  template <class Reducer, class DenseBytes>
  sparse_exchange_step exchange(Reducer& reducer, std::span<float> grads,
                                sparse_exchange_policy policy, std::size_t trial_steps,
                                const DenseBytes& dense_wire_bytes) {
    if (policy != sparse_exchange_policy::measured || m_row_cost_ratio > 0)
      return exchange_step(reducer, grads, policy, trial::none, dense_wire_bytes);
    const std::size_t k = m_trial_step++;
    const auto path = k % 2 == 0 ? trial::dense : trial::rows;
    const double t0 = clock_seconds(reducer);
    sparse_exchange_step done = exchange_step(reducer, grads, policy, path, dense_wire_bytes);
    const double seconds = clock_seconds(reducer) - t0;
    if (k >= 2)  // the first pair warms up
      m_trial_costs[path == trial::rows].push_back(seconds /
                                                   double(std::max<std::uint64_t>(done.bytes, 1)));
    if (k + 1 == trial_steps) {
      double cost[2];
      for (int p = 0; p < 2; ++p) cost[p] = detail::median(m_trial_costs[p]);
      reducer.all_reduce_max(std::span<double>(cost));
      // Positive, so the trial ends even if a clock read no time at all.
      m_row_cost_ratio = cost[0] > 0 && cost[1] > 0 ? cost[1] / cost[0] : 1.0;
      done.agreed_ratio = m_row_cost_ratio;
    }
    return done;
  }

 private:
  enum class trial { none, dense, rows };

  // The trials' clock: the reducer's own where it keeps one (a simulated link), else the host's.
  template <class Reducer>
  static double clock_seconds(const Reducer& reducer) {
    if constexpr (reducer_keeps_clock<Reducer>) {
      return static_cast<double>(reducer.clock_seconds());
    } else {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    }
  }

  template <class Reducer, class DenseBytes>
  sparse_exchange_step exchange_step(Reducer& reducer, std::span<float> grads,
                                     sparse_exchange_policy policy, trial path,
                                     const DenseBytes& dense_wire_bytes) {
    const auto world = static_cast<std::size_t>(reducer.world_size());
    const std::size_t segments = m_segments.size();
    m_counts.resize(segments);
    m_all_counts.resize(segments * world);
    for (std::size_t k = 0; k < segments; ++k) m_counts[k] = m_touched[k].size();
    reducer.all_gather(std::span<const std::uint64_t>(m_counts),
                       std::span<std::uint64_t>(m_all_counts));
    sparse_exchange_step done;
    // A gather of b bytes per rank moves (W − 1)·b into each rank, as an allreduce of W·b/2 does.
    done.bytes = world * segments * sizeof(std::uint64_t) / 2;
    const double weight = policy == sparse_exchange_policy::measured ? m_row_cost_ratio : 1.0;
    std::size_t block = 0;
    for (std::size_t k = 0; k < segments; ++k) {
      sparse_segment& g = m_segments[k];
      g.max_rows = 0;
      for (std::size_t r = 0; r < world; ++r)
        g.max_rows = std::max(g.max_rows, m_all_counts[r * segments + k]);
      const std::uint64_t as_rows = world * g.max_rows * g.words * sizeof(std::uint64_t) / 2;
      g.as_rows = path == trial::none
                      ? policy == sparse_exchange_policy::on ||
                            double(as_rows) * weight < double(dense_wire_bytes(g.extent))
                      : path == trial::rows;
      if (!g.as_rows) continue;
      done.sent_rows = true;
      g.block_offset = block;
      block += static_cast<std::size_t>(g.max_rows) * g.words;
      done.bytes += as_rows;
    }
    const std::size_t dense_floats = reduce_remainder(reducer, grads);
    done.bytes += dense_wire_bytes(dense_floats);
    if (block == 0) return done;
    pack_rows(grads.data(), block);
    m_gathered.resize(block * world);
    reducer.all_gather(std::span<const std::uint64_t>(m_block),
                       std::span<std::uint64_t>(m_gathered));
    for (std::size_t k = 0; k < segments; ++k)
      if (m_segments[k].as_rows && m_segments[k].max_rows > 0)
        merge_rows(k, grads.data(), world, block);
    return done;
  }

  // The dense remainder: the arena less the segments sent as rows (in arena order), averaged in
  // one all_reduce_mean; returns its floats.
  template <class Reducer>
  std::size_t reduce_remainder(Reducer& reducer, std::span<float> arena) {
    float* grads = arena.data();
    std::vector<std::pair<std::size_t, std::size_t>> runs;
    std::size_t at = 0, dense_floats = 0;
    for (const auto& g : m_segments) {
      if (!g.as_rows) continue;
      if (g.offset > at) runs.emplace_back(at, g.offset);
      at = g.offset + g.extent;
    }
    runs.emplace_back(at, arena.size());  // never empty: the trailing floats end the arena
    for (const auto& [b, e] : runs) dense_floats += e - b;
    if (runs.size() == 1) {
      reducer.all_reduce_mean(std::span<float>(grads + runs[0].first, dense_floats));
      return dense_floats;
    }
    m_remainder.resize(dense_floats);
    float* to = m_remainder.data();
    for (const auto& [b, e] : runs) to = std::copy(grads + b, grads + e, to);
    reducer.all_reduce_mean(std::span<float>(m_remainder));
    const float* from = m_remainder.data();
    for (const auto& [b, e] : runs) {
      std::copy(from, from + (e - b), grads + b);
      from += e - b;
    }
    return dense_floats;
  }

  // This rank's rows of the segments sent as rows: a 32-bit id then the values, packed two
  // 32-bit fields to a word; padding slots 0.
  void pack_rows(const float* grads, std::size_t block) {
    m_block.assign(block, 0);
    for (std::size_t k = 0; k < m_segments.size(); ++k) {
      const sparse_segment& g = m_segments[k];
      if (!g.as_rows) continue;
      const std::vector<std::int32_t>& ids = m_touched[k];
      for (std::size_t j = 0; j < ids.size(); ++j) {
        auto* slot =
            reinterpret_cast<unsigned char*>(m_block.data() + g.block_offset + j * g.words);
        std::memcpy(slot, &ids[j], sizeof(std::int32_t));
        std::memcpy(slot + sizeof(std::int32_t),
                    grads + g.offset + static_cast<std::size_t>(ids[j]) * g.cols,
                    g.cols * sizeof(float));
      }
    }
  }

  // Segment k's rows from every rank: each row touched anywhere becomes the sum of its
  // senders' rows in rank order, divided by W.
  void merge_rows(std::size_t k, float* grads, std::size_t world, std::size_t block) {
    const std::size_t segments = m_segments.size();
    const sparse_segment& g = m_segments[k];
    const auto slot = [&](std::size_t r, std::size_t j) {
      return reinterpret_cast<const unsigned char*>(m_gathered.data() + r * block + g.block_offset +
                                                    j * g.words);
    };
    const auto id_at = [&](std::size_t r, std::size_t j) {
      std::int32_t id;
      std::memcpy(&id, slot(r, j), sizeof id);
      return id;
    };
    const float divisor = static_cast<float>(world);
    m_heads.assign(world, 0);
    m_row.resize(2 * g.cols);
    float* sum = m_row.data();
    float* incoming = m_row.data() + g.cols;
    // Every rank's ids ascend, so a W-way merge visits each touched row once, in order.
    for (;;) {
      std::int32_t next = 0;
      bool any = false;
      for (std::size_t r = 0; r < world; ++r)
        if (m_heads[r] < m_all_counts[r * segments + k]) {
          const std::int32_t id = id_at(r, m_heads[r]);
          if (!any || id < next) next = id;
          any = true;
        }
      if (!any) break;
      // The first sender's row, then the others' added in rank order: the bits of the dense
      // reduce, whose ranks that did not touch the row add exact zeros (local_ring and the
      // MPI shared arena sum in rank order).
      bool first = true;
      for (std::size_t r = 0; r < world; ++r)
        if (m_heads[r] < m_all_counts[r * segments + k] && id_at(r, m_heads[r]) == next) {
          const unsigned char* values = slot(r, m_heads[r]) + sizeof(std::int32_t);
          if (first) {
            std::memcpy(sum, values, g.cols * sizeof(float));
          } else {
            std::memcpy(incoming, values, g.cols * sizeof(float));
            for (std::size_t c = 0; c < g.cols; ++c) sum[c] += incoming[c];
          }
          first = false;
          ++m_heads[r];
        }
      float* dst = grads + g.offset + static_cast<std::size_t>(next) * g.cols;
      for (std::size_t c = 0; c < g.cols; ++c) dst[c] = sum[c] / divisor;
    }
  }

  std::vector<sparse_segment> m_segments;
  std::vector<std::vector<std::int32_t>> m_touched;
  // Scratch kept between steps.
  std::vector<std::int32_t> m_union;
  std::vector<std::uint64_t> m_counts, m_all_counts, m_block, m_gathered;
  std::vector<float> m_remainder, m_row;
  std::vector<std::size_t> m_heads;
  // `measured`: seconds per byte of this fit's trial steps, dense [0] and rows [1]; then the
  // agreed ratio rows ÷ dense (0 until agreed).
  std::vector<double> m_trial_costs[2];
  std::size_t m_trial_step = 0;
  double m_row_cost_ratio = 0;
  // The rows each segment's counted steps touched on this rank, and those steps; the rows the
  // optimizer updated in them (every rank's union); whether the step is counted, not yet updated.
  std::vector<std::uint64_t> m_rows_counted;
  std::vector<std::uint64_t> m_rows_updated;
  std::size_t m_steps_counted = 0;
  bool m_step_counted = false;
};

}  // namespace tutti::detail
