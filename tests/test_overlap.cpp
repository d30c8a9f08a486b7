// SPDX-License-Identifier: Apache-2.0
// Overlapped, bucketed reduction: models report final gradient ranges during backward, a
// communication thread reduces buckets as they complete, and the result equals the plain path
// (bitwise with 2 ranks; to the order of float sums with 3). Accumulation, compression, the
// finite guard and a failing rank still behave.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"
#include "skip.hpp"
#include "wrapped_model.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if __has_include(<cblas.h>)
#include <tutti/models/neural_cf.hpp>
#endif

#if defined(__linux__)
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace test_overlap {

namespace {

using tutti_test::check_replicas_agree;
using tutti_test::count_differing;
using tutti_test::rank_run;
using tutti_test::train_ranks;
using mf = tutti::models::matrix_factorization<tutti::host_space>;

tutti::data::interactions course_rows(std::int32_t learners, std::int32_t courses) {
  auto all = tutti::data::synthetic_courses({.learners = learners,
                                             .courses = courses,
                                             .interactions_per_learner = 6,
                                             .implicit = true,
                                             .seed = 23});
  return tutti::data::split(all, {.test_fraction = 0.1, .seed = 5}).train;
}

mf make_mf(const tutti::data::interactions& d, std::int32_t dim = 16) {
  return mf({.dim = dim, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, d.n_users(),
            d.n_items());
}

// Records a model's reports and checks them against its layout: every value of every segment
// exactly once, nothing else, each report inside one segment, and the reports' starts never
// increasing (backward runs from the end of the arena).
struct report_log {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  void operator()(std::size_t offset, std::size_t count) { ranges.emplace_back(offset, count); }

  void check_covers(const tutti::parameter_layout& layout) const {
    std::vector<int> seen(layout.total(), 0);
    std::size_t previous = layout.total();
    for (const auto& [o, c] : ranges) {
      CHECK(o <= previous);
      previous = o;
      bool inside_one = false;
      for (const auto& s : layout.segments())
        inside_one = inside_one || (o >= s.offset && o + c <= s.offset + s.size());
      CHECK(inside_one);
      for (std::size_t i = o; i < o + c; ++i) ++seen[i];
    }
    for (const auto& s : layout.segments())
      for (std::size_t i = s.offset; i < s.offset + s.size(); ++i) REQUIRE(seen[i] == 1);
  }
};

tutti::batch_view view_of(const tutti::data::interactions& d, std::size_t n,
                          std::vector<float>& weights) {
  weights.assign(n, 1.f);
  weights[n / 3] = 0.f;  // a padding slot in the middle
  return {{d.users.data(), n}, {d.items.data(), n}, {d.labels.data(), n}, {weights.data(), n}};
}

// Matrix factorisation that turns one gradient value non-finite on one rank at one call: in the
// first row of the user table that call touched, written before that row is reported final.
class poisoned_mf : public tutti_test::wrapped_model<mf> {
 public:
  poisoned_mf(mf inner, int poison_rank, std::size_t poison_call, int rank)
      : wrapped_model(std::move(inner)),
        m_poison_rank(poison_rank),
        m_call(poison_call),
        m_rank(rank) {}

  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum) {
    m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
    if (poison_now()) grads[poisoned_index(batch)] = std::numeric_limits<float>::quiet_NaN();
    ++m_calls;
  }
  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum,
                         const tutti::gradient_ready& ready) {
    const bool poison = poison_now();
    const std::size_t at = poison ? poisoned_index(batch) : 0;
    auto hook = [&](std::size_t offset, std::size_t count) {
      if (poison && at >= offset && at < offset + count)
        grads[at] = std::numeric_limits<float>::quiet_NaN();
      ready(offset, count);
    };
    m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum, tutti::gradient_ready(hook));
    ++m_calls;
  }

 private:
  bool poison_now() const { return m_rank == m_poison_rank && m_calls == m_call; }
  std::size_t poisoned_index(const tutti::batch_view& batch) const {
    std::int32_t row = std::numeric_limits<std::int32_t>::max();
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (batch.weights[i] != 0.f) row = std::min(row, batch.users[i]);
    return layout()[0].offset + static_cast<std::size_t>(row) * layout()[0].cols;
  }

  int m_poison_rank;
  std::size_t m_call;
  int m_rank;
  std::size_t m_calls = 0;
};

