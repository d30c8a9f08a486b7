// SPDX-License-Identifier: Apache-2.0
// The trainer's guards: a non-finite loss or gradient on one rank is skipped (or stops) on every
// rank and is recorded with its rank, step and samples; replica checks find a rank whose
// parameters drifted and either name it or repair it from rank 0.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "wrapped_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace test_guards {

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;

tutti::data::split_result guard_data() {
  auto all = tutti::data::synthetic_courses({.learners = 200,
                                             .courses = 40,
                                             .interactions_per_learner = 12,
                                             .implicit = true,
                                             .seed = 8});
  return tutti::data::split(all, {.test_fraction = 0.1, .seed = 2});
}

// Where a poisoned model writes a non-finite value: rank, the 0-based call (= global step), and
// whether it poisons the loss or one gradient value.
struct poison {
  int rank = -1;
  std::size_t call = 0;
  bool loss = false;
  float value = std::numeric_limits<float>::quiet_NaN();
};

// A test-only model: matrix factorisation whose loss or gradient turns non-finite on a chosen
// rank at a chosen step, as a bad row or an overflow would make it.
class poisoned_mf : public tutti_test::wrapped_model<mf> {
 public:
  poisoned_mf(mf inner, std::vector<poison> plan, int rank)
      : wrapped_model(std::move(inner)), m_plan(std::move(plan)), m_rank(rank) {}

  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum) {
    m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
    for (const auto& p : m_plan)
      if (p.rank == m_rank && p.call == m_calls) {
        if (p.loss)
          *loss_sum = p.value;
        else
          grads[grads.size() / 2] = p.value;
      }
    ++m_calls;
  }

 private:
  std::vector<poison> m_plan;
  int m_rank;
  std::size_t m_calls = 0;
};

using poisoned_trainer = tutti::trainer<poisoned_mf, tutti::shuffled_shards, tutti::local_ring,
                                        tutti::constant, tutti::sgd>;

// What one rank ended with.
struct rank_outcome {
  std::vector<float> params;
  std::vector<float> state;
  tutti::fit_result result;
  std::string error;  // what() of the exception the rank raised, if any
  std::vector<tutti::nonfinite_record> error_records;
  std::vector<int> mismatch_ranks;
  std::size_t mismatch_step = 0;
  bool untouched_by_skip = false;  // parameters and state after step 3 equal those after step 2
};

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

std::vector<rank_outcome> train_poisoned(int world, const tutti::data::split_result& parts,
                                         std::vector<poison> plan, tutti::train_options opt) {
  std::vector<rank_outcome> out(static_cast<std::size_t>(world));
  tutti::run_local(world, [&](tutti::local_ring ring) {
    auto& mine = out[static_cast<std::size_t>(ring.rank())];
    poisoned_trainer* self = nullptr;
    std::vector<float> after_step2;
    tutti::train_options o = opt;
    o.on_step = [&](const tutti::step_progress& p) {
      auto snapshot = [&] {
        std::vector<float> s(self->parameters().begin(), self->parameters().end());
        s.insert(s.end(), self->optimizer_state().begin(), self->optimizer_state().end());
        return s;
      };
      if (p.global_step == 2) after_step2 = snapshot();
      if (p.global_step == 3) mine.untouched_by_skip = snapshot() == after_step2;
    };
    poisoned_trainer t(poisoned_mf(mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic},
                                      parts.train.n_users(), parts.train.n_items()),
                                   plan, ring.rank()),
                       {}, ring, {}, tutti::sgd{.momentum = 0.9f}, o);
    self = &t;
    try {
      // No test split: with the guard off the parameters turn NaN, and nothing is to be ranked.
      mine.result = t.fit(parts.train, tutti::data::interactions{});
    } catch (const tutti::nonfinite_error& e) {
      mine.error = e.what();
      mine.error_records = e.records();
    }
    mine.params = t.parameters_on_host();
    mine.state.assign(t.optimizer_state().begin(), t.optimizer_state().end());
  });
  return out;
}

