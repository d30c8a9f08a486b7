// SPDX-License-Identifier: Apache-2.0
/// @file data/feedback.hpp
/// @brief `tutti::data::as_positives`: a platform's log (enrolments, completions, clicks) read as
/// positive interactions, one label-1 row per kept row, for training with sampled negatives.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/data/split.hpp>
#include <tutti/detail/thread_range.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace tutti::data {

/// What `as_positives` does with a (learner, course) pair that occurs more than once.
enum class repeated_pairs : std::uint8_t {
  once,  ///< the pair is one positive (its first row in file order is kept)
  each,  ///< every row is a positive: a course taken three times counts three times
};

/// Options of `as_positives`.
struct positive_options {
  repeated_pairs repeats = repeated_pairs::once;
  /// With a label column: rows whose label is above this are positives, the others dropped
  /// (a log's rows are all positives, label 1 or no label at all).
  float label_above = 0.f;
};

/// What `as_positives` kept and dropped.
struct positive_counts {
  std::size_t rows = 0;          ///< rows read
  std::size_t kept = 0;          ///< positives kept
  std::size_t not_positive = 0;  ///< rows whose label was not above `label_above`
  std::size_t repeated = 0;      ///< repeats of a pair dropped (`repeated_pairs::once`)
};

}  // namespace tutti::data

namespace tutti::detail {

/// Clears `keep[r]` for every kept row r whose (user, item) pair a kept row before it holds, and
/// returns how many it cleared. The kept rows are grouped by user with a counting sort (stable:
/// file order within a user); each user's rows are then checked against that user's earlier
/// rows, by a scan for a short list and a sort of (item, row) for a long one, users in parallel.
/// `Index` holds a row number.
template <class Index>
std::size_t drop_repeated_pairs(const data::interactions& d, std::vector<char>& keep) {
  const auto n_users = static_cast<std::size_t>(d.n_users());
  const std::size_t n_rows = d.size();
  std::vector<Index> start(n_users + 1, 0);
  std::vector<Index> rows;
  // The counting sort by user, each thread counting and placing the rows of its own range of
  // users (every thread reads every row, and writes only its users' entries).
#pragma omp parallel
  {
    const thread_share mine = thread_share_of(n_users);
    const std::int32_t* users = d.users.data();
    for (std::size_t r = 0; r < n_rows; ++r)
      if (keep[r] && mine.holds(users[r])) ++start[static_cast<std::size_t>(users[r]) + 1];
#pragma omp barrier
#pragma omp single
    {
      for (std::size_t u = 0; u < n_users; ++u) start[u + 1] += start[u];
      rows.resize(start[n_users]);
    }
    std::vector<Index> at(start.begin() + mine.lo, start.begin() + mine.hi);
    for (std::size_t r = 0; r < n_rows; ++r)
      if (keep[r] && mine.holds(users[r]))
        rows[at[static_cast<std::size_t>(users[r] - mine.lo)]++] = static_cast<Index>(r);
  }
  constexpr std::size_t scanned = 32;  // a user with more rows is sorted
  std::size_t repeated = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : repeated)
  for (std::ptrdiff_t u = 0; u < static_cast<std::ptrdiff_t>(n_users); ++u) {
    const Index* b = rows.data() + start[static_cast<std::size_t>(u)];
    const std::size_t n =
        start[static_cast<std::size_t>(u) + 1] - start[static_cast<std::size_t>(u)];
    if (n <= scanned) {
      for (std::size_t j = 1; j < n; ++j)
        for (std::size_t i = 0; i < j; ++i)
          if (d.items[b[i]] == d.items[b[j]]) {
            keep[b[j]] = 0;
            ++repeated;
            break;
          }
      continue;
    }
    std::vector<std::pair<std::int32_t, Index>> by_item(n);
    for (std::size_t j = 0; j < n; ++j) by_item[j] = {d.items[b[j]], b[j]};
    std::sort(by_item.begin(), by_item.end());  // by item, then by row: the first row first
    for (std::size_t j = 1; j < n; ++j)
      if (by_item[j].first == by_item[j - 1].first) {
        keep[by_item[j].second] = 0;
        ++repeated;
      }
  }
  return repeated;
}

/// Which rows of `d` `as_positives` keeps under `o` (a label above the bar, a pair's first row
/// where repeats count once), with `c`'s counts.
inline std::vector<char> positive_rows(const data::interactions& d, const data::positive_options& o,
                                       data::positive_counts& c) {
  c.rows = d.size();
  std::vector<char> keep(d.size(), 0);
  for (std::size_t r = 0; r < d.size(); ++r) keep[r] = d.labels[r] > o.label_above;
  for (std::size_t r = 0; r < d.size(); ++r) c.not_positive += !keep[r];
  if (o.repeats == data::repeated_pairs::once)
    c.repeated = d.size() <= std::numeric_limits<std::uint32_t>::max()
                     ? drop_repeated_pairs<std::uint32_t>(d, keep)
                     : drop_repeated_pairs<std::size_t>(d, keep);
  c.kept = c.rows - c.not_positive - c.repeated;
  return keep;
}

}  // namespace tutti::detail

namespace tutti::data {

/// Every row of `d` whose label is above `o.label_above` as a positive (label 1), repeats of a
/// pair kept or dropped as `o.repeats` says; timestamps, index spaces and names are kept, and
/// the result is implicit. The order of the kept rows is their order in `d`.
inline interactions as_positives(const interactions& d, const positive_options& o = {},
                                 positive_counts* counts = nullptr) {
  positive_counts c;
  const std::vector<char> keep = detail::positive_rows(d, o, c);
  interactions out;
  out.user_ids = d.user_ids;
  out.item_ids = d.item_ids;
  out.user_names = d.user_names;
  out.item_names = d.item_names;
  out.implicit = true;
  out.users.reserve(c.kept);
  out.items.reserve(c.kept);
  out.labels.assign(c.kept, 1.f);
  if (d.has_timestamps()) out.timestamps.reserve(c.kept);
  for (std::size_t r = 0; r < d.size(); ++r) {
    if (!keep[r]) continue;
    out.users.push_back(d.users[r]);
    out.items.push_back(d.items[r]);
    if (d.has_timestamps()) out.timestamps.push_back(d.timestamps[r]);
  }
  if (counts != nullptr) *counts = c;
  return out;
}

/// As above, in `d`'s own arrays: the kept rows are moved to the front (in order) and the rest
/// cut off, so the log is never held twice (a 20 M-row log is 240 MB a copy).
inline interactions as_positives(interactions&& d, const positive_options& o = {},
                                 positive_counts* counts = nullptr) {
  positive_counts c;
  const std::vector<char> keep = detail::positive_rows(d, o, c);
  detail::keep_rows_in_place(d, [&](std::size_t r) { return keep[r] != 0; });
  std::vector<float>().swap(d.labels);  // the ratings' array, replaced by the 1s of the kept
  d.labels.assign(d.users.size(), 1.f);
  d.implicit = true;
  if (counts != nullptr) *counts = c;
  return std::move(d);
}

/// True when every label of `d` is the same value (a log read with `--implicit` whose rows are
/// all 1: trained as it is, a model learns to predict that value everywhere).
inline bool labels_all_equal(const interactions& d) {
  return !d.labels.empty() && std::all_of(d.labels.begin(), d.labels.end(),
                                          [&](float l) { return l == d.labels.front(); });
}

}  // namespace tutti::data
