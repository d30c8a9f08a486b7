// SPDX-License-Identifier: Apache-2.0
// Ranking metrics in training: HR@K and NDCG@K after each epoch, the same on every rank, over the
// union of rank-local lists, and a quality target that ends the run at the first epoch reaching it.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include <memory>
#include <mutex>
#include <vector>

namespace test_ranking_training {

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;
using tutti::data::interactions;

struct loo_data {
  tutti::data::split_result parts;
  std::shared_ptr<const tutti::data::ranking_candidates> lists;
};

loo_data courses() {
  const auto d = tutti::data::synthetic_courses({.learners = 400, .courses = 120, .seed = 8});
  loo_data out{tutti::data::leave_one_out(d), nullptr};
  out.lists = std::make_shared<const tutti::data::ranking_candidates>(
      tutti::data::sample_candidates(out.parts.train, out.parts.test, {.negatives = 50}));
  return out;
}

mf make_model(const interactions& d) {
  return mf({.dim = 16, .loss = tutti::loss_kind::logistic}, d.n_users(), d.n_items());
}

tutti::train_options options(const loo_data& d) {
  return {.batch = 256, .epochs = 4, .base_lr = 0.02, .seed = 3, .ranking = d.lists};
}

bool same(const tutti::ranking_result& a, const tutti::ranking_result& b) {
  return a.k == b.k && a.lists == b.lists && a.hits == b.hits && a.hit_rate == b.hit_rate &&
         a.ndcg == b.ndcg;
}

// The sub-list of `c` for lists [begin, end).
tutti::data::ranking_candidates lists_slice(const tutti::data::ranking_candidates& c,
                                            std::size_t begin, std::size_t end) {
  tutti::data::ranking_candidates s;
  s.n_negatives = c.n_negatives;
  s.users.assign(c.users.begin() + std::ptrdiff_t(begin), c.users.begin() + std::ptrdiff_t(end));
  s.negatives.assign(c.negatives.begin() + std::ptrdiff_t(begin),
                     c.negatives.begin() + std::ptrdiff_t(end));
  s.items.assign(c.items.begin() + std::ptrdiff_t(begin * c.width()),
                 c.items.begin() + std::ptrdiff_t(end * c.width()));
  return s;
}

}  // namespace

TEST_CASE("training reports HR@K and NDCG@K after each epoch, those of its parameters") {
  const loo_data d = courses();
  tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant, tutti::adam> t(
      make_model(d.parts.train), {}, {}, {}, {}, options(d));
  const auto before = tutti::evaluate_ranking(t.model(), t.parameters(), *d.lists, 10);
  const auto r = t.fit(d.parts.train, {});
  REQUIRE(r.epochs.size() == 4);
  for (const auto& e : r.epochs) {
    CAPTURE(e.epoch);
    REQUIRE(e.ranking.has_value());
    CHECK(e.ranking->k == 10);
    CHECK(e.ranking->lists == d.parts.test.size());
  }
  REQUIRE(r.ranking.has_value());
  CHECK(same(*r.ranking, r.epochs.back().ranking.value()));
  // The reported metrics are those of the final parameters, through either entry point.
  CHECK(same(*r.ranking, tutti::evaluate_ranking(t.model(), t.parameters(), *d.lists, 10)));
  CHECK(same(*r.ranking, t.evaluate_ranking(*d.lists, 10)));
  // The model learned to rank: random scores give HR@10 = 10/51 ≈ 0.2 with 50 negatives.
  CHECK(r.ranking->hit_rate > before.hit_rate + 0.1);
  CHECK(r.ranking->ndcg > before.ndcg);
  CHECK(r.ranking->ndcg <= r.ranking->hit_rate);
  CHECK_FALSE(r.target.reached);
}

