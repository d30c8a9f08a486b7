// SPDX-License-Identifier: Apache-2.0
/// @file data/feedback.hpp
/// @brief `tutti::data::as_positives`: a platform's log (enrolments, completions, clicks) read as
/// positive interactions, one label-1 row per kept row, for training with sampled negatives.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/data/split.hpp>
#include <tutti/detail/learner_buckets.hpp>
#include <tutti/detail/spare_capacity.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
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

/// The kept rows of a log in buckets of consecutive users (`detail::learner_buckets`): bucket b's
/// rows at [start[b], start[b + 1]) in file order, each row's user within the bucket (`low`),
/// course and row number.
template <class Index>
struct repeat_buckets {
  learner_buckets buckets;
  std::vector<Index> start;
  std::unique_ptr<std::uint16_t[]> low;
  std::unique_ptr<std::int32_t[]> items;
  std::unique_ptr<Index[]> rows;
};

/// `d`'s kept rows (`keep`) in buckets of consecutive users.
template <class Index>
repeat_buckets<Index> group_rows_in_buckets(const data::interactions& d,
                                            const std::vector<char>& keep, std::size_t n_users) {
  repeat_buckets<Index> out;
  out.buckets = learner_buckets_of(n_users);
  const std::size_t n = d.size();
  out.low.reset(new std::uint16_t[n]);  // the kept rows' places: pages past them never touched
  out.items.reset(new std::int32_t[n]);
  out.rows.reset(new Index[n]);
  const std::int32_t* users = d.users.data();
  const std::int32_t* items = d.items.data();
  out.start = place_in_learner_buckets<Index>(
      n, out.buckets,
      [&](std::size_t lo, std::size_t hi, auto&& f) {
        for (std::size_t r = lo; r < hi; ++r)
          if (keep[r]) f(r, users[r], items[r]);
      },
      [&](Index p, std::size_t r, std::int32_t u, std::int32_t i) {
        out.low[p] = out.buckets.low(static_cast<std::size_t>(u));
        out.items[p] = i;
        out.rows[p] = static_cast<Index>(r);
      });
  return out;
}

/// Clears `keep` for each of one user's `n` rows (`items`, `rows`, in file order) whose course
/// an earlier of them holds; returns how many. A short list is scanned, a long one sorted.
template <class Index>
std::size_t mark_repeats(const std::int32_t* items, const Index* rows, std::size_t n,
                         std::vector<char>& keep) {
  constexpr std::size_t scanned = 32;  // a user with more rows is sorted
  std::size_t repeated = 0;
  if (n <= scanned) {
    for (std::size_t j = 1; j < n; ++j)
      for (std::size_t i = 0; i < j; ++i)
        if (items[i] == items[j]) {
          keep[rows[j]] = 0;
          ++repeated;
          break;
        }
    return repeated;
  }
  std::vector<std::pair<std::int32_t, Index>> by_item(n);
  for (std::size_t j = 0; j < n; ++j) by_item[j] = {items[j], rows[j]};
  std::sort(by_item.begin(), by_item.end());  // by course, then by row: the first row first
  for (std::size_t j = 1; j < n; ++j)
    if (by_item[j].first == by_item[j - 1].first) {
      keep[by_item[j].second] = 0;
      ++repeated;
    }
  return repeated;
}

/// Clears `keep[r]` for every kept row r whose (user, item) pair a kept row before it holds, and
/// returns how many it cleared. The kept rows are grouped by user in two passes that stay in the
/// caches (`detail/learner_buckets.hpp`): first into at most 4,096 buckets of consecutive users
/// (each thread its own range of rows, in file order), then each bucket by user with a count per
/// user of the bucket; each user's rows, in file order, are then checked against that user's
/// earlier rows (a scan for a short list, a sort of (item, row) for a long one).
/// `Index` holds a row number.
template <class Index>
std::size_t drop_repeated_pairs(const data::interactions& d, std::vector<char>& keep) {
  const auto n_users = static_cast<std::size_t>(d.n_users());
  if (n_users == 0) return 0;
  const repeat_buckets rb = group_rows_in_buckets<Index>(d, keep, n_users);
  const std::size_t per = rb.buckets.width();  // users in a bucket
  std::size_t repeated = 0;
#pragma omp parallel reduction(+ : repeated)
  {
    std::vector<Index> start(per + 1);
    std::vector<std::int32_t> items;
    std::vector<Index> rows;
#pragma omp for schedule(dynamic, 16)
    for (std::ptrdiff_t b = 0; b < static_cast<std::ptrdiff_t>(rb.buckets.count); ++b) {
      const Index lo = rb.start[static_cast<std::size_t>(b)];
      const Index hi = rb.start[static_cast<std::size_t>(b) + 1];
      if (hi - lo < 2) continue;
      // The bucket's rows by user (stable: file order within a user); start[u] ends user u.
      std::fill(start.begin(), start.end(), Index{0});
      for (Index k = lo; k < hi; ++k) ++start[rb.low[k] + 1];
      for (std::size_t u = 0; u < per; ++u) start[u + 1] += start[u];
      items.resize(hi - lo);
      rows.resize(hi - lo);
      for (Index k = lo; k < hi; ++k) {
        const Index at = start[rb.low[k]]++;
        items[at] = rb.items[k];
        rows[at] = rb.rows[k];
      }
      Index first = 0;
      for (std::size_t u = 0; u < per; ++u) {
        repeated += mark_repeats(items.data() + first, rows.data() + first, start[u] - first, keep);
        first = start[u];
      }
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
  // The labels are not moved (each is overwritten below): one pass over 4 bytes a row fewer.
  detail::keep_rows_in_place(
      d, [&](std::size_t r) { return keep[r] != 0; }, detail::kept_labels::left);
  // The 1s of the kept rows where the labels were: the same pages, none new to the process (a
  // fresh array is written into memory the system must first clear, 80 MB for 20 M rows).
  d.labels.assign(d.users.size(), 1.f);
  detail::release_spare_capacity(d.labels);
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
