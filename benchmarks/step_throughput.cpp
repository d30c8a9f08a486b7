// SPDX-License-Identifier: Apache-2.0
/// @file benchmarks/step_throughput.cpp
/// @brief `tutti_bench_step`: samples/s of full `tutti::trainer` steps on 1, 2 and 4 ranks, the
/// share of each phase, and how close a step comes to the machine's memory bandwidth.
///
/// Each configuration trains for a few epochs on the synthetic course data (all rows train,
/// no evaluation) and reports the median over the epochs after the first (the first pays for
/// page faults and cold caches). The roofline share divides the bytes a step cannot avoid
/// moving by the step time and by a STREAM-triad bandwidth measured here, in this process.

#include "common.hpp"

#include <tutti/data/interactions.hpp>
#include <tutti/data/synthetic.hpp>
#include <tutti/launch.hpp>
#include <tutti/models/logistic_regression.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/optimizers/adam.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/single_rank.hpp>
#include <tutti/samplers/shuffled_shards.hpp>
#include <tutti/schedules/constant.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/host.hpp>
#include <tutti/trainer.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

struct config {
  std::vector<int> ranks{1, 2, 4};
  std::vector<std::string> models{"mf", "lr"};
  std::size_t batch = 4096;
  int dim = 32;
  std::size_t epochs = 2;
  std::string optimizer = "sgd";
  double lr = 0.05;
  std::int32_t learners = 16000;  // ~960k rows: ~235 steps an epoch at batch 4096
  std::int32_t courses = 500;
  std::uint64_t seed = 1;
  std::size_t stream_mb = 64;
  std::size_t stream_reps = 10;
  std::string json;
};

// ---- memory bandwidth ---------------------------------------------------------------------------

/// a[i] = b[i] + s * c[i], STREAM's triad.
struct triad_fn {
  double* a;
  const double* b;
  const double* c;
  double s;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { a[i] = b[i] + s * c[i]; }
};

/// Sets three arrays in the same parallel loop the triad uses, so each page is first touched by
/// the thread that later streams it.
struct triad_init_fn {
  double* a;
  double* b;
  double* c;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    a[i] = 0.0;
    b[i] = 1.0;
    c[i] = 2.0;
  }
};

struct stream_result {
  std::size_t array_bytes = 0;
  int threads = 1;
  double best_gbs = 0;
  double median_gbs = 0;
};

// Counts 3 arrays per pass (two read, one written), as STREAM does: the write-allocate read a
// cache may add is not counted, so the figure is what a loop of this shape can expect.
stream_result measure_stream(const config& c) {
  const tutti::host_space space;
  const std::size_t n = c.stream_mb * (std::size_t{1} << 20) / sizeof(double);
  tutti::buffer<double, tutti::host_space> a(n, space), b(n, space), cc(n, space);
  tutti::parallel_for(space, n, triad_init_fn{a.data(), b.data(), cc.data()});
  tutti::parallel_for(space, n, triad_fn{a.data(), b.data(), cc.data(), 3.0});  // warmup
  std::vector<double> gbs;
  for (std::size_t k = 0; k < c.stream_reps; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    tutti::parallel_for(space, n, triad_fn{a.data(), b.data(), cc.data(), 3.0});
    const double t = tutti::bench::seconds_since(t0);
    gbs.push_back(3.0 * double(n * sizeof(double)) / t / 1e9);
  }
  stream_result r;
  r.array_bytes = n * sizeof(double);
#if defined(_OPENMP)
  r.threads = omp_get_max_threads();
#endif
  r.best_gbs = *std::max_element(gbs.begin(), gbs.end());
  r.median_gbs = tutti::bench::median(gbs);
  return r;
}

// ---- training -----------------------------------------------------------------------------------

/// One configuration's figures (rank 0's clock; ranks are in lockstep through the reduction).
struct row {
  std::string model;
  int ranks = 1;
  std::string reducer;
  std::size_t parameters = 0;
  std::size_t state = 0;
  std::size_t steps_per_epoch = 0;
  std::vector<double> epoch_samples_per_second;
  double samples_per_second = 0;
  double step_seconds = 0;
  tutti::phase_seconds phases_per_step;
  double min_bytes_per_step = 0;
  double achieved_gbs = 0;
  double roofline_share = 0;
};