std::vector<std::uint64_t> batch_ids(const tutti::data::interactions& train, int world, int rank,
                                     std::uint64_t seed, std::size_t epoch, std::size_t step,
                                     std::size_t local_batch) {
  const auto sh = tutti::shuffled_shards{}.shard(train.size(), world, rank, seed, epoch);
  const auto first = sh.indices.begin() + static_cast<std::ptrdiff_t>(step * local_batch);
  return {first, first + static_cast<std::ptrdiff_t>(local_batch)};
}

}  // namespace

TEST_CASE("the host's blocked finite check finds every kind of non-finite value anywhere") {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::signaling_NaN(), inf, -inf};
  const float finite[] = {0.f,
                          -0.f,
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          1.f};
  const tutti::host_space space;
  const std::size_t block = tutti::detail::host_block;
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}, block, 3 * block + 7}) {
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = finite[i % std::size(finite)];
    CHECK_FALSE(tutti::detail::any_nonfinite(space, g.data(), n));
    for (const std::size_t at : {std::size_t{0}, n / 2, n - 1, std::min(n - 1, block)}) {
      for (const float bad : specials) {
        CAPTURE(n);
        CAPTURE(at);
        CAPTURE(bad);
        const float keep = g[at];
        g[at] = bad;
        CHECK(tutti::detail::any_nonfinite(space, g.data(), n));
        if (at > 0) CHECK_FALSE(tutti::detail::any_nonfinite(space, g.data(), at));  // before it
        g[at] = keep;
      }
    }
  }
}

TEST_CASE("a NaN gradient on one of four ranks is skipped everywhere and recorded") {
  const auto parts = guard_data();
  const tutti::train_options opt{
      .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 7, .evaluate_each_epoch = false};
  const auto ranks = train_poisoned(4, parts, {{.rank = 2, .call = 3}}, opt);

  const auto expected_ids = batch_ids(parts.train, 4, 2, 7, 0, 3, 24);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    CAPTURE(r);
    const auto& o = ranks[r];
    CHECK(o.error.empty());
    CHECK(all_finite(o.params));
    CHECK(all_finite(o.state));
    // The replicas stay bitwise identical, optimizer state included.
    CHECK(o.params == ranks[0].params);
    CHECK(o.state == ranks[0].state);
    // The skipped step changed neither the parameters nor the momentum.
    CHECK(o.untouched_by_skip);
    CHECK(o.result.skipped_steps == 1);
    CHECK(o.result.epochs[0].skipped_steps == 1);
    CHECK(o.result.epochs[1].skipped_steps == 0);
    CHECK(std::isfinite(o.result.epochs[0].train_loss));
    REQUIRE(o.result.nonfinite.size() == 1);
    const auto& rec = o.result.nonfinite[0];
    CHECK(rec.rank == 2);
    CHECK(rec.epoch == 0);
    CHECK(rec.step == 3);
    CHECK(rec.global_step == 3);
    CHECK(rec.sample_ids == expected_ids);
  }
}

