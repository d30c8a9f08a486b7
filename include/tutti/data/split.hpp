// SPDX-License-Identifier: Apache-2.0
/// @file data/split.hpp
/// @brief `tutti::data::split`: a seeded train/test split decided per (user, item) pair.
///
/// Whether a row is held out depends only on (seed, source user id, source item id): never on
/// row order, on how the file was sharded, or on the world size, so every rank computes the
/// same split and a reloaded or reordered dataset splits the same way.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace tutti::detail {

/// Checks that `d` has one entry per row in each column and that every row's indices lie in
/// [0, n_users()) and [0, n_items()); `fn` names the caller in the error.
inline void check_interaction_rows(const data::interactions& d, const char* fn) {
  const std::size_t n = d.size();
  TUTTI_EXPECTS(d.items.size() == n && d.labels.size() == n &&
                    (d.timestamps.empty() || d.timestamps.size() == n),
                fn,
                "users, items, labels and timestamps have different lengths; expected one entry "
                "per row in each (timestamps may be empty)");
  for (std::size_t i = 0; i < n; ++i)
    TUTTI_EXPECTS(
        d.users[i] >= 0 && d.users[i] < d.n_users() && d.items[i] >= 0 && d.items[i] < d.n_items(),
        fn,
        "row " + std::to_string(i) + " has user " + std::to_string(d.users[i]) + ", item " +
            std::to_string(d.items[i]) + "; expected indices below n_users() = " +
            std::to_string(d.n_users()) + " and n_items() = " + std::to_string(d.n_items()));
}

/// `d`'s index spaces, kind and names, for a half of a split of it.
inline void copy_header(const data::interactions& d, data::interactions& half) {
  half.user_ids = d.user_ids;
  half.item_ids = d.item_ids;
  half.implicit = d.implicit;
  half.user_names = d.user_names;
  half.item_names = d.item_names;
}

/// Row i of `from` appended to `to` (its timestamp too where `from` has them).
inline void append_row(const data::interactions& from, std::size_t i, data::interactions& to) {
  to.users.push_back(from.users[i]);
  to.items.push_back(from.items[i]);
  to.labels.push_back(from.labels[i]);
  if (from.has_timestamps()) to.timestamps.push_back(from.timestamps[i]);
}

/// Which of a row's columns `keep_rows_in_place` moves: all, or all but the labels (for a caller
/// that writes the labels anew, so a pass over them is not spent).
enum class kept_labels : bool { moved, left };

/// Keeps the rows i of `d` with keep(i), in their order, in `d`'s own arrays (the others cut off).
/// `keep` is called once a row, in order (callers count with it). The rows before the first one
/// dropped are already in place and are not written. With
/// `kept_labels::left` the labels are neither moved nor cut: the caller writes them.
template <class Keep>
void keep_rows_in_place(data::interactions& d, Keep keep, kept_labels labels = kept_labels::moved) {
  const bool with_time = d.has_timestamps();
  const bool with_labels = labels == kept_labels::moved;
  std::size_t i = 0;
  while (i < d.size() && keep(i)) ++i;
  std::size_t out = i;  // row i (if any) is the first one dropped: keep is not asked again
  for (++i; i < d.size(); ++i) {
    if (!keep(i)) continue;
    d.users[out] = d.users[i];
    d.items[out] = d.items[i];
    if (with_labels) d.labels[out] = d.labels[i];
    if (with_time) d.timestamps[out] = d.timestamps[i];
    ++out;
  }
  d.users.resize(out);
  d.items.resize(out);
  if (with_labels) d.labels.resize(out);
  if (with_time) d.timestamps.resize(out);
}

}  // namespace tutti::detail

namespace tutti::data {

/// Hyper-parameters of `split`.
struct split_options {
  double test_fraction = 0.1;  ///< expected share of rows held out, in [0, 1)
  std::uint64_t seed = 1;      ///< different seeds give independent splits
};

/// The two halves of a split; both keep the input's full user and item index spaces.
struct split_result {
  interactions train;  ///< rows not held out
  interactions test;   ///< rows held out
};

/// The draw in [0, 1) that decides whether the pair (user_id, item_id) of source ids is held
/// out under `seed`: it is iff the draw is below the test fraction.
inline double split_draw(std::uint64_t seed, std::int64_t user_id, std::int64_t item_id) {
  std::uint64_t h = detail::hash2(detail::hash2(seed, static_cast<std::uint64_t>(user_id)),
                                  static_cast<std::uint64_t>(item_id));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

/// Whether each row of `data` is held out under `opt` (the draws by all threads: each reads its
/// row's source ids, a cache miss on a large log). Checks `opt` and `data` first.
inline std::vector<char> held_out_rows(const interactions& data, const split_options& opt) {
  const char* fn = "tutti::data::split";
  TUTTI_EXPECTS(opt.test_fraction >= 0.0 && opt.test_fraction < 1.0, fn,
                "test_fraction = " + std::to_string(opt.test_fraction) + "; expected 0 <= f < 1");
  detail::check_interaction_rows(data, fn);
  const std::size_t n = data.size();
  // A learner's source id is a cache miss on a large log: it is asked for `ahead` rows before it
  // is read (a quarter of the time of the loop without it, on 8.65 M learners).
  constexpr std::size_t ahead = 32;
  std::vector<char> held(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(n); ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (i + ahead < n)
      detail::prefetch_bytes(&data.user_ids[static_cast<std::size_t>(data.users[i + ahead])],
                             sizeof(std::int64_t));
    held[i] =
        split_draw(opt.seed, data.user_ids[static_cast<std::size_t>(data.users[i])],
                   data.item_ids[static_cast<std::size_t>(data.items[i])]) < opt.test_fraction;
  }
  return held;
}

/// Splits `data` into train and test rows. Rows with the same (user, item) pair always land on
/// the same side. Timestamps, when present, follow their rows.
/// @throws tutti::invalid_argument unless 0 <= test_fraction < 1, or when `data` is inconsistent.
inline split_result split(const interactions& data, const split_options& opt = {}) {
  const std::vector<char> held = held_out_rows(data, opt);
  const std::size_t n = data.size();
  const auto n_test = static_cast<std::size_t>(std::count(held.begin(), held.end(), char{1}));
  split_result out;
  for (auto [half, rows] : {std::pair{&out.train, n - n_test}, std::pair{&out.test, n_test}}) {
    detail::copy_header(data, *half);
    half->users.reserve(rows);
    half->items.reserve(rows);
    half->labels.reserve(rows);
    if (data.has_timestamps()) half->timestamps.reserve(rows);
  }
  for (std::size_t i = 0; i < n; ++i) detail::append_row(data, i, held[i] ? out.test : out.train);
  return out;
}

/// As above, in `data`'s own arrays: the held-out rows are copied out and the training rows
/// moved to the front where they are, so the log is never held twice (the halves are those of
/// the copying form, row for row).
inline split_result split(interactions&& data, const split_options& opt = {}) {
  const std::vector<char> held = held_out_rows(data, opt);
  const auto n_test = static_cast<std::size_t>(std::count(held.begin(), held.end(), char{1}));
  split_result out;
  detail::copy_header(data, out.test);
  out.test.users.reserve(n_test);
  out.test.items.reserve(n_test);
  out.test.labels.reserve(n_test);
  if (data.has_timestamps()) out.test.timestamps.reserve(n_test);
  for (std::size_t i = 0; i < data.size(); ++i)
    if (held[i]) detail::append_row(data, i, out.test);
  detail::keep_rows_in_place(data, [&](std::size_t i) { return !held[i]; });
  out.train = std::move(data);
  return out;
}

}  // namespace tutti::data
