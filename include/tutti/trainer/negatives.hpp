// SPDX-License-Identifier: Apache-2.0
/// @file trainer/negatives.hpp
/// @brief Negatives sampled in the step: a platform's log holds positives only, and each
/// positive of a batch is followed by K courses its learner has not taken, drawn by a
/// counter-based generator keyed by (seed, epoch, dataset position, k) so the draw does not
/// depend on the rank count, the batch split or a resume point.
#pragma once

#include <tutti/config.hpp>
#include <tutti/data/detail/learner_lists.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
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

/// The tables of `train` for `o` (`o.per_positive > 0`), each learner's courses written to
/// `taken` (room for a value per row of `train`) and their offsets to `offsets` (`n_users + 1`
/// values, zero on entry; the last is the courses kept), `t.offsets` and `t.taken` left empty.
/// `Offset` holds the number of rows. Throws `tutti::invalid_argument` for an alpha that is not
/// finite or below 0.
template <class Offset>
negative_tables make_negative_tables(const data::interactions& train, const negative_options& o,
                                     std::int32_t* taken, Offset* offsets) {
  check_negative_options(o);
  negative_tables t;
  learner_courses(train, offsets, taken);
  if (o.sampler == negative_sampler::popularity) popularity_tables(train, o.alpha, t);
  return t;
}

/// As above, the offsets in `t.offsets` (64 bits).
inline negative_tables make_negative_tables(const data::interactions& train,
                                            const negative_options& o, std::int32_t* taken) {
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(train.n_users()) + 1, 0);
  negative_tables t = make_negative_tables(train, o, taken, offsets.data());
  t.offsets = std::move(offsets);
  return t;
}

/// The tables of `train` for `o` (`o.per_positive > 0`). Throws `tutti::invalid_argument` for an
/// alpha that is not finite or below 0.
inline negative_tables make_negative_tables(const data::interactions& train,
                                            const negative_options& o) {
  std::vector<std::int32_t> taken(train.size());
  negative_tables t = make_negative_tables(train, o, taken.data());
  taken.resize(t.offsets.back());
  t.taken = std::move(taken);
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
