// SPDX-License-Identifier: Apache-2.0
/// @file benchmarks/peers/tutti_allreduce.cpp
/// @brief `tutti_bench_peer_allreduce`: tutti's side of the allreduce comparison with
/// torch.distributed's gloo backend (benchmarks/peers/gloo_allreduce.py), measured with the same
/// loop as that script, step for step.
///
///   tutti_bench_peer_allreduce --reducer local --ranks 2 [--json PATH]   # threads, local_ring
///   mpiexec -n 2 tutti_bench_peer_allreduce --reducer mpi [--json PATH]  # processes,
///   mpi_allreduce mpiexec -n 2 tutti_bench_peer_allreduce --reducer mpi --shared-arena  # in its
///   shared arena
///
/// Per size (4 KiB ... 64 MiB by default): rank r fills its float buffer with r + 1 + (i mod 7);
/// after a one-value max-reduction that lines the ranks up, `warmup` untimed calls estimate the
/// time of one call, the ranks agree on the slowest estimate and so on the number of timed
/// iterations (enough for --seconds-per-size, at least --min-iters); each timed iteration starts
/// right after a line-up, each rank times its own `all_reduce_mean`, and an iteration's time is
/// the slowest rank's. time is the median over iterations, algbw = bytes / time, busbw = algbw ·
/// 2(W-1)/W (nccl-tests). The buffer must then hold the mean (W+1)/2 + (i mod 7) within 1e-6
/// relative; #wrong counts the values that do not, summed over ranks, and any makes the program
/// exit with 1. The convention is that of `tutti_bench_allreduce`.
///
/// The memory's bound, measured in the same run: any allreduce must read every rank's S input
/// bytes once and write every rank's S result bytes once, i.e. move at least as many bytes as
/// every rank copying its buffer once. So after the allreduce iterations the ranks time, with
/// the same line-up, a `memcpy` of S bytes each, all at once; copy is the median of the slowest
/// rank's, and "of bound" = copy time / allreduce time (100 % would be an allreduce that costs
/// what the unavoidable bytes cost). A W = 2 `local_ring`, which writes each finished chunk into
/// both buffers, moves exactly those bytes; at W > 2 its ring moves 2.5 (W-1)/W times as many.

#include "../common.hpp"

#include <tutti/bench/allreduce.hpp>
#include <tutti/launch.hpp>
#include <tutti/reducers/local_ring.hpp>
#if defined(TUTTI_BENCH_HAS_MPI)
#include <tutti/reducers/mpi.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <vector>

