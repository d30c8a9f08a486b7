// SPDX-License-Identifier: Apache-2.0
// The NCCL reducer: one rank equals the no-op reducer, with and without the overlapped
// reduction; with two or more GPUs, the mean is exact and a failing rank ends every rank with
// an error that names it.
#include <doctest/doctest.h>

#include <tutti/reducers/nccl_ring.hpp>
#include <tutti/tutti.hpp>

#include "../skip.hpp"

static_assert(tutti::check_gradient_reducer<tutti::nccl_ring>());
static_assert(tutti::reducer_starts_collectives<tutti::nccl_ring>);

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace {

template <class Reducer>
std::vector<float> train_with(Reducer reducer, const tutti::data::split_result& parts,
                              tutti::cuda_space space, bool overlap = false) {
  using model = tutti::models::matrix_factorization<tutti::cuda_space>;
  tutti::train_options opt{.batch = 256, .epochs = 2, .base_lr = 0.02, .seed = 5};
  opt.overlap_reduce = overlap;
  opt.bucket_bytes = 4 << 10;  // many buckets: started while backward runs on the stream
  tutti::trainer<model, tutti::shuffled_shards, Reducer, tutti::constant, tutti::adam> t(
      model({.dim = 8, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
            parts.train.n_items(), space),
      {}, reducer, {}, {}, opt);
  t.fit(parts.train, parts.test);
  return t.parameters_on_host();
}

}  // namespace

TEST_CASE("nccl_ring with one rank trains exactly like single_rank") {
  auto all = tutti::data::synthetic_courses(
      {.learners = 300, .courses = 60, .interactions_per_learner = 10, .seed = 4});
  auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 1});
  const auto reference = train_with(tutti::single_rank{}, parts, tutti::cuda_space{});
  std::vector<float> with_nccl;
  tutti::run_nccl(
      1, [&](tutti::nccl_ring& ring) { with_nccl = train_with(ring, parts, ring.space()); });
  REQUIRE(with_nccl.size() == reference.size());
  // ncclAvg over one rank is the identity: the runs must agree bit for bit.
  CHECK(with_nccl == reference);
}

TEST_CASE(
    "nccl_ring with one rank: the overlapped reduction (buckets started on the "
    "communication stream during backward) equals the plain one bitwise") {
  auto all = tutti::data::synthetic_courses(
      {.learners = 300, .courses = 60, .interactions_per_learner = 10, .seed = 4});
  auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 1});
  std::vector<float> plain, overlapped;
  tutti::run_nccl(1, [&](tutti::nccl_ring& ring) {
    plain = train_with(ring, parts, ring.space());
    overlapped = train_with(ring, parts, ring.space(), true);
  });
  REQUIRE(overlapped.size() == plain.size());
  CHECK(overlapped == plain);
}

TEST_CASE("nccl_ring: scalar reductions and gathers on one rank") {
  tutti::run_nccl(1, [&](tutti::nccl_ring& ring) {
    std::vector<double> v{1.5, -2.0};
    ring.all_reduce_sum(v);
    CHECK(v == std::vector<double>{1.5, -2.0});
    std::vector<std::uint64_t> mine{7, 9}, all(2);
    ring.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
    CHECK(all == mine);
  });
}

TEST_CASE("nccl_ring: the communication stream at the device's greatest priority, or default") {
  int least = 0, greatest = 0;
  REQUIRE(cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
  for (const bool high : {true, false}) {
    CAPTURE(high);
    tutti::run_nccl(
        1,
        [&](tutti::nccl_ring& ring) {
          int priority = 1;
          REQUIRE(cudaStreamGetPriority(ring.comm_stream(), &priority) == cudaSuccess);
          CHECK(priority == (high ? greatest : 0));
        },
        tutti::nccl_options{.high_priority_stream = high});
  }
}

TEST_CASE("nccl_ring across GPUs: exact mean, and a failing rank is named on every rank") {
  const int gpus = tutti::cuda_device_count();
  if (gpus < 2)
    TUTTI_TEST_SKIP("needs 2 GPUs (NCCL allows one rank per GPU); " << gpus << " visible");
  const int world = gpus > 4 ? 4 : gpus;
  tutti::run_nccl(world, [&](tutti::nccl_ring& ring) {
    const std::size_t n = 1000003;
    std::vector<float> host(n);
    for (std::size_t i = 0; i < n; ++i) host[i] = float(ring.rank() + 1 + int(i % 7));
    const tutti::cuda_space& space = ring.space();
    auto d = tutti::make_buffer(space, std::span<const float>(host));
    ring.all_reduce_mean(d.span());
    auto out = tutti::to_host_vector(space, d.span());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (std::fabs(out[i] - (float(world + 1) / 2 + float(i % 7))) > 1e-5f) ++wrong;
    CHECK(wrong == 0);
  });
  CHECK_THROWS_WITH_AS(tutti::run_nccl(world,
                                       [&](tutti::nccl_ring& ring) {
                                         std::vector<double> v{1.0};
                                         ring.all_reduce_sum(v);
                                         if (ring.rank() == 1) throw std::runtime_error("injected");
                                         ring.all_reduce_sum(v);  // the others wait here
                                       }),
                       "injected", std::runtime_error);
}

TEST_CASE("TUTTI_NCCL_CHECK names the call and NCCL's error") {
  try {
    TUTTI_NCCL_CHECK(ncclCommInitRank(nullptr, 0, ncclUniqueId{}, 0));
    FAIL("an invalid ncclCommInitRank succeeded");
  } catch (const tutti::nccl_error& e) {
    const std::string what = e.what();
    CHECK(what.find("ncclCommInitRank(nullptr") != std::string::npos);
    CHECK(what.find("nccl.cpp:") != std::string::npos);
  }
}
