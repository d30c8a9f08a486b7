// SPDX-License-Identifier: Apache-2.0
/// @file trainer/evaluation.hpp
/// @brief The test-split evaluation of a trainer's parameters: predictions on the model's space,
/// RMSE for squared loss and the exact AUC for logistic loss, the same value on every rank.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/metrics.hpp>
#include <tutti/ranking.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/trainer/options.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tutti::detail {

/// True when `labels` hold one value only (an AUC needs positives and negatives).
inline bool one_class(std::span<const float> labels) {
  for (const float l : labels)
    if (l != labels.front()) return false;
  return true;
}

/// The model's predictions with parameters `params` for every row of `rows`, in the space's
/// memory.
template <class Model, class Space>
buffer<float, Space> predict_on_space(Model& model, const Space& space,
                                      std::span<const float> params,
                                      const data::interactions& rows) {
  auto d_users = make_buffer(space, std::span<const std::int32_t>(rows.users));
  auto d_items = make_buffer(space, std::span<const std::int32_t>(rows.items));
  buffer<float, Space> out(rows.size(), space);
  model.predict(params, std::span<const std::int32_t>(d_users.span()),
                std::span<const std::int32_t>(d_items.span()), out.span());
  return out;
}

/// Every rank holds the whole test split: rank 0 computes the metric on the space (only the
/// value comes back to the host) and a sum shares it. Collective.
template <class Model, class Space, class Reducer>
eval_result evaluate_on_rank0(Model& model, const Space& space, std::span<const float> params,
                              Reducer& reducer, const data::interactions& test) {
  eval_result r;
  if (test.size() == 0) return r;
  const bool squared = model.loss() == loss_kind::squared;
  // A log's held-out rows are all positives: no AUC to compute (ranking metrics rank them).
  if (!squared && one_class(test.labels)) return r;
  r.metric = squared ? metric_name::rmse : metric_name::auc;
  double value[1] = {0.0};
  if (reducer.rank() == 0) {
    const buffer<float, Space> predictions = predict_on_space(model, space, params, test);
    auto labels = make_buffer(space, std::span<const float>(test.labels));
    const std::span<const float> p(predictions.span()), y(labels.span());
    value[0] = squared ? rmse(space, p, y) : auc(space, p, y);
  }
  reducer.all_reduce_sum(std::span<double>(value));
  r.value = value[0];
  return r;
}

/// Each rank holds its own test rows: the metric of their union (in rank order). RMSE from
/// summed squared errors; the exact AUC from every rank's (score, label) pairs, gathered. Each
/// rank predicts only its own rows. Collective; every rank returns the same.
template <class Model, class Space, class Reducer>
eval_result evaluate_across_ranks(Model& model, const Space& space, std::span<const float> params,
                                  Reducer& reducer, const data::interactions& test) {
  std::vector<float> predictions;
  if (test.size())
    predictions = to_host_vector(
        space, std::span<const float>(predict_on_space(model, space, params, test).span()));
  eval_result r;
  if (model.loss() == loss_kind::squared) {
    double sums[2] = {0.0, static_cast<double>(test.size())};
    for (std::size_t i = 0; i < predictions.size(); ++i) {
      const double e = double(predictions[i]) - double(test.labels[i]);
      sums[0] += e * e;
    }
    reducer.all_reduce_sum(std::span<double>(sums));
    if (sums[1] == 0) return r;
    r.metric = metric_name::rmse;
    r.value = std::sqrt(sums[0] / sums[1]);
    return r;
  }
  const std::uint64_t mine[1] = {test.size()};
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(reducer.world_size()));
  reducer.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(counts));
  const std::uint64_t width = *std::max_element(counts.begin(), counts.end());
  if (width == 0) return r;
  // One word per row: the score's bits over the label's bits; padding past a rank's count.
  std::vector<std::uint64_t> packed(static_cast<std::size_t>(width), 0);
  for (std::size_t i = 0; i < predictions.size(); ++i)
    packed[i] = std::uint64_t{std::bit_cast<std::uint32_t>(predictions[i])} << 32 |
                std::bit_cast<std::uint32_t>(test.labels[i]);
  std::vector<std::uint64_t> all(packed.size() * counts.size());
  reducer.all_gather(std::span<const std::uint64_t>(packed), std::span<std::uint64_t>(all));
  std::vector<float> scores, labels;
  for (std::size_t k = 0; k < counts.size(); ++k)
    for (std::uint64_t i = 0; i < counts[k]; ++i) {
      const std::uint64_t w = all[k * packed.size() + static_cast<std::size_t>(i)];
      scores.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(w >> 32)));
      labels.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(w)));
    }
  if (one_class(labels)) return r;  // every rank's rows alike
  r.metric = metric_name::auc;
  r.value = auc(scores, labels);
  return r;
}

/// HR@K and NDCG@K of the ranking lists `candidates` (may be null: this rank ranks none), over
/// the union of every rank's lists: each rank ranks its own on the space, the hit counts are
/// summed. Collective; every rank returns the same.
template <class Model, class Space, class Reducer>
ranking_result evaluate_ranking_across_ranks(Model& model, std::span<const float> params,
                                             Reducer& reducer,
                                             const ranking_lists_on<Space>* candidates,
                                             std::size_t k) {
  std::vector<double> sums(k + 1, 0.0);  // lists, then the hits at each rank below K
  if (candidates && candidates->lists > 0) {
    const ranking_result mine = evaluate_ranking(model, params, *candidates, k);
    sums[0] = double(mine.lists);
    for (std::size_t r = 0; r < k; ++r) sums[r + 1] = double(mine.hits[r]);
  }
  reducer.all_reduce_sum(std::span<double>(sums));  // integers below 2^53: exact
  std::vector<std::uint64_t> hits(k);
  for (std::size_t r = 0; r < k; ++r) hits[r] = static_cast<std::uint64_t>(sums[r + 1]);
  return ranking_from_hits(std::move(hits), static_cast<std::uint64_t>(sums[0]));
}

}  // namespace tutti::detail