// Matrix factorisation whose report of one range fails on one rank, mid-backward, after some
// buckets have left.
class failing_mf : public tutti_test::wrapped_model<mf> {
 public:
  failing_mf(mf inner, int rank) : wrapped_model(std::move(inner)), m_rank(rank) {}
  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum) {
    m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
  }
  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum,
                         const tutti::gradient_ready& ready) {
    std::size_t reports = 0;
    auto hook = [&](std::size_t offset, std::size_t count) {
      if (m_rank == 1 && ++m_calls > 2 && ++reports == 4)
        throw std::runtime_error("injected failure in backward on rank 1");
      ready(offset, count);
    };
    m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum, tutti::gradient_ready(hook));
  }

 private:
  int m_rank;
  std::size_t m_calls = 0;
};

// A reducer that starts collectives and completes them all in `finish_started`: a host stand-in
// for nccl_ring's event-ordered communication stream, so the trainer's thread-less path runs
// here. Started spans must stay untouched until then, as on a GPU the compute stream must not
// write them while NCCL reads them.
class deferred_ring : public tutti_test::ring_forwarder {
 public:
  deferred_ring(tutti::local_ring ring, std::size_t* most_started)
      : ring_forwarder(ring), m_most(most_started) {}
  template <class T>
  void all_reduce_mean(std::span<T> g) {
    REQUIRE(m_started.empty());
    m_ring.all_reduce_mean(g);
  }
  void start_all_reduce_mean(std::span<float> g) {
    m_started.emplace_back(g, std::vector<float>(g.begin(), g.end()));
    *m_most = std::max(*m_most, m_started.size());
  }
  void finish_started() {
    for (auto& [g, copy] : m_started) {
      CHECK(std::equal(g.begin(), g.end(), copy.begin()));  // nobody wrote it since
      m_ring.all_reduce_mean(g);
    }
    m_started.clear();
  }

 private:
  std::size_t* m_most;
  std::vector<std::pair<std::span<float>, std::vector<float>>> m_started;
};

}  // namespace

TEST_CASE(
    "gradient_ready: matrix factorisation reports every value once, from the arena's end, "
    "and its gradient does not change") {
  // 5000 learners at dim 32: the user table is reported in three pieces of 2048 rows.
  const auto d = course_rows(5000, 300);
  auto model = make_mf(d, 32);
  std::vector<float> params(model.layout().total());
  model.initialize(params, 7);
  std::vector<float> weights;
  const auto batch = view_of(d, 4096, weights);
  std::vector<float> plain(params.size(), 0.f), reported(params.size(), 0.f);
  float loss_plain = 0, loss_reported = 0;
  model.loss_and_gradient(params, batch, plain, 0.5f, &loss_plain);
  report_log log;
  model.loss_and_gradient(params, batch, reported, 0.5f, &loss_reported,
                          tutti::gradient_ready(log));
  CHECK(reported == plain);
  CHECK(loss_reported == loss_plain);
  log.check_covers(model.layout());
  std::size_t user_pieces = 0;
  for (const auto& [o, c] : log.ranges)
    if (o < model.layout()[1].offset) ++user_pieces;
  CHECK(user_pieces == 3);
  // An empty batch reports everything too (nothing will be written).
  report_log empty;
  model.loss_and_gradient(params, tutti::batch_view{}, reported, 1.f, nullptr,
                          tutti::gradient_ready(empty));
  empty.check_covers(model.layout());
}

