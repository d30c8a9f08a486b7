// SPDX-License-Identifier: Apache-2.0
// A global batch that is not a multiple of the world size: each rank takes ⌈B/W⌉ or ⌊B/W⌋ slots
// per step, every step visits the samples one rank would, W ranks end with one rank's
// parameters, and every sample counts once per epoch, on every path of the step.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <vector>

namespace test_uneven_batch {

using tutti_test::relative_difference;

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;
using run = tutti_test::rank_run;

const tutti::data::split_result& parts() {
  static const auto p =
      tutti::data::split(tutti::data::synthetic_courses({.learners = 300,
                                                         .courses = 60,
                                                         .interactions_per_learner = 12,
                                                         .implicit = true,
                                                         .seed = 5}),
                         {.test_fraction = 0.2, .seed = 3});
  return p;
}

mf make_mf() {
  return mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, parts().train.n_users(),
            parts().train.n_items());
}

// 101 is prime: no world size of 2 or more divides it.
tutti::train_options uneven_options() {
  return {.batch = 101, .epochs = 2, .base_lr = 0.05, .seed = 11, .evaluate_each_epoch = false};
}

template <class Optimizer = tutti::sgd>
run train_on(int world, const tutti::train_options& opt, Optimizer optimizer = {.momentum = 0.9f}) {
  return tutti_test::train_rank0<mf>(world, parts(), opt, make_mf, tutti::constant{}, optimizer);
}

// What each rank visited, step by step: (epoch, step) -> rank -> (sample, weight) pairs.
struct visits {
  std::mutex mu;
  std::map<std::pair<std::size_t, std::size_t>, std::map<int, std::vector<std::uint64_t>>> real;
  std::map<std::pair<std::size_t, std::size_t>, std::map<int, std::size_t>> slots;

  auto recorder() {
    return [this](const tutti::step_progress& p, std::span<const std::uint64_t> ids,
                  std::span<const float> w) {
      std::lock_guard lock(mu);
      auto& mine = real[{p.epoch, p.step}][p.rank];
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (w[i] > 0) mine.push_back(ids[i]);
      slots[{p.epoch, p.step}][p.rank] = ids.size();
    };
  }
  // The real samples of one step over all ranks, sorted.
  std::vector<std::uint64_t> step(std::size_t epoch, std::size_t s) {
    std::vector<std::uint64_t> all;
    for (const auto& [rank, ids] : real.at({epoch, s}))
      all.insert(all.end(), ids.begin(), ids.end());
    std::sort(all.begin(), all.end());
    return all;
  }
};

}  // namespace

TEST_CASE("uneven batch: the split helper deals ⌈B/W⌉ or ⌊B/W⌋ slots and covers every rank") {
  for (std::size_t w : {1u, 2u, 3u, 4u, 7u}) {
    for (std::size_t b : {7u, 10u, 101u, 4096u}) {
      CAPTURE(w);
      CAPTURE(b);
      const tutti::detail::batch_split split{b, w};
      for (std::size_t s = 0; s < 50; ++s) {
        std::size_t sum = 0;
        for (std::size_t r = 0; r < w; ++r) {
          const std::size_t take = split.first(r, s + 1) - split.first(r, s);
          CHECK((take == split.smallest() || take == split.largest()));
          sum += take;
        }
        CHECK(sum == b);  // each step takes exactly the global batch
      }
      // The steps that cover 1000 dealt positions: as many as one rank needs for 1000 samples.
      std::vector<std::uint64_t> dealt(w);
      for (std::size_t r = 0; r < w; ++r) dealt[r] = (1000 + w - 1 - r) / w;
      CHECK(split.steps_to_cover(dealt) == (1000 + b - 1) / b);
      // And the real samples of those steps add up to the 1000.
      std::uint64_t total = 0;
      for (std::size_t s = 0; s < split.steps_to_cover(dealt); ++s)
        total += split.global_real(dealt, s);
      CHECK(total == 1000);
    }
  }
}

