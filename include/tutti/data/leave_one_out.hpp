// SPDX-License-Identifier: Apache-2.0
/// @file data/leave_one_out.hpp
/// @brief The leave-one-out ranking protocol of the NCF paper: `tutti::data::leave_one_out` holds
/// out each user's last interaction, `tutti::data::sample_candidates` pairs it with items the
/// user never interacted with, for `tutti::evaluate_ranking` (tutti/ranking.hpp) to rank.
///
/// Both depend only on the rows, the source ids and the seed: never on row order, threads, or
/// the world size, so every rank and every resume builds the same held-out rows and candidates.
#pragma once

#include <tutti/data/detail/learner_lists.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/data/split.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/detail/thread_range.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tutti::data {

/// Options of `leave_one_out`.
struct leave_one_out_options {
  /// Without timestamps, which interaction of a user is held out (a seeded draw per pair of
  /// source ids); with timestamps the seed breaks no tie that matters and is unused.
  std::uint64_t seed = 1;
};

/// Options of `sample_candidates`.
struct candidate_options {
  std::size_t negatives = 100;  ///< N: items sampled per held-out row (the NCF protocol's 100)
  std::uint64_t seed = 1;       ///< different seeds give independent samples
};

/// One ranking list per held-out row: `items[u * width()]` is the held-out (positive) item, the
/// next `negatives[u]` entries the sampled items; a user with fewer than N unseen items has all
/// of them, and the rest of the row repeats the positive (never ranked).
struct ranking_candidates {
  std::size_t n_negatives = 0;           ///< N asked for
  std::vector<std::int32_t> users;       ///< dense user index per list
  std::vector<std::int32_t> items;       ///< users.size() × width(), row-major
  std::vector<std::uint32_t> negatives;  ///< sampled items in each list (≤ N)
  std::size_t width() const noexcept { return n_negatives + 1; }
  std::size_t size() const noexcept { return users.size(); }
};

}  // namespace tutti::data

namespace tutti::detail {

// Row i beats row j as a user's held-out row: the later timestamp (or, without timestamps, the
// larger seeded draw); then the larger source item id, then the larger label. Equal on all three,
// the rows are the same interaction, and either may go.
struct held_out_order {
  const data::interactions& d;
  std::uint64_t seed;
  bool beats(std::size_t i, std::size_t j) const {
    if (d.has_timestamps()) {
      if (d.timestamps[i] != d.timestamps[j]) return d.timestamps[i] > d.timestamps[j];
    } else {
      const double a = draw(i), b = draw(j);
      if (a != b) return a > b;
    }
    return beats_on_tie(i, j);
  }
  /// The order of rows i and j of equal timestamps (or draws).
  bool beats_on_tie(std::size_t i, std::size_t j) const {
    const auto ii = d.item_ids[static_cast<std::size_t>(d.items[i])];
    const auto ij = d.item_ids[static_cast<std::size_t>(d.items[j])];
    if (ii != ij) return ii > ij;
    return d.labels[i] > d.labels[j];
  }
  double draw(std::size_t i) const {
    return data::split_draw(seed, d.user_ids[static_cast<std::size_t>(d.users[i])],
                            d.item_ids[static_cast<std::size_t>(d.items[i])]);
  }
  /// `draw(i)`'s 53 bits as an integer: the draws order as these do.
  std::uint64_t draw_bits(std::size_t i) const {
    return static_cast<std::uint64_t>(std::ldexp(draw(i), 53));
  }
};

// Each user's item indices in two sets of rows, sorted and without repeats, as one CSR table
// (grouped by all threads, `learner_courses`).
struct user_item_sets {
  std::vector<std::uint64_t> start;  // n_users + 1
  std::vector<std::int32_t> items;   // sorted within a user

