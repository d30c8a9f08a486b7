// SPDX-License-Identifier: Apache-2.0
// The trainer end to end: data-parallel equivalence, exactly-once epochs, agreement checks.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <cmath>
#include <functional>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace test_trainer {

using tutti_test::relative_difference;

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;

tutti::data::split_result small_data(bool implicit, std::int32_t learners = 300) {
  auto all = tutti::data::synthetic_courses({.learners = learners,
                                             .courses = 60,
                                             .interactions_per_learner = 12,
                                             .implicit = implicit,
                                             .seed = 5});
  return tutti::data::split(all, {.test_fraction = 0.2, .seed = 3});
}

mf make_mf(const tutti::data::interactions& d, tutti::loss_kind loss) {
  return mf({.dim = 8, .l2 = 1e-3f, .loss = loss}, d.n_users(), d.n_items());
}

using run = tutti_test::rank_run;

template <class Schedule = tutti::constant, class Optimizer = tutti::sgd>
run train_on(int world, const tutti::data::split_result& parts, tutti::train_options opt,
             tutti::loss_kind loss = tutti::loss_kind::logistic, Schedule schedule = {},
             Optimizer optimizer = {.momentum = 0.9f}) {
  return tutti_test::train_rank0<mf>(
      world, parts, opt, [&] { return make_mf(parts.train, loss); }, schedule, optimizer);
}

}  // namespace

TEST_CASE("W ranks at global batch B end with the parameters of 1 rank at batch B") {
  const auto parts = small_data(true);
  // 240 is divisible by 2, 3 and 4; the training rows are not a multiple of 240, so the last
  // step of every epoch is partial and, for W > 1, padded.
  const tutti::train_options opt{
      .batch = 240, .epochs = 2, .base_lr = 0.05, .seed = 11, .evaluate_each_epoch = false};
  REQUIRE(parts.train.size() % 240 != 0);
  const run one = train_on(1, parts, opt);
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    const run many = train_on(world, parts, opt);
    CHECK(many.result.steps == one.result.steps);
    // Not the same arithmetic: one rank sums B per-sample terms, W ranks sum B/W each and the
    // means are averaged, so only rounding differs. It cannot depend on the machine: matrix
    // factorisation uses no BLAS, its host vectors are the build's (not the CPU's) and its
    // results do not depend on the thread count (test_models.cpp); SGD passes a rounding
    // difference on without amplifying it.
    CHECK(relative_difference(many.params, one.params) <= 1e-5);
    CHECK(many.result.epochs.back().train_loss ==
          doctest::Approx(one.result.epochs.back().train_loss).epsilon(1e-5));
  }
}

TEST_CASE("with Adam, warmup and a cosine schedule the equivalence still holds") {
  const auto parts = small_data(false);
  const tutti::train_options opt{
      .batch = 120, .epochs = 2, .base_lr = 0.01, .seed = 2, .evaluate_each_epoch = false};
  using sched = tutti::warmup<tutti::cosine>;
  const sched s{.warmup_steps = 5};
  const run one = train_on(1, parts, opt, tutti::loss_kind::squared, s, tutti::adam{});
  const run three = train_on(3, parts, opt, tutti::loss_kind::squared, s, tutti::adam{});
  // Rounding only, as above; the same arithmetic on every machine (no BLAS, the build's
  // vectors, thread-count independent), so the margin found here holds everywhere.
  CHECK(relative_difference(three.params, one.params) <= 1e-5);
}

TEST_CASE("the finite guard, replica checks and the wait collective leave training unchanged") {
  const auto parts = small_data(true);
  tutti::train_options plain{
      .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 6, .evaluate_each_epoch = false};
  plain.nonfinite = tutti::nonfinite_policy::off;
  tutti::train_options checked = plain;
  checked.nonfinite = tutti::nonfinite_policy::skip;
  checked.replica_check_every = 2;
  checked.measure_wait = true;
  const run a = train_on(2, parts, plain);
  const run b = train_on(2, parts, checked);
  // Bitwise: the checks observe the step, they never change its arithmetic.
  CHECK(a.params == b.params);
  CHECK(a.result.epochs.back().train_loss == b.result.epochs.back().train_loss);
  CHECK(b.result.skipped_steps == 0);
  CHECK(b.result.replica_checks > 0);
  CHECK(b.result.replica_events.empty());
}

