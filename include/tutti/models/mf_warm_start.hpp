// SPDX-License-Identifier: Apache-2.0
/// @file models/mf_warm_start.hpp
/// @brief `apply_warm_start`: a matrix factorisation's freshly initialised arena, with the rows
/// of every learner and course an earlier export knows taken from that export (matched by
/// source id), so that today's data continues from yesterday's model instead of starting over.
#pragma once

#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/models/mf_export.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tutti::models {

/// What a warm start took from the export and what it left as initialised.
struct warm_start_counts {
  std::size_t users_reused = 0;  ///< learners of the data the export knows
  std::size_t users_new = 0;     ///< learners it does not: they keep their initial rows
  std::size_t items_reused = 0;  ///< courses likewise
  std::size_t items_new = 0;
};

}  // namespace tutti::models

namespace tutti::detail {

/// Copies, for each dense index d of `ids` that `known` (export source id -> export index)
/// holds, the export's row (`dim` factors from `factors`, one bias from `bias`) into the
/// arena's row d; returns how many it copied.
inline std::size_t warm_rows(std::span<const std::int64_t> ids,
                             const std::vector<std::int64_t>& export_ids,
                             const std::vector<float>& factors, const std::vector<float>& bias,
                             std::span<float> table, std::span<float> table_bias, std::size_t dim) {
  std::unordered_map<std::int64_t, std::size_t> known;
  known.reserve(export_ids.size());
  for (std::size_t k = 0; k < export_ids.size(); ++k) known.emplace(export_ids[k], k);
  std::size_t reused = 0;
  for (std::size_t d = 0; d < ids.size(); ++d) {
    const auto it = known.find(ids[d]);
    if (it == known.end()) continue;
    std::copy_n(factors.begin() + static_cast<std::ptrdiff_t>(it->second * dim), dim,
                table.begin() + static_cast<std::ptrdiff_t>(d * dim));
    table_bias[d] = bias[it->second];
    ++reused;
  }
  return reused;
}

/// How many of `ids` are among `export_ids`.
inline std::size_t count_known(std::span<const std::int64_t> ids,
                               const std::vector<std::int64_t>& export_ids) {
  std::vector<std::int64_t> sorted(export_ids);
  std::sort(sorted.begin(), sorted.end());
  std::size_t n = 0;
  for (const std::int64_t id : ids) n += std::binary_search(sorted.begin(), sorted.end(), id);
  return n;
}

}  // namespace tutti::detail

namespace tutti::models {

/// What `apply_warm_start` would take from `e` for data whose dense indices have the source ids
/// `user_ids` and `item_ids`, without an arena.
inline warm_start_counts count_warm_start(std::span<const std::int64_t> user_ids,
                                          std::span<const std::int64_t> item_ids,
                                          const mf_export& e) {
  warm_start_counts c;
  c.users_reused = detail::count_known(user_ids, e.user_ids);
  c.items_reused = detail::count_known(item_ids, e.item_ids);
  c.users_new = user_ids.size() - c.users_reused;
  c.items_new = item_ids.size() - c.items_reused;
  return c;
}

/// Overwrites, in `params` (a host copy of a `matrix_factorization`'s arena laid out as
/// `layout`, freshly initialised), the factors and bias of every learner and course whose
/// source id (`user_ids[u]`, `item_ids[i]`: dense index -> source id, as `data::interactions`
/// holds them; names by their codes) the export `e` holds, and the global bias. Learners and
/// courses the export does not know keep their initial values. The result depends only on the
/// ids, so every rank and every rerun gets the same arena.
/// @throws tutti::invalid_argument when the layout is not a matrix factorisation's of the
/// export's dimension, or the id lists do not match its tables.
inline warm_start_counts apply_warm_start(const parameter_layout& layout, std::span<float> params,
                                          std::span<const std::int64_t> user_ids,
                                          std::span<const std::int64_t> item_ids,
                                          const mf_export& e) {
  constexpr const char* fn = "tutti::models::apply_warm_start";
  TUTTI_EXPECTS(params.size() == layout.total(), fn,
                "params has " + std::to_string(params.size()) + " values; expected " +
                    std::to_string(layout.total()));
  const segment& pu = layout.find("user_embedding");
  const segment& qi = layout.find("item_embedding");
  TUTTI_EXPECTS(pu.cols == static_cast<std::size_t>(e.dim) && qi.cols == pu.cols, fn,
                "the model has " + std::to_string(pu.cols) + " factors per row, the export " +
                    std::to_string(e.dim) + "; expected the export's dimension");
  TUTTI_EXPECTS(pu.rows == user_ids.size() && qi.rows == item_ids.size(), fn,
                "tables of " + std::to_string(pu.rows) + " learners and " +
                    std::to_string(qi.rows) + " courses; expected one row per id given (" +
                    std::to_string(user_ids.size()) + " and " + std::to_string(item_ids.size()) +
                    ")");
  const auto part = [&](const char* name) {
    const segment& s = layout.find(name);
    return params.subspan(s.offset, s.size());
  };
  const std::size_t dim = pu.cols;
  warm_start_counts c;
  c.users_reused = detail::warm_rows(user_ids, e.user_ids, e.user_factors, e.user_bias,
                                     part("user_embedding"), part("user_bias"), dim);
  c.items_reused = detail::warm_rows(item_ids, e.item_ids, e.item_factors, e.item_bias,
                                     part("item_embedding"), part("item_bias"), dim);
  c.users_new = user_ids.size() - c.users_reused;
  c.items_new = item_ids.size() - c.items_reused;
  part("global_bias")[0] = e.global_bias;
  return c;
}

}  // namespace tutti::models
