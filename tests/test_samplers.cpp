// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <tutti/concepts.hpp>
#include <tutti/samplers/contiguous_shards.hpp>
#include <tutti/samplers/owned_shards.hpp>
#include <tutti/samplers/shuffled_shards.hpp>

#include "spaces.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace test_samplers {

namespace {

static_assert(tutti::shard_sampler<tutti::shuffled_shards>);
static_assert(tutti::shard_sampler<tutti::contiguous_shards>);
static_assert(tutti::check_shard_sampler<tutti::shuffled_shards>());
static_assert(tutti::check_shard_sampler<tutti::contiguous_shards>());

// Checks the exactly-once property of one epoch over all ranks; returns "" or what broke.
template <class Sampler>
std::string coverage_problem(const Sampler& sampler, std::size_t n, int world, std::uint64_t seed,
                             std::uint64_t epoch) {
  const std::size_t w = static_cast<std::size_t>(world);
  // `none` covers every sample once like `pad`, without padded slots.
  const bool none = sampler.tail == tutti::tail_policy::none;
  const bool pad = sampler.tail == tutti::tail_policy::pad || none;
  const std::size_t slots = pad ? (n + w - 1) / w : n / w;
  std::vector<tutti::shard> shards;
  for (int r = 0; r < world; ++r) shards.push_back(sampler.shard(n, world, r, seed, epoch));

  std::vector<double> weight_of(n, 0.0);
  double total = 0;
  for (int r = 0; r < world; ++r) {
    const auto& s = shards[static_cast<std::size_t>(r)];
    // Under `none` a rank holds its own share: the longest share, or one fewer.
    const std::size_t expected =
        none ? (n > static_cast<std::size_t>(r) ? (n - static_cast<std::size_t>(r) + w - 1) / w : 0)
             : slots;
    if (s.size() != expected)
      return "rank " + std::to_string(r) + " has " + std::to_string(s.size()) + " slots";
    if (s.longest() != slots) return "inconsistent vectors";
    // The tutti samplers give the prefix per rank (W numbers) and the weights as two numbers
    // (real slots first), never a number a slot.
    if (!s.real_prefix.empty() || s.rank_real.size() != w) return "not the per-rank prefix";
    if (!s.weights.empty() || s.slot_count != s.size()) return "a weight a slot";
    if (s.real_slots != s.rank_real[static_cast<std::size_t>(r)])
      return "rank " + std::to_string(r) + "'s real slots are not its rank_real";
    bool seen_pad = false;
    for (std::size_t j = 0; j < s.size(); ++j) {
      if (none && s.weight(j) != 1.0f) return "a padded slot under tail none";
      if (s.indices[j] >= n) return "index out of range";
      if (s.weight(j) != 0.0f && s.weight(j) != 1.0f) return "weight not 0 or 1";
      // Padding sits at the end of a shard, at most one slot of it.
      if (seen_pad && s.weight(j) != 0.0f) return "real slot after a padded slot";
      if (s.weight(j) == 0.0f) {
        if (seen_pad) return "two padded slots on one rank";
        seen_pad = true;
      }
      weight_of[s.indices[j]] += s.weight(j);
      total += s.weight(j);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (pad && weight_of[i] != 1.0)
      return "index " + std::to_string(i) + " has weight " + std::to_string(weight_of[i]);
    if (!pad && weight_of[i] > 1.0) return "index " + std::to_string(i) + " counted twice";
  }
  if (!pad && total != static_cast<double>(w * (n / w)))
    return "drop kept " + std::to_string(total);

  // The prefix of real samples must equal the brute-force count over all ranks, identically on
  // every rank.
  std::uint64_t running = 0;
  for (std::size_t j = 0; j <= slots; ++j) {
    for (int r = 0; r < world; ++r)
      if (shards[static_cast<std::size_t>(r)].real_before(j) != running)
        return "real_before(" + std::to_string(j) + ") on rank " + std::to_string(r) + " is " +
               std::to_string(shards[static_cast<std::size_t>(r)].real_before(j)) + ", expected " +
               std::to_string(running);
    if (j < slots)
      for (int r = 0; r < world; ++r) {
        const auto& s = shards[static_cast<std::size_t>(r)];
        running += j < s.size() && s.weight(j) == 1.0f ? 1 : 0;
      }
  }
  return "";
}

template <class Sampler>
void check_coverage(const Sampler& sampler) {
  const std::uint64_t seeds[] = {0, 1, 0xdeadbeefULL};
  std::vector<std::size_t> sizes;
  for (std::size_t n = 1; n <= 60; ++n) sizes.push_back(n);
  for (std::size_t n : {97, 1000, 4097, 100003}) sizes.push_back(n);
  for (std::size_t n : sizes)
    for (int world = 1; world <= 8; ++world)
      for (std::uint64_t seed : seeds)
        for (std::uint64_t epoch : {0, 1, 7}) {
          if (n > 1000 && (seed != 1 || epoch == 7)) continue;
          INFO("n = " << n << ", W = " << world << ", seed = " << seed << ", epoch = " << epoch);
          CHECK(coverage_problem(sampler, n, world, seed, epoch) == "");
        }
}

std::vector<std::uint64_t> permutation(std::size_t n, std::uint64_t seed, std::uint64_t epoch) {
  return tutti::shuffled_shards{}.shard(n, 1, 0, seed, epoch).indices;
}

/// Calls `check(sampler, n, world, rank, start, shard_from's shard)` for the three tails, n = 1
/// to 70,000, W = 1, 3, 4, every rank and starts 0, n/3 and n (seed 42, epoch 3).
template <class Check>
void for_each_shuffled_shard(Check check) {
  for (auto tail : {tutti::tail_policy::pad, tutti::tail_policy::drop, tutti::tail_policy::none})
    for (std::size_t n : {1, 10, 1001, 70000})
      for (int world : {1, 3, 4})
        for (std::size_t start : {std::size_t{0}, n / 3, n})
          for (int r = 0; r < world; ++r) {
            CAPTURE(n);
            CAPTURE(world);
            CAPTURE(r);
            CAPTURE(start);
            const tutti::shuffled_shards sampler{.tail = tail};
            check(sampler, n, world, r, start, sampler.shard_from(n, world, r, 42, 3, start));
          }
}

}  // namespace

TEST_CASE("shuffled_shards: every sample exactly once with pad and none, at most once with drop") {
  check_coverage(tutti::shuffled_shards{.tail = tutti::tail_policy::pad});
  check_coverage(tutti::shuffled_shards{.tail = tutti::tail_policy::drop});
  check_coverage(tutti::shuffled_shards{.tail = tutti::tail_policy::none});
}

TEST_CASE("contiguous_shards: every sample exactly once with pad, at most once with drop") {
  for (bool shuffle : {false, true}) {
    check_coverage(
        tutti::contiguous_shards{.tail = tutti::tail_policy::pad, .shuffle_within = shuffle});
    check_coverage(
        tutti::contiguous_shards{.tail = tutti::tail_policy::drop, .shuffle_within = shuffle});
    check_coverage(
        tutti::contiguous_shards{.tail = tutti::tail_policy::none, .shuffle_within = shuffle});
  }
}

TEST_CASE("shuffled_shards: the permutation depends on (seed, epoch) and nothing else") {
  const std::size_t n = 1000;
  const auto p = permutation(n, 42, 3);
  std::vector<std::uint64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < n; ++i) REQUIRE(sorted[i] == i);
  CHECK(p != sorted);
  CHECK(permutation(n, 42, 3) == p);
  CHECK(permutation(n, 42, 4) != p);
  CHECK(permutation(n, 43, 3) != p);
  CHECK(permutation(n, 0, 0) != permutation(n, 0, 1));