TEST_CASE("every epoch uses each training row exactly once across ranks") {
  const auto parts = small_data(true);
  for (int world : {1, 3, 4}) {
    CAPTURE(world);
    const run r = train_on(world, parts, {.batch = 96, .epochs = 2, .seed = 4});
    for (const auto& e : r.result.epochs) {
      CHECK(e.weighted_samples == double(parts.train.size()));
      REQUIRE(e.samples_per_rank.size() == static_cast<std::size_t>(world));
      std::uint64_t sum = 0;
      for (auto s : e.samples_per_rank) sum += s;
      CHECK(sum == parts.train.size());
    }
  }
}

TEST_CASE("the memory accounts are the bytes of the arenas, the rows and the shard the fit held") {
  const auto parts = small_data(true);
  using trainer_t =
      tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant, tutti::adam>;
  trainer_t t(make_mf(parts.train, tutti::loss_kind::logistic), {}, {}, {}, {},
              {.batch = 64, .epochs = 1, .seed = 2});
  const tutti::fit_result r = t.fit(parts.train, parts.test);
  const tutti::memory_accounts& m = r.memory;
  CHECK(m.parameters == t.parameters().size() * sizeof(float));
  CHECK(m.optimizer_state == t.optimizer_state().size() * sizeof(float));
  CHECK(m.optimizer_state == 2 * m.parameters);             // Adam's two moments
  CHECK(m.gradients >= m.parameters);                       // the arena and its trailing flags
  CHECK(m.rows == parts.train.size() * 3 * sizeof(float));  // (user, item, label) per row
  // Each step deals its own slots' positions: the shard is one count of real slots per rank, no
  // position, weight or count per slot (real slots lead, the prefix is given per rank).
  CHECK(m.shard == sizeof(std::uint64_t));
  // The step buffers: one batch's rows (user, item, label, weight), the epoch's key of the
  // negatives, and the step's positions.
  const std::uint64_t batch_rows =
      64 * (2 * sizeof(std::int32_t) + 2 * sizeof(float)) + sizeof(std::uint64_t);
  CHECK(m.step_buffers == batch_rows + 64 * sizeof(std::uint64_t));
  CHECK(m.total() ==
        m.parameters + m.gradients + m.optimizer_state + m.rows + m.step_buffers + m.shard);
  // With `on_batch` (it is handed the epoch's positions) the shard is dealt whole and the step
  // reads it in place: a position a slot, no copy of the slots in the step buffers.
  tutti::train_options watched{.batch = 64, .epochs = 1, .seed = 2};
  watched.on_batch = [](const tutti::step_progress&, std::span<const std::uint64_t>,
                        std::span<const float>) {
  };
  trainer_t w(make_mf(parts.train, tutti::loss_kind::logistic), {}, {}, {}, {}, watched);
  const tutti::fit_result dealt = w.fit(parts.train, parts.test);
  CHECK(dealt.memory.shard == parts.train.size() * sizeof(std::uint64_t) + sizeof(std::uint64_t));
  CHECK(dealt.memory.step_buffers == batch_rows);
  CHECK(dealt.parameters_checksum == r.parameters_checksum);
}

TEST_CASE("rows read in place: no copy of the rows, the same parameters bitwise") {
  // (The copy of a log of positives holds pairs, its label one number: the same rows read.)
  // Ratings (labels that differ: three arrays read) and a log of positives with sampled
  // negatives (one label: no label array read), with a dense and a row-sparse optimizer.
  const auto ratings = small_data(false);
  const auto positives = tutti::data::as_positives(tutti_test::implicit_courses(300, 80).train);
  REQUIRE(tutti::data::labels_all_equal(positives));
  for (const bool log : {false, true}) {
    CAPTURE(log);
    const tutti::data::interactions& train = log ? positives : ratings.train;
    const tutti::loss_kind loss = log ? tutti::loss_kind::logistic : tutti::loss_kind::squared;
    tutti::train_options opt{.batch = 64, .epochs = 2, .seed = 5, .evaluate_each_epoch = false};
    if (log) opt.negatives.per_positive = 3;
    const auto fit = [&](auto optimizer, bool in_place) {
      using trainer_t = tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank,
                                       tutti::constant, decltype(optimizer)>;
      auto o = opt;
      o.rows_in_place = in_place;
      trainer_t t(make_mf(train, loss), {}, {}, {}, optimizer, o);
      const tutti::fit_result r = t.fit(train, {});
      // The copy: (learner, course, label) a row, or (learner, course) where one label is all.
      CHECK(r.memory.rows == (in_place ? 0 : train.size() * (log ? 2 : 3) * sizeof(float)));
      return t.parameters_on_host();
    };
    CHECK(fit(tutti::adam{}, true) == fit(tutti::adam{}, false));
    CHECK(fit(tutti::rowwise_adagrad{}, true) == fit(tutti::rowwise_adagrad{}, false));
  }
}

