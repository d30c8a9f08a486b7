// SPDX-License-Identifier: Apache-2.0
// The measured accounts: they add up to the step time, count the bytes the reducer moved, give
// bandwidths in the nccl-tests convention and flag the rank the others wait for (on a simulated
// clock, so no load beside the test changes what they find).
#include <doctest/doctest.h>

#include <tutti/ledger/accounts.hpp>
#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <thread>
#include <vector>

namespace test_accounts {

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;

tutti::data::split_result accounts_data() {
  auto all = tutti::data::synthetic_courses({.learners = 200,
                                             .courses = 40,
                                             .interactions_per_learner = 12,
                                             .implicit = true,
                                             .seed = 6});
  return tutti::data::split(all, {.test_fraction = 0.1, .seed = 1});
}

mf make_model(const tutti::data::interactions& d) {
  return mf({.dim = 8, .loss = tutti::loss_kind::logistic}, d.n_users(), d.n_items());
}

struct rank_run {
  tutti::fit_result result;
  std::uint64_t reducer_bytes = 0;
};

/// `local_ring` with a simulated clock shared by its copies: `work(s)` advances it, and the
/// one-value `all_reduce_max` the trainer probes its wait with moves every rank's clock to the
/// latest, as a collective ends when its last rank arrives. The trainer times its steps on it
/// (`reducer_keeps_clock`).
class clocked_ring : public tutti_test::ring_forwarder {
 public:
  explicit clocked_ring(tutti::local_ring ring) : ring_forwarder(ring) {}
  void all_reduce_max(std::span<double> v) {
    double latest[1] = {*m_clock};
    m_ring.all_reduce_max(std::span<double>(latest));
    *m_clock = latest[0];
    m_ring.all_reduce_max(v);
  }
  double clock_seconds() const { return *m_clock; }
  void work(double seconds) const { *m_clock += seconds; }

 private:
  std::shared_ptr<double> m_clock = std::make_shared<double>(0.0);
};
static_assert(tutti::reducer_keeps_clock<clocked_ring>);

// Trains `world` ranks; each sleeps sleep_ms(rank) milliseconds after every step (in on_step).
template <class SleepMs>
std::vector<rank_run> train_ranks(int world, const tutti::data::split_result& parts,
                                  tutti::train_options opt, SleepMs sleep_ms) {
  std::vector<rank_run> out(static_cast<std::size_t>(world));
  auto body = [&](auto reducer) {
    tutti::train_options o = opt;
    const int rank = reducer.rank();
    o.on_step = [&](const tutti::step_progress&) {
      if (const double ms = sleep_ms(rank); ms > 0)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    };
    tutti::trainer<mf, tutti::shuffled_shards, decltype(reducer)> t(make_model(parts.train), {},
                                                                    reducer, {}, {}, o);
    auto& mine = out[static_cast<std::size_t>(rank)];
    mine.result = t.fit(parts.train, parts.test);
    mine.reducer_bytes = t.reducer().bytes_reduced();
  };
  if (world == 1)
    body(tutti::single_rank{});
  else
    tutti::run_local(world, [&](tutti::local_ring ring) { body(ring); });
  return out;
}

double phase_sum(const tutti::phase_seconds& p) {
  return p.data + p.compute + p.guard + p.wait + p.reduce + p.optimizer + p.other;
}

}  // namespace

TEST_CASE("the accounts add up to the measured step time of every epoch") {
  const auto parts = accounts_data();
  for (int world : {1, 3}) {
    CAPTURE(world);
    tutti::train_options opt{.batch = 96, .epochs = 2, .seed = 2, .evaluate_each_epoch = false};
    opt.measure_wait = true;
    // A millisecond of callback per step, so the account for host work between steps matters.
    const auto ranks = train_ranks(world, parts, opt, [](int) { return 1.0; });
    for (const auto& r : ranks) {
      double total_step_seconds = 0;
      for (const auto& e : r.result.epochs) {
        CHECK(e.step_seconds > 0);
        CHECK(phase_sum(e.phases) == doctest::Approx(e.step_seconds).epsilon(0.05));
        CHECK(e.phases.total() == doctest::Approx(phase_sum(e.phases)));
        CHECK(e.phases.other >= 0.001 * double(e.steps));
        total_step_seconds += e.step_seconds;
      }
      const auto& l = r.result.ledger;
      CHECK(l.steps == r.result.steps);
      CHECK(l.step.total == doctest::Approx(total_step_seconds).epsilon(0.05));
      CHECK(l.step.total ==
            doctest::Approx(l.data.total + l.compute.total + l.guard.total + l.wait.total +
                            l.reduce_exposed.total + l.optimizer.total + l.other.total));
      CHECK(l.step.mean == doctest::Approx(l.step.total / double(l.steps)));
      CHECK(l.step.p50 <= l.step.p95);
      CHECK(l.other.p50 >= 0.001);
      CHECK(l.compute.mean > 0);
      CHECK(l.reduce_total.total > 0);
    }
  }
}

