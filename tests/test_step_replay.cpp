// SPDX-License-Identifier: Apache-2.0
// The device step recorded once and replayed (a CUDA Graph on a GPU), run here on
// tutti_test::replaying_host_space: a replay's kernels keep the arguments they were recorded
// with, as a captured graph's do, so a value that changes from step to step and reaches a kernel
// by argument (the step's slots, its log entry, the rate, Adam's bias corrections) would stay the
// recorded step's and move the parameters. The runs below must give the bits of the same run
// whose kernels run one by one (tutti_test::opaque_host_space).
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "../apps/tutti/run_policies.hpp"
#include "rank_runs.hpp"
#include "spaces.hpp"

#include <atomic>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace test_step_replay {

namespace {

using tutti_test::implicit_courses;
using tutti_test::opaque_host_space;
using tutti_test::replaying_host_space;

static_assert(tutti::space_captures_steps<replaying_host_space>);
static_assert(!tutti::space_captures_steps<opaque_host_space>);
static_assert(tutti::optimizer_steps_rows_from_memory<tutti::lazy_adam, replaying_host_space>);
static_assert(
    tutti::optimizer_steps_rows_from_memory<tutti::rowwise_adagrad, replaying_host_space>);
static_assert(tutti::optimizer_steps_rows_from_memory<tutti::row_sparse_sgd, replaying_host_space>);
static_assert(
    tutti::model_repeats_its_kernels<tutti::models::matrix_factorization<replaying_host_space>>);

constexpr std::size_t batch = 96;

tutti::train_options base_options() {
  return {.batch = batch, .epochs = 3, .base_lr = 0.05, .seed = 8, .evaluate_each_epoch = false};
}

struct run {
  std::vector<float> params;
  tutti::fit_result result;
};

// A rate that changes at every step: a replay that kept the recorded step's rate or bias
// correction would drift from the run whose kernels run one by one.
template <class Space, class Optimizer>
run train(const tutti::data::interactions& d, Optimizer optimizer, tutti::train_options opt) {
  using mf = tutti::models::matrix_factorization<Space>;
  using schedule = tutti::warmup<tutti::cosine>;
  tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, schedule, Optimizer> t(
      mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, d.n_users(), d.n_items()), {},
      {}, schedule{.warmup_steps = 7, .inner = {}, .start_fraction = 0.1}, optimizer, opt);
  auto r = t.fit(d, {});
  return {t.parameters_on_host(), std::move(r)};
}

// Steps of a full batch over the run: the steps a replay may take.
std::size_t full_steps(const tutti::data::interactions& d, const tutti::train_options& opt) {
  return opt.epochs * (d.size() / opt.batch);
}

template <class Optimizer>
void check_replays_as_run(Optimizer optimizer) {
  const auto parts = implicit_courses(600, 200);
  const tutti::train_options opt = base_options();
  const run eager = train<opaque_host_space>(parts.train, optimizer, opt);
  const run replayed = train<replaying_host_space>(parts.train, optimizer, opt);
  CHECK(eager.result.replayed_steps == 0);
  CHECK(replayed.result.step_graph_refused == "");
  // Every full step but the first, which sizes the model's memory, replays the record.
  CHECK(replayed.result.replayed_steps == full_steps(parts.train, opt) - 1);
  CHECK(tutti_test::count_differing(replayed.params, eager.params) == 0);
  CHECK(replayed.result.parameters_checksum == eager.result.parameters_checksum);
  CHECK(replayed.result.epochs.back().train_loss == eager.result.epochs.back().train_loss);
}

}  // namespace

TEST_CASE("replaying space: a replay's kernels keep the arguments they were recorded with") {
  // The tool the tests below rely on: a value passed by argument is the recorded one at every
  // replay; a value read from the space's memory is the current one.
  const replaying_host_space space;
  tutti::buffer<int, replaying_host_space> out(2, space);
  tutti::buffer<int, replaying_host_space> in(1, space);
  int by_argument = 1;
  const int* in_memory = in.data();
  int* o = out.data();
  const auto graph = space.capture([&] {
    const int v = by_argument;
    tutti::parallel_for(space, 1, [o, v, in_memory](std::size_t) {
      o[0] = v;
      o[1] = *in_memory;
    });
  });
  for (int step = 1; step <= 3; ++step) {
    by_argument = step;
    in.data()[0] = 10 * step;
    space.replay(graph);
    CHECK(out.data()[0] == 1);
    CHECK(out.data()[1] == 10 * step);
  }
  // A record refuses what a capture refuses: a copy from the host.
  const auto copying = space.capture([&] { space.copy_from_host(o, &by_argument, sizeof(int)); });
  CHECK_THROWS_AS(space.replay(copying), std::logic_error);
}