TEST_CASE("non-finite losses on two ranks at once give one record per rank") {
  const auto parts = guard_data();
  const tutti::train_options opt{
      .batch = 96, .epochs = 1, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  const float inf = std::numeric_limits<float>::infinity();
  const auto ranks = train_poisoned(
      4, parts,
      {{.rank = 3, .call = 5, .loss = true, .value = inf}, {.rank = 1, .call = 5, .loss = true}},
      opt);
  for (const auto& o : ranks) {
    CHECK(all_finite(o.params));
    CHECK(o.params == ranks[0].params);
    CHECK(o.result.skipped_steps == 1);
    REQUIRE(o.result.nonfinite.size() == 2);
    CHECK(o.result.nonfinite[0].rank == 1);
    CHECK(o.result.nonfinite[1].rank == 3);
    for (const auto& rec : o.result.nonfinite) {
      CHECK(rec.step == 5);
      CHECK(rec.sample_ids == batch_ids(parts.train, 4, rec.rank, 3, 0, 5, 24));
    }
  }
}

TEST_CASE("nonfinite_policy::stop raises on every rank, naming the rank, step and samples") {
  const auto parts = guard_data();
  tutti::train_options opt{
      .batch = 96, .epochs = 1, .base_lr = 0.05, .seed = 7, .evaluate_each_epoch = false};
  opt.nonfinite = tutti::nonfinite_policy::stop;
  const auto ranks = train_poisoned(4, parts, {{.rank = 2, .call = 3}}, opt);
  const auto expected_ids = batch_ids(parts.train, 4, 2, 7, 0, 3, 24);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    CAPTURE(r);
    const auto& o = ranks[r];
    CHECK(o.error.find("rank 2, epoch 0, step 3") != std::string::npos);
    CHECK(o.error.find(std::to_string(expected_ids[0])) != std::string::npos);
    REQUIRE(o.error_records.size() == 1);
    CHECK(o.error_records[0].rank == 2);
    CHECK(o.error_records[0].step == 3);
    CHECK(o.error_records[0].sample_ids == expected_ids);
    // Stopped before the bad update: what every rank holds is finite and identical.
    CHECK(all_finite(o.params));
    CHECK(o.params == ranks[0].params);
  }
}

TEST_CASE("with the guard off a NaN on one rank reaches every replica") {
  // The counterpart of the tests above: without the guard the mean carries the NaN everywhere.
  const auto parts = guard_data();
  tutti::train_options opt{
      .batch = 96, .epochs = 1, .base_lr = 0.05, .seed = 7, .evaluate_each_epoch = false};
  opt.nonfinite = tutti::nonfinite_policy::off;
  const auto ranks = train_poisoned(4, parts, {{.rank = 2, .call = 3}}, opt);
  for (const auto& o : ranks) {
    CHECK_FALSE(all_finite(o.params));
    CHECK(o.result.skipped_steps == 0);
    CHECK(o.result.nonfinite.empty());
  }
}