TEST_CASE(
    "each step's positions dealt as it is taken: the bits of the epoch's shard, one step held") {
  // Without `on_batch` a host step deals its own slots' positions (`sampler_fills_slots`); with
  // it the epoch's shard is dealt whole. Both train to the same bits on 1-4 ranks, with an
  // uneven batch, sampled negatives and accumulation; the shard account holds no position.
  for (const bool negatives : {false, true}) {
    for (const std::size_t accumulation : {std::size_t{1}, std::size_t{2}}) {
      for (int world : {1, 2, 3, 4}) {
        CAPTURE(negatives);
        CAPTURE(accumulation);
        CAPTURE(world);
        auto opt = uneven_options();
        opt.accumulation = accumulation;
        if (negatives) opt.negatives.per_positive = 3;
        const run by_step = train_on(world, opt);
        std::size_t seen = 0;
        std::mutex mu;
        opt.on_batch = [&](const tutti::step_progress&, std::span<const std::uint64_t> ids,
                           std::span<const float>) {
          std::lock_guard lock(mu);
          seen += ids.size();
        };
        const run whole = train_on(world, opt);
        REQUIRE(seen > 0);
        REQUIRE(by_step.params.size() == whole.params.size());
        std::size_t differing = 0;
        for (std::size_t i = 0; i < whole.params.size(); ++i)
          differing += by_step.params[i] != whole.params[i];
        CHECK(differing == 0);
        CHECK(by_step.result.parameters_checksum == whole.result.parameters_checksum);
        CHECK(by_step.result.steps == whole.result.steps);
        const auto w = static_cast<std::uint64_t>(world);
        const std::uint64_t slots = (parts().train.size() + w - 1) / w;
        // The shard: each rank's count of real slots alone, against a position a slot.
        CHECK(by_step.result.memory.shard == w * sizeof(std::uint64_t));
        CHECK(whole.result.memory.shard == (slots + w) * sizeof(std::uint64_t));
        // The step buffers hold one step's positions instead.
        const std::uint64_t step_slots = (101 + w - 1) / w;
        CHECK(by_step.result.memory.step_buffers ==
              whole.result.memory.step_buffers + step_slots * sizeof(std::uint64_t));
      }
    }
  }
}

TEST_CASE("uneven batch: every step visits the samples of one rank's step, split over the ranks") {
  visits one;
  auto opt = uneven_options();
  opt.on_batch = one.recorder();
  const run single = train_on(1, opt);
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    visits many;
    opt.on_batch = many.recorder();
    const run r = train_on(world, opt);
    CHECK(r.result.steps == single.result.steps);
    REQUIRE(many.real.size() == one.real.size());
    const tutti::detail::batch_split split{101, static_cast<std::size_t>(world)};
    for (const auto& [at, ranks] : one.real) {
      CAPTURE(at.first);
      CAPTURE(at.second);
      CHECK(many.step(at.first, at.second) == one.step(at.first, at.second));
      for (const auto& [rank, count] : many.slots.at(at))
        CHECK((count == split.smallest() || count == split.largest() || count < split.smallest()));
    }
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
      std::multiset<std::uint64_t> seen;
      for (const auto& [at, ranks] : many.real)
        if (at.first == epoch)
          for (const auto& [rank, ids] : ranks) seen.insert(ids.begin(), ids.end());
      CHECK(seen.size() == parts().train.size());
      CHECK(std::set<std::uint64_t>(seen.begin(), seen.end()).size() == seen.size());
    }
  }
}