TEST_CASE("replayed steps: lazy Adam gives the bits of the step run kernel by kernel") {
  check_replays_as_run(tutti::lazy_adam{});
}

TEST_CASE("replayed steps: row-wise Adagrad gives the bits of the step run kernel by kernel") {
  check_replays_as_run(tutti::rowwise_adagrad{});
}

TEST_CASE(
    "replayed steps: row-sparse SGD with momentum gives the bits of the step run kernel by "
    "kernel") {
  check_replays_as_run(tutti::row_sparse_sgd{.momentum = 0.9f});
}

TEST_CASE(
    "replayed steps: the optimizer tutti train chooses by name replays as the optimizer does") {
  // `tutti train` hands the trainer the optimizer a name chooses as its own type: a row-sparse
  // one's values of a step reach the space's memory, so its steps replay (each is run above).
  using tutti::cli::optimizer_choice;
  int replaying = 0;
  for (int i = 0; i <= static_cast<int>(optimizer_choice::row_sparse_sgd); ++i) {
    const auto choice = static_cast<optimizer_choice>(i);
    CAPTURE(tutti::cli::name_of(choice));
    tutti::cli::with_optimizer(choice, 0.9f, 0.f, [&](auto optimizer) {
      using O = decltype(optimizer);
      CHECK(tutti::optimizer_steps_rows_from_memory<O, replaying_host_space> ==
            tutti::optimizer_steps_rows<O, tutti::host_space>);
      if constexpr (tutti::optimizer_steps_rows_from_memory<O, replaying_host_space>) {
        ++replaying;
        if (choice == optimizer_choice::lazy_adam) check_replays_as_run(optimizer);
      }
    });
  }
  CHECK(replaying == 3);
}

TEST_CASE(
    "replayed steps: a non-finite step is skipped and logged where it is, as kernel by "
    "kernel") {
  // One training row with a NaN label: its step's loss is NaN in every epoch, wherever the
  // shuffle puts it; the replay reads the step's slots and log entry from memory.
  auto parts = implicit_courses(600, 200);
  parts.train.labels.at(137) = std::numeric_limits<float>::quiet_NaN();
  tutti::train_options opt = base_options();
  opt.nonfinite = tutti::nonfinite_policy::skip;
  const run eager = train<opaque_host_space>(parts.train, tutti::lazy_adam{}, opt);
  const run replayed = train<replaying_host_space>(parts.train, tutti::lazy_adam{}, opt);
  REQUIRE(eager.result.skipped_steps == opt.epochs);
  CHECK(replayed.result.replayed_steps > 0);
  CHECK(replayed.result.skipped_steps == opt.epochs);
  REQUIRE(replayed.result.nonfinite.size() == eager.result.nonfinite.size());
  for (std::size_t k = 0; k < eager.result.nonfinite.size(); ++k)
    CHECK(replayed.result.nonfinite[k].global_step == eager.result.nonfinite[k].global_step);
  CHECK(tutti_test::count_differing(replayed.params, eager.params) == 0);
}

TEST_CASE("replayed steps: the steps that read back or differ in shape run kernel by kernel") {
  const auto parts = implicit_courses(600, 200);
  tutti::train_options opt = base_options();
  const std::atomic<bool> stop{false};
  opt.stop = &stop;
  opt.stop_poll_every = 5;  // every fifth step reads the stop request: not replayed
  const run eager = train<opaque_host_space>(parts.train, tutti::lazy_adam{}, opt);
  const run replayed = train<replaying_host_space>(parts.train, tutti::lazy_adam{}, opt);
  const std::size_t steps_per_epoch = (parts.train.size() + batch - 1) / batch;
  const std::size_t steps = opt.epochs * steps_per_epoch;
  std::size_t polls_at_full = 0;
  for (std::size_t g = 0; g < steps; ++g)
    if ((g + 1) % opt.stop_poll_every == 0 && (g + 1) % steps_per_epoch != 0) ++polls_at_full;
  REQUIRE(parts.train.size() % batch != 0);  // each epoch's last step is shorter
  CHECK(replayed.result.replayed_steps == full_steps(parts.train, opt) - polls_at_full - 1);
  CHECK(tutti_test::count_differing(replayed.params, eager.params) == 0);

  opt.step_graphs = false;
  const run off = train<replaying_host_space>(parts.train, tutti::lazy_adam{}, opt);
  CHECK(off.result.replayed_steps == 0);
  CHECK(tutti_test::count_differing(off.params, eager.params) == 0);
}

}  // namespace test_step_replay