  // Rank r of W deals positions r, r + W, ... of that same permutation, whatever W is.
  for (int world : {2, 3, 7}) {
    for (int r = 0; r < world; ++r) {
      const auto s = tutti::shuffled_shards{}.shard(n, world, r, 42, 3);
      for (std::size_t j = 0; j < s.size(); ++j) {
        const std::size_t pos = j * static_cast<std::size_t>(world) + static_cast<std::size_t>(r);
        if (pos < n) CHECK(s.indices[j] == p[pos]);
      }
    }
  }
}

// The prefix of real samples slot by slot, whichever form the shard gives it in.
std::vector<std::uint64_t> prefix_of(const tutti::shard& s) {
  std::vector<std::uint64_t> p;
  for (std::size_t j = 0; j <= s.longest(); ++j) p.push_back(s.real_before(j));
  return p;
}

TEST_CASE("shard weights: two numbers and a weight a slot read alike, over every range") {
  tutti::shard two;  // 5 slots, 3 real
  two.slot_count = 5;
  two.real_slots = 3;
  tutti::shard each;
  each.weights = {1.f, 1.f, 1.f, 0.f, 0.f};
  CHECK(two.size() == 5);
  CHECK(each.size() == 5);
  CHECK(two.weights_in(0, 5) == each.weights);
  for (std::size_t b = 0; b <= 6; ++b)
    for (std::size_t e = 0; e <= 5; ++e) {
      CAPTURE(b);
      CAPTURE(e);
      CHECK(two.weight_sum(b, e) == each.weight_sum(b, e));  // an empty range (b >= e) weighs 0
      CHECK(two.weights_in(b, e) == each.weights_in(b, e));
      if (b < 5) CHECK(two.weight(b) == each.weight(b));
    }
  CHECK(two.weight_sum(1, 4) == 2.0);
}