#if __has_include(<cblas.h>)
TEST_CASE(
    "gradient_ready: neural_cf reports its layers last to first, then its tables, and its "
    "gradient does not change") {
  const auto d = course_rows(3000, 200);
  tutti::models::neural_cf<tutti::host_space> model(
      {.gmf_dim = 8, .layers = {32, 16}, .loss = tutti::loss_kind::logistic}, d.n_users(),
      d.n_items());
  std::vector<float> params(model.layout().total());
  model.initialize(params, 3);
  std::vector<float> weights;
  const auto batch = view_of(d, 1024, weights);
  std::vector<float> plain(params.size(), 0.f), reported(params.size(), 0.f);
  float loss_plain = 0, loss_reported = 0;
  model.loss_and_gradient(params, batch, plain, 1.f, &loss_plain);
  report_log log;
  model.loss_and_gradient(params, batch, reported, 1.f, &loss_reported, tutti::gradient_ready(log));
  CHECK(reported == plain);
  CHECK(loss_reported == loss_plain);
  log.check_covers(model.layout());
  REQUIRE(log.ranges.size() >= 2);
  CHECK(log.ranges[0].first == model.layout().find("output_bias").offset);
}
#else
TEST_CASE(
    "gradient_ready: neural_cf reports its layers last to first, then its tables, and its "
    "gradient does not change") {
  TUTTI_TEST_SKIP("no <cblas.h> in this build: neural_cf is compiled out");
}
#endif

