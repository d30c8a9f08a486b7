// SPDX-License-Identifier: Apache-2.0
/// @file trainer/negatives.hpp
/// @brief Negatives sampled in the step: a platform's log holds positives only, and each
/// positive of a batch is followed by K courses its learner has not taken, drawn by a
/// counter-based generator keyed by (seed, epoch, dataset position, k) so the draw does not
/// depend on the rank count, the batch split or a resume point.
#pragma once

#include <tutti/config.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/detail/thread_range.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tutti {

/// How the negatives of a positive are drawn (`negative_options::sampler`).
enum class negative_sampler : std::uint8_t {
  uniform,     ///< every course alike
  popularity,  ///< course c with probability ∝ count(c)^alpha (word2vec's 0.75 by default)
};

/// The name `tutti train --negative-sampler` spells: "uniform" or "popularity".
constexpr const char* to_string(negative_sampler s) noexcept {
  return s == negative_sampler::popularity ? "popularity" : "uniform";
}

/// Negatives sampled in the step (`train_options::negatives`); `per_positive = 0` trains on the
/// rows as they are.
struct negative_options {
  /// K: negatives drawn for each positive (0: none).
  std::uint32_t per_positive = 0;
  /// The distribution they are drawn from.
  negative_sampler sampler = negative_sampler::uniform;
  /// The exponent of the popularity sampler (0 is uniform, 1 proportional to the counts).
  float alpha = 0.75f;
  /// Draws per negative before one of the learner's own courses is kept: each draw that lands on
  /// a course the learner took is drawn again, up to this many times (a learner who took nearly
  /// every course keeps the last draw; `negative_collisions` counts how often that can happen).
  std::uint32_t max_draws = 32;
};

}  // namespace tutti

namespace tutti::detail {

/// What the step's negative draw reads, built once per fit on the host from the training rows:
/// each learner's courses (sorted, unique; CSR by learner) and, for the popularity sampler, the
/// cumulative weights of the courses scaled to 2^32.
struct negative_tables {
  std::vector<std::uint64_t> offsets;     // n_users + 1
  std::vector<std::int32_t> taken;        // offsets.back() courses, sorted per learner
  std::vector<std::uint64_t> cumulative;  // n_items, popularity only: the last is 2^32
  std::vector<float> log_q;               // n_items, popularity only: log of each draw's odds
};

/// Each learner's courses, in row order: `offsets` (n_users + 1, zero) becomes the CSR offsets
/// and `taken` (a value per row) the courses. Threads split the learners in equal ranges; each
/// reads every row and keeps those of its range, so the result is the serial one. The offsets are
/// their own cursors: counted one place ahead, summed, advanced by the rows, then shifted back.
inline void group_courses_by_learner(const data::interactions& train,
                                     std::vector<std::uint64_t>& offsets, std::int32_t* taken) {
  const std::size_t nu = offsets.size() - 1, n = train.size();
  const std::int32_t* users = train.users.data();
  const std::int32_t* items = train.items.data();
  std::uint64_t* at = offsets.data() + 1;  // at[u]: learner u's count, then the end of its list
#pragma omp parallel
  {
    const thread_share mine = thread_share_of(nu);
    for (std::size_t r = 0; r < n; ++r)
      if (mine.holds(users[r])) ++at[users[r]];
#pragma omp barrier
#pragma omp single
    {  // at[u] = the start of learner u + 1's list, so at[u - 1] is u's: the cursor
      for (std::size_t u = 1; u < nu; ++u) at[u] += at[u - 1];
      for (std::size_t u = nu; u-- > 1;) at[u] = at[u - 1];
      if (nu > 0) at[0] = 0;
    }
    for (std::size_t r = 0; r < n; ++r)
      if (mine.holds(users[r])) taken[at[users[r]]++] = items[r];
  }
}

/// Sorts and deduplicates each learner's list of `offsets`/`taken` in place (learners in
/// parallel), then closes the gaps in one pass where a list lost a course; returns the courses
/// kept (`offsets.back()`).
inline std::uint64_t sort_unique_lists(std::vector<std::uint64_t>& offsets, std::int32_t* taken) {
  const std::size_t nu = offsets.size() - 1;
  std::vector<std::uint64_t> kept(nu);
  std::uint64_t dropped = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : dropped)
  for (std::ptrdiff_t l = 0; l < static_cast<std::ptrdiff_t>(nu); ++l) {
    const auto u = static_cast<std::size_t>(l);
    std::int32_t* b = taken + offsets[u];
    std::int32_t* e = taken + offsets[u + 1];
    std::sort(b, e);
    kept[u] = static_cast<std::uint64_t>(std::unique(b, e) - b);
    dropped += static_cast<std::uint64_t>(e - b) - kept[u];
  }
  if (dropped > 0) {
    std::uint64_t out = 0;
    for (std::size_t u = 0; u < nu; ++u) {
      const std::uint64_t from = offsets[u];
      offsets[u] = out;
      for (std::uint64_t k = 0; k < kept[u]; ++k) taken[out++] = taken[from + k];
    }
    offsets[nu] = out;
  }
  return offsets[nu];
}

/// Each learner's sorted, unique courses of `train`, written to `taken` (room for a value per
/// row of `train`); returns the CSR offsets into it (n_users + 1; the last is the courses kept).
inline std::vector<std::uint64_t> learner_courses(const data::interactions& train,
                                                  std::int32_t* taken) {
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(train.n_users()) + 1, 0);
  group_courses_by_learner(train, offsets, taken);
  sort_unique_lists(offsets, taken);
  return offsets;
}

