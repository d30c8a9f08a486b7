// SPDX-License-Identifier: Apache-2.0
/// @file trainer/epoch_summary.hpp
/// @brief What the ranks tell each other at an epoch's end: the steps the finite guard skipped,
/// every rank's samples, mean step, work and wait seconds, and non-finite step counts (one
/// gather), and the records of the non-finite steps.
#pragma once

#include <tutti/ledger/accounts.hpp>
#include <tutti/shard.hpp>
#include <tutti/trainer/batch_split.hpp>
#include <tutti/trainer/errors.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace tutti::detail {

inline std::uint64_t double_to_bits(double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

inline double bits_to_double(std::uint64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

/// The steps of an epoch the finite guard skipped (the same on every rank), and those this rank
/// caused.
struct epoch_skips {
  std::vector<std::uint64_t> mine;  ///< steps whose loss or gradient was not finite here
  std::size_t count = 0;            ///< steps skipped
  std::size_t first = 0;            ///< the first skipped step (meaningful when count > 0)
};

/// The skips from the epoch's per-step flags: this rank's own and the reduced ones.
inline epoch_skips read_skips(const std::vector<float>& local, const std::vector<float>& global) {
  epoch_skips s;
  s.first = global.size();
  for (std::size_t i = 0; i < global.size(); ++i) {
    if (local[i] != 0.f) s.mine.push_back(i);
    if (global[i] != 0.f) {
      ++s.count;
      s.first = std::min(s.first, i);
    }
  }
  return s;
}

/// Every rank's part of an epoch, in rank order.
struct epoch_ranks {
  std::vector<std::uint64_t> samples;  ///< real samples used
  std::vector<double> step_mean, work_mean, wait_mean;
  std::vector<std::uint64_t> bad_counts;  ///< steps it found non-finite
};

/// One gather of this rank's real samples, mean step, work and wait seconds over `steps`
/// steps, and its count of non-finite steps. Collective.
template <class Reducer>
epoch_ranks gather_epoch_ranks(Reducer& reducer, double local_weight, const step_account& totals,
                               std::size_t steps, std::size_t bad_steps) {
  const double per = steps ? 1.0 / double(steps) : 0.0;
  const std::uint64_t mine[5] = {static_cast<std::uint64_t>(std::llround(local_weight)),
                                 double_to_bits(totals.seconds() * per),
                                 double_to_bits(totals.work() * per),
                                 double_to_bits(totals.wait * per), bad_steps};
  const auto world = static_cast<std::size_t>(reducer.world_size());
  std::vector<std::uint64_t> gathered(5 * world);
  reducer.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(gathered));
  epoch_ranks out;
  out.samples.resize(world);
  out.step_mean.resize(world);
  out.work_mean.resize(world);
  out.wait_mean.resize(world);
  out.bad_counts.resize(world);
  for (std::size_t r = 0; r < world; ++r) {
    out.samples[r] = gathered[5 * r];
    out.step_mean[r] = bits_to_double(gathered[5 * r + 1]);
    out.work_mean[r] = bits_to_double(gathered[5 * r + 2]);
    out.wait_mean[r] = bits_to_double(gathered[5 * r + 3]);
    out.bad_counts[r] = gathered[5 * r + 4];
  }
  return out;
}

/// Every rank's non-finite steps of the epoch as (rank, step) pairs: one gather of lists of
/// step numbers padded to the longest (`counts[r]` is rank r's). Collective.
template <class Reducer>
std::vector<std::pair<int, std::size_t>> gather_bad_steps(
    Reducer& reducer, const std::vector<std::uint64_t>& mine,
    const std::vector<std::uint64_t>& counts) {
  const std::uint64_t width = *std::max_element(counts.begin(), counts.end());
  std::vector<std::pair<int, std::size_t>> at;
  if (width == 0) return at;
  std::vector<std::uint64_t> list(static_cast<std::size_t>(width), 0);
  std::copy(mine.begin(), mine.end(), list.begin());
  std::vector<std::uint64_t> all(list.size() * counts.size());
  reducer.all_gather(std::span<const std::uint64_t>(list), std::span<std::uint64_t>(all));
  for (std::size_t r = 0; r < counts.size(); ++r)
    for (std::uint64_t k = 0; k < counts[r]; ++k)
      at.emplace_back(static_cast<int>(r),
                      static_cast<std::size_t>(all[r * list.size() + static_cast<std::size_t>(k)]));
  return at;
}

/// The records of (rank, step) pairs of an epoch, ordered by step then rank. Every rank can
/// compute any rank's batch from the sampler, so only the step numbers travel: `shard_of(r)`
/// is rank r's shard of the epoch, whose part of step s starts at `split.first(r, s −
/// step_base)`.
template <class ShardOf>
std::vector<nonfinite_record> nonfinite_records(std::vector<std::pair<int, std::size_t>> at,
                                                ShardOf&& shard_of, const batch_split& split,
                                                std::size_t step_base, std::size_t epoch,
                                                std::size_t epoch_first_step) {
  std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  });
  std::vector<nonfinite_record> out;
  for (const auto& [r, step] : at) {
    const shard& sh = shard_of(r);
    const auto ur = static_cast<std::size_t>(r);
    const std::size_t begin = std::min(sh.size(), split.first(ur, step - step_base));
    const std::size_t end = std::min(sh.size(), split.first(ur, step - step_base + 1));
    nonfinite_record rec;
    rec.rank = r;
    rec.epoch = epoch;
    rec.step = step;
    rec.global_step = epoch_first_step + step;
    rec.sample_ids.assign(sh.indices.begin() + static_cast<std::ptrdiff_t>(begin),
                          sh.indices.begin() + static_cast<std::ptrdiff_t>(end));
    out.push_back(std::move(rec));
  }
  return out;
}

}  // namespace tutti::detail