namespace {

struct config {
  std::string reducer = "local";
  int ranks = 2;
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t factor = 4;
  std::size_t warmup = 3;
  double seconds_per_size = 0.2;
  std::size_t min_iters = 5;
  std::string json;
  bool shared_arena = false;  // --reducer mpi: the buffers in mpi_allreduce's shared arena
};

struct row {
  std::size_t bytes = 0;
  std::size_t iters = 0;
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  double copy_us = 0;  // every rank copying its S bytes at once
  std::size_t wrong = 0;
};

using clock_type = std::chrono::steady_clock;

template <class Reducer>
void line_up(Reducer& reducer) {
  double v[1] = {0.0};
  reducer.all_reduce_max(std::span<double>(v));
}

// One size on one rank: a collective, every rank calls it with the same arguments.
// The message is the first `bytes` of the reducer's shared arena when it lent one (as
// `tutti bench allreduce` does), else a buffer of this rank's own.
template <class Reducer>
row measure(Reducer& reducer, std::size_t bytes, const config& c) {
  const int world = reducer.world_size();
  std::vector<float> own;
  const std::span<float> buf =
      tutti::detail::bench::bench_buffer(reducer, bytes / sizeof(float), own);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = float(reducer.rank() + 1) + float(i % 7);
  const std::span<float> s = buf;

  line_up(reducer);
  const auto w0 = clock_type::now();
  for (std::size_t k = 0; k < c.warmup; ++k) reducer.all_reduce_mean(s);
  double per_iter[1] = {tutti::bench::seconds_since(w0) /
                        double(std::max<std::size_t>(c.warmup, 1))};
  reducer.all_reduce_max(std::span<double>(per_iter));
  const double want = per_iter[0] > 0 ? c.seconds_per_size / per_iter[0] : 1e6;
  const std::size_t iters = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(want)),
                                                    c.min_iters, std::size_t{1000000});

  std::vector<double> seconds(iters);
  for (std::size_t k = 0; k < iters; ++k) {
    line_up(reducer);
    const auto t0 = clock_type::now();
    reducer.all_reduce_mean(s);
    seconds[k] = tutti::bench::seconds_since(t0);
  }
  reducer.all_reduce_max(std::span<double>(seconds));  // per iteration, the slowest rank

  // The bound: every rank copies its S bytes once, all at once, as often as the allreduce ran.
  std::vector<float> src(buf.size(), 1.f), dst(buf.size(), 0.f);
  std::vector<double> copies(iters);
  for (std::size_t k = 0; k < iters; ++k) {
    line_up(reducer);
    const auto t0 = clock_type::now();
    std::memcpy(dst.data(), src.data(), bytes);
    copies[k] = tutti::bench::seconds_since(t0);
  }
  reducer.all_reduce_max(std::span<double>(copies));
  volatile float sink = dst[dst.size() / 2];  // the copies are used
  (void)sink;

  const double base = (world + 1) / 2.0;
  double wrong[1] = {0.0};
  for (std::size_t i = 0; i < buf.size(); ++i) {
    const double expected = base + double(i % 7);
    if (!(std::abs(double(buf[i]) - expected) <= 1e-6 * std::abs(expected))) wrong[0] += 1;
  }
  reducer.all_reduce_sum(std::span<double>(wrong));

  row r;
  r.bytes = bytes;
  r.iters = iters;
  const double t = tutti::bench::median(seconds);
  r.time_us = t * 1e6;
  r.algbw_gbs = t > 0 ? double(bytes) / t / 1e9 : 0.0;
  r.busbw_gbs = r.algbw_gbs * 2.0 * double(world - 1) / double(world);
  r.copy_us = tutti::bench::median(copies) * 1e6;
  r.wrong = static_cast<std::size_t>(wrong[0]);
  return r;
}

template <class Reducer>
std::vector<row> sweep(Reducer& reducer, const config& c) {
  std::vector<row> rows;
  for (std::size_t b = c.min_bytes; b <= c.max_bytes; b *= c.factor) {
    rows.push_back(measure(reducer, b, c));
    if (b > c.max_bytes / c.factor) break;
  }
  return rows;
}

// Prints the table and writes the JSON report (rank 0 only); returns the exit code.
int report(const std::vector<row>& rows, const std::string& name, int world, const config& c) {
  std::printf(
      "tutti_bench_peer_allreduce: %s, %d ranks; time = median over iterations of the "
      "slowest rank\n",
      name.c_str(), world);
  std::printf("%12s %10s %7s %12s %10s %10s %7s %10s %9s\n", "size(B)", "count", "iters",
              "time(us)", "algbw", "busbw", "#wrong", "copy(us)", "of bound");
  std::size_t wrong = 0;
  nlohmann::json results = nlohmann::json::array();
  for (const auto& r : rows) {
    const double share = r.time_us > 0 ? r.copy_us / r.time_us : 0.0;
    std::printf("%12zu %10zu %7zu %12.1f %10.3f %10.3f %7zu %10.1f %8.1f%%\n", r.bytes,
                r.bytes / sizeof(float), r.iters, r.time_us, r.algbw_gbs, r.busbw_gbs, r.wrong,
                r.copy_us, 100.0 * share);
    wrong += r.wrong;
    results.push_back({{"reducer", name},
                       {"ranks", world},
                       {"bytes", r.bytes},
                       {"count", r.bytes / sizeof(float)},
                       {"iters", r.iters},
                       {"time_us", r.time_us},
                       {"algbw_gbs", r.algbw_gbs},
                       {"busbw_gbs", r.busbw_gbs},
                       {"copy_us", r.copy_us},
                       {"bound_share", share},
                       {"wrong", r.wrong}});
  }
  std::fflush(stdout);
  if (!c.json.empty())
    tutti::bench::write_json(c.json, results,
                             {{"benchmark", "peer_allreduce"},
                              {"config",
                               {{"min_bytes", c.min_bytes},
                                {"max_bytes", c.max_bytes},
                                {"factor", c.factor},
                                {"warmup", c.warmup},
                                {"seconds_per_size", c.seconds_per_size},
                                {"min_iters", c.min_iters}}}});
  if (wrong > 0) {
    std::fprintf(stderr, "tutti_bench_peer_allreduce: %zu wrong values\n", wrong);
    return 1;
  }
  return 0;
}