template <class Model, class Reducer, class Optimizer>
tutti::fit_result fit_rank(Model model, Reducer reducer, Optimizer optimizer,
                           const tutti::data::interactions& train, const config& c) {
  using trainer_t =
      tutti::trainer<Model, tutti::shuffled_shards, Reducer, tutti::constant, Optimizer>;
  trainer_t t(std::move(model), tutti::shuffled_shards{}, std::move(reducer), tutti::constant{},
              std::move(optimizer),
              tutti::train_options{.batch = c.batch,
                                   .epochs = c.epochs,
                                   .base_lr = c.lr,
                                   .seed = c.seed,
                                   .evaluate_each_epoch = false});
  return t.fit(train, tutti::data::interactions{});
}

/// Trains one configuration on `world` ranks (launched as `tutti train` launches them) and
/// returns rank 0's result.
template <class MakeModel, class Optimizer>
tutti::fit_result fit_world(int world, MakeModel make_model, const Optimizer& optimizer,
                            const tutti::data::interactions& train, const config& c) {
  tutti::fit_result rank0;
  std::mutex m;
  tutti::run_host_ranks(world, [&](auto reducer) {
    const int rank = reducer.rank();
    tutti::fit_result r = fit_rank(make_model(), std::move(reducer), optimizer, train, c);
    if (rank == 0) {
      std::lock_guard lock(m);
      rank0 = std::move(r);
    }
  });
  return rank0;
}

/// Summarises a run: medians over the epochs after the first, phase seconds per step, and the
/// roofline. `row_floats` is the parameter values one sample touches.
row summarise(const std::string& model, int world, const tutti::fit_result& r,
              std::size_t parameters, std::size_t state, std::size_t row_floats,
              const stream_result& stream, const config& c) {
  row out;
  out.model = model;
  out.ranks = world;
  out.reducer = world == 1 ? "no_op" : "local_ring";
  out.parameters = parameters;
  out.state = state;
  out.steps_per_epoch = r.epochs.front().steps;
  std::vector<double> sps, step_s;
  tutti::phase_seconds sum;
  std::size_t steps = 0;
  for (const auto& e : r.epochs) out.epoch_samples_per_second.push_back(e.samples_per_second);
  for (std::size_t k = 1; k < r.epochs.size(); ++k) {
    const auto& e = r.epochs[k];
    sps.push_back(e.samples_per_second);
    step_s.push_back(e.seconds / double(e.steps));
    sum += e.phases;
    steps += e.steps;
  }
  out.samples_per_second = tutti::bench::median(sps);
  out.step_seconds = tutti::bench::median(step_s);
  const double per = steps ? 1.0 / double(steps) : 0.0;
  out.phases_per_step = {sum.data * per, sum.compute * per, sum.reduce * per, sum.optimizer * per};
  // A lower bound on the bytes of one global step over all ranks: each rank reads its
  // parameter, gradient and optimizer-state arenas once, and every sample reads the parameter
  // rows it touches once. Writes and the batch itself come on top.
  out.min_bytes_per_step = double(world) * double(2 * parameters + state) * sizeof(float) +
                           double(c.batch) * double(row_floats) * sizeof(float);
  out.achieved_gbs = out.step_seconds > 0 ? out.min_bytes_per_step / out.step_seconds / 1e9 : 0.0;
  out.roofline_share = stream.best_gbs > 0 ? out.achieved_gbs / stream.best_gbs : 0.0;
  return out;
}

/// The model `tutti train --model NAME` builds for `users` x `items` (mf or lr), with the
/// models' own default L2 and the logistic loss, composed by its type.
template <class Use>
void with_bench_model(const std::string& name, std::int32_t users, std::int32_t items, int dim,
                      Use&& use) {
  using tutti::host_space;
  constexpr float l2 = 1e-4f;
  if (name == "mf")
    use([=] {
      return tutti::models::matrix_factorization<host_space>(
          {.dim = dim, .l2 = l2, .loss = tutti::loss_kind::logistic}, users, items, host_space{});
    });
  else
    use([=] {
      return tutti::models::logistic_regression<host_space>(
          {.l2 = l2, .loss = tutti::loss_kind::logistic}, users, items, host_space{});
    });
}

