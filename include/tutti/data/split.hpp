// SPDX-License-Identifier: Apache-2.0
/// @file data/split.hpp
/// @brief `tutti::data::split`: a seeded train/test split decided per (user, item) pair.
///
/// Whether a row is held out depends only on (seed, source user id, source item id): never on
/// row order, on how the file was sharded, or on the world size, so every rank computes the
/// same split and a reloaded or reordered dataset splits the same way.
#pragma once

#include <tutti/data/interactions.hpp>
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

/// Splits `data` into train and test rows. Rows with the same (user, item) pair always land on
/// the same side. Timestamps, when present, follow their rows.
/// @throws tutti::invalid_argument unless 0 <= test_fraction < 1, or when `data` is inconsistent.
inline split_result split(const interactions& data, const split_options& opt = {}) {
  const char* fn = "tutti::data::split";
  TUTTI_EXPECTS(opt.test_fraction >= 0.0 && opt.test_fraction < 1.0, fn,
                "test_fraction = " + std::to_string(opt.test_fraction) + "; expected 0 <= f < 1");
  detail::check_interaction_rows(data, fn);
  const std::size_t n = data.size();

  split_result out;
  for (interactions* half : {&out.train, &out.test}) {
    half->user_ids = data.user_ids;
    half->item_ids = data.item_ids;
    half->implicit = data.implicit;
    half->user_names = data.user_names;
    half->item_names = data.item_names;
  }
  const bool with_time = data.has_timestamps();
  // The draws by all threads (each reads its row's source ids, a cache miss on a large log),
  // then the rows dealt in order.
  std::vector<char> held(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i)
    held[static_cast<std::size_t>(i)] =
        split_draw(opt.seed, data.user_ids[static_cast<std::size_t>(data.users[i])],
                   data.item_ids[static_cast<std::size_t>(data.items[i])]) < opt.test_fraction;
  const auto n_test = static_cast<std::size_t>(std::count(held.begin(), held.end(), char{1}));
  for (auto [half, rows] : {std::pair{&out.train, n - n_test}, std::pair{&out.test, n_test}}) {
    half->users.reserve(rows);
    half->items.reserve(rows);
    half->labels.reserve(rows);
    if (with_time) half->timestamps.reserve(rows);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t u = data.users[i];
    const std::int32_t v = data.items[i];
    interactions& half = held[i] ? out.test : out.train;
    half.users.push_back(u);
    half.items.push_back(v);
    half.labels.push_back(data.labels[i]);
    if (with_time) half.timestamps.push_back(data.timestamps[i]);
  }
  return out;
}

}  // namespace tutti::data