TEST_CASE("bucket pipeline: buckets cut from the arena's end, padding ready, bad reports refused") {
  tutti::parameter_layout layout;
  layout.add("table", 10, 10, tutti::segment_kind::embedding);  // 100 values, 12 of padding
  layout.add("bias", 1, 1, tutti::segment_kind::bias);          // at 112, 15 of padding
  REQUIRE(layout.total() == 128);
  std::vector<float> grads(layout.total(), 1.f);
  tutti::single_rank alone;
  std::vector<std::pair<std::size_t, std::size_t>> checked;
  tutti::detail::bucket_pipeline<tutti::single_rank> p(
      alone, grads.data(), layout, 48,
      [&](std::size_t begin, std::size_t end) { checked.emplace_back(begin, end); });
  REQUIRE(p.buckets() == 3);
  CHECK(p.bucket_range(0) == std::pair<std::size_t, std::size_t>{80, 128});
  CHECK(p.bucket_range(1) == std::pair<std::size_t, std::size_t>{32, 80});
  CHECK(p.bucket_range(2) == std::pair<std::size_t, std::size_t>{0, 32});
  using range = std::pair<std::size_t, std::size_t>;
  p.begin_step();
  p.ready(112, 1);
  CHECK(checked.empty());  // bucket 0 still waits for the table's rows 8 and 9
  p.ready(50, 50);         // completes bucket 0, which leaves
  CHECK(checked == std::vector<range>{{80, 128}});
  p.ready(0, 50);
  p.finish();
  CHECK(checked == std::vector<range>{{80, 128}, {32, 80}, {0, 32}});

  checked.clear();
  p.begin_step();
  p.ready(0, 50);  // bucket 2 is complete, but leaves only after buckets 0 and 1
  CHECK(checked.empty());
  p.ready(112, 1);
  CHECK_THROWS_WITH_AS(p.ready(112, 1), doctest::Contains("reported final twice"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(p.ready(95, 10), doctest::Contains("or padding between segments"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(p.ready(120, 20), doctest::Contains("outside the gradient arena"),
                       tutti::invalid_argument);
  p.finish();  // what was not reported leaves now, checked like the rest
  CHECK(checked == std::vector<range>{{80, 128}, {32, 80}, {0, 32}});

  // A last bucket of 10 values: split off the bucket before it, leaving after it.
  checked.clear();
  tutti::detail::bucket_pipeline<tutti::single_rank> q(
      alone, grads.data(), layout, 48,
      [&](std::size_t begin, std::size_t end) { checked.emplace_back(begin, end); }, std::nullopt,
      10);
  REQUIRE(q.buckets() == 4);
  CHECK(q.bucket_range(2) == range{10, 32});
  CHECK(q.bucket_range(3) == range{0, 10});
  q.begin_step();
  q.ready(10, 90);  // buckets 1 and 2 complete; 0 waits for the bias
  CHECK(checked.empty());
  q.ready(112, 1);
  CHECK(checked == std::vector<range>{{80, 128}, {32, 80}, {10, 32}});
  q.ready(0, 10);  // the last bucket leaves as soon as its values are final
  CHECK(checked == std::vector<range>{{80, 128}, {32, 80}, {10, 32}, {0, 10}});
  q.finish();
  CHECK(checked.size() == 4);
  // A last bucket no smaller than what is left changes nothing.
  tutti::detail::bucket_pipeline<tutti::single_rank> same(alone, grads.data(), layout, 48, {},
                                                          std::nullopt, 32);
  CHECK(same.buckets() == 3);
}

TEST_CASE("overlapped reduction: 2 and 3 ranks equal the plain path bitwise") {
  const auto train = course_rows(3000, 300);
  tutti::train_options opt{
      .batch = 516, .epochs = 2, .base_lr = 0.05, .seed = 9, .evaluate_each_epoch = false};
  const auto make = [&](int) {
    return make_mf(train);
  };
  for (const int world : {2, 3}) {
    CAPTURE(world);
    const auto plain = train_ranks<mf>(world, train, opt, make);
    auto o = opt;
    o.overlap_reduce = true;
    o.bucket_bytes = 16 << 10;  // many buckets: the tables leave in pieces
    const auto overlapped = train_ranks<mf>(world, train, o, make);
    check_replicas_agree(overlapped);
    // Exact by construction: local_ring adds every value in rank order, so a bucket (a
    // sub-span) is reduced to the bits the whole arena's reduce gives it.
    CHECK(count_differing(overlapped[0].params, plain[0].params) == 0);
    const auto& l = overlapped[0].result.ledger;
    CHECK(overlapped[0].result.bytes_reduced_per_step == plain[0].result.bytes_reduced_per_step);
    CHECK(l.reduce_total.mean > 0);
    CHECK(l.reduce_exposed.mean <= l.reduce_total.mean);
    // Large buckets with a small last one split off (and none): the same results.
    o.bucket_bytes = 64 << 10;
    for (const std::size_t last : {std::size_t{4} << 10, std::size_t{0}}) {
      CAPTURE(last);
      o.last_bucket_bytes = last;
      const auto split = train_ranks<mf>(world, train, o, make);
      check_replicas_agree(split);
      CHECK(count_differing(split[0].params, plain[0].params) == 0);
    }
  }
}

TEST_CASE(
    "overlapped reduction: with accumulation and with compressed<local_ring, bf16>, equal "
    "to the plain path bitwise on 2 ranks") {
  const auto train = course_rows(2000, 200);
  tutti::train_options opt{.batch = 384,
                           .epochs = 2,
                           .base_lr = 0.05,
                           .seed = 4,
                           .evaluate_each_epoch = false,
                           .accumulation = 3};
  const auto make = [&](int) {
    return make_mf(train);
  };
  auto o = opt;
  o.overlap_reduce = true;
  o.bucket_bytes = 8 << 10;
  CHECK(train_ranks<mf>(2, train, o, make)[0].params ==
        train_ranks<mf>(2, train, opt, make)[0].params);

  const auto bf16 = [](tutti::local_ring r) {
    return tutti::compressed<tutti::local_ring>(r);
  };
  opt.accumulation = o.accumulation = 1;
  const auto plain = train_ranks<mf>(2, train, opt, make, tutti::sgd{.momentum = 0.9f}, bf16);
  const auto overlapped = train_ranks<mf>(2, train, o, make, tutti::sgd{.momentum = 0.9f}, bf16);
  check_replicas_agree(overlapped);
  CHECK(overlapped[0].params == plain[0].params);
}

#if __has_include(<cblas.h>)
TEST_CASE("overlapped reduction: neural_cf on 2 and 3 ranks equals the plain path bitwise") {
  using ncf = tutti::models::neural_cf<tutti::host_space>;
  const auto train = course_rows(1500, 150);
  tutti::train_options opt{
      .batch = 258, .epochs = 1, .base_lr = 0.05, .seed = 2, .evaluate_each_epoch = false};
  const auto make = [&](int) {
    return ncf({.gmf_dim = 8, .layers = {16, 8}, .loss = tutti::loss_kind::logistic},
               train.n_users(), train.n_items());
  };
  auto o = opt;
  o.overlap_reduce = true;
  o.bucket_bytes = 4 << 10;
  // Exact by construction: each bucket's values are added in rank order, as in the plain
  // reduce, whatever the BLAS kernel made of the gradients.
  for (const int world : {2, 3}) {
    CAPTURE(world);
    CHECK(count_differing(train_ranks<ncf>(world, train, o, make)[0].params,
                          train_ranks<ncf>(world, train, opt, make)[0].params) == 0);
  }
}
#else
TEST_CASE("overlapped reduction: neural_cf on 2 and 3 ranks equals the plain path bitwise") {
  TUTTI_TEST_SKIP("no <cblas.h> in this build: neural_cf is compiled out");
}
#endif

TEST_CASE(
    "overlapped reduction: a reducer that starts collectives itself (the nccl_ring path) "
    "gets every bucket during backward and equals the plain path bitwise on 2 ranks") {
  const auto train = course_rows(2000, 200);
  tutti::train_options opt{
      .batch = 512, .epochs = 2, .base_lr = 0.05, .seed = 8, .evaluate_each_epoch = false};
  const auto make = [&](int) {
    return make_mf(train);
  };
  const auto plain = train_ranks<mf>(2, train, opt, make);
  std::size_t most[2] = {0, 0};
  opt.overlap_reduce = true;
  opt.bucket_bytes = 16 << 10;
  const auto started =
      train_ranks<mf>(2, train, opt, make, tutti::sgd{.momentum = 0.9f},
                      [&](tutti::local_ring r) { return deferred_ring(r, &most[r.rank()]); });
  check_replicas_agree(started);
  CHECK(started[0].params == plain[0].params);
  // About 2000 learners x 16 floats and the rest: 9 or more buckets of 16 KiB, all started
  // before the step waits.
  CHECK(most[0] >= 8);
  CHECK(most[1] == most[0]);
}

TEST_CASE("overlapped reduction: a NaN on one of four ranks skips the step everywhere, named") {
  const auto train = course_rows(1200, 200);
  tutti::train_options opt{
      .batch = 256, .epochs = 1, .base_lr = 0.05, .seed = 6, .evaluate_each_epoch = false};
  const auto make = [&](int rank) {
    return poisoned_mf(make_mf(train), 2, 3, rank);
  };
  const auto plain = train_ranks<poisoned_mf>(4, train, opt, make);
  opt.overlap_reduce = true;
  opt.bucket_bytes = 8 << 10;
  const auto overlapped = train_ranks<poisoned_mf>(4, train, opt, make);
  for (const auto& r : overlapped) {
    CHECK(r.result.skipped_steps == 1);
    REQUIRE(r.result.nonfinite.size() == 1);
    CHECK(r.result.nonfinite[0].rank == 2);
    CHECK(r.result.nonfinite[0].global_step == 3);
    CHECK(std::all_of(r.params.begin(), r.params.end(), [](float v) { return std::isfinite(v); }));
  }
  check_replicas_agree(overlapped);
  CHECK(count_differing(overlapped[0].params, plain[0].params) == 0);  // rank-order sums
}

TEST_CASE("overlapped reduction: a rank failing mid-backward ends every rank with its error") {
  const auto train = course_rows(1500, 200);
  tutti::train_options opt{.batch = 256,
                           .epochs = 1,
                           .base_lr = 0.05,
                           .seed = 1,
                           .evaluate_each_epoch = false,
                           .overlap_reduce = true,
                           .bucket_bytes = 4 << 10};
  const auto make = [&](int rank) {
    return failing_mf(make_mf(train), rank);
  };
  CHECK_THROWS_WITH(train_ranks<failing_mf>(2, train, opt, make),
                    doctest::Contains("injected failure in backward on rank 1"));
}

TEST_CASE(
    "overlapped reduction: refused with the sparse exchange and with a bucket under a float") {
  const auto train = course_rows(300, 50);
  tutti::train_options opt{.batch = 64, .epochs = 1, .overlap_reduce = true};
  opt.sparse_exchange = tutti::sparse_exchange_policy::on;
  CHECK_THROWS_WITH_AS(train_ranks<mf>(2, train, opt, [&](int) { return make_mf(train); }),
                       doctest::Contains("overlap_reduce with sparse_exchange"),
                       tutti::invalid_argument);
  opt.sparse_exchange = tutti::sparse_exchange_policy::off;
  opt.bucket_bytes = 2;
  CHECK_THROWS_WITH_AS(train_ranks<mf>(2, train, opt, [&](int) { return make_mf(train); }),
                       doctest::Contains("bucket_bytes = 2"), tutti::invalid_argument);
}

#if defined(__linux__)
namespace {

// Whether this process may set a thread's nice value to `nice` below 0: CAP_SYS_NICE in its
// effective set (/proc/self/status), or an RLIMIT_NICE of 20 - nice or more.
bool may_lower_nice_to(int nice) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("CapEff:", 0) == 0 &&
        (std::stoull(line.substr(7), nullptr, 16) >> 23 & 1) != 0)  // CAP_SYS_NICE is bit 23
      return true;
  rlimit limit{};
  return ::getrlimit(RLIMIT_NICE, &limit) == 0 &&
         (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= rlim_t(20 - nice));
}

}  // namespace

// tests/extra.cmake also runs this case without the privilege (setpriv to nobody, or
// RLIMIT_NICE 0), with TUTTI_TEST_EXPECT_NICE_REFUSED=1, so both outcomes are checked in CI.
TEST_CASE(
    "overlapped reduction: the communication thread runs at the nice value asked for, or the "
    "run warns why not, the result is the plain path's either way") {
  const auto train = course_rows(1500, 200);
  tutti::train_options opt{
      .batch = 384, .epochs = 1, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  const auto make = [&](int) {
    return make_mf(train);
  };
  const auto plain = train_ranks<mf>(2, train, opt, make);
  CHECK_FALSE(plain[0].result.comm_thread_nice.has_value());  // no thread, nothing to report

  std::vector<std::string> warnings;
  opt.on_warning = [&](const std::string& w) {
    warnings.push_back(w);
  };
  opt.overlap_reduce = true;
  opt.bucket_bytes = 8 << 10;
  errno = 0;
  const int inherited = ::getpriority(PRIO_PROCESS, 0);
  REQUIRE(errno == 0);

  // Raising the nice value (a lower priority) is allowed to everyone.
  opt.comm_thread_nice = std::min(inherited + 5, 19);
  auto runs = train_ranks<mf>(2, train, opt, make);
  for (const auto& r : runs) CHECK(r.result.comm_thread_nice == opt.comm_thread_nice);
  CHECK(warnings.empty());
  CHECK(runs[0].params == plain[0].params);

  // Without a request the thread keeps the process's value.
  opt.comm_thread_nice = std::nullopt;
  runs = train_ranks<mf>(2, train, opt, make);
  for (const auto& r : runs) CHECK(r.result.comm_thread_nice == inherited);
  CHECK(warnings.empty());
  CHECK(runs[0].params == plain[0].params);

  // The default, -10, needs the privilege; without it the run goes on at the inherited value
  // and rank 0 says why (once).
  opt.comm_thread_nice = tutti::train_options{}.comm_thread_nice;
  REQUIRE(opt.comm_thread_nice == -10);
  const bool granted = may_lower_nice_to(-10) || inherited <= -10;
  if (const char* e = std::getenv("TUTTI_TEST_EXPECT_NICE_REFUSED"); e && *e == '1')
    REQUIRE_FALSE(granted);
  runs = train_ranks<mf>(2, train, opt, make);
  CHECK(runs[0].params == plain[0].params);
  if (granted) {
    for (const auto& r : runs) CHECK(r.result.comm_thread_nice == -10);
    CHECK(warnings.empty());
  } else {
    for (const auto& r : runs) CHECK(r.result.comm_thread_nice == inherited);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("communication thread runs at nice " + std::to_string(inherited) +
                           ", not the -10 asked for") != std::string::npos);
    CHECK(warnings[0].find("CAP_SYS_NICE") != std::string::npos);
  }

  opt.comm_thread_nice = 20;
  CHECK_THROWS_WITH_AS(train_ranks<mf>(2, train, opt, make),
                       doctest::Contains("comm_thread_nice = 20; expected a nice value from -20"),
                       tutti::invalid_argument);
}
#endif

}  // namespace test_overlap
