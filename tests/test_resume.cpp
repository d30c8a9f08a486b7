// SPDX-License-Identifier: Apache-2.0
// Checkpoints in the trainer: a stopped or crashed run resumed from its checkpoint ends with the
// parameters of an uninterrupted run, bitwise; another world size re-shards the rest of the
// epoch so every sample still counts once; a resume with other settings is refused, named.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace test_resume {

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;
namespace fs = std::filesystem;

const tutti::data::split_result& data() {
  static const auto parts =
      tutti::data::split(tutti::data::synthetic_courses({.learners = 200,
                                                         .courses = 40,
                                                         .interactions_per_learner = 10,
                                                         .implicit = true,
                                                         .seed = 9}),
                         {.test_fraction = 0.1, .seed = 2});
  return parts;
}

struct scratch_dir {
  fs::path path;
  explicit scratch_dir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("tutti-resume-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~scratch_dir() { fs::remove_all(path); }
};

struct outcome {
  std::vector<float> params;
  tutti::fit_result result;
  bool interrupted = false;
  std::string error;
};

// Trains on `world` ranks with Adam and a cosine schedule (state and schedule position both
// matter for an exact resume). `hook(rank, global_step)` runs after each step.
outcome train(int world, tutti::train_options opt,
              const std::function<void(int, std::size_t)>& hook = {}) {
  outcome out;
  std::mutex mu;
  const auto& parts = data();
  auto body = [&](auto reducer) {
    tutti::train_options o = opt;
    const int rank = reducer.rank();
    if (hook)
      o.on_step = [&, rank](const tutti::step_progress& p) {
        hook(rank, p.global_step);
      };
    tutti::trainer<mf, tutti::shuffled_shards, decltype(reducer), tutti::cosine, tutti::adam> t(
        mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
           parts.train.n_items()),
        {}, reducer, {}, {}, o);
    try {
      auto r = t.fit(parts.train, parts.test);
      if (rank == 0) {
        std::lock_guard lock(mu);
        out.params = t.parameters_on_host();
        out.result = std::move(r);
      }
    } catch (const tutti::interrupted_error& e) {
      std::lock_guard lock(mu);
      out.interrupted = true;
      out.error = e.what();
    }
  };
  if (world == 1)
    body(tutti::single_rank{});
  else
    tutti::run_local(world, [&](tutti::local_ring ring) { body(ring); });
  return out;
}

tutti::train_options base_options() {
  return {.batch = 120, .epochs = 3, .base_lr = 0.02, .seed = 6, .evaluate_each_epoch = false};
}

std::size_t steps_per_epoch() {
  return (data().train.size() + 119) / 120;
}

}  // namespace

TEST_CASE("resume: a run stopped at any point ends bitwise equal to an uninterrupted run") {
  const std::size_t spe = steps_per_epoch();
  REQUIRE(data().train.size() % 120 != 0);  // the last step of an epoch is partial
  for (int world : {1, 3}) {
    const outcome whole = train(world, base_options());
    // Stops mid-epoch, after the last step of the first epoch (its boundary: the epoch's end
    // is still to be reported), and after the second step of the run.
    for (std::size_t stop_after : {spe + spe / 2, spe - 2, std::size_t{0}}) {
      CAPTURE(world);
      CAPTURE(stop_after);
      scratch_dir dir("stop");
      std::atomic<bool> stop{false};
      auto opt = base_options();
      opt.checkpoint_dir = dir.path.string();
      opt.stop = &stop;
      // The request reaches one rank only (the last); every rank must stop at the same step.
      const outcome first = train(world, opt, [&](int rank, std::size_t step) {
        if (rank == world - 1 && step == stop_after) stop = true;
      });
      REQUIRE(first.interrupted);
      CHECK(first.error.find("stopped on request after global step " +
                             std::to_string(stop_after + 2)) != std::string::npos);
      const auto found = tutti::find_latest_checkpoint(dir.path);
      REQUIRE(found);
      // The flag set after step k is seen by the reduce of step k + 1.
      CHECK(found->state.global_step == stop_after + 2);
      CHECK(found->state.world_size == world);

      auto again = base_options();
      again.resume = &found->state;
      const outcome rest = train(world, again);
      REQUIRE_FALSE(rest.interrupted);
      CHECK(rest.result.resumed_from_step == stop_after + 2);
      CHECK(rest.params == whole.params);
      CHECK(rest.result.epochs.back().train_loss ==
            doctest::Approx(whole.result.epochs.back().train_loss).epsilon(1e-9));
      // The resumed epoch still counts every training row once.
      CHECK(rest.result.epochs.front().weighted_samples == double(data().train.size()));
    }
  }
}