TEST_CASE("training learns: loss falls and the test AUC beats chance clearly") {
  const auto parts = small_data(true, 3000);
  const run r = train_on(2, parts, {.batch = 256, .epochs = 6, .base_lr = 0.02, .seed = 1},
                         tutti::loss_kind::logistic, tutti::constant{}, tutti::adam{});
  CHECK(r.result.epochs.back().train_loss < r.result.epochs.front().train_loss);
  CHECK(std::string(r.result.eval.metric) == "auc");
  CHECK(r.result.eval.value > 0.7);
}

TEST_CASE("ranks that disagree on the seed are stopped before the first step, named") {
  const auto parts = small_data(true);
  auto attempt = [&] {
    tutti::run_local(3, [&](tutti::local_ring ring) {
      tutti::train_options opt{.batch = 96, .epochs = 1, .seed = ring.rank() == 2 ? 99u : 1u};
      tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring> t(
          make_mf(parts.train, tutti::loss_kind::logistic), {}, ring, {}, {}, opt);
      t.fit(parts.train, parts.test);
    });
  };
  CHECK_THROWS_WITH_AS(attempt(), doctest::Contains("seed: rank(s) 2 differ from rank 0"),
                       tutti::mismatch_error);
}

TEST_CASE("ranks that disagree on the overlapped reduction or its buckets are stopped, named") {
  const auto parts = small_data(true);
  // Each pair differs on one rank only in a setting that changes which collectives run.
  const std::function<void(tutti::train_options&)> differ[] = {
      [](tutti::train_options& o) { o.overlap_reduce = true; },
      [](tutti::train_options& o) {
        o.overlap_reduce = true;
        o.bucket_bytes = 4096;
      },
      [](tutti::train_options& o) {
        o.overlap_reduce = true;
        o.last_bucket_bytes = 0;
      }};
  for (std::size_t k = 0; k < std::size(differ); ++k) {
    CAPTURE(k);
    auto attempt = [&] {
      tutti::run_local(2, [&](tutti::local_ring ring) {
        tutti::train_options opt{.batch = 96, .epochs = 1, .seed = 1};
        if (k > 0) opt.overlap_reduce = true;
        if (ring.rank() == 1) differ[k](opt);
        tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring> t(
            make_mf(parts.train, tutti::loss_kind::logistic), {}, ring, {}, {}, opt);
        t.fit(parts.train, parts.test);
      });
    };
    CHECK_THROWS_WITH_AS(attempt(), doctest::Contains("training options: rank(s) 1 differ"),
                         tutti::mismatch_error);
  }
}

TEST_CASE("the run settings: one list gives the agreement digest and the checkpoint's record") {
  tutti::train_options o{.batch = 96, .epochs = 2, .base_lr = 0.01, .seed = 5};
  o.run_config = {{"model", "mf"}};
  const tutti::detail::run_shape shape{.layout_digest = 7,
                                       .optimizer_state_floats = 3,
                                       .train_rows = 100,
                                       .train_digest = 9,
                                       .world_size = 2};
  const auto recorded = tutti::detail::checkpoint_settings(o, shape);
  // The record keeps its names and order (checkpoints written before compare against it).
  std::vector<std::string> names;
  for (const auto& [name, value] : recorded) names.push_back(name);
  CHECK(names == std::vector<std::string>{"batch", "epochs", "base_lr", "scaling",
                                          "reference_batch", "seed", "nonfinite", "accumulation",
                                          "parameter_layout", "optimizer_state_floats",
                                          "train_rows", "train_digest", "world_size", "model"});
  // Sampled negatives are recorded after the accumulation, and change the record.
  auto sampling = o;
  sampling.negatives.per_positive = 4;
  const auto with_negatives = tutti::detail::checkpoint_settings(sampling, shape);
  REQUIRE(with_negatives.size() == recorded.size() + 1);
  CHECK(with_negatives[8].first == "negatives");
  CHECK(with_negatives != recorded);
  // Settings a resume may change are not recorded, but ranks must share them.
  auto other = o;
  other.overlap_reduce = true;
  CHECK(tutti::detail::checkpoint_settings(other, shape) == recorded);
  CHECK(tutti::detail::options_digest(other) != tutti::detail::options_digest(o));
  other = o;
  other.checkpoint_every = 10;
  CHECK(tutti::detail::checkpoint_settings(other, shape) == recorded);
  CHECK(tutti::detail::options_digest(other) != tutti::detail::options_digest(o));
  // A recorded setting that changes the result is in both.
  other = o;
  other.batch = 128;
  CHECK(tutti::detail::checkpoint_settings(other, shape) != recorded);
  CHECK(tutti::detail::options_digest(other) != tutti::detail::options_digest(o));
  // The seed is agreed on by itself (so the error can name it), and recorded.
  other = o;
  other.seed = 6;
  CHECK(tutti::detail::options_digest(other) == tutti::detail::options_digest(o));
}