TEST_CASE(
    "every rank reports the same ranking metrics, and rank-local lists count as their union") {
  const loo_data d = courses();
  const std::size_t mid = d.lists->size() / 2;
  const auto first =
      std::make_shared<const tutti::data::ranking_candidates>(lists_slice(*d.lists, 0, mid));
  const auto second = std::make_shared<const tutti::data::ranking_candidates>(
      lists_slice(*d.lists, mid, d.lists->size()));
  const std::size_t n = d.parts.train.size();
  std::mutex m;
  std::vector<tutti::ranking_result> shared(2), local(2), whole(2);
  tutti::run_local(2, [&](tutti::local_ring ring) {
    const auto r = std::size_t(ring.rank());
    tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring, tutti::constant, tutti::adam> t(
        make_model(d.parts.train), {}, ring, {}, {}, options(d));
    const auto res = t.fit(d.parts.train, {});
    // With rank-local data each rank passes its own half of the lists.
    auto opt = options(d);
    opt.epochs = 1;
    opt.ranking = r == 0 ? first : second;
    const tutti::owned_shards sampler{.rows = {n, n}};  // each rank holds every row
    tutti::trainer<mf, tutti::owned_shards, tutti::local_ring, tutti::constant, tutti::adam> u(
        make_model(d.parts.train), sampler, ring, {}, {}, opt);
    const auto res_local = u.fit(d.parts.train, {});
    const auto all = tutti::evaluate_ranking(u.model(), u.parameters(), *d.lists, 10);
    std::lock_guard lock(m);
    shared[r] = res.ranking.value();
    local[r] = res_local.ranking.value();
    whole[r] = all;
  });
  CHECK(same(shared[0], shared[1]));
  CHECK(shared[0].lists == d.lists->size());
  CHECK(same(local[0], local[1]));
  CHECK(same(local[0], whole[0]));
  CHECK(local[0].lists == d.lists->size());
}

TEST_CASE("a quality target ends the run after the first epoch that reaches it") {
  const loo_data d = courses();
  using trainer =
      tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant, tutti::adam>;
  const auto run_to = [&](tutti::quality_target target, bool evaluate_each_epoch = true) {
    auto opt = options(d);
    opt.epochs = 6;
    opt.target = target;
    opt.evaluate_each_epoch = evaluate_each_epoch;
    trainer t(make_model(d.parts.train), {}, {}, {}, {}, opt);
    return t.fit(d.parts.train, {});
  };
  using m = tutti::quality_target::measure;
  const auto full = run_to({.metric = m::hit_rate, .value = 2.0});  // never reached
  REQUIRE(full.epochs.size() == 6);
  CHECK_FALSE(full.target.reached);
  // The first epoch whose HR@10 passes the second epoch's: the run stops there.
  const double goal = full.epochs[1].ranking->hit_rate;
  std::size_t first = 0;
  while (full.epochs[first].ranking->hit_rate < goal) ++first;
  const auto stopped = run_to({.metric = m::hit_rate, .value = goal}, false);
  REQUIRE(stopped.target.reached);
  CHECK(stopped.target.epoch == first + 1);
  CHECK(stopped.epochs.size() == first + 1);
  CHECK(stopped.target.value == full.epochs[first].ranking->hit_rate);
  CHECK(stopped.target.seconds > 0);
  CHECK(stopped.target.seconds <= stopped.seconds);
  CHECK(same(*stopped.ranking, *full.epochs[first].ranking));

  auto opt = options(d);
  // An RMSE target on a logistic model is refused before any training.
  opt.target = tutti::quality_target{.metric = m::rmse, .value = 0.5};
  CHECK_THROWS_WITH_AS(
      trainer(make_model(d.parts.train), {}, {}, {}, {}, opt),
      doctest::Contains("the target is the test RMSE, but the model's loss is logistic"),
      tutti::invalid_argument);
  // An AUC target matches the loss, but there is no test split to reach it on.
  CHECK_THROWS_WITH_AS(run_to({.metric = m::auc, .value = 0.5}),
                       doctest::Contains("the target is the test auc, but there is no test split"),
                       tutti::invalid_argument);
  opt.ranking = nullptr;
  opt.target = tutti::quality_target{.metric = m::ndcg, .value = 0.5};
  CHECK_THROWS_WITH_AS(trainer(make_model(d.parts.train), {}, {}, {}, {}, opt),
                       doctest::Contains("no ranking lists were given"), tutti::invalid_argument);
}

}  // namespace test_ranking_training
