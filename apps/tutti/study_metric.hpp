// SPDX-License-Identifier: Apache-2.0
// `tutti study large-batch --metric`: the test metric a study compares cells by. RMSE for
// ratings and AUC for implicit labels (the default), or HR@K / NDCG@K under the leave-one-out
// protocol (each learner's latest interaction held out and ranked among sampled courses).
#pragma once

#include <tutti/data/leave_one_out.hpp>
#include <tutti/error.hpp>
#include <tutti/ranking.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

namespace tutti::cli::detail {

/// What `--metric` asked for: the data's own metric (`auto`), or a ranking metric at `k`.
struct study_metric_choice {
  const char* ranking = nullptr;  // "hr" or "ndcg"; null: auto (rmse or auc)
  std::size_t k = 0;
};

/// Parses `--metric`: auto, hr@K or ndcg@K (K >= 1).
/// @throws tutti::invalid_argument naming what was expected.
inline study_metric_choice parse_study_metric(const std::string& text) {
  if (text == "auto") return {};
  study_metric_choice m;
  const std::size_t at = text.find('@');
  if (at != std::string::npos) {
    const std::string_view name(text.data(), at);
    m.ranking = name == "hr" ? "hr" : name == "ndcg" ? "ndcg" : nullptr;
    const char* end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data() + at + 1, end, m.k);
    if (ec != std::errc{} || p != end) m.ranking = nullptr;
  }
  TUTTI_EXPECTS(m.ranking && m.k >= 1, "tutti study large-batch",
                "--metric " + text +
                    ": expected auto (RMSE for ratings, AUC for implicit labels), hr@K or ndcg@K, "
                    "e.g. hr@10");
  return m;
}

/// True when a larger value of `metric` is better (all but RMSE).
inline bool higher_is_better(const char* metric) {
  return std::string_view(metric) != "rmse";
}

/// The lists a split's runs are ranked on, and how: null lists for the data's own metric.
struct study_eval {
  std::shared_ptr<const data::ranking_candidates> lists;
  std::size_t k = 0;
  bool ndcg = false;
  /// The study's value of a ranking result.
  double of(const ranking_result& r) const { return ndcg ? r.ndcg : r.hit_rate; }
};

/// HR@K or NDCG@K of a scorer that ranks each list at random: the held-out item is equally likely
/// at each of its list's n + 1 places.
inline double random_ranking_metric(const data::ranking_candidates& c, std::size_t k, bool ndcg) {
  if (c.size() == 0) return 0.0;
  double sum = 0;
  for (const std::uint32_t n : c.negatives) {
    const std::size_t places = std::size_t{n} + 1, top = std::min(k, places);
    double hit = 0;
    for (std::size_t r = 0; r < top; ++r) hit += ndcg ? 1.0 / std::log2(double(r) + 2.0) : 1.0;
    sum += hit / double(places);
  }
  return sum / double(c.size());
}

}  // namespace tutti::cli::detail
