// SPDX-License-Identifier: Apache-2.0
/// @file benchmarks/cpu_mf.cpp
/// @brief `tutti_bench_cpu_mf`: matrix factorisation training on the host space, in one process
/// (all cores) or as one rank per MPI process, and the files that let the CPU peers in
/// benchmarks/peers/ (libtorch C++, PyTorch DDP) train the same model on the same data, from the
/// same initial parameters, in the same batch order.
///
///   tutti_bench_cpu_mf [--dim 64 --batch 4096 --epochs 3 --lr 0.01] [--json PATH]
///   tutti_bench_cpu_mf --out DIR --out-world 1,2 --prepare      # the peers' inputs only
///   tutti_bench_cpu_mf --reducer local --ranks 2 [--json PATH]   # ranks as threads
///   mpiexec -n 2 tutti_bench_cpu_mf --reducer mpi [--json PATH]  # one rank per process
///
/// The work is that of benchmarks/gpu_mf.cu on the CPU: logistic loss, L2 on the touched rows
/// weighted per sample, Adam, on the synthetic course data. Figures are rank 0's; samples/s is
/// `epoch_record::samples_per_second` (the epoch's wall time, the shard's construction
/// included), and the first epoch is reported as warm-up.

#include "common.hpp"

#include <tutti/data/interactions.hpp>
#include <tutti/data/synthetic.hpp>
#include <tutti/launch.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/optimizers/adam.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/single_rank.hpp>
#include <tutti/samplers/shuffled_shards.hpp>
#include <tutti/schedules/constant.hpp>
#include <tutti/space/host.hpp>
#include <tutti/trainer.hpp>
#if defined(TUTTI_BENCH_HAS_MPI)
#include <tutti/reducers/mpi.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

struct config {
  std::int32_t learners = 16000;  // ~960k rows: 235 steps an epoch at batch 4096
  std::int32_t courses = 500;
  double per_learner = 30;
  int dim = 64;
  std::size_t batch = 4096;
  std::size_t epochs = 3;
  double lr = 0.01;
  float l2 = 1e-4f;
  std::uint64_t seed = 7;
  std::string reducer = "none";
  int ranks = 2;  // --reducer local
  std::string sparse = "off";
  std::string shared_arena = "on";  // --reducer mpi
  std::string out;
  std::vector<int> out_world{1, 2};
  bool prepare = false;
  std::string json;
};

using model_t = tutti::models::matrix_factorization<tutti::host_space>;

template <class T>
void write_raw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!f) throw tutti::error("cannot write " + path);
}

tutti::data::interactions make_data(const config& c) {
  return tutti::data::synthetic_courses({.learners = c.learners,
                                         .courses = c.courses,
                                         .interactions_per_learner = c.per_learner,
                                         .implicit = true,
                                         .seed = 42});
}

model_t make_model(const config& c, const tutti::data::interactions& data) {
  return model_t({.dim = c.dim, .l2 = c.l2, .loss = tutti::loss_kind::logistic}, data.n_users(),
                 data.n_items());
}

template <class Reducer>
auto make_trainer(const config& c, const tutti::data::interactions& data, Reducer reducer) {
  return tutti::trainer<model_t, tutti::shuffled_shards, Reducer, tutti::constant, tutti::adam>(
      make_model(c, data), {}, std::move(reducer), {}, {},
      {.batch = c.batch,
       .epochs = c.epochs,
       .base_lr = c.lr,
       .seed = c.seed,
       .evaluate_each_epoch = false,
       .sparse_exchange = tutti::sparse_exchange_policy_named(c.sparse).value()});
}

// The peers' inputs: the data, the trainer's initial parameters, and for each world size W and
// rank r the slots rank r visits in each epoch (order{e}_w{W}_r{r}.u64) with their weights
// (0 marks padding; weight{e}_w{W}_r{r}.f32). A peer's rank r takes local batch k from slots
// [k·B/W, (k+1)·B/W) and scales its loss by W / (real samples of the global step), as the
// trainer does.
void write_peer_inputs(const config& c, const tutti::data::interactions& data,
                       const std::vector<float>& init, const model_t& model) {
  std::filesystem::create_directories(c.out);
  write_raw(c.out + "/users.i32", data.users);
  write_raw(c.out + "/items.i32", data.items);
  write_raw(c.out + "/labels.f32", data.labels);
  write_raw(c.out + "/init.f32", init);
  for (int w : c.out_world)
    for (int r = 0; r < w; ++r)
      for (std::size_t e = 0; e < c.epochs; ++e) {
        const auto sh = tutti::shuffled_shards{}.shard(data.size(), w, r, c.seed, e);
        const std::string tag =
            std::to_string(e) + "_w" + std::to_string(w) + "_r" + std::to_string(r);
        write_raw(c.out + "/order" + tag + ".u64", sh.indices);
        write_raw(c.out + "/weight" + tag + ".f32", sh.weights_in(0, sh.size()));
      }
  nlohmann::json meta;
  meta["rows"] = data.size();
  meta["users"] = data.n_users();
  meta["items"] = data.n_items();
  meta["dim"] = c.dim;
  meta["batch"] = c.batch;
  meta["epochs"] = c.epochs;
  meta["lr"] = c.lr;
  meta["l2"] = c.l2;
  meta["seed"] = c.seed;
  meta["worlds"] = c.out_world;
  meta["segments"] = nlohmann::json::array();
  for (const auto& s : model.layout().segments())
    meta["segments"].push_back(
        {{"name", s.name}, {"offset", s.offset}, {"rows", s.rows}, {"cols", s.cols}});
  std::ofstream f(c.out + "/meta.json");
  f << meta.dump(2) << '\n';
  if (!f) throw tutti::error("cannot write " + c.out + "/meta.json");
}

