// SPDX-License-Identifier: Apache-2.0
/// @file models/mf_recommend.hpp
/// @brief `tutti::models::top_k`: a user's k best unseen items under an exported matrix
/// factorisation, and `id_index`, source id -> dense index.
#pragma once

#include <tutti/data/id_names.hpp>
#include <tutti/error.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/models/mf_export.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace tutti::models {

/// One recommended item: its dense index and its score s = g + b_u + b_i + <p_u, q_i> (the
/// logit for a logistic model, the predicted rating for a squared one).
struct scored_item {
  std::int32_t item = 0;
  float score = 0;
};

/// Score of dense user `u` and item `i`, computed as `matrix_factorization::predict` does.
inline float mf_export_score(const mf_export& e, std::int32_t u, std::int32_t i) {
  const auto d = static_cast<std::size_t>(e.dim);
  const float* p = e.user_factors.data() + static_cast<std::size_t>(u) * d;
  const float* q = e.item_factors.data() + static_cast<std::size_t>(i) * d;
  return e.global_bias + e.user_bias[static_cast<std::size_t>(u)] +
         e.item_bias[static_cast<std::size_t>(i)] + tutti::detail::dot4(p, q, d);
}

/// The `k` items of highest score for dense user `u` among the items not in its seen list,
/// best first; equal scores in ascending order of the items' source ids, so the list is a
/// function of the export alone. Fewer than `k` when fewer items are unseen.
inline std::vector<scored_item> top_k(const mf_export& e, std::int32_t u, std::size_t k) {
  TUTTI_EXPECTS(
      u >= 0 && u < e.n_users(), "tutti::models::top_k",
      "user index " + std::to_string(u) + " outside [0, " + std::to_string(e.n_users()) + ")");
  std::vector<char> seen(static_cast<std::size_t>(e.n_items()), 0);
  for (std::int64_t i : e.seen(u)) seen[static_cast<std::size_t>(i)] = 1;
  std::vector<scored_item> all;
  all.reserve(seen.size());
  for (std::int32_t i = 0; i < e.n_items(); ++i)
    if (!seen[static_cast<std::size_t>(i)]) all.push_back({i, mf_export_score(e, u, i)});
  const auto better = [&e](const scored_item& a, const scored_item& b) {
    if (a.score != b.score) return a.score > b.score;
    return e.item_ids[static_cast<std::size_t>(a.item)] <
           e.item_ids[static_cast<std::size_t>(b.item)];
  };
  const std::size_t n = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), better);
  all.resize(n);
  return all;
}

/// Source id -> dense index over `ids` (e.g. `mf_export::user_ids`).
class id_index {
 public:
  /// Indexes `ids`; the ids of an export are distinct.
  explicit id_index(std::span<const std::int64_t> ids) {
    m_index.reserve(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k)
      m_index.emplace(ids[k], static_cast<std::int32_t>(k));
  }
  /// The dense index of source id `id`, or nullopt when it is not indexed.
  std::optional<std::int32_t> find(std::int64_t id) const {
    const auto it = m_index.find(id);
    if (it == m_index.end()) return std::nullopt;
    return it->second;
  }
  /// The dense index of the id spelt `text`: a name of `names` when the ids have names (found
  /// by its code), else an integer id in decimal; nullopt when it is not indexed.
  std::optional<std::int32_t> find(std::string_view text, const data::id_names* names) const {
    if (names != nullptr) {
      const auto k = find(data::name_code(text));
      if (k && (*names)[static_cast<std::size_t>(*k)] == text) return k;
      return std::nullopt;
    }
    std::int64_t id = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
    if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return find(id);
  }

 private:
  std::unordered_map<std::int64_t, std::int32_t> m_index;
};

}  // namespace tutti::models
