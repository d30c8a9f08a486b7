// SPDX-License-Identifier: Apache-2.0
/// @file data/feedback.hpp
/// @brief `tutti::data::as_positives`: a platform's log (enrolments, completions, clicks) read as
/// positive interactions, one label-1 row per kept row, for training with sampled negatives.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

/// Every row of `d` whose label is above `o.label_above` as a positive (label 1), repeats of a
/// pair kept or dropped as `o.repeats` says; timestamps, index spaces and names are kept, and
/// the result is implicit. The order of the kept rows is their order in `d`.
inline interactions as_positives(const interactions& d, const positive_options& o = {},
                                 positive_counts* counts = nullptr) {
  positive_counts c;
  c.rows = d.size();
  std::vector<char> keep(d.size(), 0);
  for (std::size_t r = 0; r < d.size(); ++r) keep[r] = d.labels[r] > o.label_above;
  for (std::size_t r = 0; r < d.size(); ++r) c.not_positive += !keep[r];
  if (o.repeats == repeated_pairs::once) {
    std::vector<std::pair<std::uint64_t, std::size_t>> pairs;
    pairs.reserve(d.size());
    for (std::size_t r = 0; r < d.size(); ++r)
      if (keep[r])
        pairs.emplace_back(
            (std::uint64_t(std::uint32_t(d.users[r])) << 32) | std::uint32_t(d.items[r]), r);
    std::sort(pairs.begin(), pairs.end());  // by pair, then by row: the first row of each first
    for (std::size_t k = 1; k < pairs.size(); ++k)
      if (pairs[k].first == pairs[k - 1].first) {
        keep[pairs[k].second] = 0;
        ++c.repeated;
      }
  }
  interactions out;
  out.user_ids = d.user_ids;
  out.item_ids = d.item_ids;
  out.user_names = d.user_names;
  out.item_names = d.item_names;
  out.implicit = true;
  for (std::size_t r = 0; r < d.size(); ++r) {
    if (!keep[r]) continue;
    out.users.push_back(d.users[r]);
    out.items.push_back(d.items[r]);
    out.labels.push_back(1.f);
    if (d.has_timestamps()) out.timestamps.push_back(d.timestamps[r]);
  }
  c.kept = out.size();
  if (counts != nullptr) *counts = c;
  return out;
}

/// True when every label of `d` is the same value (a log read with `--implicit` whose rows are
/// all 1: trained as it is, a model learns to predict that value everywhere).
inline bool labels_all_equal(const interactions& d) {
  return !d.labels.empty() && std::all_of(d.labels.begin(), d.labels.end(),
                                          [&](float l) { return l == d.labels.front(); });
}

}  // namespace tutti::data