TEST_CASE("bytes reduced per step are 4 bytes per float of the gradient arena") {
  const auto parts = accounts_data();
  for (int world : {1, 2}) {
    CAPTURE(world);
    const auto ranks = train_ranks(
        world, parts, {.batch = 64, .epochs = 2, .seed = 1, .evaluate_each_epoch = false},
        [](int) { return 0.0; });
    for (const auto& r : ranks) {
      const auto model = make_model(parts.train);
      // The layout's arena plus the trailing finite flag.
      const std::uint64_t arena_bytes =
          4 * (model.layout().total() + tutti::gradient_trailing_floats);
      CHECK(r.result.arena_floats == model.layout().total());
      CHECK(r.result.param_count == model.layout().parameter_count());
      CHECK(r.result.optimizer_state_floats == 0);
      CHECK(r.result.bytes_reduced_per_step == arena_bytes);
      CHECK(r.result.ledger.bytes_reduced_per_step == arena_bytes);
      // What the reducer itself counted.
      CHECK(r.reducer_bytes == arena_bytes * r.result.steps);
    }
  }
}

TEST_CASE("algbw is bytes over reduce time and busbw = algbw * 2(n-1)/n") {
  const auto parts = accounts_data();
  for (int world : {1, 2, 4}) {
    CAPTURE(world);
    const auto ranks = train_ranks(
        world, parts, {.batch = 64, .epochs = 1, .seed = 1, .evaluate_each_epoch = false},
        [](int) { return 0.0; });
    const auto& l = ranks[0].result.ledger;
    CHECK(l.world_size == world);
    // The trainer's reduce blocks: all of it is exposed.
    CHECK(l.reduce_exposed.total == doctest::Approx(l.reduce_total.total));
    REQUIRE(l.reduce_total.mean > 0);
    CHECK(l.algbw == doctest::Approx(double(l.bytes_reduced_per_step) / l.reduce_total.mean));
    CHECK(l.busbw == doctest::Approx(l.algbw * 2.0 * (world - 1) / world));
    if (world == 1) CHECK(l.busbw == 0);
  }
}

TEST_CASE("a rank that works longer is flagged slow, the ranks that wait for it are not") {
  // On a simulated clock: every rank has 2 ms of work per step beside its compute (which costs
  // no simulated time), rank 1 has 8 ms; at the wait probe each rank's clock moves to the
  // latest, as a collective ends when its last rank arrives. The accounts are handed these
  // costs, so the load beside the test cannot change what they find.
  const auto parts = accounts_data();
  tutti::train_options opt{.batch = 96, .epochs = 2, .seed = 3, .evaluate_each_epoch = false};
  opt.measure_wait = true;
  std::vector<tutti::fit_result> ranks(4);
  tutti::run_local(4, [&](tutti::local_ring ring) {
    const clocked_ring reducer(ring);
    const int rank = ring.rank();
    tutti::train_options o = opt;
    o.on_step = [&, reducer](const tutti::step_progress&) {
      reducer.work(rank == 1 ? 8e-3 : 2e-3);
    };
    tutti::trainer<mf, tutti::shuffled_shards, clocked_ring> t(make_model(parts.train), {}, reducer,
                                                               {}, {}, o);
    ranks[static_cast<std::size_t>(rank)] = t.fit(parts.train, parts.test);
  });
  for (const auto& r : ranks) {
    for (const auto& e : r.epochs) {
      REQUIRE(e.ranks.rows.size() == 4);
      CHECK(e.ranks.slow_ranks() == std::vector<int>{1});
      CHECK(e.ranks.rows[1].relative > 2.0);
      CHECK_FALSE(e.ranks.rows[0].slow);
    }
    const auto& table = r.ledger.ranks;
    CHECK(table.slow_ranks() == std::vector<int>{1});
    // The others wait 6 ms for rank 1 at every step's probe (but the run's first, which
    // follows no work); rank 1 never waits. Its 8 ms of work is charged to the step after it
    // (the epoch's first step may have none before it).
    const double steps = double(r.steps) / double(r.epochs.size());
    const double some = (steps - 1) / steps;
    CHECK(table.rows[0].wait_seconds >= 6e-3 * some - 1e-12);
    CHECK(table.rows[0].wait_seconds <= 6e-3 + 1e-12);
    CHECK(table.rows[1].wait_seconds == 0.0);
    CHECK(table.rows[1].work_seconds >= 8e-3 * some - 1e-12);
    CHECK(table.rows[1].work_seconds <= 8e-3 + 1e-12);
    CHECK(table.rows[2].work_seconds <= 2e-3 + 1e-12);
    // Ranks in lock step take the same step time; the work time is what tells them apart.
    CHECK(table.rows[0].step_seconds == doctest::Approx(table.rows[1].step_seconds).epsilon(0.1));
  }
  // Every rank sees the same table.
  CHECK(ranks[3].epochs[0].ranks.rows[1].work_seconds ==
        ranks[0].epochs[0].ranks.rows[1].work_seconds);
}