  user_item_sets(const data::interactions& a, const data::interactions& b, std::size_t n_users)
      : start(n_users + 1, 0), items(a.size() + b.size()) {
    const data::interactions* sets[] = {&a, &b};
    learner_courses(std::span<const data::interactions* const>(sets), n_users, start.data(),
                    items.data());
    items.resize(start.back());
  }
  std::span<const std::int32_t> of(std::size_t u) const {
    return {items.data() + start[u], start[u + 1] - start[u]};
  }
};

// Up to n distinct items outside `seen` (sorted), drawn by (seed, the user's source id), written
// to `out` (room for n); returns how many. Where unseen items are plenty, rejection sampling (the
// items drawn so far marked in `drawn`, a bitmap of n_items bits that is all zero on entry and on
// return); where they are few, a seeded partial shuffle of all of them. Either way the result
// depends only on the seed, the user and `seen`.
inline std::size_t draw_unseen(std::span<const std::int32_t> seen, std::int32_t n_items,
                               std::size_t n, std::uint64_t key, std::int32_t* out,
                               std::vector<std::uint64_t>& drawn) {
  const std::size_t unseen = static_cast<std::size_t>(n_items) - seen.size();
  const auto is_seen = [&](std::int32_t v) {
    return std::binary_search(seen.begin(), seen.end(), v);
  };
  if (unseen >= 4 * n) {
    const auto word = [&](std::int32_t v) -> std::uint64_t& {
      return drawn[static_cast<std::size_t>(v) >> 6];
    };
    const auto bit = [](std::int32_t v) {
      return std::uint64_t{1} << (v & 63);
    };
    std::size_t k = 0;
    for (std::uint64_t c = 0; k < n; ++c) {
      const auto v = static_cast<std::int32_t>(hash2(key, c) % static_cast<std::uint64_t>(n_items));
      if ((word(v) & bit(v)) != 0 || is_seen(v)) continue;
      word(v) |= bit(v);
      out[k++] = v;
    }
    for (std::size_t i = 0; i < k; ++i) word(out[i]) &= ~bit(out[i]);
    return k;
  }
  std::vector<std::int32_t> all;
  all.reserve(unseen);
  for (std::int32_t v = 0; v < n_items; ++v)
    if (!is_seen(v)) all.push_back(v);
  const std::size_t take = std::min(n, all.size());
  for (std::size_t i = 0; i < take; ++i) {
    const std::size_t j = i + hash2(key, i) % (all.size() - i);
    std::swap(all[i], all[j]);
  }
  std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(take), out);
  return take;
}

/// Each user's held-out row for `leave_one_out`: the latest eligible one (see there), none for a
/// user with fewer than two rows. One pass over the rows, each thread keeping the users of its
/// own range; a user's state is 16 bytes (one cache line, asked for a few rows ahead): the order
/// key of its best row (the timestamp, or the draw's 53 bits, which order as the draw does), and
/// the row with the count of the user's rows (0, 1 or 2 for "two or more") in its top bits.
struct held_out_last {
  struct alignas(16) best {
    std::int64_t key = 0;
    std::uint64_t row_count = none_row;  // the row in the low 62 bits, min(rows, 2) above
  };
  static constexpr std::uint64_t none_row = (std::uint64_t{1} << 62) - 1;
  static std::uint64_t row_of(const best& b) { return b.row_count & none_row; }
  static std::uint64_t count_of(const best& b) { return b.row_count >> 62; }

  std::vector<best> users;
  std::vector<char> held_rows;  // row i is its user's held-out row

  held_out_last(const data::interactions& data, std::uint64_t seed)
      : users(static_cast<std::size_t>(data.n_users())), held_rows(data.size(), 0) {
    check_interaction_rows(data, "tutti::data::leave_one_out");
    const held_out_order order{data, seed};
    const bool timed = data.has_timestamps();
    const std::size_t n = data.size();
    const auto key = [&](std::size_t i) {
      return timed ? data.timestamps[i] : static_cast<std::int64_t>(order.draw_bits(i));
    };
#pragma omp parallel
    {
      const thread_share mine = thread_share_of(users.size());
      constexpr std::size_t ahead = 16;
      for (std::size_t i = 0; i < n; ++i) {
        if (i + ahead < n) {
          const std::int32_t v = data.users[i + ahead];
          if (mine.holds(v)) {
            prefetch_bytes(&users[static_cast<std::size_t>(v)], sizeof(best));
            if (!timed) prefetch_bytes(&data.user_ids[static_cast<std::size_t>(v)], 8);
          }
        }
        const std::int32_t u = data.users[i];
        if (!mine.holds(u)) continue;
        best& b = users[static_cast<std::size_t>(u)];
        const std::uint64_t count = std::min<std::uint64_t>(count_of(b) + 1, 2);
        std::uint64_t row = row_of(b);
        const bool eligible = !data.implicit || data.labels[i] > 0.5f;
        if (eligible) {
          const std::int64_t k = key(i);
          if (row == none_row || k > b.key || (k == b.key && order.beats_on_tie(i, row))) {
            row = i;
            b.key = k;
          }
        }
        b.row_count = row | (count << 62);
      }
    }
    for (const best& b : users)
      if (row_of(b) != none_row && count_of(b) >= 2) held_rows[row_of(b)] = 1;
  }
  /// True when row i is its user's held-out row.
  bool held(std::size_t i) const {
    return held_rows[i] != 0;
  }
  /// The held-out rows into `test` (its header from `data`), in user order.
  void put_test(const data::interactions& data, data::interactions& test) const {
    copy_header(data, test);
    std::vector<std::uint64_t> rows;  // the held-out rows in user order, then gathered by all
    for (const best& b : users)       // threads (each a cache miss in each column)
      if (row_of(b) != none_row && count_of(b) >= 2) rows.push_back(row_of(b));
    const std::size_t m = rows.size();
    const bool timed = data.has_timestamps();
    test.users.resize(m);
    test.items.resize(m);
    test.labels.resize(m);
    if (timed) test.timestamps.resize(m);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t k = 0; k < static_cast<std::ptrdiff_t>(m); ++k) {
      const std::uint64_t r = rows[static_cast<std::size_t>(k)];
      test.users[static_cast<std::size_t>(k)] = data.users[r];
      test.items[static_cast<std::size_t>(k)] = data.items[r];
      test.labels[static_cast<std::size_t>(k)] = data.labels[r];
      if (timed) test.timestamps[static_cast<std::size_t>(k)] = data.timestamps[r];
    }
  }
};

}  // namespace tutti::detail

