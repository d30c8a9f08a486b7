// SPDX-License-Identifier: Apache-2.0
/// @file data/interactions.hpp
/// @brief `tutti::data::interactions`: (user, item, label[, timestamp]) rows as struct of arrays.
#pragma once

#include <tutti/detail/random.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tutti::data {

/// An interactions dataset held on the host as struct of arrays.
///
/// Users and items carry dense indices in [0, n_users()) and [0, n_items()); `user_ids` and
/// `item_ids` map a dense index back to the id of the source. A split keeps both maps whole, so
/// train and test share one index space.
struct interactions {
  std::vector<std::int32_t> users;       ///< dense user index per row
  std::vector<std::int32_t> items;       ///< dense item index per row
  std::vector<float> labels;             ///< rating, or 0/1 for implicit feedback
  std::vector<std::int64_t> timestamps;  ///< per row, or empty when the source has none
  std::vector<std::int64_t> user_ids;    ///< dense user index -> source id
  std::vector<std::int64_t> item_ids;    ///< dense item index -> source id
  bool implicit = false;                 ///< labels are 0/1 (implicit feedback)

  /// Number of rows.
  std::size_t size() const noexcept { return users.size(); }
  /// Number of distinct users (size of the user index space).
  std::int32_t n_users() const noexcept { return static_cast<std::int32_t>(user_ids.size()); }
  /// Number of distinct items (size of the item index space).
  std::int32_t n_items() const noexcept { return static_cast<std::int32_t>(item_ids.size()); }
  /// True when every row has a timestamp.
  bool has_timestamps() const noexcept { return !timestamps.empty(); }

  /// A 64-bit digest of the rows, labels and index spaces; ranks compare it before training.
  std::uint64_t digest() const noexcept {
    std::uint64_t h = detail::mix64(size() ^ (static_cast<std::uint64_t>(implicit) << 63));
    h = detail::mix64(h ^ user_ids.size());
    h = detail::mix64(h ^ (item_ids.size() << 1));
    for (std::size_t i = 0; i < size(); ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &labels[i], sizeof bits);
      std::uint64_t row = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(users[i])) << 32) |
                          static_cast<std::uint32_t>(items[i]);
      h = detail::mix64(h ^ row) + bits;
    }
    return h;
  }
};

}  // namespace tutti::data