// Prints the table and writes the JSON report (rank 0 only).
void report(const config& c, const tutti::data::interactions& data, const tutti::fit_result& r,
            const std::string& reducer, int world, int threads) {
  std::printf(
      "tutti_bench_cpu_mf: %zu interactions, %d users, %d items, dim %d, global batch %zu, "
      "Adam lr %g, l2 %g; %d rank(s) (%s, sparse exchange %s), %d OpenMP thread(s) per rank\n",
      data.size(), data.n_users(), data.n_items(), c.dim, c.batch, c.lr, double(c.l2), world,
      reducer.c_str(), c.sparse.c_str(), threads);
  std::printf("%6s  %10s  %12s  %14s\n", "epoch", "seconds", "train loss", "samples/s");
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> sps;
  for (const auto& e : r.epochs) {
    std::printf("%6zu  %10.4f  %12.6f  %14.0f%s\n", e.epoch, e.seconds, e.train_loss,
                e.samples_per_second, e.epoch == 1 ? "  (warm-up)" : "");
    if (e.epoch > 1) sps.push_back(e.samples_per_second);
    rows.push_back({{"epoch", e.epoch},
                    {"seconds", e.seconds},
                    {"train_loss", e.train_loss},
                    {"samples_per_s", e.samples_per_second},
                    {"phase_seconds",
                     {{"data", e.phases.data},
                      {"compute", e.phases.compute},
                      {"reduce", e.phases.reduce},
                      {"optimizer", e.phases.optimizer}}}});
  }
  const double median_sps = tutti::bench::median(sps);
  if (world > 1)
    std::printf("gradient bytes per step and rank: %llu (dense: %llu, %.2fx fewer)\n",
                static_cast<unsigned long long>(r.bytes_reduced_per_step),
                static_cast<unsigned long long>(r.dense_bytes_per_step),
                r.bytes_reduced_per_step > 0
                    ? double(r.dense_bytes_per_step) / double(r.bytes_reduced_per_step)
                    : 0.0);
  if (c.sparse == "measured")
    std::printf(
        "measured sparse exchange: rows cost %.3gx the dense path per byte; %zu of %zu "
        "steps sent rows\n",
        r.sparse_row_cost_ratio, r.sparse_steps, r.steps);
  std::printf("median samples/s after the warm-up: %.0f; final train loss %.6f\n", median_sps,
              r.epochs.back().train_loss);
  std::fflush(stdout);
  if (!c.json.empty()) {
    tutti::bench::write_json(c.json, rows,
                             {{"benchmark", "cpu_mf"},
                              {"reducer", reducer},
                              {"sparse_exchange", c.sparse},
                              {"bytes_reduced_per_step", r.bytes_reduced_per_step},
                              {"dense_bytes_per_step", r.dense_bytes_per_step},
                              {"sparse_steps", r.sparse_steps},
                              {"sparse_row_cost_ratio", r.sparse_row_cost_ratio},
                              {"ranks", world},
                              {"threads_per_rank", threads},
                              {"rows", data.size()},
                              {"dim", c.dim},
                              {"batch", c.batch},
                              {"lr", c.lr},
                              {"l2", c.l2},
                              {"samples_per_s", median_sps},
                              {"final_train_loss", r.epochs.back().train_loss}});
  }
}

int omp_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int run_single(const config& c) {
  const auto data = make_data(c);
  auto t = make_trainer(c, data, tutti::single_rank{});
  if (!c.out.empty()) {
    write_peer_inputs(c, data, t.parameters_on_host(), make_model(c, data));
    std::printf("tutti_bench_cpu_mf: wrote the peers' inputs to %s\n", c.out.c_str());
    if (c.prepare) return 0;
  }
  const auto r = t.fit(data, tutti::data::interactions{});
  report(c, data, r, "single_rank", 1, omp_threads());
  return 0;
}