TEST_CASE("ranks holding different data are stopped, named") {
  const auto parts = small_data(true);
  auto other = parts;
  other.train.labels[0] = 1.f - other.train.labels[0];
  auto attempt = [&] {
    tutti::run_local(2, [&](tutti::local_ring ring) {
      const auto& mine = ring.rank() == 1 ? other : parts;
      tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring> t(
          make_mf(mine.train, tutti::loss_kind::logistic), {}, ring, {}, {}, {.batch = 96});
      t.fit(mine.train, mine.test);
    });
  };
  CHECK_THROWS_WITH_AS(attempt(), doctest::Contains("dataset digest: rank(s) 1"),
                       tutti::mismatch_error);
}

TEST_CASE("per-rank JSON-lines records carry rank, epoch, step, loss, samples and seconds") {
  const auto parts = small_data(true);
  std::ostringstream out;
  tutti::json_lines_log log(out);
  train_on(2, parts, {.batch = 64, .epochs = 2, .seed = 1, .log_every = 10, .log = &log});
  std::istringstream in(out.str());
  std::string line;
  int lines = 0, rank1 = 0, events = 0;
  double samples = 0;
  while (std::getline(in, line)) {
    if (line.find("\"event\":\"learning_rate\"") != std::string::npos) {
      // The global-batch guard's record: rank 0 once, with the rate it derived.
      ++events;
      CHECK(line.find("\"rank\":0,") != std::string::npos);
      CHECK(line.find("\"global_batch\":64,") != std::string::npos);
      CHECK(line.find("\"scaling\":\"none\"") != std::string::npos);
      continue;
    }
    ++lines;
    CHECK(line.front() == '{');
    CHECK(line.back() == '}');
    for (const char* key :
         {"\"rank\":", "\"epoch\":", "\"step\":", "\"loss\":", "\"samples\":", "\"seconds\":"})
      CHECK(line.find(key) != std::string::npos);
    if (line.find("\"rank\":1") != std::string::npos) ++rank1;
    const auto at = line.find("\"samples\":") + 10;
    samples += std::stod(line.substr(at));
  }
  CHECK(events == 1);
  CHECK(lines > 4);
  CHECK(rank1 * 2 == lines);
  // The records' sample counts cover both epochs of both ranks exactly once.
  CHECK(samples == doctest::Approx(2.0 * double(parts.train.size())));
}

namespace {

using tutti_test::slice;

// owned_shards' slots, read as positions in the whole training set held by every rank.
struct owned_view_of_everything {
  tutti::owned_shards inner;
  tutti::shard shard(std::size_t, int world, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    tutti::shard s =
        inner.shard(static_cast<std::size_t>(inner.rows_of(rank)), world, rank, seed, epoch);
    s.first = 0;
    return s;
  }
};

}  // namespace

