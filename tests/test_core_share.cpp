// SPDX-License-Identifier: Apache-2.0
// One rank's threads follow what else runs on the machine (tutti/core_share.hpp): the threads it
// takes for each count of other runnable tasks, when it looks and when it changes its mind, all
// through looks and a clock the test hands it; and a run whose threads change between steps
// ends with the parameters of a run that kept them.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"
#include "skip.hpp"

#include <chrono>
#include <cstring>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace test_core_share {

using namespace std::chrono_literals;
using tutti::core_share;

namespace {

/// A core_share on `cores` with at most `most` threads whose looks read `seen` in turn (the
/// last one for ever after) and whose settings land in `set`.
core_share sharing(int cores, int most, std::vector<int>& seen, std::vector<int>& set,
                   std::size_t window = 3) {
  return core_share(
      {.cores = cores, .most = most, .period = 100ms, .window = window},
      [&seen, k = std::size_t{0}]() mutable {
        const int v = seen[std::min(k, seen.size() - 1)];
        ++k;
        return v;
      },
      [&set](int threads) { set.push_back(threads); });
}

}  // namespace

TEST_CASE("core share: the threads are the cores the other work leaves, one at least") {
  CHECK(tutti::threads_for(2, 0, 2) == 2);
  CHECK(tutti::threads_for(2, 1, 2) == 1);
  CHECK(tutti::threads_for(2, 2, 2) == 1);  // never none
  CHECK(tutti::threads_for(2, 7, 2) == 1);
  CHECK(tutti::threads_for(16, 3, 8) == 8);  // never more than the rank started with
  CHECK(tutti::threads_for(16, 10, 8) == 6);
  CHECK(tutti::threads_for(4, -1, 3) == 3);  // nothing known: as started
}

TEST_CASE("core share: a neighbour seen in a whole window takes a thread, one idle look gives it") {
  std::vector<int> seen{0, 1, 1, 1, 1, 0, 1, 1, 1};
  std::vector<int> set;
  core_share share = sharing(2, 2, seen, set);
  const auto t0 = core_share::clock::time_point{} + 1h;
  auto at = [&](int period) {
    share.poll(t0 + period * 100ms);
  };
  at(0);  // looks: 0
  CHECK(set.empty());
  CHECK(share.threads() == 2);
  at(1);  // 0 1
  at(2);  // 0 1 1: the first look still says idle
  CHECK(set.empty());
  at(3);  // 1 1 1: seen in the whole window
  CHECK(set == std::vector<int>{1});
  CHECK(share.threads() == 1);
  at(4);                   // 1 1 1
  CHECK(set.size() == 1);  // set once, not at every look
  at(5);                   // 1 1 0: one idle look gives the thread back
  CHECK(set == std::vector<int>{1, 2});
  at(6);
  at(7);
  CHECK(set.size() == 2);
  at(8);  // 1 1 1
  CHECK(set == std::vector<int>{1, 2, 1});
  CHECK(share.changes() == 3);
  CHECK(share.fewest() == 1);
  CHECK(share.most() == 2);
}

TEST_CASE("core share: it looks at most once a period, and counts every step") {
  std::vector<int> seen{2};
  std::vector<int> set;
  core_share share = sharing(4, 4, seen, set, 1);
  const auto t0 = core_share::clock::time_point{} + 1h;
  share.poll(t0);  // the first poll looks
  CHECK(set == std::vector<int>{2});
  seen = {0};
  for (int k = 1; k < 10; ++k) share.poll(t0 + k * 10ms);  // within the period: no look
  CHECK(set == std::vector<int>{2});
  CHECK(share.steps() == 10);
  CHECK(share.steps_below() == 9);  // the first step ran on the threads it started with
  share.poll(t0 + 100ms);
  CHECK(set == std::vector<int>{2, 4});
  CHECK(share.steps_below() == 10);  // counted before the look that gave the threads back
  share.poll(t0 + 150ms);
  CHECK(share.steps_below() == 10);
}

TEST_CASE("core share: a machine it cannot read leaves the threads alone") {
  std::vector<int> seen{-1};
  std::vector<int> set;
  core_share share = sharing(2, 2, seen, set, 1);
  for (int k = 0; k < 5; ++k) share.poll(core_share::clock::time_point{} + k * 1s);
  CHECK(set.empty());
  CHECK(share.changes() == 0);
  CHECK(share.fewest() == 2);
  CHECK_THROWS_AS(core_share({.cores = 2, .most = 0}), tutti::invalid_argument);
}

#if defined(_OPENMP)
TEST_CASE("core share: threads changed between steps leave the parameters of fixed threads") {
  using mf = tutti::models::matrix_factorization<tutti::host_space>;
  const auto parts = tutti_test::implicit_courses(400, 80);
  auto make = [&] {
    return mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
              parts.train.n_items());
  };
  tutti::train_options opt{.batch = 64, .epochs = 2, .base_lr = 0.05, .seed = 9};
  const auto fixed =
      tutti_test::train_ranks<mf, tutti::lazy_adam>(1, parts.train, opt, make, {}).at(0);
  // Every step looks (period 0) and sees 0, 2 or 1 others in turn: 3, 1 and 2 threads.
  std::vector<int> set;
  int k = 0;
  core_share share(
      {.cores = 3, .most = 3, .period = 0ms, .window = 1}, [&k] { return k++ % 3; },
      [&set](int threads) {
        set.push_back(threads);
        omp_set_num_threads(threads);
      });
  opt.on_step = [&share](const tutti::step_progress&) {
    share.poll();
  };
  const auto moved =
      tutti_test::train_ranks<mf, tutti::lazy_adam>(1, parts.train, opt, make, {}).at(0);
  REQUIRE(share.changes() > 10);
  CHECK(share.fewest() == 1);
  REQUIRE(moved.params.size() == fixed.params.size());
  CHECK(std::memcmp(moved.params.data(), fixed.params.data(),
                    fixed.params.size() * sizeof(float)) == 0);
  CHECK(moved.result.epochs.back().train_loss == fixed.result.epochs.back().train_loss);
}
#else
TEST_CASE("core share: threads changed between steps leave the parameters of fixed threads") {
  TUTTI_TEST_SKIP("the build has no OpenMP, so a rank's threads cannot change");
}
#endif

}  // namespace test_core_share