TEST_CASE("rank table: median of the work times and the 20% rule") {
  const std::vector<double> step{1, 1, 1, 1}, wait{0.3, 0, 0.2, 0.1};
  auto t = tutti::make_rank_table(step, std::vector<double>{1.0, 1.3, 1.1, 1.19}, wait);
  CHECK(t.median_work_seconds == doctest::Approx(1.145));
  CHECK(t.slow_ranks() == std::vector<int>{});
  t = tutti::make_rank_table(step, std::vector<double>{1.0, 1.5, 1.1, 1.2}, wait);
  CHECK(t.median_work_seconds == doctest::Approx(1.15));
  CHECK(t.slow_ranks() == std::vector<int>{1});
  CHECK(t.rows[1].relative == doctest::Approx(1.5 / 1.15));
  t = tutti::make_rank_table(std::vector<double>{1, 1, 1}, std::vector<double>{1, 2, 4},
                             std::vector<double>{0, 0, 0}, 0.5);
  CHECK(t.median_work_seconds == 2);
  CHECK(t.slow_ranks() == std::vector<int>{2});
  CHECK_THROWS_AS(tutti::make_rank_table(step, std::vector<double>{1.0}, wait),
                  tutti::invalid_argument);
}

TEST_CASE("ledger: exact totals and means, nearest-rank percentiles, bounded memory") {
  tutti::ledger l;
  for (int i = 1; i <= 100; ++i) {
    tutti::step_account s;
    s.compute = i * 1e-3;
    s.reduce_total = s.reduce_exposed = 2e-3;
    s.bytes = 400;
    l.record(s);
  }
  auto s = l.summarize(4);
  CHECK(s.steps == 100);
  CHECK(s.compute.total == doctest::Approx(5.05));
  CHECK(s.compute.mean == doctest::Approx(0.0505));
  CHECK(s.compute.p50 == doctest::Approx(0.050));
  CHECK(s.compute.p95 == doctest::Approx(0.095));
  CHECK(s.step.p95 == doctest::Approx(0.097));
  CHECK(s.bytes_reduced_per_step == 400);
  CHECK(s.algbw == doctest::Approx(400 / 2e-3));
  CHECK(s.busbw == doctest::Approx(400 / 2e-3 * 1.5));

  tutti::ledger small(10);
  for (int i = 0; i < 1000; ++i) {
    tutti::step_account a;
    a.data = 1.0;
    small.record(a);
  }
  CHECK(small.kept().size() == 10);
  CHECK(small.summarize(1).data.total == doctest::Approx(1000.0));
  CHECK(small.summarize(1).data.p95 == 1.0);
}

TEST_CASE("step_account: the step time counts the exposed reduce, work excludes the collective") {
  tutti::step_account a;
  a.data = 1;
  a.compute = 2;
  a.guard = 0.5;
  a.wait = 3;
  a.reduce_total = 4;
  a.reduce_exposed = 1;
  a.optimizer = 0.25;
  a.other = 0.25;
  CHECK(a.seconds() == 8);
  CHECK(a.work() == 4);
  a[tutti::account::reduce] += 1;
  CHECK(a.reduce_total == 5);
  CHECK(std::string(tutti::to_string(tutti::account::compute)) == "compute");
  CHECK(tutti::allreduce_bus_factor(8) == doctest::Approx(1.75));
}

}  // namespace test_accounts