namespace tutti::data {

/// Holds out each user's last interaction (the latest timestamp; without timestamps, one chosen
/// by a seeded draw per pair of source ids) as `test`; every other row stays in `train`, in its
/// order. In implicit data only a positive row (label 1) is held out, the item a ranking must
/// find; ratings count as interactions whatever their value, as the NCF protocol treats them. A
/// user with a single row, or no positive one, keeps every row in `train` and is not evaluated.
/// Both halves keep the input's user and item index spaces.
/// @throws tutti::invalid_argument when `data` is inconsistent.
inline split_result leave_one_out(const interactions& data, const leave_one_out_options& opt = {}) {
  const detail::held_out_last h(data, opt.seed);
  split_result out;
  detail::copy_header(data, out.train);
  for (std::size_t i = 0; i < data.size(); ++i)
    if (!h.held(i)) detail::append_row(data, i, out.train);
  h.put_test(data, out.test);
  return out;
}

/// As above, in `data`'s own arrays: the held-out rows are copied out and the training rows
/// moved to the front where they are, so the log is never held twice (the halves are those of
/// the copying form, row for row).
inline split_result leave_one_out(interactions&& data, const leave_one_out_options& opt = {}) {
  const detail::held_out_last h(data, opt.seed);
  split_result out;
  h.put_test(data, out.test);
  detail::keep_rows_in_place(data, [&](std::size_t i) { return !h.held(i); });
  out.train = std::move(data);
  return out;
}

/// For each row of `held_out` (one per user, as `leave_one_out` makes them), the held-out item
/// and `negatives` items the user interacted with neither in `train` nor in `held_out`, drawn
/// without repeats by (seed, the user's source id).
/// @throws tutti::invalid_argument when the two disagree on the index spaces, a user has two
/// held-out rows, or a row is out of range.
inline ranking_candidates sample_candidates(const interactions& train, const interactions& held_out,
                                            const candidate_options& opt = {}) {
  const char* fn = "tutti::data::sample_candidates";
  detail::check_interaction_rows(train, fn);
  detail::check_interaction_rows(held_out, fn);
  TUTTI_EXPECTS(train.user_ids == held_out.user_ids && train.item_ids == held_out.item_ids, fn,
                "train has " + std::to_string(train.n_users()) + " users and " +
                    std::to_string(train.n_items()) + " items, held_out " +
                    std::to_string(held_out.n_users()) + " and " +
                    std::to_string(held_out.n_items()) +
                    "; expected the same index spaces (the halves of one split)");
  TUTTI_EXPECTS(opt.negatives >= 1, fn, "negatives = 0; expected at least 1");
  const auto n_users = static_cast<std::size_t>(train.n_users());
  const detail::user_item_sets seen(train, held_out, n_users);

  ranking_candidates c;
  c.n_negatives = opt.negatives;
  const std::size_t w = c.width(), lists = held_out.size();
  c.users = held_out.users;
  c.items.resize(lists * w);
  c.negatives.resize(lists);
  std::vector<char> listed(n_users, 0);
  for (std::size_t r = 0; r < lists; ++r) {
    const auto u = static_cast<std::size_t>(held_out.users[r]);
    TUTTI_EXPECTS(!listed[u], fn,
                  "user " + held_out.user_text(static_cast<std::int32_t>(u)) +
                      " has more than one held-out row; expected one per user (leave_one_out)");
    listed[u] = 1;
  }
#pragma omp parallel
  {
    std::vector<std::uint64_t> drawn((static_cast<std::size_t>(train.n_items()) + 63) / 64, 0);
#pragma omp for schedule(dynamic, 64)
    for (std::size_t r = 0; r < lists; ++r) {
      const auto u = static_cast<std::size_t>(held_out.users[r]);
      const std::uint64_t key = detail::hash2(opt.seed ^ 0x6e65676174697665ull,
                                              static_cast<std::uint64_t>(held_out.user_ids[u]));
      std::int32_t* row = c.items.data() + r * w;
      const std::size_t k =
          detail::draw_unseen(seen.of(u), train.n_items(), opt.negatives, key, row + 1, drawn);
      row[0] = held_out.items[r];
      std::fill(row + 1 + k, row + w, held_out.items[r]);
      c.negatives[r] = static_cast<std::uint32_t>(k);
    }
  }
  return c;
}

}  // namespace tutti::data
