// SPDX-License-Identifier: Apache-2.0
// Host and CUDA spaces run the same kernels from the same source: after K training steps from
// the same seed they must hold the same parameters (within 1e-4 relative).
#include <doctest/doctest.h>

#include <tutti/space/cuda.hpp>
#include <tutti/tutti.hpp>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <vector>

namespace {

template <class Space, class Optimizer>
std::vector<float> train_parameters(const tutti::data::split_result& parts, tutti::loss_kind loss,
                                    Optimizer optimizer, double* final_loss) {
  using model = tutti::models::matrix_factorization<Space>;
  tutti::trainer<model, tutti::shuffled_shards, tutti::single_rank, tutti::warmup<tutti::cosine>,
                 Optimizer>
      t(model({.dim = 16, .l2 = 1e-3f, .loss = loss}, parts.train.n_users(), parts.train.n_items()),
        tutti::shuffled_shards{}, tutti::single_rank{},
        tutti::warmup<tutti::cosine>{.warmup_steps = 4}, optimizer,
        {.batch = 512, .epochs = 2, .base_lr = 0.02, .seed = 9});
  auto r = t.fit(parts.train, parts.test);
  *final_loss = r.epochs.back().train_loss;
  return t.parameters_on_host();
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("host and cuda spaces train to the same parameters") {
  for (bool implicit : {true, false}) {
    CAPTURE(implicit);
    auto all = tutti::data::synthetic_courses(
        {.learners = 400, .courses = 80, .interactions_per_learner = 15, .implicit = implicit});
    auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 2});
    const auto loss = implicit ? tutti::loss_kind::logistic : tutti::loss_kind::squared;
    double host_loss = 0, cuda_loss = 0;
    auto host = train_parameters<tutti::host_space>(parts, loss, tutti::adam{}, &host_loss);
    auto cuda = train_parameters<tutti::cuda_space>(parts, loss, tutti::adam{}, &cuda_loss);
    REQUIRE(host.size() == cuda.size());
    CHECK(relative_difference(cuda, host) <= 1e-4);
    CHECK(cuda_loss == doctest::Approx(host_loss).epsilon(1e-4));
    host =
        train_parameters<tutti::host_space>(parts, loss, tutti::sgd{.momentum = 0.9f}, &host_loss);
    cuda =
        train_parameters<tutti::cuda_space>(parts, loss, tutti::sgd{.momentum = 0.9f}, &cuda_loss);
    CHECK(relative_difference(cuda, host) <= 1e-4);
  }
}

namespace {

// Trains the model `make(Space{})` from seed 9 with `optimizer`; returns the parameters and
// writes the last epoch's train loss.
template <class Space, class Optimizer, class Make>
std::vector<float> train_model(const tutti::data::split_result& parts, Make make,
                               Optimizer optimizer, double* final_loss) {
  using model = decltype(make(Space{}));
  tutti::trainer<model, tutti::shuffled_shards, tutti::single_rank, tutti::warmup<tutti::cosine>,
                 Optimizer>
      t(make(Space{}), tutti::shuffled_shards{}, tutti::single_rank{},
        tutti::warmup<tutti::cosine>{.warmup_steps = 4}, optimizer,
        {.batch = 512, .epochs = 2, .base_lr = 0.02, .seed = 9, .evaluate_each_epoch = false});
  auto r = t.fit(parts.train, parts.test);
  *final_loss = r.epochs.back().train_loss;
  return t.parameters_on_host();
}

// Host and cuda runs of one model with one optimizer hold the same parameters and loss.
template <class Optimizer, class Make>
void check_parity(const tutti::data::split_result& parts, Make make, Optimizer optimizer) {
  double host_loss = 0, cuda_loss = 0;
  const auto host = train_model<tutti::host_space>(parts, make, optimizer, &host_loss);
  const auto cuda = train_model<tutti::cuda_space>(parts, make, optimizer, &cuda_loss);
  REQUIRE(host.size() == cuda.size());
  CHECK(relative_difference(cuda, host) <= 1e-4);
  CHECK(cuda_loss == doctest::Approx(host_loss).epsilon(1e-4));
}

template <class Make>
void check_every_optimizer(const tutti::data::split_result& parts, Make make) {
  SUBCASE("sgd") {
    check_parity(parts, make, tutti::sgd{.momentum = 0.9f});
  }
  SUBCASE("adam") {
    check_parity(parts, make, tutti::adam{});
  }
  SUBCASE("adamw") {
    check_parity(parts, make, tutti::adam{.weight_decay = 0.01f, .decoupled = true});
  }
  SUBCASE("lars") {
    check_parity(parts, make, tutti::lars{.weight_decay = 1e-4f});
  }
  SUBCASE("lamb") {
    check_parity(parts, make, tutti::lamb{.weight_decay = 0.01f});
  }
}

}  // namespace

