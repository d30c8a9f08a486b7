// SPDX-License-Identifier: Apache-2.0
/// @file batch.hpp
/// @brief `tutti::batch_view`: one rank's batch, gathered into the model's space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti {

/// A batch of interactions in the memory of the model's space (struct of arrays).
/// `weights[i]` is 1 for a real sample and 0 for a padded slot; models multiply every loss and
/// gradient contribution by it, so padding never counts.
struct batch_view {
  std::span<const std::int32_t> users;
  std::span<const std::int32_t> items;
  std::span<const float> labels;
  std::span<const float> weights;
  /// Number of slots (real and padded).
  std::size_t size() const noexcept { return users.size(); }
};

/// The loss a model minimises; also selects the evaluation metric (RMSE or AUC).
enum class loss_kind : std::uint8_t {
  squared,   ///< (prediction - label)^2 on ratings; evaluated by RMSE
  logistic,  ///< log-loss on 0/1 labels with a sigmoid link; evaluated by exact AUC
};

}  // namespace tutti
