// SPDX-License-Identifier: Apache-2.0
/// @file data/append.hpp
/// @brief Logs of several days read as one: `tutti::data::append_rows` puts one source's rows
/// after another's, its learners and courses matched by source id (the ones not seen before get
/// the next dense indices, in their order), so yesterday's log and today's read one after the
/// other are the rows, ids and dictionaries of the two files joined into one.
/// `tutti::data::replay_history` keeps every pair of the newest day and a share of the others (a
/// draw per (learner, course) pair, the same on every rank and every run).
#pragma once

#include <tutti/data/id_names.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/data/split.hpp>
#include <tutti/error.hpp>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tutti::detail {

// `more`'s dense indices in `ids` (and `names`): the known ones found by source id, the others
// appended in their order.
inline std::vector<std::int32_t> merge_ids(std::vector<std::int64_t>& ids,
                                           std::shared_ptr<const data::id_names>& names,
                                           const std::vector<std::int64_t>& more_ids,
                                           const data::id_names* more_names) {
  std::unordered_map<std::int64_t, std::int32_t> index;
  index.reserve(ids.size() + more_ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) index.emplace(ids[k], static_cast<std::int32_t>(k));
  std::shared_ptr<data::id_names> grown;
  if (names) grown = std::make_shared<data::id_names>(*names);
  std::vector<std::int32_t> to(more_ids.size());
  for (std::size_t k = 0; k < more_ids.size(); ++k) {
    const auto [it, added] = index.emplace(more_ids[k], static_cast<std::int32_t>(ids.size()));
    if (added) {
      TUTTI_EXPECTS(ids.size() < static_cast<std::size_t>(INT32_MAX), "tutti::data::append_rows",
                    "more than 2^31 - 1 distinct ids; expected fewer");
      ids.push_back(more_ids[k]);
      if (grown) grown->push_back((*more_names)[k]);
    }
    to[k] = it->second;
  }
  if (grown) names = std::move(grown);
  return to;
}

}  // namespace tutti::detail

namespace tutti::data {

/// Appends `more`'s rows after `into`'s. Learners and courses are matched by source id (their
/// names where the ids are names); those `into` lacks are added in `more`'s order. `source`
/// names `more` in errors. Throws `tutti::invalid_argument` when the two differ in kind: one
/// with timestamps and one without, names against integer ids, 0/1 labels against ratings.
inline void append_rows(interactions& into, const interactions& more, const std::string& source) {
  constexpr const char* fn = "tutti::data::append_rows";
  TUTTI_EXPECTS(
      into.has_timestamps() == more.has_timestamps() || into.size() == 0 || more.size() == 0, fn,
      source + (more.has_timestamps() ? " has" : " has no") +
          " timestamps and the rows before it " + (into.has_timestamps() ? "have" : "have none") +
          "; expected every file with the same columns");
  TUTTI_EXPECTS(bool(into.user_names) == bool(more.user_names) &&
                    bool(into.item_names) == bool(more.item_names),
                fn,
                source + "'s ids are " + (more.user_names ? "names" : "integers") +
                    " and those before it " + (into.user_names ? "names" : "integers") +
                    "; expected one kind (--ids integer or --ids name)");
  TUTTI_EXPECTS(into.implicit == more.implicit, fn,
                source + "'s labels are " + (more.implicit ? "0/1" : "ratings") +
                    " and those before it " + (into.implicit ? "0/1" : "ratings") +
                    "; expected one kind");
  const std::vector<std::int32_t> users = tutti::detail::merge_ids(
      into.user_ids, into.user_names, more.user_ids, more.user_names.get());
  const std::vector<std::int32_t> items = tutti::detail::merge_ids(
      into.item_ids, into.item_names, more.item_ids, more.item_names.get());
  const std::size_t n = into.size() + more.size();
  into.users.reserve(n);
  into.items.reserve(n);
  into.labels.reserve(n);
  for (std::size_t r = 0; r < more.size(); ++r) {
    into.users.push_back(users[static_cast<std::size_t>(more.users[r])]);
    into.items.push_back(items[static_cast<std::size_t>(more.items[r])]);
  }
  into.labels.insert(into.labels.end(), more.labels.begin(), more.labels.end());
  into.timestamps.insert(into.timestamps.end(), more.timestamps.begin(), more.timestamps.end());
}

/// The (learner, course) pairs of a day's rows, by source id: what `replay_history` keeps whole.
class pair_set {
 public:
  pair_set() = default;
  /// The pairs of `day`'s rows.
  explicit pair_set(const interactions& day) {
    m_pairs.reserve(day.size());
    for (std::size_t r = 0; r < day.size(); ++r)
      m_pairs.insert(key(day.user_ids[static_cast<std::size_t>(day.users[r])],
                         day.item_ids[static_cast<std::size_t>(day.items[r])]));
  }
  /// True when the pair of source ids (`user_id`, `item_id`) is in the set.
  bool contains(std::int64_t user_id, std::int64_t item_id) const {
    return m_pairs.count(key(user_id, item_id)) != 0;
  }
  /// Number of distinct pairs.
  std::size_t size() const noexcept { return m_pairs.size(); }

 private:
  struct pair_hash {
    std::size_t operator()(const std::pair<std::int64_t, std::int64_t>& p) const noexcept {
      return static_cast<std::size_t>(tutti::detail::hash2(static_cast<std::uint64_t>(p.first),
                                                           static_cast<std::uint64_t>(p.second)));
    }
  };
  static std::pair<std::int64_t, std::int64_t> key(std::int64_t u, std::int64_t i) {
    return {u, i};
  }
  std::unordered_set<std::pair<std::int64_t, std::int64_t>, pair_hash> m_pairs;
};

/// What `replay_history` kept.
struct replay_counts {
  std::size_t history = 0;  ///< rows whose pair is not the newest day's, before the replay
  std::size_t kept = 0;     ///< of them kept
};

/// Keeps every row of `rows` whose (learner, course) pair is one of the newest day's (`newest`)
/// and a share of the others (the history's): such a row is kept when the draw of its pair's
/// source ids under `seed` is below `share`, so a pair is kept or dropped as a whole, on every
/// rank and in every run alike. Row order is kept; the dictionaries keep every id (a learner
/// whose rows all dropped keeps its row of the tables). Made on a split's training side, it
/// leaves the held-out rows and the ranking lists as a full retrain has them. Throws
/// `tutti::invalid_argument` unless 0 <= share <= 1.
inline replay_counts replay_history(interactions& rows, const pair_set& newest, double share,
                                    std::uint64_t seed) {
  TUTTI_EXPECTS(std::isfinite(share) && share >= 0.0 && share <= 1.0, "tutti::data::replay_history",
                "share is " + std::to_string(share) + "; expected 0 <= share <= 1");
  replay_counts c;
  const std::uint64_t draw_seed = seed ^ 0x7265706c6179ULL;  // "replay": apart from the split's
  detail::keep_rows_in_place(rows, [&](std::size_t r) {
    const std::int64_t u = rows.user_ids[static_cast<std::size_t>(rows.users[r])];
    const std::int64_t i = rows.item_ids[static_cast<std::size_t>(rows.items[r])];
    if (newest.contains(u, i)) return true;
    ++c.history;
    const bool kept = split_draw(draw_seed, u, i) < share;
    c.kept += kept ? 1 : 0;
    return kept;
  });
  return c;
}

}  // namespace tutti::data