TEST_CASE("one rank alone skips its non-finite step too") {
  const auto parts = guard_data();
  using one_rank = tutti::trainer<poisoned_mf, tutti::shuffled_shards, tutti::single_rank>;
  one_rank t(poisoned_mf(mf({.dim = 8, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
                            parts.train.n_items()),
                         {{.rank = 0, .call = 2}}, 0),
             {}, {}, {}, {}, {.batch = 64, .epochs = 1, .seed = 1, .evaluate_each_epoch = false});
  const auto r = t.fit(parts.train, parts.test);
  CHECK(all_finite(t.parameters_on_host()));
  REQUIRE(r.nonfinite.size() == 1);
  CHECK(r.nonfinite[0].rank == 0);
  CHECK(r.nonfinite[0].step == 2);
  CHECK(r.nonfinite[0].sample_ids == batch_ids(parts.train, 1, 0, 1, 0, 2, 64));
}

namespace {

using plain_trainer =
    tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring, tutti::constant, tutti::adam>;

struct replica_outcome {
  std::vector<float> params;
  std::vector<float> state;
  std::uint64_t checksum = 0;
  tutti::fit_result result;
  bool raised = false;
  std::string error;
  std::vector<int> mismatch_ranks;
  std::size_t mismatch_step = 0;
};

// Trains 3 ranks; after global step `perturb_at` rank 1 nudges one parameter (if perturb_at >= 0).
std::vector<replica_outcome> train_perturbed(const tutti::data::split_result& parts,
                                             long perturb_at, tutti::train_options opt) {
  std::vector<replica_outcome> out(3);
  tutti::run_local(3, [&](tutti::local_ring ring) {
    auto& mine = out[static_cast<std::size_t>(ring.rank())];
    plain_trainer* self = nullptr;
    tutti::train_options o = opt;
    o.on_step = [&](const tutti::step_progress& p) {
      if (p.rank == 1 && static_cast<long>(p.global_step) == perturb_at)
        self->parameters_mutable()[5] += 1e-3f;
    };
    plain_trainer t(mf({.dim = 8, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
                       parts.train.n_items()),
                    {}, ring, {}, {}, o);
    self = &t;
    try {
      mine.result = t.fit(parts.train, parts.test);
    } catch (const tutti::replica_mismatch_error& e) {
      mine.raised = true;
      mine.error = e.what();
      mine.mismatch_ranks = e.ranks();
      mine.mismatch_step = e.event().global_step;
    }
    mine.params = t.parameters_on_host();
    mine.state.assign(t.optimizer_state().begin(), t.optimizer_state().end());
    mine.checksum = t.replica_checksum();
  });
  return out;
}

}  // namespace

TEST_CASE("healthy replicas pass every replica check") {
  const auto parts = guard_data();
  tutti::train_options opt{
      .batch = 90, .epochs = 2, .base_lr = 0.02, .seed = 4, .evaluate_each_epoch = false};
  opt.replica_check_every = 4;
  const auto ranks = train_perturbed(parts, -1, opt);
  const std::size_t steps = ranks[0].result.steps;
  REQUIRE(steps > 8);
  // Every 4th step, plus the end unless the last step was a 4th one.
  const std::size_t expected = steps / 4 + (steps % 4 != 0 ? 1 : 0);
  for (const auto& o : ranks) {
    CHECK_FALSE(o.raised);
    CHECK(o.result.replica_checks == expected);
    CHECK(o.result.replica_events.empty());
    CHECK(o.checksum == ranks[0].checksum);
  }
}

TEST_CASE("a perturbed replica is named at the next check, on every rank") {
  const auto parts = guard_data();
  tutti::train_options opt{
      .batch = 90, .epochs = 1, .base_lr = 0.02, .seed = 4, .evaluate_each_epoch = false};
  opt.replica_check_every = 4;
  // Perturbed after step 5: the check after step 7 (the 8th) sees it.
  auto ranks = train_perturbed(parts, 5, opt);
  for (const auto& o : ranks) {
    CHECK(o.raised);
    CHECK(o.mismatch_ranks == std::vector<int>{1});
    CHECK(o.mismatch_step == 7);
    CHECK(o.error.find("rank(s) 1 differ from rank 0") != std::string::npos);
  }
  CHECK(ranks[1].checksum != ranks[0].checksum);
  CHECK(ranks[2].checksum == ranks[0].checksum);

  // Without periodic checks, the one at the end (after the last step) finds it.
  opt.replica_check_every = 0;
  ranks = train_perturbed(parts, 5, opt);
  const std::size_t slots = tutti::shuffled_shards{}.shard(parts.train.size(), 3, 0, 4, 0).size();
  const std::size_t steps = (slots + 29) / 30;
  REQUIRE(steps > 8);
  for (const auto& o : ranks) {
    CHECK(o.raised);
    CHECK(o.mismatch_ranks == std::vector<int>{1});
    CHECK(o.mismatch_step == steps - 1);
  }
}

TEST_CASE("rebroadcast_on_mismatch repairs the replica from rank 0 and records the event") {
  const auto parts = guard_data();
  tutti::train_options opt{
      .batch = 90, .epochs = 1, .base_lr = 0.02, .seed = 4, .evaluate_each_epoch = false};
  opt.replica_check_every = 4;
  opt.rebroadcast_on_mismatch = true;
  const auto ranks = train_perturbed(parts, 5, opt);
  for (const auto& o : ranks) {
    CHECK_FALSE(o.raised);
    REQUIRE(o.result.replica_events.size() == 1);
    CHECK(o.result.replica_events[0].ranks == std::vector<int>{1});
    CHECK(o.result.replica_events[0].global_step == 7);
    CHECK(o.result.replica_events[0].epoch == 0);
    CHECK(o.result.replica_events[0].step == 7);
    // Parameters and Adam's moments identical again, to the bit.
    CHECK(o.params == ranks[0].params);
    CHECK(o.state == ranks[0].state);
    CHECK(o.checksum == ranks[0].checksum);
  }
}

}  // namespace test_guards