template <class Optimizer>
std::vector<row> bench_model(const std::string& name, const Optimizer& optimizer,
                             const tutti::data::interactions& train, const stream_result& stream,
                             const config& c) {
  std::vector<row> rows;
  // The parameter values one sample touches: mf a user row and bias and an item row and bias,
  // lr one user weight and one item weight.
  const std::size_t row_floats = name == "mf" ? 2 * (std::size_t(c.dim) + 1) : 2;
  for (int world : c.ranks) {
    with_bench_model(name, train.n_users(), train.n_items(), c.dim, [&](auto make) {
      const std::size_t p = make().layout().total();
      const auto r = fit_world(world, make, optimizer, train, c);
      rows.push_back(summarise(name, world, r, p, optimizer.state_size(p), row_floats, stream, c));
    });
  }
  return rows;
}

void print_header() {
  std::printf("\n%-5s %5s %-10s %6s %11s %8s %9s %6s %6s %6s %6s %9s %7s %8s\n", "model", "ranks",
              "reducer", "steps", "samples/s", "speedup", "step(ms)", "data", "comp", "reduce",
              "optim", "minMB/st", "GB/s", "roofline");
}

void print_row(const row& r, double base_sps) {
  const double t = r.phases_per_step.total();
  const auto pct = [t](double x) {
    return t > 0 ? 100.0 * x / t : 0.0;
  };
  // Speedup is relative to the 1-rank run of the same model, when there is one.
  char speedup[16] = "-";
  if (base_sps > 0)
    std::snprintf(speedup, sizeof speedup, "%.2fx", r.samples_per_second / base_sps);
  std::printf(
      "%-5s %5d %-10s %6zu %11.0f %8s %9.3f %5.1f%% %5.1f%% %5.1f%% %5.1f%% %9.3f %7.2f "
      "%7.1f%%\n",
      r.model.c_str(), r.ranks, r.reducer.c_str(), r.steps_per_epoch, r.samples_per_second, speedup,
      r.step_seconds * 1e3, pct(r.phases_per_step.data), pct(r.phases_per_step.compute),
      pct(r.phases_per_step.reduce), pct(r.phases_per_step.optimizer), r.min_bytes_per_step / 1e6,
      r.achieved_gbs, 100.0 * r.roofline_share);
  std::fflush(stdout);
}

nlohmann::json to_json(const row& r, const config& c) {
  const auto& p = r.phases_per_step;
  const double t = p.total();
  const auto share = [t](double x) {
    return t > 0 ? x / t : 0.0;
  };
  return {{"model", r.model},
          {"ranks", r.ranks},
          {"reducer", r.reducer},
          {"optimizer", c.optimizer},
          {"global_batch", c.batch},
          {"dim", r.model == "mf" ? nlohmann::json(c.dim) : nlohmann::json()},
          {"parameters", r.parameters},
          {"optimizer_state", r.state},
          {"steps_per_epoch", r.steps_per_epoch},
          {"epoch_samples_per_second", r.epoch_samples_per_second},
          {"samples_per_second", r.samples_per_second},
          {"step_seconds", r.step_seconds},
          {"phase_seconds_per_step",
           {{"data", p.data},
            {"compute", p.compute},
            {"reduce", p.reduce},
            {"optimizer", p.optimizer}}},
          {"phase_share",
           {{"data", share(p.data)},
            {"compute", share(p.compute)},
            {"reduce", share(p.reduce)},
            {"optimizer", share(p.optimizer)}}},
          {"min_bytes_per_step", r.min_bytes_per_step},
          {"achieved_gbs", r.achieved_gbs},
          {"roofline_share", r.roofline_share}};
}