TEST_CASE("ranks holding only their own rows train exactly as ranks holding everything") {
  for (const auto loss : {tutti::loss_kind::logistic, tutti::loss_kind::squared}) {
    CAPTURE(static_cast<int>(loss));
    const auto parts = small_data(loss == tutti::loss_kind::logistic);
    const std::size_t n = parts.train.size(), m = parts.test.size();
    // Three ranks with unequal shares, so the short ranks pad their last steps.
    const std::vector<std::size_t> cut = {0, n / 5, n / 2 + 7, n};
    const std::vector<std::size_t> test_cut = {0, m / 2, m / 2, m};  // rank 1 holds no test row
    const tutti::owned_shards sampler{.rows = {cut[1] - cut[0], cut[2] - cut[1], cut[3] - cut[2]}};
    const tutti::train_options opt{.batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 8};

    run local, everything;
    std::mutex mu;
    tutti::run_local(3, [&](tutti::local_ring ring) {
      const auto r = static_cast<std::size_t>(ring.rank());
      const auto train = slice(parts.train, cut[r], cut[r + 1]);
      const auto test = slice(parts.test, test_cut[r], test_cut[r + 1]);
      tutti::trainer<mf, tutti::owned_shards, tutti::local_ring> t(make_mf(parts.train, loss),
                                                                   sampler, ring, {}, {}, opt);
      auto res = t.fit(train, test);
      if (r == 0) {
        std::lock_guard lock(mu);
        local.params = t.parameters_on_host();
        local.result = std::move(res);
      }
    });
    tutti::run_local(3, [&](tutti::local_ring ring) {
      tutti::trainer<mf, owned_view_of_everything, tutti::local_ring> t(
          make_mf(parts.train, loss), {sampler}, ring, {}, {}, opt);
      auto res = t.fit(parts.train, parts.test);
      if (ring.rank() == 0) {
        std::lock_guard lock(mu);
        everything.params = t.parameters_on_host();
        everything.result = std::move(res);
      }
    });
    CHECK(local.params == everything.params);
    for (std::size_t e = 0; e < 2; ++e) {
      CHECK(local.result.epochs[e].train_loss == everything.result.epochs[e].train_loss);
      CHECK(local.result.epochs[e].weighted_samples == double(n));
    }
    // The metric over every rank's test rows equals the metric of the whole test set.
    CHECK(std::string_view(local.result.eval.metric) == everything.result.eval.metric);
    // One name object per metric, whichever path evaluated: the pointers are equal too.
    CHECK(local.result.eval.metric == everything.result.eval.metric);
    CHECK(local.result.eval.value == doctest::Approx(everything.result.eval.value).epsilon(1e-9));
  }
}

TEST_CASE("a rank holding rows other than its sampler says is stopped, named") {
  const auto parts = small_data(true);
  const std::size_t n = parts.train.size();
  auto attempt = [&] {
    tutti::run_local(2, [&](tutti::local_ring ring) {
      const tutti::owned_shards sampler{.rows = {n / 2, n - n / 2}};
      // Rank 1 is handed one row too few.
      const auto train =
          ring.rank() == 0 ? slice(parts.train, 0, n / 2) : slice(parts.train, n / 2, n - 1);
      tutti::trainer<mf, tutti::owned_shards, tutti::local_ring> t(
          make_mf(parts.train, tutti::loss_kind::logistic), sampler, ring, {}, {}, {.batch = 96});
      t.fit(train, parts.test);
    });
  };
  CHECK_THROWS_WITH_AS(attempt(), doctest::Contains("rank 1 holds"), tutti::error);
}

TEST_CASE("gradient accumulation over K micro-batches gives the step of the whole batch") {
  const auto parts = small_data(true);
  tutti::train_options opt{
      .batch = 240, .epochs = 2, .base_lr = 0.05, .seed = 11, .evaluate_each_epoch = false};
  for (int world : {1, 3}) {
    CAPTURE(world);
    const run whole = train_on(world, parts, opt);
    for (std::size_t k : {2u, 7u}) {  // 7 does not divide the local batch: a short last one
      CAPTURE(k);
      opt.accumulation = k;
      const run micro = train_on(world, parts, opt);
      opt.accumulation = 1;
      // Only the order of float additions differs (K partial sums instead of one), the same
      // on every machine: no BLAS, the build's vectors, thread-count independent results.
      CHECK(relative_difference(micro.params, whole.params) < 1e-5);
      CHECK(micro.result.epochs.back().train_loss ==
            doctest::Approx(whole.result.epochs.back().train_loss).epsilon(1e-6));
      CHECK(micro.result.epochs.back().weighted_samples == double(parts.train.size()));
    }
  }
  opt.accumulation = 121;  // more micro-batches than the 120 samples of a rank's local batch
  CHECK_THROWS_WITH_AS(train_on(2, parts, opt), doctest::Contains("accumulation = 121"),
                       tutti::invalid_argument);
}

