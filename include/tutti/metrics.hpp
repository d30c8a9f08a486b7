// SPDX-License-Identifier: Apache-2.0
/// @file metrics.hpp
/// @brief Evaluation metrics: RMSE for ratings, exact AUC for implicit feedback; on host vectors,
/// or on the memory of any execution space (the same source on the host and a GPU).
#pragma once

#include <tutti/config.hpp>
#include <tutti/error.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/traits.hpp>

#include <thrust/iterator/constant_iterator.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace tutti {

/// Root mean squared error of `predictions` against `labels` (equal, non-zero sizes).
inline double rmse(std::span<const float> predictions, std::span<const float> labels) {
  TUTTI_EXPECTS(predictions.size() == labels.size() && !labels.empty(), "tutti::rmse",
                "got " + std::to_string(predictions.size()) + " predictions and " +
                    std::to_string(labels.size()) + " labels; expected equal, non-zero sizes");
  double s = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    double d = double(predictions[i]) - double(labels[i]);
    s += d * d;
  }
  return std::sqrt(s / double(labels.size()));
}

/// Exact area under the ROC curve: the probability that a random positive (label > 0.5) scores
/// above a random negative, ties counting one half (Mann-Whitney U with mid-ranks).
/// Throws `tutti::invalid_argument` when either class is absent.
inline double auc(std::span<const float> scores, std::span<const float> labels) {
  TUTTI_EXPECTS(scores.size() == labels.size(), "tutti::auc",
                "got " + std::to_string(scores.size()) + " scores and " +
                    std::to_string(labels.size()) + " labels; expected equal sizes");
  for (std::size_t i = 0; i < scores.size(); ++i)
    TUTTI_EXPECTS(std::isfinite(scores[i]), "tutti::auc",
                  "score " + std::to_string(i) + " is not finite; expected finite scores");
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  double positives = 0, rank_sum = 0;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    double mid_rank = 0.5 * double(i + 1 + j);  // mean of 1-based ranks i+1 .. j
    for (std::size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5f) {
        positives += 1;
        rank_sum += mid_rank;
      }
    i = j;
  }
  double negatives = double(scores.size()) - positives;
  TUTTI_EXPECTS(positives > 0 && negatives > 0, "tutti::auc",
                "labels hold " + std::to_string(std::size_t(positives)) + " positives and " +
                    std::to_string(std::size_t(negatives)) +
                    " negatives; expected at least one of each");
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

namespace detail {

struct squared_error_fn {
  const float* p;
  const float* y;
  TUTTI_HOST_DEVICE double operator()(std::size_t i) const {
    const double d = double(p[i]) - double(y[i]);
    return d * d;
  }
};
struct sum_double_fn {
  TUTTI_HOST_DEVICE double operator()(double a, double b) const { return a + b; }
};
struct sum_count_fn {
  TUTTI_HOST_DEVICE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return a + b;
  }
};
// 1 for a non-finite value: x - x is NaN exactly when x is NaN or infinite.
struct nonfinite_flag_fn {
  const float* s;
  TUTTI_HOST_DEVICE std::uint64_t operator()(std::size_t i) const {
    return s[i] - s[i] == 0.f ? 0u : 1u;
  }
};
struct copy_scores_fn {
  const float* scores;
  const float* labels;
  float* keys;
  std::uint64_t* positive;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    keys[i] = scores[i];
    positive[i] = labels[i] > 0.5f ? 1u : 0u;
  }
};
// Positives of a tie group times the group's mid-rank (1-based ranks start+1 .. start+count).
struct group_rank_sum_fn {
  const std::uint64_t* start;
  const std::uint64_t* count;
  const std::uint64_t* positives;
  TUTTI_HOST_DEVICE double operator()(std::size_t g) const {
    return double(positives[g]) * (double(start[g]) + 0.5 * double(count[g] + 1));
  }
};
struct value_at_fn {
  const std::uint64_t* v;
  TUTTI_HOST_DEVICE std::uint64_t operator()(std::size_t i) const { return v[i]; }
};

}  // namespace detail

/// RMSE of `predictions` against `labels`, both memory of `space`, computed there (a device
/// space synchronises once to return the value). Agrees with the host overload to rounding.
template <execution_space Space>
double rmse(const Space& space, std::span<const float> predictions, std::span<const float> labels) {
  TUTTI_EXPECTS(predictions.size() == labels.size() && !labels.empty(), "tutti::rmse",
                "got " + std::to_string(predictions.size()) + " predictions and " +
                    std::to_string(labels.size()) + " labels; expected equal, non-zero sizes");
  const double s = transform_reduce(space, labels.size(),
                                    detail::squared_error_fn{predictions.data(), labels.data()},
                                    0.0, detail::sum_double_fn{});
  return std::sqrt(s / double(labels.size()));
}

/// The exact AUC of `scores` against `labels`, both memory of `space`, computed there: a stable
/// sort by score, tie groups by reduce-by-key, their starts by a scan, and the positives'
/// mid-rank sum by a reduction — no copy of the scores to the host. Every partial sum is an
/// integer or a half below 2^53, so the value equals the host overload's exactly.
/// Throws `tutti::invalid_argument` for a non-finite score or when either class is absent.
template <execution_space Space>
double auc(const Space& space, std::span<const float> scores, std::span<const float> labels) {
  const std::size_t n = scores.size();
  TUTTI_EXPECTS(n == labels.size(), "tutti::auc",
                "got " + std::to_string(n) + " scores and " + std::to_string(labels.size()) +
                    " labels; expected equal sizes");
  const std::uint64_t bad = transform_reduce(space, n, detail::nonfinite_flag_fn{scores.data()},
                                             std::uint64_t{0}, detail::sum_count_fn{});
  TUTTI_EXPECTS(bad == 0, "tutti::auc",
                std::to_string(bad) + " score(s) are not finite; expected finite scores");
  buffer<float, Space> keys(n, space), unique(n, space);
  buffer<std::uint64_t, Space> positive(n, space), count(n, space), group_pos(n, space),
      start(n, space);
  parallel_for(space, n,
               detail::copy_scores_fn{scores.data(), labels.data(), keys.data(), positive.data()});
  thrust::stable_sort_by_key(space.policy(), keys.data(), keys.data() + n, positive.data());
  const auto ends = thrust::reduce_by_key(space.policy(), keys.data(), keys.data() + n,
                                          thrust::make_constant_iterator<std::uint64_t>(1),
                                          unique.data(), count.data());
  const auto groups = static_cast<std::size_t>(ends.first - unique.data());
  thrust::reduce_by_key(space.policy(), keys.data(), keys.data() + n, positive.data(),
                        unique.data(), group_pos.data());
  thrust::exclusive_scan(space.policy(), count.data(), count.data() + groups, start.data());
  const double positives =
      double(transform_reduce(space, groups, detail::value_at_fn{group_pos.data()},
                              std::uint64_t{0}, detail::sum_count_fn{}));
  const double negatives = double(n) - positives;
  TUTTI_EXPECTS(positives > 0 && negatives > 0, "tutti::auc",
                "labels hold " + std::to_string(std::size_t(positives)) + " positives and " +
                    std::to_string(std::size_t(negatives)) +
                    " negatives; expected at least one of each");
  const double rank_sum = transform_reduce(
      space, groups, detail::group_rank_sum_fn{start.data(), count.data(), group_pos.data()}, 0.0,
      detail::sum_double_fn{});
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace tutti