TEST_CASE("every model with every optimizer: host and cuda spaces train to the same parameters") {
  auto all = tutti::data::synthetic_courses(
      {.learners = 300, .courses = 60, .interactions_per_learner = 12, .implicit = true});
  const auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 2});
  const auto users = parts.train.n_users(), items = parts.train.n_items();
  SUBCASE("matrix_factorization") {
    check_every_optimizer(parts, [&](auto space) {
      return tutti::models::matrix_factorization<decltype(space), float>(
          {.dim = 16, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, users, items, space);
    });
  }
  SUBCASE("logistic_regression") {
    check_every_optimizer(parts, [&](auto space) {
      return tutti::models::logistic_regression<decltype(space), float>(
          {.l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, users, items, space);
    });
  }
}

TEST_CASE("TUTTI_CUDA_CHECK names the call, the CUDA error and the place") {
  void* p = nullptr;
  try {
    TUTTI_CUDA_CHECK(cudaMalloc(&p, std::size_t{1} << 62));
    FAIL("an impossible allocation succeeded");
  } catch (const tutti::cuda_error& e) {
    const std::string what = e.what();
    CHECK(what.find("cudaMalloc(&p") != std::string::npos);
    CHECK(what.find("cudaErrorMemoryAllocation") != std::string::npos);
    CHECK(what.find("parity.cpp:") != std::string::npos);
  }
}

TEST_CASE("cuda space: a stopped run resumed from its checkpoint ends within 1e-6 of a whole run") {
  namespace fs = std::filesystem;
  auto parts = tutti::data::split(
      tutti::data::synthetic_courses({.learners = 300, .courses = 60, .implicit = true}),
      {.test_fraction = 0.1, .seed = 2});
  using model = tutti::models::matrix_factorization<tutti::cuda_space>;
  using trainer = tutti::trainer<model, tutti::shuffled_shards, tutti::single_rank,
                                 tutti::warmup<tutti::cosine>, tutti::adam>;
  const tutti::train_options base{.batch = 256, .epochs = 2, .base_lr = 0.02, .seed = 4};
  auto make = [&](tutti::train_options o) {
    return trainer(model({.dim = 16, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
                         parts.train.n_items()),
                   {}, {}, tutti::warmup<tutti::cosine>{.warmup_steps = 4}, {}, std::move(o));
  };
  auto whole = make(base);
  whole.fit(parts.train, parts.test);
  const auto expected = whole.parameters_on_host();

  const fs::path dir = fs::temp_directory_path() / "tutti-cuda-resume";
  fs::remove_all(dir);
  std::atomic<bool> stop{false};
  auto opt = base;
  opt.checkpoint_dir = dir.string();
  opt.stop = &stop;
  opt.on_step = [&](const tutti::step_progress& p) {
    if (p.global_step == 7) stop = true;
  };
  auto first = make(opt);
  CHECK_THROWS_AS(first.fit(parts.train, parts.test), tutti::interrupted_error);
  const auto found = tutti::find_latest_checkpoint(dir);
  REQUIRE(found);
  auto again_opt = base;
  again_opt.resume = &found->state;
  auto again = make(again_opt);
  again.fit(parts.train, parts.test);
  CHECK(relative_difference(again.parameters_on_host(), expected) <= 1e-6);
  fs::remove_all(dir);
}

namespace {

// One rank of 4 micro-batches per step measures the noise scale every `every` steps; returns
// the parameters and writes the run's estimate.
template <class Space>
std::vector<float> train_noise(const tutti::data::split_result& parts, std::size_t every,
                               tutti::noise_scale_estimate* estimate) {
  using model = tutti::models::matrix_factorization<Space>;
  tutti::trainer<model, tutti::shuffled_shards, tutti::single_rank, tutti::cosine, tutti::adam> t(
      model({.dim = 16, .l2 = 1e-3f, .loss = tutti::loss_kind::squared}, parts.train.n_users(),
            parts.train.n_items()),
      tutti::shuffled_shards{}, tutti::single_rank{}, tutti::cosine{}, tutti::adam{},
      {.batch = 512,
       .epochs = 2,
       .base_lr = 0.02,
       .seed = 9,
       .evaluate_each_epoch = false,
       .accumulation = 4,
       .noise_scale_every = every});
  *estimate = t.fit(parts.train, parts.test).noise_scale;
  return t.parameters_on_host();
}

}  // namespace

TEST_CASE("cuda space: the gradient noise scale is the host's, and measuring it only reads") {
  auto all = tutti::data::synthetic_courses(
      {.learners = 400, .courses = 80, .interactions_per_learner = 15, .implicit = false});
  auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 2});
  tutti::noise_scale_estimate host{}, cuda{}, off{};
  const auto host_params = train_noise<tutti::host_space>(parts, 2, &host);
  const auto cuda_params = train_noise<tutti::cuda_space>(parts, 2, &cuda);
  const auto cuda_off = train_noise<tutti::cuda_space>(parts, 0, &off);
  REQUIRE(host.measurements > 0);
  CHECK(cuda.measurements == host.measurements);
  CHECK(off.measurements == 0);
  CHECK(cuda_params == cuda_off);  // bit for bit: the measurement only reads
  CHECK(relative_difference(cuda_params, host_params) <= 1e-4);
  // The same gradients within float rounding: the smoothed squared norms agree closely; their
  // difference, |G|², and the ratio somewhat less so.
  CHECK(cuda.trace == doctest::Approx(host.trace).epsilon(1e-2));
  CHECK(cuda.grad_sq == doctest::Approx(host.grad_sq).epsilon(5e-2));
  CHECK(cuda.bounded() == host.bounded());
  if (host.known() && cuda.known())
    CHECK(cuda.b_simple == doctest::Approx(host.b_simple).epsilon(5e-2));
}