TEST_CASE("a global batch grown past the reference with no scaling rule is warned about") {
  const auto parts = small_data(true);
  std::mutex mu;
  std::vector<std::string> warnings;
  tutti::train_options opt{.batch = 2048, .epochs = 1, .reference_batch = 256, .seed = 1};
  opt.on_warning = [&](const std::string& w) {
    std::lock_guard lock(mu);
    warnings.push_back(w);
  };
  train_on(2, parts, opt);
  REQUIRE(warnings.size() == 1);  // rank 0 only
  CHECK(warnings[0].find("global batch 2048 (2 ranks x 1024) is 8 x the reference batch 256") !=
        std::string::npos);
  CHECK(warnings[0].find("linear scaling with warmup (lr 0.4)") != std::string::npos);
  warnings.clear();
  opt.scaling = tutti::lr_scaling::linear;
  train_on(2, parts, opt);
  CHECK(warnings.empty());
  opt.scaling = tutti::lr_scaling::none;
  opt.batch = 512;  // 2 x the reference: below the default factor of 4
  train_on(2, parts, opt);
  CHECK(warnings.empty());
}

namespace {

// Counts which of its two `step` overloads the trainer calls.
struct probe_optimizer {
  int* layout_calls;
  int* plain_calls;
  std::size_t state_size(std::size_t) const { return 0; }
  template <class Space>
  void step(const Space&, std::span<float>, std::span<const float>, std::span<float>, float,
            std::uint64_t) const {
    ++*plain_calls;
  }
  template <class Space>
  void step(const Space&, const tutti::parameter_layout& layout, std::span<float> p,
            std::span<const float>, std::span<float>, float, std::uint64_t) const {
    if (layout.total() == p.size()) ++*layout_calls;
  }
};

}  // namespace

TEST_CASE("a layout-aware optimizer (LARS, LAMB) gets the model's layout from the trainer") {
  const auto parts = small_data(true);
  int layout_calls = 0, plain_calls = 0;
  train_on(1, parts, {.batch = 256, .epochs = 1}, tutti::loss_kind::logistic, tutti::constant{},
           probe_optimizer{&layout_calls, &plain_calls});
  CHECK(layout_calls == int((parts.train.size() + 255) / 256));
  CHECK(plain_calls == 0);

  // LAMB through the trainer: W ranks equal 1 rank, and the trust ratio changes the run.
  const tutti::train_options opt{
      .batch = 240, .epochs = 2, .base_lr = 0.01, .seed = 3, .evaluate_each_epoch = false};
  const run one =
      train_on(1, parts, opt, tutti::loss_kind::logistic, tutti::constant{}, tutti::lamb{});
  const run three =
      train_on(3, parts, opt, tutti::loss_kind::logistic, tutti::constant{}, tutti::lamb{});
  const run adam = train_on(1, parts, opt, tutti::loss_kind::logistic, tutti::constant{},
                            tutti::adam{.weight_decay = 0.01f, .decoupled = true});
  CHECK(relative_difference(three.params, one.params) < 1e-5);
  CHECK(relative_difference(adam.params, one.params) > 1e-3);
  CHECK(one.result.epochs.back().train_loss < one.result.epochs.front().train_loss);
}

TEST_CASE("uneven inputs (tail none): short ranks join the last reductions, results as with pad") {
  const auto parts = small_data(true);
  REQUIRE(parts.train.size() % 3 != 0);  // some ranks hold one sample fewer
  for (int world : {3, 4}) {
    CAPTURE(world);
    tutti::train_options opt{
        .batch = 12, .epochs = 2, .base_lr = 0.05, .seed = 5, .evaluate_each_epoch = false};
    // A local batch of 3 or 4: the shorter ranks run out one step early when the share of
    // the longest rank is 1 more than a multiple of the local batch, so pick such a size.
    auto run_with = [&](tutti::tail_policy tail) {
      run out;
      std::mutex mu;
      tutti::run_local(world, [&](tutti::local_ring ring) {
        tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring> t(
            make_mf(parts.train, tutti::loss_kind::logistic), {.tail = tail}, ring, {},
            {.momentum = 0.9f}, opt);
        auto r = t.fit(parts.train, parts.test);
        if (ring.rank() == 0) {
          std::lock_guard lock(mu);
          out.params = t.parameters_on_host();
          out.result = std::move(r);
        }
      });
      return out;
    };
    const run none = run_with(tutti::tail_policy::none);
    const run pad = run_with(tutti::tail_policy::pad);
    // Padded slots contribute exactly nothing, so skipping them changes no bit.
    CHECK(none.params == pad.params);
    for (const auto& e : none.result.epochs) {
      CHECK(e.weighted_samples == double(parts.train.size()));
      std::uint64_t sum = 0;
      for (auto c : e.samples_per_rank) sum += c;
      CHECK(sum == parts.train.size());
    }
  }
}

}  // namespace test_trainer