TEST_CASE("uneven batch: W ranks end with the parameters of 1 rank (SGD and Adam)") {
  const auto opt = uneven_options();
  const run one = train_on(1, opt);
  const run one_adam = train_on(1, opt, tutti::adam{});
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    const run many = train_on(world, opt);
    // The same samples per step (above), summed in other groupings: rounding only, and the
    // same on every machine (matrix factorisation uses no BLAS, its results do not depend on the
    // thread count).
    CHECK(relative_difference(many.params, one.params) <= 1e-5);
    CHECK(many.result.epochs.back().train_loss ==
          doctest::Approx(one.result.epochs.back().train_loss).epsilon(1e-5));
    for (const auto& e : many.result.epochs) {
      CHECK(e.weighted_samples == double(parts().train.size()));
      std::uint64_t sum = 0;
      for (auto c : e.samples_per_rank) sum += c;
      CHECK(sum == parts().train.size());
    }
    const run adam = train_on(world, opt, tutti::adam{});
    CHECK(relative_difference(adam.params, one_adam.params) <= 1e-5);
  }
}

TEST_CASE(
    "uneven batch: accumulation, the sparse exchange, the overlapped reduction, the "
    "row-sparse step") {
  const auto base = uneven_options();
  const run one = train_on(1, base);
  auto with = [&](auto change) {
    auto o = base;
    change(o);
    return train_on(3, o);
  };
  // 101 over 3 ranks: local batches of 34 and 33; 5 micro-batches leave a short last one.
  CHECK(relative_difference(with([](auto& o) { o.accumulation = 5; }).params, one.params) <= 1e-5);
  CHECK(relative_difference(
            with([](auto& o) { o.sparse_exchange = tutti::sparse_exchange_policy::on; }).params,
            one.params) <= 1e-5);
  CHECK(relative_difference(with([](auto& o) { o.overlap_reduce = true; }).params, one.params) <=
        1e-5);
  // The row-sparse step against its own one-rank run (its momentum is lazy, not sgd's).
  const auto rows_on = [&](int world) {
    return tutti_test::train_rank0<mf>(world, parts(), base, make_mf, tutti::constant{},
                                       tutti::row_sparse_sgd{.momentum = 0.9f});
  };
  CHECK(relative_difference(rows_on(3).params, rows_on(1).params) <= 1e-5);
  auto too_many = base;
  too_many.accumulation = 34;  // more micro-batches than the smallest local batch, 33
  CHECK_THROWS_WITH_AS(train_on(3, too_many), doctest::Contains("smallest local batch (33)"),
                       tutti::invalid_argument);
}

TEST_CASE("uneven batch: rank-local rows of unequal shares count once each") {
  const auto& p = parts();
  const std::size_t n = p.train.size();
  const std::vector<std::size_t> cut = {0, n / 5, n / 2 + 7, n};
  const tutti::owned_shards sampler{.rows = {cut[1] - cut[0], cut[2] - cut[1], cut[3] - cut[2]}};
  visits seen;
  auto opt = uneven_options();
  opt.on_batch = seen.recorder();
  std::mutex mu;
  tutti::fit_result result;
  tutti::run_local(3, [&](tutti::local_ring ring) {
    const auto r = static_cast<std::size_t>(ring.rank());
    const auto mine = tutti_test::slice(p.train, cut[r], cut[r + 1]);
    tutti::trainer<mf, tutti::owned_shards, tutti::local_ring> t(make_mf(), sampler, ring, {}, {},
                                                                 opt);
    auto res = t.fit(mine, {});
    if (r == 0) {
      std::lock_guard lock(mu);
      result = std::move(res);
    }
  });
  for (const auto& e : result.epochs) CHECK(e.weighted_samples == double(n));
  std::multiset<std::uint64_t> epoch0;
  for (const auto& [at, ranks] : seen.real)
    if (at.first == 0)
      for (const auto& [rank, ids] : ranks) epoch0.insert(ids.begin(), ids.end());
  CHECK(epoch0.size() == n);
  CHECK(std::set<std::uint64_t>(epoch0.begin(), epoch0.end()).size() == n);
}

namespace {

// shuffled_shards with rank 1's first slot turned into padding.
struct padding_first {
  tutti::shard shard(std::size_t n, int world, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    auto s = tutti::shuffled_shards{}.shard(n, world, rank, seed, epoch);
    if (rank == 1) {
      s.weights = s.weights_in(0, s.size());  // a weight a slot
      s.weights.front() = 0.f;
    }
    return s;
  }
};

}  // namespace

