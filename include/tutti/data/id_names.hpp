// SPDX-License-Identifier: Apache-2.0
/// @file data/id_names.hpp
/// @brief Ids that are not integers: `tutti::data::id_names`, the dictionary from a dense index
/// to the id as the source spells it (`u1`, `cs101`, a UUID), and `tutti::data::name_code`, the
/// 64-bit code that stands for such an id wherever tutti needs a number (splits, tie-breaks,
/// sealed shards).
///
/// A name's code depends on its bytes alone, so every rank, every file and every resume agrees
/// on it without sharing the dictionary. Two distinct names with one code (about one chance in
/// 2^64 / n^2 for n names, or a file built to collide) are refused by the loaders, naming both:
/// a code never silently stands for two ids.
///
/// Memory: the names' bytes in one buffer and one 64-bit end offset per name; the loaders add
/// the 64-bit codes and an open-addressing table of 32-bit slots at most half full while
/// loading (docs/data.md#ids-of-any-kind has the measured figures).
#pragma once

#include <tutti/detail/random.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tutti::data {

/// The 64-bit code of the id `name`: a hash of its bytes (and length), stable across machines,
/// compilers and runs.
inline std::int64_t name_code(std::string_view name) noexcept {
  std::uint64_t h = detail::mix64(0x7475747469696473ULL ^ name.size());  // "tuttiids"
  std::size_t i = 0;
  for (; i + 8 <= name.size(); i += 8) {
    std::uint64_t w = 0;
    for (int b = 0; b < 8; ++b)
      w |= std::uint64_t{static_cast<unsigned char>(name[i + static_cast<std::size_t>(b)])}
           << (8 * b);
    h = detail::mix64(h ^ w) + 0x9e3779b97f4a7c15ULL;
  }
  std::uint64_t tail = 0;
  for (std::size_t b = 0; i + b < name.size(); ++b)
    tail |= std::uint64_t{static_cast<unsigned char>(name[i + b])} << (8 * b);
  return static_cast<std::int64_t>(detail::mix64(h ^ tail ^ 0xa0761d6478bd642fULL));
}

/// Dense index -> the id's text as the source spells it (unquoted, blanks outside quotes
/// trimmed). Names are kept back to back in one buffer.
class id_names {
 public:
  /// Number of names.
  std::size_t size() const noexcept { return m_ends.size(); }
  /// True when there is no name.
  bool empty() const noexcept { return m_ends.empty(); }
  /// The name of dense index `i`; valid while this object lives unchanged.
  std::string_view operator[](std::size_t i) const noexcept {
    const std::size_t b = i == 0 ? 0 : static_cast<std::size_t>(m_ends[i - 1]);
    return std::string_view(m_bytes).substr(b, static_cast<std::size_t>(m_ends[i]) - b);
  }
  /// Appends `name` as the next dense index.
  void push_back(std::string_view name) {
    m_bytes.append(name);
    m_ends.push_back(m_bytes.size());
  }
  /// Reserves room for `n` names of `bytes` bytes in all.
  void reserve(std::size_t n, std::size_t bytes) {
    m_ends.reserve(n);
    m_bytes.reserve(bytes);
  }
  /// Bytes of all names together.
  std::size_t bytes() const noexcept { return m_bytes.size(); }
  /// Gives back the room reserved beyond the names.
  void shrink_to_fit() {
    m_bytes.shrink_to_fit();
    m_ends.shrink_to_fit();
  }
  /// Bytes this object holds on the heap.
  std::size_t memory_bytes() const noexcept {
    return m_bytes.capacity() + m_ends.capacity() * sizeof(std::uint64_t);
  }
  /// A 64-bit digest of the names in order.
  std::uint64_t digest() const noexcept {
    std::uint64_t h = detail::mix64(0x6e616d6573ULL ^ size());
    for (std::size_t i = 0; i < size(); ++i)
      h = detail::mix64(h ^ static_cast<std::uint64_t>(name_code((*this)[i]))) + i;
    return h;
  }
  friend bool operator==(const id_names& a, const id_names& b) noexcept {
    return a.m_ends == b.m_ends && a.m_bytes == b.m_bytes;
  }