TEST_CASE("shuffled_shards: sizes, padding and the real prefix on a small case") {
  // n = 10, W = 4: 3 slots per rank; slot 2 is real on ranks 0 and 1 only.
  const tutti::shuffled_shards pad{};
  for (int r = 0; r < 4; ++r) {
    const auto s = pad.shard(10, 4, r, 7, 0);
    CHECK(s.size() == 3);
    CHECK(prefix_of(s) == std::vector<std::uint64_t>{0, 4, 8, 10});
    CHECK(s.rank_real == std::vector<std::uint64_t>{3, 3, 2, 2});
    CHECK(s.weight(2) == (r < 2 ? 1.0f : 0.0f));
    CHECK(s.global_real(1, 3) == 6);
  }
  const tutti::shuffled_shards drop{.tail = tutti::tail_policy::drop};
  CHECK(drop.shard(10, 4, 3, 7, 0).size() == 2);
  CHECK(prefix_of(drop.shard(10, 4, 3, 7, 0)) == std::vector<std::uint64_t>{0, 4, 8});
  CHECK(drop.shard(10, 4, 3, 7, 0).rank_real == std::vector<std::uint64_t>{2, 2, 2, 2});
  // Fewer samples than ranks: pad gives every rank one slot, drop gives none.
  CHECK(pad.shard(3, 5, 4, 1, 1).size() == 1);
  CHECK(pad.shard(3, 5, 4, 1, 1).weight(0) == 0.0f);
  CHECK(drop.shard(3, 5, 4, 1, 1).size() == 0);
  CHECK(prefix_of(drop.shard(3, 5, 4, 1, 1)) == std::vector<std::uint64_t>{0});
}

TEST_CASE("shuffled_shards: the shard written on a space is shard_from's, slot for slot") {
  static_assert(tutti::sampler_fills_on_space<tutti::shuffled_shards, tutti::host_space>);
  static_assert(
      tutti::sampler_fills_on_space<tutti::shuffled_shards, tutti_test::opaque_host_space>);
  static_assert(!tutti::sampler_fills_on_space<tutti::contiguous_shards, tutti::host_space>);
  for_each_shuffled_shard([](const tutti::shuffled_shards& sampler, std::size_t n, int world, int r,
                             std::size_t start, const tutti::shard& whole) {
    const auto outline = sampler.outline_from(n, world, r, 42, 3, start);
    CHECK(outline.indices.empty());
    CHECK(outline.size() == whole.size());
    CHECK(outline.weights_in(0, outline.size()) == whole.weights_in(0, whole.size()));
    CHECK(outline.rank_real == whole.rank_real);
    CHECK(outline.longest() == whole.longest());
    // Poisoned memory: every value must be written.
    std::vector<std::uint64_t> indices(whole.size() + 1, ~std::uint64_t{0});
    std::vector<float> weights(whole.size() + 1, -1.f);
    sampler.fill_on_space(tutti_test::opaque_host_space{}, n, world, r, 42, 3, start,
                          indices.data(), weights.data());
    CHECK(indices.back() == ~std::uint64_t{0});  // and nothing past the shard
    indices.pop_back();
    weights.pop_back();
    CHECK(indices == whole.indices);
    CHECK(weights == whole.weights_in(0, whole.size()));
  });
  CHECK_THROWS_WITH_AS(tutti::shuffled_shards{}.outline_from(10, 2, 0, 1, 1, 11),
                       doctest::Contains("start = 11 > n = 10"), tutti::invalid_argument);
}