TEST_CASE("resume: a crash loses only the steps since the last periodic checkpoint") {
  const outcome whole = train(2, base_options());
  scratch_dir dir("crash");
  auto opt = base_options();
  opt.checkpoint_dir = dir.path.string();
  opt.checkpoint_every = 4;
  opt.checkpoint_keep = 2;
  const std::size_t crash_at = steps_per_epoch() + 6;
  bool crashed = false;
  try {
    train(2, opt, [&](int rank, std::size_t step) {
      if (rank == 1 && step == crash_at) throw std::runtime_error("simulated crash of rank 1");
    });
  } catch (const std::runtime_error& e) {
    crashed = std::string(e.what()).find("simulated crash") != std::string::npos;
  }
  REQUIRE(crashed);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path))
    files += entry.path().extension() == ".tck";
  CHECK(files == 2);  // keep-last-K
  const auto found = tutti::find_latest_checkpoint(dir.path);
  REQUIRE(found);
  CHECK(found->state.global_step == (crash_at / 4) * 4);
  auto again = base_options();
  again.resume = &found->state;
  again.checkpoint_dir = dir.path.string();
  again.checkpoint_every = 4;
  const outcome rest = train(2, again);
  CHECK(rest.params == whole.params);
}

TEST_CASE("resume: on another world size the rest of the epoch is re-dealt, each sample once") {
  const std::size_t n = data().train.size();
  scratch_dir dir("reshard");
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::uint64_t, int> seen;  // epoch-1 (0-based) sample -> times consumed
  auto record = [&](const tutti::step_progress& p, std::span<const std::uint64_t> ids,
                    std::span<const float> w) {
    if (p.epoch != 1) return;
    std::lock_guard lock(mu);
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (w[i] > 0) ++seen[ids[i]];
  };
  auto opt = base_options();
  opt.checkpoint_dir = dir.path.string();
  opt.stop = &stop;
  opt.on_batch = record;
  const outcome first = train(2, opt, [&](int, std::size_t step) {
    if (step == steps_per_epoch() + 2) stop = true;
  });
  REQUIRE(first.interrupted);
  const auto found = tutti::find_latest_checkpoint(dir.path);
  REQUIRE(found);
  CHECK(found->state.world_size == 2);
  CHECK(found->state.epoch == 1);

  auto again = base_options();
  again.resume = &found->state;
  again.on_batch = record;
  const outcome rest = train(3, again);
  REQUIRE_FALSE(rest.interrupted);
  CHECK(seen.size() == n);
  std::size_t once = 0;
  for (const auto& [id, count] : seen) once += count == 1;
  CHECK(once == n);
  CHECK(rest.result.epochs.front().weighted_samples == double(n));
  CHECK(rest.result.epochs.front().samples_before_resume == found->state.samples_in_epoch);
  CHECK(rest.result.world_size == 3);
}

TEST_CASE(
    "resume: a batch the ranks split unevenly, resumed on another world size, ends as one "
    "rank's uninterrupted run") {
  scratch_dir dir("uneven");
  std::atomic<bool> stop{false};
  auto opt = base_options();
  opt.batch = 101;  // prime: 2 ranks take 51 and 50 per step, 3 ranks 34, 34 and 33
  const std::size_t steps = (data().train.size() + 100) / 101;
  const outcome whole = train(1, opt);
  REQUIRE(whole.result.steps == 3 * steps);
  opt.checkpoint_dir = dir.path.string();
  opt.stop = &stop;
  const outcome first = train(2, opt, [&](int, std::size_t step) {
    if (step == steps + 2) stop = true;
  });
  REQUIRE(first.interrupted);
  const auto found = tutti::find_latest_checkpoint(dir.path);
  REQUIRE(found);
  auto again = base_options();
  again.batch = 101;
  again.resume = &found->state;
  const outcome rest = train(3, again);
  REQUIRE_FALSE(rest.interrupted);
  // Every step took the samples of one rank's step, so only rounding differs.
  CHECK(tutti_test::relative_difference(rest.params, whole.params) <= 1e-5);
  CHECK(rest.result.epochs.front().weighted_samples == double(data().train.size()));
}

TEST_CASE("resume: other settings are refused, naming the fields and both values") {
  scratch_dir dir("refuse");
  std::atomic<bool> stop{false};
  auto opt = base_options();
  opt.checkpoint_dir = dir.path.string();
  opt.stop = &stop;
  opt.run_config = {{"model", "mf dim 8"}};
  train(1, opt, [&](int, std::size_t step) {
    if (step == 3) stop = true;
  });
  const auto found = tutti::find_latest_checkpoint(dir.path);
  REQUIRE(found);
  auto other = base_options();
  other.base_lr = 0.03;
  other.run_config = {{"model", "mf dim 16"}};
  other.resume = &found->state;
  std::string message;
  try {
    train(1, other);
  } catch (const tutti::invalid_argument& e) {
    message = e.what();
  }
  CHECK(message.find("base_lr (checkpoint 0.02") != std::string::npos);
  CHECK(message.find("model (checkpoint mf dim 8, now mf dim 16)") != std::string::npos);
  // A finished run has nothing left to resume.
  auto done = base_options();
  done.checkpoint_dir = dir.path.string();
  done.checkpoint_every = 1;
  done.run_config = opt.run_config;
  train(1, done);
  const auto last = tutti::find_latest_checkpoint(dir.path);
  REQUIRE(last);
  auto after = base_options();
  after.run_config = opt.run_config;
  after.resume = &last->state;
  CHECK_THROWS_WITH_AS(train(1, after), doctest::Contains("already complete"),
                       tutti::invalid_argument);
}

