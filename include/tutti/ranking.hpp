// SPDX-License-Identifier: Apache-2.0
/// @file ranking.hpp
/// @brief Ranking metrics under the leave-one-out protocol: hit rate and NDCG at K of each
/// held-out item among its sampled candidates (data/leave_one_out.hpp), computed on the memory of
/// any execution space (the same source on the host and a GPU).
///
/// A held-out item's rank is the number of its candidates that score at least as high as it
/// does: a tie counts against it, so a model that scores everything alike has a hit rate of 0
/// rather than 1. HR@K is the share of lists whose held-out item ranks below K; NDCG@K the mean
/// of 1 / log2(rank + 2) over those lists (0 for the others), the NCF paper's definitions with
/// one relevant item per list.
#pragma once

#include <tutti/config.hpp>
#include <tutti/data/leave_one_out.hpp>
#include <tutti/error.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/host.hpp>
#include <tutti/space/traits.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tutti {

/// HR@K and NDCG@K over a set of ranking lists.
struct ranking_result {
  std::size_t k = 0;      ///< the cut-off K
  std::size_t lists = 0;  ///< ranking lists evaluated (held-out rows)
  double hit_rate = 0;    ///< HR@K, in [0, 1]
  double ndcg = 0;        ///< NDCG@K, in [0, 1]
  /// hits[r]: lists whose held-out item has rank r, for r < K (HR@k and NDCG@k for any k ≤ K
  /// follow from it).
  std::vector<std::uint64_t> hits;
};

namespace detail {

// The held-out item's rank in list u: candidates scoring at least as high; a non-finite score
// anywhere in the list gives the list's width, flagged by the caller's count.
struct list_rank_fn {
  const float* scores;
  const std::uint32_t* negatives;
  std::uint32_t* rank;
  std::size_t width;
  TUTTI_HOST_DEVICE void operator()(std::size_t u) const {
    const float* s = scores + u * width;
    const float p = s[0];
    std::uint32_t r = 0;
    bool finite = p - p == 0.f;
    for (std::uint32_t j = 1; j <= negatives[u]; ++j) {
      finite = finite && s[j] - s[j] == 0.f;
      r += s[j] >= p ? 1u : 0u;
    }
    rank[u] = finite ? r : static_cast<std::uint32_t>(width);
  }
};

// HR@K and NDCG@K from how many of `lists` lists rank their held-out item at each r < K. The
// sums run in rank order over integer counts: the same value on every space and rank count.
inline ranking_result ranking_from_hits(std::vector<std::uint64_t> hits, std::uint64_t lists) {
  ranking_result r;
  r.k = hits.size();
  r.lists = static_cast<std::size_t>(lists);
  double hit = 0, gain = 0;
  for (std::size_t i = 0; i < hits.size(); ++i) {
    hit += double(hits[i]);
    gain += double(hits[i]) / std::log2(double(i) + 2.0);
  }
  r.hits = std::move(hits);
  if (lists == 0) return r;
  r.hit_rate = hit / double(lists);
  r.ndcg = gain / double(lists);
  return r;
}

inline ranking_result ranking_from_ranks(const std::vector<std::uint32_t>& ranks, std::size_t k,
                                         std::size_t width) {
  std::vector<std::uint64_t> hits(k, 0);
  std::size_t nonfinite = 0;
  for (std::uint32_t x : ranks) {
    if (x == width) ++nonfinite;
    if (x < k) ++hits[x];
  }
  TUTTI_EXPECTS(nonfinite == 0, "tutti::evaluate_ranking",
                std::to_string(nonfinite) +
                    " list(s) hold a score that is not finite; expected finite scores");
  return ranking_from_hits(std::move(hits), ranks.size());
}

}  // namespace detail

/// HR@K and NDCG@K of candidate lists whose scores are already on `space`: `scores` holds
/// `negatives.size()` lists of `width` scores, the held-out item's first; list u ranks its first
/// `negatives[u]` candidates after it. The ranks are computed on the space; only they come back.
/// @throws tutti::invalid_argument for a shape mismatch, K = 0, or a non-finite score.
template <execution_space Space>
ranking_result ranking_metrics(const Space& space, std::span<const float> scores,
                               std::span<const std::uint32_t> negatives, std::size_t width,
                               std::size_t k) {
  const std::size_t lists = negatives.size();
  TUTTI_EXPECTS(width >= 1 && scores.size() == lists * width, "tutti::ranking_metrics",
                "got " + std::to_string(scores.size()) + " scores for " + std::to_string(lists) +
                    " lists of width " + std::to_string(width) + "; expected lists × width");
  TUTTI_EXPECTS(k >= 1, "tutti::ranking_metrics", "k = 0; expected at least 1");
  buffer<std::uint32_t, Space> rank(lists, space);
  parallel_for(space, lists,
               detail::list_rank_fn{scores.data(), negatives.data(), rank.data(), width});
  return detail::ranking_from_ranks(
      to_host_vector(space, std::span<const std::uint32_t>(rank.span())), k, width);
}

namespace detail {

// Each candidate's user for the lists [first, first + count): list l's user, width times.
struct repeat_user_fn {
  const std::int32_t* list_users;  // one per list
  std::int32_t* out;               // count × width
  std::size_t first, width;
  TUTTI_HOST_DEVICE void operator()(std::size_t j) const { out[j] = list_users[first + j / width]; }
};

}  // namespace detail