 private:
  std::string m_bytes;
  std::vector<std::uint64_t> m_ends;
};

/// The id of dense index `k` as the source spells it: its name in `names`, or, for integer ids
/// (`names` null), `ids[k]` in decimal.
inline std::string id_text(const std::shared_ptr<const id_names>& names,
                           const std::vector<std::int64_t>& ids, std::size_t k) {
  return names ? std::string((*names)[k]) : std::to_string(ids[k]);
}

/// True when both dictionaries are absent, or both present and equal.
inline bool same_names(const std::shared_ptr<const id_names>& a,
                       const std::shared_ptr<const id_names>& b) {
  return a == b || (a && b && *a == *b);
}

}  // namespace tutti::data

namespace tutti::detail {

/// Open-addressing map from a name to its dense index, in order of first appearance, keyed by
/// `name_code`. Builds the dictionary (`names`) and the codes (`codes`, the source ids).
class dense_name_map {
 public:
  /// A map whose codes come from `code_of` (`name_code`; tests pass one that collides).
  explicit dense_name_map(std::int64_t (*code_of)(std::string_view) noexcept = data::name_code)
      : m_code(code_of) {}
  /// What `operator()` found.
  struct result {
    std::int32_t dense = -1;  ///< the name's dense index; -1 on a collision
    std::int32_t other = -1;  ///< on a collision: the dense index of the other name
  };
  /// Dense index of `name`, adding it when new; on a code collision with another name, returns
  /// dense = -1 and the other name's index (nothing is added).
  result operator()(std::string_view name) {
    if ((m_codes.size() + 1) * 2 > m_slots.size()) grow();
    const std::size_t mask = m_slots.size() - 1;
    const std::int64_t code = m_code(name);
    std::size_t at = mix64(static_cast<std::uint64_t>(code)) & mask;
    while (true) {
      const std::int32_t slot = m_slots[at];
      if (slot < 0) {
        const auto dense = static_cast<std::int32_t>(m_codes.size());
        m_slots[at] = dense;
        m_codes.push_back(code);
        m_names.push_back(name);
        return {dense, -1};
      }
      if (m_codes[static_cast<std::size_t>(slot)] == code)
        return m_names[static_cast<std::size_t>(slot)] == name ? result{slot, -1}
                                                               : result{-1, slot};
      at = (at + 1) & mask;
    }
  }
  /// Number of distinct names seen.
  std::size_t size() const noexcept { return m_codes.size(); }
  /// The name of dense index `i`.
  std::string_view name(std::int32_t i) const noexcept {
    return m_names[static_cast<std::size_t>(i)];
  }
  /// The code of dense index `i`.
  std::int64_t code(std::int32_t i) const noexcept { return m_codes[static_cast<std::size_t>(i)]; }
  /// Dense index -> code; leaves the codes empty.
  std::vector<std::int64_t> release_codes() {
    m_slots = {};
    m_codes.shrink_to_fit();
    return std::move(m_codes);
  }
  /// Dense index -> name; leaves the names empty.
  data::id_names release_names() {
    m_names.shrink_to_fit();
    return std::move(m_names);
  }

 private:
  void grow() {
    const std::size_t n = m_slots.empty() ? 1024 : m_slots.size() * 2;
    m_slots.assign(n, -1);
    for (std::size_t d = 0; d < m_codes.size(); ++d) {
      std::size_t at = mix64(static_cast<std::uint64_t>(m_codes[d])) & (n - 1);
      while (m_slots[at] >= 0) at = (at + 1) & (n - 1);
      m_slots[at] = static_cast<std::int32_t>(d);
    }
  }
  std::int64_t (*m_code)(std::string_view) noexcept;
  std::vector<std::int32_t> m_slots;
  std::vector<std::int64_t> m_codes;
  data::id_names m_names;
};

}  // namespace tutti::detail