TEST_CASE("resume: notes are kept, never compared, and name the data when the rows differ") {
  using list = tutti::detail::run_setting_list;
  const list saved = {{"train_rows", "328"}, {"train_digest", "aa"}, {"note.data", "'a.csv'"}};
  // The same rows from a renamed file resume: a note is not a setting.
  CHECK_NOTHROW(tutti::detail::check_resume_settings(
      saved, {{"train_rows", "328"}, {"train_digest", "aa"}, {"note.data", "'b.csv'"}}));
  CHECK_NOTHROW(
      tutti::detail::check_resume_settings(saved, {{"train_rows", "328"}, {"train_digest", "aa"}}));
  // Other rows: the digests, and the files the runs read.
  CHECK_THROWS_WITH_AS(
      tutti::detail::check_resume_settings(
          saved, {{"train_rows", "329"}, {"train_digest", "bb"}, {"note.data", "'b.csv'"}}),
      doctest::Contains("train_digest (checkpoint aa, now bb); the training rows are not those "
                        "the checkpoint was trained on ('a.csv', now 'b.csv')"),
      tutti::invalid_argument);
}

namespace {

// What a continued run starts from: parameters, optimizer state, optimizer steps taken.
struct model_state {
  std::vector<float> params, state;
  std::uint64_t steps = 0;
};

// `fits` fits of one epoch each on one trainer, on `world` ranks, with lazy Adam (a row-sparse
// step whose bias corrections follow the optimizer's step count) at a constant rate; the
// trainer starts from `from` where given (the model from its parameters, the optimizer as
// `train_options::continues`).
model_state train_on(int world, std::size_t fits, const std::optional<model_state>& from,
                     bool write_state = false) {
  model_state out;
  std::mutex mu;
  const auto& parts = data();
  auto body = [&](auto reducer) {
    tutti::train_options o = base_options();
    o.epochs = 1;
    mf model({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
             parts.train.n_items());
    if (from) {
      model.start_from(std::make_shared<const std::vector<float>>(from->params));
      if (write_state)  // written into the trainer's zeroed arena instead of handed over
        o.continues = {.steps = from->steps, .write_state = [from](std::span<float> state) {
                         std::copy(from->state.begin(), from->state.end(), state.begin());
                       }};
      else
        o.continues = {from->steps, std::make_shared<const std::vector<float>>(from->state)};
    }
    tutti::trainer<mf, tutti::shuffled_shards, decltype(reducer), tutti::constant, tutti::lazy_adam>
        t(std::move(model), {}, reducer, {}, {}, o);
    for (std::size_t k = 0; k < fits; ++k) t.fit(parts.train, parts.test);
    if (reducer.rank() != 0) return;
    const std::lock_guard lock(mu);
    out.params = t.parameters_on_host();
    out.state = tutti::to_host_vector(tutti::host_space{}, t.optimizer_state());
    out.steps = t.optimizer_steps();
  };
  if (world == 1)
    body(tutti::single_rank{});
  else
    tutti::run_local(world, [&](tutti::local_ring ring) { body(ring); });
  return out;
}

}  // namespace

TEST_CASE(
    "continue: a run from a model's parameters, optimizer state and steps is the same trainer "
    "fitting again, bitwise") {
  const std::size_t spe = steps_per_epoch();
  std::vector<std::vector<float>> by_world;
  for (int world : {1, 2}) {
    CAPTURE(world);
    const model_state twice = train_on(world, 2, std::nullopt);
    const model_state once = train_on(world, 1, std::nullopt);
    CHECK(once.steps == spe);
    const model_state continued = train_on(world, 1, once);
    by_world.push_back(continued.params);
    CHECK(continued.steps == 2 * spe);
    CHECK(continued.params == twice.params);
    CHECK(continued.state == twice.state);
    CHECK(train_on(world, 1, once, /*write_state=*/true).params == twice.params);
    // Without the steps (the bias corrections start again) or without the state, another run.
    model_state no_steps = once;
    no_steps.steps = 0;
    CHECK(train_on(world, 1, no_steps).params != twice.params);
    model_state no_state = once;
    std::fill(no_state.state.begin(), no_state.state.end(), 0.f);
    CHECK(train_on(world, 1, no_state).params != twice.params);
  }
  // 1 rank and 2 continue to the same parameters, up to the order of the gradient's sums.
  CHECK(tutti_test::relative_difference(by_world[0], by_world[1]) <= 1e-5);
  // A state of another size is refused before any step.
  model_state wrong = train_on(1, 1, std::nullopt);
  wrong.state.pop_back();
  CHECK_THROWS_WITH_AS(train_on(1, 1, wrong), doctest::Contains("optimizer-state floats"),
                       tutti::invalid_argument);
}

}  // namespace test_resume