// Ranks as threads of this process, joined by a local_ring; each rank gets cores / ranks
// OpenMP threads (tutti::run_local's default).
int run_threads(const config& c) {
  const auto data = make_data(c);
  tutti::fit_result rank0;
  int threads = 1;
  tutti::run_local(c.ranks, [&](tutti::local_ring& ring) {
    auto t = make_trainer(c, data, ring);
    auto r = t.fit(data, tutti::data::interactions{});
    if (ring.rank() == 0) {
      rank0 = std::move(r);
      threads = omp_threads();
    }
  });
  report(c, data, rank0, "local_ring", c.ranks, threads);
  return 0;
}

#if defined(TUTTI_BENCH_HAS_MPI)
int run_mpi(const config& c, int& argc, char**& argv) {
  tutti::mpi_session session(argc, argv);
  return tutti::mpi_abort_on_exception([&] {
    const auto data = make_data(c);
    auto t = make_trainer(
        c, data, tutti::mpi_allreduce(MPI_COMM_WORLD, {.shared_arena = c.shared_arena == "on"}));
    const int rank = t.reducer().rank(), world = t.reducer().world_size();
    const auto r = t.fit(data, tutti::data::interactions{});
    const bool shared = !t.reducer().shared_arena().empty();
    if (rank == 0)
      report(c, data, r, shared ? "mpi_allreduce, shared arena" : "mpi_allreduce", world,
             omp_threads());
    return 0;
  });
}
#endif

}  // namespace

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{"tutti_bench_cpu_mf: MF training on the host space, with CPU peers' inputs"};
  config c;
  app.add_option("--learners", c.learners, "synthetic learners")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--courses", c.courses, "synthetic courses")
      ->check(CLI::Range(2, 10000000))
      ->capture_default_str();
  app.add_option("--per-learner", c.per_learner, "mean positives per learner")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dim", c.dim, "embedding dimension")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--batch", c.batch, "global batch (a multiple of the world size)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs (the first is reported as warm-up)")
      ->check(CLI::Range(std::size_t{2}, std::size_t{1000}))
      ->capture_default_str();
  app.add_option("--lr", c.lr, "Adam learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--l2", c.l2, "L2 strength per touched row")->capture_default_str();
  app.add_option("--seed", c.seed, "initialisation and shuffling seed")->capture_default_str();
  app.add_option("--reducer", c.reducer,
                 "none: one process, all cores; local: --ranks ranks as threads of this process "
                 "(local_ring); mpi: one rank per process of mpiexec")
      ->check(CLI::IsMember({"none", "local", "mpi"}))
      ->capture_default_str();
  app.add_option("--ranks", c.ranks, "ranks of --reducer local")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--shared-arena", c.shared_arena,
                 "--reducer mpi: on (the gradient arena in an MPI shared-memory window, reduced "
                 "in place, when all ranks share this host) or off (MPI_Allreduce)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--sparse-exchange", c.sparse,
                 "send only the embedding rows a step touched: off (the dense allreduce), auto "
                 "(rows when they move fewer bytes), on (always rows), measured (as auto, each "
                 "path's bytes weighted by its cost per byte measured on the first steps)")
      ->check(CLI::IsMember({"off", "auto", "on", "measured"}))
      ->capture_default_str();
  app.add_option("--out", c.out, "write the peers' inputs (data, init, batch order) to DIR");
  app.add_option("--out-world", c.out_world, "world sizes whose shards --out writes")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_flag("--prepare", c.prepare, "with --out: write the inputs and exit without training");
  app.add_option("--json", c.json, "also write the results as JSON to this file");
  try {
    app.parse(argc, argv);
    if (c.reducer != "none" && !c.out.empty())
      throw CLI::ValidationError("--out", "write the peers' inputs with --reducer none");
    if (c.reducer == "local" && c.batch < std::size_t(c.ranks))
      throw CLI::ValidationError("--batch", "must be at least --ranks");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "tutti_bench_cpu_mf: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    if (c.reducer == "mpi") {
#if defined(TUTTI_BENCH_HAS_MPI)
      return run_mpi(c, argc, argv);
#else
      std::fprintf(stderr,
                   "tutti_bench_cpu_mf: error: --reducer mpi: built without MPI (configure "
                   "where MPI is installed)\n");
      return 2;
#endif
    }
    if (c.reducer == "local") return run_threads(c);
    return run_single(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti_bench_cpu_mf: error: %s\n", e.what());
    return 1;
  }
}