TEST_CASE("shuffled_shards: any run of slots dealt alone holds shard_from's positions") {
  static_assert(tutti::sampler_fills_slots<tutti::shuffled_shards>);
  static_assert(!tutti::sampler_fills_slots<tutti::contiguous_shards>);
  static_assert(!tutti::sampler_fills_slots<tutti::owned_shards>);
  for_each_shuffled_shard([](const tutti::shuffled_shards& sampler, std::size_t n, int world, int r,
                             std::size_t start, const tutti::shard& whole) {
    const std::size_t mine = whole.size();
    // Runs of every length a step has, from the first slot, the middle and the end,
    // the empty run and the whole shard; poisoned memory around each.
    const std::size_t firsts[] = {0, mine / 2, mine > 5 ? mine - 5 : 0, mine};
    const std::size_t counts[] = {0, 1, 7, 1024, 1025, 3000, mine};
    for (const std::size_t first : firsts)
      for (const std::size_t count : counts) {
        if (count > mine - first) continue;
        std::vector<std::uint64_t> out(count + 2, ~std::uint64_t{0});
        sampler.fill_slots(n, world, r, 42, 3, start, first, count, out.data() + 1);
        CHECK(out.front() == ~std::uint64_t{0});
        CHECK(out.back() == ~std::uint64_t{0});
        for (std::size_t j = 0; j < count; ++j)
          if (out[j + 1] != whole.indices[first + j])
            FAIL("slot " << first + j << " of " << mine << " (run from " << first << ")");
      }
  });
  std::uint64_t one = 0;
  CHECK_THROWS_WITH_AS(tutti::shuffled_shards{}.fill_slots(10, 2, 0, 1, 1, 0, 4, 2, &one),
                       doctest::Contains("slots [4, 6) of a shard of 5"), tutti::invalid_argument);
}

TEST_CASE("contiguous_shards: each rank reads one contiguous block, in rank order") {
  for (std::size_t n : {1, 5, 10, 17, 64, 1001})
    for (int world = 1; world <= 8; ++world)
      for (auto tail : {tutti::tail_policy::pad, tutti::tail_policy::drop}) {
        INFO("n = " << n << ", W = " << world);
        std::uint64_t next = 0;
        for (int r = 0; r < world; ++r) {
          const auto ordered =
              tutti::contiguous_shards{.tail = tail, .shuffle_within = false}.shard(n, world, r, 5,
                                                                                    2);
          const auto shuffled =
              tutti::contiguous_shards{.tail = tail, .shuffle_within = true}.shard(n, world, r, 5,
                                                                                   2);
          std::vector<std::uint64_t> real;
          for (std::size_t j = 0; j < ordered.size(); ++j)
            if (ordered.weight(j) == 1.0f) real.push_back(ordered.indices[j]);
          for (std::uint64_t idx : real) CHECK(idx == next++);
          std::vector<std::uint64_t> real_shuffled;
          for (std::size_t j = 0; j < shuffled.size(); ++j)
            if (shuffled.weight(j) == 1.0f) real_shuffled.push_back(shuffled.indices[j]);
          std::sort(real_shuffled.begin(), real_shuffled.end());
          CHECK(real_shuffled == real);
        }
        if (tail == tutti::tail_policy::pad) CHECK(next == n);
      }
}

TEST_CASE("contiguous_shards: shuffle_within changes the order with the epoch and seed") {
  const tutti::contiguous_shards s{};
  const auto a = s.shard(4000, 4, 1, 9, 0).indices;
  CHECK(s.shard(4000, 4, 1, 9, 0).indices == a);
  CHECK(s.shard(4000, 4, 1, 9, 1).indices != a);
  CHECK(s.shard(4000, 4, 1, 8, 0).indices != a);
  CHECK(a.front() >= 1000);
  CHECK(a.front() < 2000);
  CHECK(!std::is_sorted(a.begin(), a.end()));
}