TEST_CASE("the row-sparse step: host and cuda spaces train to the same parameters") {
  // On the device the rows are found, checked, updated and zeroed by kernels that never read a
  // count back; the host's row step is the reference.
  auto all = tutti::data::synthetic_courses(
      {.learners = 400, .courses = 80, .interactions_per_learner = 15, .implicit = true});
  const auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 2});
  const auto loss = tutti::loss_kind::logistic;
  auto check = [&](auto optimizer) {
    double host_loss = 0, cuda_loss = 0;
    const auto host = train_parameters<tutti::host_space>(parts, loss, optimizer, &host_loss);
    const auto cuda = train_parameters<tutti::cuda_space>(parts, loss, optimizer, &cuda_loss);
    REQUIRE(host.size() == cuda.size());
    CHECK(relative_difference(cuda, host) <= 1e-4);
    CHECK(cuda_loss == doctest::Approx(host_loss).epsilon(1e-4));
  };
  SUBCASE("lazy_adam") {
    check(tutti::lazy_adam{});
  }
  SUBCASE("rowwise_adagrad") {
    check(tutti::rowwise_adagrad{});
  }
  SUBCASE("row_sparse_sgd") {
    check(tutti::row_sparse_sgd{.momentum = 0.9f});
  }
}

TEST_CASE("cuda space: the shuffled shard written on the device is shard_from's, slot for slot") {
  const tutti::cuda_space space;
  for (auto tail : {tutti::tail_policy::pad, tutti::tail_policy::none})
    for (std::size_t n : {1, 1001, 300000})
      for (int world : {1, 3})
        for (int r = 0; r < world; ++r) {
          CAPTURE(n);
          CAPTURE(world);
          CAPTURE(r);
          const tutti::shuffled_shards sampler{.tail = tail};
          const auto whole = sampler.shard_from(n, world, r, 5, 2, n / 4);
          tutti::buffer<std::uint64_t, tutti::cuda_space> indices(whole.size(), space);
          tutti::buffer<float, tutti::cuda_space> weights(whole.size(), space);
          sampler.fill_on_space(space, n, world, r, 5, 2, n / 4, indices.data(), weights.data());
          CHECK(tutti::to_host_vector(space, indices.span()) == whole.indices);
          CHECK(tutti::to_host_vector(space, weights.span()) == whole.weights_in(0, whole.size()));
        }
}

TEST_CASE(
    "cuda space: the row-sparse step replayed from a CUDA Graph gives the bits of the step "
    "run kernel by kernel") {
  // The same kernels either way: replayed, they read the step's slots, log entry and rate from
  // device memory; a value frozen at capture would move the parameters.
  auto all = tutti::data::synthetic_courses(
      {.learners = 400, .courses = 80, .interactions_per_learner = 15, .implicit = true});
  const auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 2});
  using model = tutti::models::matrix_factorization<tutti::cuda_space>;
  using schedule = tutti::warmup<tutti::cosine>;
  auto run = [&](bool graphs, std::vector<float>& params) {
    tutti::trainer<model, tutti::shuffled_shards, tutti::single_rank, schedule, tutti::lazy_adam> t(
        model({.dim = 16, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
              parts.train.n_items()),
        {}, {}, schedule{.warmup_steps = 4}, tutti::lazy_adam{},
        {.batch = 512, .epochs = 2, .base_lr = 0.02, .seed = 9, .step_graphs = graphs});
    auto r = t.fit(parts.train, parts.test);
    params = t.parameters_on_host();
    return r;
  };
  std::vector<float> one_by_one, replayed;
  const auto a = run(false, one_by_one);
  const auto b = run(true, replayed);
  CHECK(a.replayed_steps == 0);
  INFO("refused: " << b.step_graph_refused);
  CHECK(b.step_graph_refused.empty());
  CHECK(b.replayed_steps == 2 * (parts.train.size() / 512) - 1);
  CHECK(b.parameters_checksum == a.parameters_checksum);
  CHECK(replayed == one_by_one);
}