template <class Optimizer>
int run(const config& c, const Optimizer& optimizer) {
  const auto t0 = std::chrono::steady_clock::now();
  const stream_result stream = measure_stream(c);
  std::printf(
      "tutti_bench_step: STREAM triad over 3 x %zu MB on %d thread(s): best %.2f GB/s, "
      "median %.2f GB/s (%zu reps)\n",
      stream.array_bytes >> 20, stream.threads, stream.best_gbs, stream.median_gbs, c.stream_reps);

  const tutti::data::interactions train =
      tutti::data::synthetic_courses({.learners = c.learners, .courses = c.courses});
  std::printf(
      "data: synthetic courses, %zu rows (all train), %d users, %d items; global batch "
      "%zu, %zu epochs (figures: median of epochs 2..%zu), %s, dim %d\n",
      train.size(), train.n_users(), train.n_items(), c.batch, c.epochs, c.epochs,
      c.optimizer.c_str(), c.dim);
  std::printf(
      "phase columns: share of rank 0's step time; roofline: (minMB/st / step) over the "
      "best triad bandwidth\n");
  print_header();

  std::vector<row> all;
  for (const auto& name : c.models) {
    const auto rows = bench_model(name, optimizer, train, stream, c);
    const auto one =
        std::find_if(rows.begin(), rows.end(), [](const row& r) { return r.ranks == 1; });
    const double base = one != rows.end() ? one->samples_per_second : 0.0;
    for (const auto& r : rows) print_row(r, base);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  std::printf("\ntotal %.1f s\n", tutti::bench::seconds_since(t0));

  if (!c.json.empty()) {
    nlohmann::json results = nlohmann::json::array();
    for (const auto& r : all) results.push_back(to_json(r, c));
    tutti::bench::write_json(c.json, results,
                             {{"benchmark", "step_throughput"},
                              {"stream",
                               {{"kernel", "triad"},
                                {"array_bytes", stream.array_bytes},
                                {"threads", stream.threads},
                                {"best_gbs", stream.best_gbs},
                                {"median_gbs", stream.median_gbs}}},
                              {"data",
                               {{"source", "synthetic_courses"},
                                {"learners", c.learners},
                                {"courses", c.courses},
                                {"rows", train.size()}}},
                              {"config",
                               {{"batch", c.batch},
                                {"dim", c.dim},
                                {"epochs", c.epochs},
                                {"optimizer", c.optimizer},
                                {"lr", c.lr},
                                {"seed", c.seed}}}});
    std::printf("wrote %s\n", c.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{"tutti_bench_step: samples/s of full training steps on 1..N local ranks"};
  config c;
  app.add_option("--ranks", c.ranks, "world sizes (comma-separated); 1 uses single_rank")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--model", c.models, "models (comma-separated): mf, lr")
      ->delimiter(',')
      ->check(CLI::IsMember({"mf", "lr"}))
      ->capture_default_str();
  app.add_option("--batch", c.batch, "global batch (a multiple of every world size)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--dim", c.dim, "embedding dimension (mf)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs per configuration (the first is not reported)")
      ->check(CLI::Range(std::size_t{2}, std::size_t{1000}))
      ->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "optimizer")
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--learners", c.learners, "synthetic data: learners")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--courses", c.courses, "synthetic data: courses")
      ->check(CLI::Range(2, 10000000))
      ->capture_default_str();
  app.add_option("--seed", c.seed, "initialisation and shuffling seed")->capture_default_str();
  app.add_option("--stream-mb", c.stream_mb, "size of each STREAM triad array in MB")
      ->check(CLI::Range(std::size_t{1}, std::size_t{16384}))
      ->capture_default_str();
  app.add_option("--stream-reps", c.stream_reps, "timed STREAM triad passes")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000}))
      ->capture_default_str();
  app.add_option("--json", c.json, "also write the results as JSON to this file");
  try {
    app.parse(argc, argv);
    for (int w : c.ranks)
      if (c.batch < std::size_t(w))
        throw CLI::ValidationError(
            "--batch",
            std::to_string(c.batch) + " is smaller than the world size " + std::to_string(w));
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, as a shell user expects; exit code 2 marks a usage error.
    std::fprintf(stderr, "%s: error: %s (see --help)\n", "tutti_bench_step", e.what());
    return 2;
  }
  try {
    if (c.optimizer == "adam") return run(c, tutti::adam{});
    return run(c, tutti::sgd{});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti_bench_step: error: %s\n", e.what());
    return 1;
  }
}
