// SPDX-License-Identifier: Apache-2.0
// The metrics on a space's memory equal the host metrics: RMSE to rounding, the AUC exactly,
// ties included; bad input is refused alike.
#include <doctest/doctest.h>

#include "spaces.hpp"

#include <tutti/metrics.hpp>
#include <tutti/space/buffer.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace test_metrics {

TEST_CASE_TEMPLATE("metrics on a space equal the host metrics, ties and all", Space,
                   TUTTI_TEST_SPACES) {
  Space space;
  std::mt19937 gen(7);
  for (std::size_t n : {2u, 3u, 17u, 1000u, 100000u}) {
    for (int levels : {3, 50, 0}) {  // few distinct scores (many ties), some, all distinct
      CAPTURE(n);
      CAPTURE(levels);
      std::vector<float> scores(n), labels(n);
      std::uniform_real_distribution<float> u(-3.f, 3.f);
      for (std::size_t i = 0; i < n; ++i) {
        float x = u(gen);
        if (levels > 0) x = std::round(x * float(levels) / 6.f);
        scores[i] = x;
        labels[i] = (i % 2 == 0) ? 1.f : float(u(gen) + 0.3f * x > 0.f);
      }
      labels[1] = 0.f;  // both classes present
      auto d_scores = tutti::make_buffer(space, std::span<const float>(scores));
      auto d_labels = tutti::make_buffer(space, std::span<const float>(labels));
      const std::span<const float> s(d_scores.data(), n), y(d_labels.data(), n);
      CHECK(tutti::auc(space, s, y) == tutti::auc(scores, labels));
      CHECK(tutti::rmse(space, s, y) ==
            doctest::Approx(tutti::rmse(scores, labels)).epsilon(1e-12));
    }
  }
}

TEST_CASE_TEMPLATE("metrics on a space refuse what the host metrics refuse", Space,
                   TUTTI_TEST_SPACES) {
  Space space;
  const std::vector<float> scores = {0.1f, std::numeric_limits<float>::quiet_NaN(), 0.3f};
  const std::vector<float> mixed = {1.f, 0.f, 1.f}, ones = {1.f, 1.f, 1.f};
  auto d_scores = tutti::make_buffer(space, std::span<const float>(scores));
  auto d_mixed = tutti::make_buffer(space, std::span<const float>(mixed));
  auto d_ones = tutti::make_buffer(space, std::span<const float>(ones));
  const std::span<const float> s(d_scores.data(), 3), m(d_mixed.data(), 3), o(d_ones.data(), 3);
  CHECK_THROWS_WITH_AS(tutti::auc(space, s, m), doctest::Contains("1 score(s) are not finite"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::auc(space, m, o), doctest::Contains("3 positives and 0 negatives"),
                       tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::rmse(space, s.first(2), m), tutti::invalid_argument);
}

}  // namespace test_metrics