/// Candidate lists on the memory of `Space`, to be scored and ranked after every epoch without
/// copying them again: each list's user, the candidates, and the sampled count per list. Where
/// the space's memory is the host's they are read in the candidates themselves, which must
/// outlive this; elsewhere they are copied once.
template <execution_space Space>
struct ranking_lists_on {
  /// Checks the shape of `c` and copies it to `space` (where the space is not the host's).
  /// @throws tutti::invalid_argument when `c`'s columns disagree with its width and size.
  ranking_lists_on(const Space& space, const data::ranking_candidates& c)
      : width(c.width()), lists(checked_size(c)) {
    if constexpr (Space::host_accessible) {
      users = c.users.data();
      items = c.items.data();
      negatives = c.negatives.data();
    } else {
      m_users = make_buffer(space, std::span<const std::int32_t>(c.users));
      m_items = make_buffer(space, std::span<const std::int32_t>(c.items));
      m_negatives = make_buffer(space, std::span<const std::uint32_t>(c.negatives));
      users = m_users.data();
      items = m_items.data();
      negatives = m_negatives.data();
    }
  }

  std::size_t width;                         ///< N + 1 candidates per list
  std::size_t lists;                         ///< number of lists
  const std::int32_t* users = nullptr;       ///< each list's user
  const std::int32_t* items = nullptr;       ///< lists × width, the held-out item first
  const std::uint32_t* negatives = nullptr;  ///< sampled items in each list

 private:
  static std::size_t checked_size(const data::ranking_candidates& c) {
    const std::size_t w = c.width(), lists = c.size();
    TUTTI_EXPECTS(
        c.items.size() == lists * w && c.negatives.size() == lists && c.users.size() == lists,
        "tutti::evaluate_ranking",
        "the candidates hold " + std::to_string(c.items.size()) + " items, " +
            std::to_string(c.users.size()) + " users and " + std::to_string(c.negatives.size()) +
            " counts for " + std::to_string(lists) + " lists of width " + std::to_string(w) +
            "; expected lists × width, and one user and one count per list");
    return lists;
  }
  buffer<std::int32_t, Space> m_users, m_items;  // the copies, where the space is not the host's
  buffer<std::uint32_t, Space> m_negatives;
};

/// Candidates `evaluate_ranking` scores at a time: the scores of every list are never held at
/// once (16 MiB of scores, and as much of their users).
inline constexpr std::size_t ranking_chunk_candidates = std::size_t{1} << 22;

/// HR@K and NDCG@K of `model` with parameters `params` (memory of the model's space) on lists
/// already on that space: every candidate is scored by `model.predict`, then ranked there, as
/// many lists at a time as hold at most `chunk` candidates (at least one list).
template <class Model, execution_space Space>
ranking_result evaluate_ranking(Model& model, std::span<const float> params,
                                const ranking_lists_on<Space>& lists, std::size_t k,
                                std::size_t chunk = ranking_chunk_candidates) {
  TUTTI_EXPECTS(k >= 1, "tutti::evaluate_ranking", "k = 0; expected at least 1");
  if (lists.lists == 0) return detail::ranking_from_ranks({}, k, lists.width);
  const auto& space = model.space();
  const std::size_t w = lists.width;
  const std::size_t per_chunk = std::max<std::size_t>(1, chunk / w);
  const std::size_t room = std::min(per_chunk, lists.lists) * w;
  buffer<std::int32_t, Space> users(room, space);
  buffer<float, Space> scores(room, space);
  buffer<std::uint32_t, Space> rank(lists.lists, space);
  for (std::size_t first = 0; first < lists.lists; first += per_chunk) {
    const std::size_t count = std::min(per_chunk, lists.lists - first), n = count * w;
    parallel_for(space, n, detail::repeat_user_fn{lists.users, users.data(), first, w});
    model.predict(params, std::span<const std::int32_t>(users.data(), n),
                  std::span<const std::int32_t>(lists.items + first * w, n),
                  std::span<float>(scores.data(), n));
    parallel_for(
        space, count,
        detail::list_rank_fn{scores.data(), lists.negatives + first, rank.data() + first, w});
  }
  return detail::ranking_from_ranks(
      to_host_vector(space, std::span<const std::uint32_t>(rank.span())), k, w);
}

/// HR@K and NDCG@K of `model` with parameters `params` (memory of the model's space) on
/// `candidates`: they are copied to the model's space, every candidate is scored by
/// `model.predict` there, then ranked there.
/// @throws tutti::invalid_argument for K = 0, a shape mismatch, or a non-finite score.
template <class Model>
ranking_result evaluate_ranking(Model& model, std::span<const float> params,
                                const data::ranking_candidates& candidates, std::size_t k) {
  TUTTI_EXPECTS(k >= 1, "tutti::evaluate_ranking", "k = 0; expected at least 1");
  using space_type = std::remove_cvref_t<decltype(model.space())>;
  return evaluate_ranking(model, params, ranking_lists_on<space_type>(model.space(), candidates),
                          k);
}

/// HR@K and NDCG@K of the popularity baseline on `candidates`: every candidate scored by how
/// often `train` holds its item, the recommender that knows nothing of the learner. A tie with
/// the held-out item counts against it (as `ranking_metrics` ranks every tie).
inline ranking_result popularity_ranking(const data::interactions& train,
                                         const data::ranking_candidates& candidates,
                                         std::size_t k) {
  std::vector<float> count(static_cast<std::size_t>(train.n_items()), 0.f);
  for (const std::int32_t i : train.items) count[static_cast<std::size_t>(i)] += 1.f;
  std::vector<float> scores(candidates.items.size());
  for (std::size_t j = 0; j < scores.size(); ++j)
    scores[j] = count[static_cast<std::size_t>(candidates.items[j])];
  return ranking_metrics(host_space{}, std::span<const float>(scores),
                         std::span<const std::uint32_t>(candidates.negatives), candidates.width(),
                         k);
}

}  // namespace tutti
