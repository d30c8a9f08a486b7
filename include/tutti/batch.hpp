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
///
/// A batch may be made of lists (`list_size` > 1): slots [l·list_size, (l+1)·list_size) are one
/// learner's positive followed by its sampled negatives, the unit a list loss (`loss_kind::bpr`,
/// `loss_kind::softmax`) is computed over. Every slot of a list carries the list's weight (a
/// padded list is padded whole); pointwise losses read the slots one by one and ignore it.
struct batch_view {
  std::span<const std::int32_t> users;
  std::span<const std::int32_t> items;
  std::span<const float> labels;
  std::span<const float> weights;
  /// Slots per list: 1 for a batch of single rows; 1 + K when each positive is followed by its K
  /// sampled negatives. A list loss needs it >= 2 and a size that is a multiple of it.
  std::size_t list_size = 1;
  /// log Q(i) for every item i (n_items values in the space's memory), the log-probability that
  /// the sampler draws it, or empty for a sampler that draws every item alike: the softmax loss
  /// subtracts it from each score of a list (the log-Q correction of sampled softmax).
  std::span<const float> item_log_q = {};
  /// Number of slots (real and padded).
  std::size_t size() const noexcept { return users.size(); }
};

/// The loss a model minimises; also selects the evaluation metric (RMSE, or AUC and the ranking
/// metrics).
enum class loss_kind : std::uint8_t {
  squared,   ///< (prediction - label)^2 on ratings; evaluated by RMSE
  logistic,  ///< log-loss on 0/1 labels with a sigmoid link; evaluated by exact AUC
  bpr,       ///< pairwise, over lists: Σ_k softplus(s_k - s_0), the positive above each negative
  softmax,   ///< sampled softmax over lists: -log of the positive's share, log-Q corrected
};

/// True for the losses computed over a batch's lists (`batch_view::list_size`), not slot by slot.
constexpr bool is_list_loss(loss_kind k) noexcept {
  return k == loss_kind::bpr || k == loss_kind::softmax;
}

/// The name `tutti train --loss` spells.
constexpr const char* to_string(loss_kind k) noexcept {
  switch (k) {
    case loss_kind::squared:
      return "squared";
    case loss_kind::logistic:
      return "logistic";
    case loss_kind::bpr:
      return "bpr";
    case loss_kind::softmax:
      return "softmax";
  }
  return "unknown";
}

}  // namespace tutti
