// SPDX-License-Identifier: Apache-2.0
// The step timeline (`train_options::on_phase`): every rank reports each interval its step's
// clock marks, in order, without overlaps, covering every step, and adding up to the ledger's
// own phase totals (the same clock reads).
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include <cmath>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace test_trace {

TEST_CASE("on_phase: each rank's intervals are ordered, disjoint, cover every step and add up") {
  auto all = tutti::data::synthetic_courses({.learners = 600,
                                             .courses = 120,
                                             .interactions_per_learner = 6,
                                             .implicit = true,
                                             .seed = 3});
  using mf = tutti::models::matrix_factorization<tutti::host_space>;
  const int world = 2;
  std::mutex m;
  std::map<int, std::vector<tutti::phase_event>> events;
  std::map<int, tutti::fit_result> results;
  tutti::run_local(world, [&](tutti::local_ring ring) {
    tutti::train_options opt{.batch = 128, .epochs = 2, .base_lr = 0.05, .seed = 2};
    opt.on_phase = [&](const tutti::phase_event& e) {
      std::lock_guard lock(m);
      events[e.rank].push_back(e);
    };
    tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring, tutti::constant, tutti::adam> t(
        mf({.dim = 8}, all.n_users(), all.n_items()), {}, ring, {}, {}, opt);
    auto r = t.fit(all, {});
    std::lock_guard lock(m);
    results[ring.rank()] = std::move(r);
  });
  REQUIRE(events.size() == 2);
  for (const auto& [rank, ev] : events) {
    CAPTURE(rank);
    const tutti::fit_result& r = results.at(rank);
    REQUIRE(!ev.empty());
    double sum = 0;
    std::set<std::size_t> steps;
    std::map<std::size_t, std::set<tutti::account>> phases_of;
    for (std::size_t i = 0; i < ev.size(); ++i) {
      CHECK(ev[i].rank == rank);
      CHECK(ev[i].seconds >= 0);
      if (i > 0 && ev[i].epoch == ev[i - 1].epoch)  // one timeline per epoch, no overlaps
        CHECK(ev[i].start >= ev[i - 1].start + ev[i - 1].seconds - 1e-9);
      CHECK(ev[i].global_step == ev[i].epoch * (r.steps / 2) + ev[i].step);
      sum += ev[i].seconds;
      steps.insert(ev[i].global_step);
      phases_of[ev[i].global_step].insert(ev[i].phase);
    }
    CHECK(steps.size() == r.steps);
    for (const auto& [g, ph] : phases_of) {
      CAPTURE(g);
      CHECK(ph.count(tutti::account::compute) == 1);
      CHECK(ph.count(tutti::account::reduce) == 1);
      CHECK(ph.count(tutti::account::optimizer) == 1);
    }
    // The same clock reads as the ledger's: the intervals add up to its phase totals.
    CHECK(std::abs(sum - r.phases.total()) <= 1e-9 * std::max(1.0, r.phases.total()));
  }
}

}  // namespace test_trace