/// Throws `tutti::invalid_argument` for an alpha that is not finite or below 0, or no draw.
inline void check_negative_options(const negative_options& o) {
  TUTTI_EXPECTS(std::isfinite(o.alpha) && o.alpha >= 0.f, "tutti::trainer",
                "negatives.alpha is " + std::to_string(o.alpha) + "; expected a finite value >= 0");
  TUTTI_EXPECTS(o.max_draws >= 1, "tutti::trainer",
                "negatives.max_draws is 0; expected at least one draw per negative");
}

/// The popularity sampler's tables of `train` into `t` (`cumulative`, `log_q`).
inline void popularity_tables(const data::interactions& train, float alpha, negative_tables& t) {
  const auto ni = static_cast<std::size_t>(train.n_items());
  std::vector<double> count(ni, 0.0);
  for (const std::int32_t i : train.items) count[static_cast<std::size_t>(i)] += 1.0;
  double total = 0;
  for (double& c : count) total += (c = c > 0 ? std::pow(c, double(alpha)) : 0.0);
  t.cumulative.resize(ni);
  double run = 0;
  for (std::size_t i = 0; i < ni; ++i) {
    run += count[i];
    t.cumulative[i] = static_cast<std::uint64_t>(std::ldexp(run / total, 32));
  }
  t.cumulative[ni - 1] = std::uint64_t(1) << 32;
  // log Q(i) for the softmax loss's correction; a course never taken is never drawn, nor in
  // any list, and keeps 0.
  t.log_q.assign(ni, 0.f);
  for (std::size_t i = 0; i < ni; ++i)
    if (count[i] > 0) t.log_q[i] = static_cast<float>(std::log(count[i] / total));
}

/// The tables of `train` for `o` (`o.per_positive > 0`). Throws `tutti::invalid_argument` for an
/// alpha that is not finite or below 0.
inline negative_tables make_negative_tables(const data::interactions& train,
                                            const negative_options& o) {
  check_negative_options(o);
  negative_tables t;
  t.taken.resize(train.size());
  t.offsets = learner_courses(train, t.taken.data());
  t.taken.resize(t.offsets.back());
  if (o.sampler == negative_sampler::popularity) popularity_tables(train, o.alpha, t);
  return t;
}

/// The bytes a learner's offset takes in the step's table of `pairs` (learner, course) pairs:
/// 4 below 2^32 pairs, else 8 (the trainer's tables and the memory forecast read this rule).
constexpr std::uint64_t offset_bytes(std::uint64_t pairs) noexcept {
  return pairs > UINT32_MAX ? sizeof(std::uint64_t) : sizeof(std::uint32_t);
}

/// `offsets` in 32 bits, where `offset_bytes` gives 4 for the pairs they index (half the bytes a
/// learner); empty where it gives 8.
inline std::vector<std::uint32_t> narrow_offsets(const std::vector<std::uint64_t>& offsets) {
  if (offsets.empty() || offset_bytes(offsets.back()) != sizeof(std::uint32_t)) return {};
  return std::vector<std::uint32_t>(offsets.begin(), offsets.end());
}

/// Learners of `t` for whom a negative may be one of their own courses: those who took more
/// than `share` of the `n_items` courses (with `max_draws` uniform draws a negative is their own
/// with probability share^max_draws).
inline std::size_t crowded_learners(const negative_tables& t, std::int32_t n_items, double share) {
  std::size_t n = 0;
  for (std::size_t u = 0; u + 1 < t.offsets.size(); ++u)
    n += double(t.offsets[u + 1] - t.offsets[u]) > share * double(n_items);
  return n;
}

/// The k-th negative of the positive at dataset position `pos` of learner `user` in the epoch
/// whose key is `epoch_key`: a course drawn from the sampler, drawn again while the learner took
/// it (up to `max_draws`). The same on every space and rank.
/// `Offset`: 64 bits, or 32 where the lists hold fewer than 2^32 courses (`narrow_offsets`).
template <class Offset = std::uint64_t>
struct negative_draw {
  const Offset* offsets;  // learner u's courses: taken[offsets[u], offsets[u + 1])
  const std::int32_t* taken;
  const std::uint64_t* cumulative;  // null: uniform
  std::int32_t n_items;
  std::uint32_t per_positive;
  std::uint32_t max_draws;

  TUTTI_HOST_DEVICE std::int32_t candidate(std::uint64_t bits) const {
    const std::uint64_t r = bits >> 32;  // 32 random bits
    if (cumulative == nullptr)
      return static_cast<std::int32_t>((r * static_cast<std::uint64_t>(n_items)) >> 32);
    // The first course whose cumulative weight exceeds r (cumulative[n_items - 1] = 2^32 > r).
    std::int32_t lo = 0, hi = n_items - 1;
    while (lo < hi) {
      const std::int32_t mid = lo + (hi - lo) / 2;
      if (cumulative[mid] > r)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }

  TUTTI_HOST_DEVICE bool took(std::int32_t user, std::int32_t item) const {
    std::uint64_t lo = offsets[user];
    const std::uint64_t end = offsets[user + 1];
    std::uint64_t hi = end;
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (taken[mid] < item)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo < end && taken[lo] == item;
  }

  TUTTI_HOST_DEVICE std::int32_t operator()(std::uint64_t epoch_key, std::int32_t user,
                                            std::uint64_t pos, std::uint32_t k) const {
    const std::uint64_t base = (pos * per_positive + k) * max_draws;
    std::int32_t item = 0;
    for (std::uint32_t d = 0; d < max_draws; ++d) {
      item = candidate(hash2(epoch_key, base + d));
      if (!took(user, item)) break;
    }
    return item;
  }
};

/// The key of an epoch's draws: every rank derives the same one from (seed, epoch).
inline std::uint64_t negative_epoch_key(std::uint64_t seed, std::size_t epoch) {
  return hash2(seed ^ 0x6e65676174697665ULL, epoch);  // "negative"
}

}  // namespace tutti::detail