int run_threads(const config& c) {
  std::vector<row> rows;
  tutti::run_local(c.ranks, [&](tutti::local_ring& ring) {
    auto mine = sweep(ring, c);
    if (ring.rank() == 0) rows = std::move(mine);
  });
  return report(rows, "local_ring", c.ranks, c);
}

#if defined(TUTTI_BENCH_HAS_MPI)
int run_mpi(const config& c, int& argc, char**& argv) {
  tutti::mpi_session session(argc, argv);
  return tutti::mpi_abort_on_exception([&] {
    tutti::mpi_allreduce reducer;
    if (c.shared_arena && reducer.shared_gradient_arena(c.max_bytes / sizeof(float)).empty())
      throw tutti::error("--shared-arena: no shared arena (are all processes on one host?)");
    const auto rows = sweep(reducer, c);
    return reducer.rank() == 0
               ? report(rows, c.shared_arena ? "mpi_shared_arena" : "mpi", reducer.world_size(), c)
               : 0;
  });
}
#endif

}  // namespace

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{"tutti_bench_peer_allreduce: tutti's all_reduce_mean, timed as the gloo peer is"};
  config c;
  app.add_option("--reducer", c.reducer,
                 "local: local_ring over --ranks threads; mpi: mpi_allreduce over mpiexec's "
                 "processes")
      ->check(CLI::IsMember({"local", "mpi"}))
      ->capture_default_str();
  app.add_option("--ranks", c.ranks, "threads of local_ring")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--min-bytes", c.min_bytes, "smallest message (multiple of 4)")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 34))
      ->capture_default_str();
  app.add_option("--max-bytes", c.max_bytes, "largest message")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 34))
      ->capture_default_str();
  app.add_option("--factor", c.factor, "ratio of consecutive sizes")
      ->check(CLI::Range(std::size_t{2}, std::size_t{1024}))
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed iterations per size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  app.add_option("--seconds-per-size", c.seconds_per_size, "target time of the timed iterations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--min-iters", c.min_iters, "fewest timed iterations per size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  app.add_flag("--shared-arena", c.shared_arena,
               "--reducer mpi: the buffers in mpi_allreduce's shared arena (an MPI shared-memory "
               "window, reduced in place; all processes on one host)");
  app.add_option("--json", c.json, "also write the results as JSON to this file");
  try {
    app.parse(argc, argv);
    if (c.min_bytes % sizeof(float) != 0)
      throw CLI::ValidationError("--min-bytes", "must be a multiple of 4 (float32 messages)");
    if (c.max_bytes < c.min_bytes)
      throw CLI::ValidationError("--max-bytes", "must be at least --min-bytes");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "tutti_bench_peer_allreduce: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    if (c.reducer == "mpi") {
#if defined(TUTTI_BENCH_HAS_MPI)
      return run_mpi(c, argc, argv);
#else
      std::fprintf(stderr, "tutti_bench_peer_allreduce: error: --reducer mpi: built without MPI\n");
      return 2;
#endif
    }
    return run_threads(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti_bench_peer_allreduce: error: %s\n", e.what());
    return 1;
  }
}