TEST_CASE("shard samplers reject bad arguments with clear messages") {
  const tutti::shuffled_shards sh{};
  const tutti::contiguous_shards co{};
  CHECK_THROWS_WITH_AS(sh.shard(10, 0, 0, 1, 0),
                       doctest::Contains("tutti::shuffled_shards::shard(): world_size = 0"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(sh.shard(10, 4, 4, 1, 0), doctest::Contains("rank = 4; expected 0 <= rank"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(sh.shard(10, 4, -1, 1, 0), doctest::Contains("rank = -1"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(sh.shard(0, 4, 0, 1, 0), doctest::Contains("n = 0"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(co.shard(0, 1, 0, 1, 0),
                       doctest::Contains("tutti::contiguous_shards::shard(): dataset size n = 0"),
                       tutti::invalid_argument);
  CHECK_THROWS_AS(co.shard(10, -2, 0, 1, 0), tutti::invalid_argument);
  CHECK_THROWS_AS(co.shard(10, 2, 2, 1, 0), tutti::invalid_argument);
}

static_assert(tutti::rank_local_sampler<tutti::owned_shards>);
static_assert(!tutti::rank_local_sampler<tutti::shuffled_shards>);

TEST_CASE("owned_shards: each rank visits exactly its own rows once, all ranks take equal steps") {
  for (const std::vector<std::uint64_t>& rows :
       {std::vector<std::uint64_t>{5}, {3, 3}, {7, 1, 4}, {10, 9, 10, 2}, {1, 1, 1, 1, 1}}) {
    const tutti::owned_shards sampler{.rows = rows};
    const int world = static_cast<int>(rows.size());
    const std::uint64_t total = sampler.total();
    const std::uint64_t slots = *std::max_element(rows.begin(), rows.end());
    for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int> seen(total, 0);
      double weight = 0;
      std::vector<std::uint64_t> real_per_slot(slots, 0);
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        const auto sh = sampler.shard(rows[r], world, r, 42, epoch);
        REQUIRE(sh.size() == slots);
        CHECK(sh.first == sampler.offset(r));
        for (std::size_t j = 0; j < sh.size(); ++j) {
          // Every slot, padded or not, names a row this rank holds.
          REQUIRE(sh.indices[j] >= sh.first);
          REQUIRE(sh.indices[j] < sh.first + rows[r]);
          if (sh.weight(j) > 0) {
            ++seen[sh.indices[j]];
            ++real_per_slot[j];
          }
          weight += sh.weight(j);
        }
      }
      CHECK(weight == double(total));
      CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
      // The prefix counts every rank's real samples, and is the same on every rank.
      for (int r = 0; r < world; ++r) {
        const auto sh = sampler.shard(rows[r], world, r, 42, epoch);
        std::uint64_t prefix = 0;
        for (std::size_t j = 0; j <= slots; ++j) {
          CHECK(sh.real_before(j) == prefix);
          if (j < slots) prefix += real_per_slot[j];
        }
      }
    }
  }
}

TEST_CASE("owned_shards: the order changes with the epoch and the seed, and differs per rank") {
  const tutti::owned_shards sampler{.rows = {64, 64}};
  const auto a = sampler.shard(64, 2, 0, 1, 0).indices;
  CHECK(a != sampler.shard(64, 2, 0, 1, 1).indices);
  CHECK(a != sampler.shard(64, 2, 0, 2, 0).indices);
  CHECK(a == sampler.shard(64, 2, 0, 1, 0).indices);
  auto b = sampler.shard(64, 2, 1, 1, 0).indices;
  for (auto& i : b) i -= 64;
  CHECK(a != b);
}

TEST_CASE("owned_shards: a rank given rows other than its own, or a bad rows list, is refused") {
  const tutti::owned_shards sampler{.rows = {4, 5}};
  CHECK_THROWS_WITH_AS(sampler.shard(4, 2, 1, 0, 0),
                       doctest::Contains("rank 1 was given 4 rows, but rows[1] = 5"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(sampler.shard(4, 3, 0, 0, 0), doctest::Contains("the world has 3"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS((tutti::owned_shards{.rows = {4, 0}}.shard(4, 2, 0, 0, 0)),
                       doctest::Contains("rank 1 holds no rows"), tutti::invalid_argument);
  CHECK_THROWS_AS(sampler.rows_of(2), tutti::invalid_argument);
}

}  // namespace test_samplers
