// SPDX-License-Identifier: Apache-2.0
/// @file data/interactions.hpp
/// @brief `tutti::data::interactions`: (user, item, label[, timestamp]) rows as struct of arrays.
#pragma once

#include <tutti/data/id_names.hpp>
#include <tutti/detail/random.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace tutti::data {

/// An interactions dataset held on the host as struct of arrays.
///
/// Users and items carry dense indices in [0, n_users()) and [0, n_items()); `user_ids` and
/// `item_ids` map a dense index back to the id of the source. A split keeps both maps whole, so
/// train and test share one index space.
///
/// Ids that are not integers (`u1`, `cs101`, UUIDs) keep their text in `user_names` /
/// `item_names` (data/id_names.hpp); their `user_ids` / `item_ids` are then the names' 64-bit
/// codes (`name_code`). Integer ids have no names (null).
struct interactions {
  std::vector<std::int32_t> users;             ///< dense user index per row
  std::vector<std::int32_t> items;             ///< dense item index per row
  std::vector<float> labels;                   ///< rating, or 0/1 for implicit feedback
  std::vector<std::int64_t> timestamps;        ///< per row, or empty when the source has none
  std::vector<std::int64_t> user_ids;          ///< dense user index -> source id
  std::vector<std::int64_t> item_ids;          ///< dense item index -> source id
  bool implicit = false;                       ///< labels are 0/1 (implicit feedback)
  std::shared_ptr<const id_names> user_names;  ///< dense user index -> name; null: integer ids
  std::shared_ptr<const id_names> item_names;  ///< dense item index -> name; null: integer ids

  /// User `u`'s id as the source spells it: its name, or its integer id in decimal.
  std::string user_text(std::int32_t u) const {
    return id_text(user_names, user_ids, static_cast<std::size_t>(u));
  }
  /// Item `i`'s id as the source spells it: its name, or its integer id in decimal.
  std::string item_text(std::int32_t i) const {
    return id_text(item_names, item_ids, static_cast<std::size_t>(i));
  }

  /// Number of rows.
  std::size_t size() const noexcept { return users.size(); }
  /// Number of distinct users (size of the user index space).
  std::int32_t n_users() const noexcept { return static_cast<std::int32_t>(user_ids.size()); }
  /// Number of distinct items (size of the item index space).
  std::int32_t n_items() const noexcept { return static_cast<std::int32_t>(item_ids.size()); }
  /// True when every row has a timestamp.
  bool has_timestamps() const noexcept { return !timestamps.empty(); }

  /// A 64-bit digest of the rows, labels, index spaces and names (when the ids have them); ranks
  /// compare it before training, and checkpoints record it.
  std::uint64_t digest() const noexcept {
    std::uint64_t h = detail::mix64(size() ^ (static_cast<std::uint64_t>(implicit) << 63));
    h = detail::mix64(h ^ user_ids.size());
    h = detail::mix64(h ^ (item_ids.size() << 1));
    if (user_names) h = detail::mix64(h ^ user_names->digest());
    if (item_names) h = detail::mix64(h ^ (item_names->digest() + 1));
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
