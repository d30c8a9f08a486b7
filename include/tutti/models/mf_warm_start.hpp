// SPDX-License-Identifier: Apache-2.0
/// @file models/mf_warm_start.hpp
/// @brief `apply_warm_start`: a matrix factorisation's freshly initialised arena, with the rows
/// of every learner and course an earlier export knows taken from that export (matched by
/// source id), so that today's data continues from yesterday's model instead of starting over.
#pragma once

#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/models/mf_export.hpp>
#include <tutti/models/mf_recommend.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tutti::models {

/// What a warm start took from the export and what it left as initialised.
struct warm_start_counts {
  std::size_t users_reused = 0;  ///< learners of the data the export knows
  std::size_t users_new = 0;     ///< learners it does not: they keep their initial rows
  std::size_t items_reused = 0;  ///< courses likewise
  std::size_t items_new = 0;
};

/// Where each learner and course of a run's data stands in an export: its row there, or -1
/// for one the export does not know. Made once (`match_export`); the counts and the warm arena
/// are read from it.
struct warm_start_match {
  std::vector<std::int32_t> users;  ///< dense user index -> export row, or -1
  std::vector<std::int32_t> items;  ///< dense item index -> export row, or -1

  /// What a warm start from this match takes from the export and leaves as initialised.
  warm_start_counts counts() const {
    const auto known = [](const std::vector<std::int32_t>& rows) {
      return static_cast<std::size_t>(
          std::count_if(rows.begin(), rows.end(), [](std::int32_t r) { return r >= 0; }));
    };
    warm_start_counts c;
    c.users_reused = known(users);
    c.items_reused = known(items);
    c.users_new = users.size() - c.users_reused;
    c.items_new = items.size() - c.items_reused;
    return c;
  }
};

}  // namespace tutti::models

namespace tutti::detail {

/// The export row of each of `ids` (source ids, names by their codes) by `export_ids`, or -1.
inline std::vector<std::int32_t> export_rows(std::span<const std::int64_t> ids,
                                             const std::vector<std::int64_t>& export_ids) {
  const models::id_index index(export_ids);
  std::vector<std::int32_t> rows(ids.size());
  for (std::size_t d = 0; d < ids.size(); ++d) rows[d] = index.find(ids[d]).value_or(-1);
  return rows;
}

/// Copies, for each arena row d whose `rows[d]` is an export row, that row (`dim` factors from
/// `factors`, one bias from `bias`) into `table` and `table_bias`.
inline void warm_rows(const std::vector<std::int32_t>& rows, const std::vector<float>& factors,
                      const std::vector<float>& bias, std::span<float> table,
                      std::span<float> table_bias, std::size_t dim) {
  for (std::size_t d = 0; d < rows.size(); ++d) {
    if (rows[d] < 0) continue;
    const auto k = static_cast<std::size_t>(rows[d]);
    std::copy_n(factors.begin() + static_cast<std::ptrdiff_t>(k * dim), dim,
                table.begin() + static_cast<std::ptrdiff_t>(d * dim));
    table_bias[d] = bias[k];
  }
}

}  // namespace tutti::detail

namespace tutti::models {

/// Matches the learners and courses of a run's data (dense index -> source id: `user_ids`,
/// `item_ids`, as `data::interactions` holds them; names by their codes) to the rows of the
/// export `e`. The match depends only on the ids, so every rank and every rerun gets the same.
inline warm_start_match match_export(std::span<const std::int64_t> user_ids,
                                     std::span<const std::int64_t> item_ids, const mf_export& e) {
  return {detail::export_rows(user_ids, e.user_ids), detail::export_rows(item_ids, e.item_ids)};
}

/// Overwrites, in `params` (a host copy of a `matrix_factorization`'s arena laid out as
/// `layout`, freshly initialised), the factors and bias of every learner and course `m` found
/// in the export `e`, and the global bias. Learners and courses the export does not know keep
/// their initial values. Returns `m.counts()`.
/// @throws tutti::invalid_argument when the layout is not a matrix factorisation's of the
/// export's dimension, or the match does not cover its tables.
inline warm_start_counts apply_warm_start(const parameter_layout& layout, std::span<float> params,
                                          const warm_start_match& m, const mf_export& e) {
  constexpr const char* fn = "tutti::models::apply_warm_start";
  TUTTI_EXPECTS(params.size() == layout.total(), fn,
                "params has " + std::to_string(params.size()) + " values; expected " +
                    std::to_string(layout.total()));
  const segment& pu = layout.find("user_embedding");
  const segment& qi = layout.find("item_embedding");
  TUTTI_EXPECTS(pu.cols == static_cast<std::size_t>(e.dim) && qi.cols == pu.cols, fn,
                "the model has " + std::to_string(pu.cols) + " factors per row, the export " +
                    std::to_string(e.dim) + "; expected the export's dimension");
  TUTTI_EXPECTS(pu.rows == m.users.size() && qi.rows == m.items.size(), fn,
                "tables of " + std::to_string(pu.rows) + " learners and " +
                    std::to_string(qi.rows) + " courses; expected one row per id given (" +
                    std::to_string(m.users.size()) + " and " + std::to_string(m.items.size()) +
                    ")");
  const auto part = [&](const char* name) {
    const segment& s = layout.find(name);
    return params.subspan(s.offset, s.size());
  };
  const std::size_t dim = pu.cols;
  detail::warm_rows(m.users, e.user_factors, e.user_bias, part("user_embedding"), part("user_bias"),
                    dim);
  detail::warm_rows(m.items, e.item_factors, e.item_bias, part("item_embedding"), part("item_bias"),
                    dim);
  part("global_bias")[0] = e.global_bias;
  return m.counts();
}

/// The optimizer-state arena a warm start begins with: `state` (the optimizer's fresh state for
/// `layout`, mapped by `map`) with the state of every learner and course `m` found in the export
/// `e` taken from the export's (`e.state`), and the global bias's. New learners and courses keep
/// their fresh state.
/// @throws tutti::invalid_argument when the export carries no state, or its rows' widths are
/// not this optimizer's for this layout.
inline void apply_warm_state(const parameter_layout& layout, const state_map& map,
                             std::span<float> state, const warm_start_match& m,
                             const mf_export& e) {
  constexpr const char* fn = "tutti::models::apply_warm_state";
  TUTTI_EXPECTS(e.state.has_value(), fn, "the export carries no optimizer state");
  check_state_map(map, layout, state.size());
  const mf_state& from = *e.state;
  const auto warm = [&](const std::string& table, const std::vector<std::int32_t>& rows,
                        const std::vector<float>& values, std::size_t width) {
    const std::vector<std::size_t> segs = tutti::detail::mf_table_segments(layout, table);
    const std::size_t w = tutti::detail::table_state_width(map, segs);
    TUTTI_EXPECTS(w == width, fn,
                  "the export keeps " + std::to_string(width) + " floats of state per " + table +
                      " row; this optimizer keeps " + std::to_string(w) +
                      "; expected the optimizer that wrote the export");
    for (std::size_t d = 0; d < rows.size(); ++d) {
      if (rows[d] < 0) continue;
      std::size_t at = static_cast<std::size_t>(rows[d]) * width;
      for (std::size_t s : segs) {
        const std::size_t sw = row_state_width(map, s);
        scatter_row_state(map, s, d, std::span<const float>(values).subspan(at, sw), state);
        at += sw;
      }
    }
  };
  warm("user", m.users, from.user, from.user_width);
  warm("item", m.items, from.item, from.item_width);
  warm("global", {0}, from.global, from.global.size());
}

}  // namespace tutti::models