TEST_CASE(
    "uneven batch: a batch below the world size, and padding before a real slot, are "
    "refused") {
  auto opt = uneven_options();
  opt.batch = 2;
  CHECK_THROWS_WITH_AS(train_on(3, opt), doctest::Contains("global batch 2 is smaller than the 3"),
                       tutti::invalid_argument);
  opt = uneven_options();
  auto attempt = [&] {
    tutti::run_local(3, [&](tutti::local_ring ring) {
      tutti::trainer<mf, padding_first, tutti::local_ring> t(make_mf(), {}, ring, {}, {}, opt);
      t.fit(parts().train, {});
    });
  };
  // Every rank stops, named by the rank whose shard is out of order.
  CHECK_THROWS_WITH_AS(attempt(), doctest::Contains("rank 1's sampler put a real sample after"),
                       tutti::invalid_argument);
}

namespace {

// shuffled_shards with a weight a slot (`weights`), as a sampler of one's own may give them,
// instead of two numbers (`slot_count`, `real_slots`).
struct slotwise_weights {
  tutti::shard shard(std::size_t n, int world, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    auto s = tutti::shuffled_shards{}.shard(n, world, rank, seed, epoch);
    s.weights = s.weights_in(0, s.size());
    s.slot_count = s.real_slots = 0;
    return s;
  }
};

// ... and the prefix of real samples given slot by slot (`real_prefix`) instead of per rank
// (`rank_real`).
struct slotwise_prefix {
  tutti::shard shard(std::size_t n, int world, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    auto s = slotwise_weights{}.shard(n, world, rank, seed, epoch);
    std::vector<std::uint64_t> prefix;
    for (std::size_t j = 0; j <= s.longest(); ++j) prefix.push_back(s.real_before(j));
    s.real_prefix = std::move(prefix);
    s.rank_real.clear();
    return s;
  }
};

// shuffled_shards whose rank 2 counts one real slot fewer than its shard leads with.
struct miscounted {
  tutti::shard shard(std::size_t n, int world, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    auto s = tutti::shuffled_shards{}.shard(n, world, rank, seed, epoch);
    if (s.rank_real.size() > 2) --s.rank_real[2];
    return s;
  }
};

template <class Sampler>
std::vector<float> rank0_params(int world, const tutti::train_options& opt) {
  std::vector<float> out;
  tutti::run_local(world, [&](tutti::local_ring ring) {
    tutti::trainer<mf, Sampler, tutti::local_ring> t(make_mf(), {}, ring, {}, {}, opt);
    t.fit(parts().train, {});
    if (ring.rank() == 0) out = t.parameters_on_host();
  });
  return out;
}

}  // namespace

TEST_CASE(
    "shard form: weights as two numbers or one a slot, the prefix per rank or slot by slot, the "
    "steps weigh the same, bitwise") {
  // An even split (99 = 3 x 33) reads the prefix; an uneven one (101) the ranks' counts; a batch
  // of 2 slots a rank ends on a padded slot's own step.
  for (const std::size_t batch : {std::size_t{99}, std::size_t{101}, std::size_t{6}}) {
    CAPTURE(batch);
    auto opt = uneven_options();
    opt.batch = batch;
    const auto per_rank = rank0_params<tutti::shuffled_shards>(3, opt);
    REQUIRE(!per_rank.empty());
    CHECK(per_rank == rank0_params<slotwise_weights>(3, opt));
    CHECK(per_rank == rank0_params<slotwise_prefix>(3, opt));
  }
  // The per-rank form must agree with the rank's own weights, or a step would be misweighed.
  auto opt = uneven_options();
  opt.batch = 99;
  CHECK_THROWS_WITH_AS(rank0_params<miscounted>(3, opt),
                       doctest::Contains("rank 2's shard leads with"), tutti::invalid_argument);
}

}  // namespace test_uneven_batch
