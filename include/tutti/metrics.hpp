// SPDX-License-Identifier: Apache-2.0
/// @file metrics.hpp
/// @brief Evaluation metrics on host vectors: RMSE for ratings, exact AUC for implicit feedback.
#pragma once

#include <tutti/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
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

}  // namespace tutti
