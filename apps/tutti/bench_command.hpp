// SPDX-License-Identifier: Apache-2.0
// `tutti bench allreduce`: the local machine's allreduce in nccl-tests' columns, its alpha-beta
// fit, the cores the host leaves this job and, optionally, what an emulated training step pays
// to synchronise its ranks; all saved as a link profile for `tutti plan --link-file`.
#pragma once

#include "json_output.hpp"
#include "output_paths.hpp"

#include <tutti/bench/allreduce.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/links.hpp>
#include <tutti/plan/projection.hpp>

#if TUTTI_HAS_MPI
#include <tutti/reducers/mpi.hpp>
#endif
#if defined(TUTTI_HAS_CUDA) && TUTTI_HAS_NCCL
#include <tutti/reducers/nccl_ring.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/cuda.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tutti::cli {

/// Everything `tutti bench allreduce` can be told.
struct bench_config {
  std::vector<int> ranks{2, 4};
  bool ranks_given = false;
  std::string reducer = "local";    // local: threads; mpi: mpiexec's processes; nccl: GPUs
  std::string shared_arena = "on";  // --reducer mpi: reduce in mpi_allreduce's shared arena
  allreduce_bench_options sweep{};
  std::string json;
  std::string save_link;
  std::string link_name = "measured";
  double cores_seconds = 0.3;  // how long the available-cores measurement burns
  double step_work_us = -1;    // < 0: no emulated steps
  std::size_t step_bytes = std::size_t{1} << 20;
  std::size_t step_iters = 300;
};

/// Adds `bench` with its `allreduce` subcommand to `app`; returns the `bench` command.
inline CLI::App* add_bench_commands(CLI::App& app, bench_config& c) {
  CLI::App* bench = app.add_subcommand("bench", "measure this machine (allreduce)");
  bench->require_subcommand(1);
  CLI::App* ar = bench->add_subcommand(
      "allreduce",
      "time all_reduce_mean per message size (nccl-tests columns), fit the alpha-beta model, "
      "and measure the cores this host leaves free");
  ar->add_option("--ranks", c.ranks,
                 "world sizes: of local_ring, threads of this process; of nccl_ring, GPUs "
                 "(default: every visible GPU)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->each([&c](const std::string&) { c.ranks_given = true; })
      ->capture_default_str();
  ar->add_option("--reducer", c.reducer,
                 "local: local_ring, ranks are threads of this process; mpi: mpi_allreduce over "
                 "the processes mpiexec started (run as mpiexec -n N tutti bench allreduce "
                 "--reducer mpi); nccl: nccl_ring, one thread per GPU of this process (a CUDA "
                 "build with NCCL)")
      ->check(CLI::IsMember({"local", "mpi", "nccl"}))
      ->capture_default_str();
  ar->add_option("--shared-arena", c.shared_arena,
                 "--reducer mpi: on (the messages live in mpi_allreduce's shared arena and are "
                 "reduced in place, as tutti train does when every process is on this host) or "
                 "off (every rank's own buffer through MPI_Allreduce)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  ar->add_option("--min-bytes", c.sweep.min_bytes, "smallest message (multiple of 4)")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 34))
      ->capture_default_str();
  ar->add_option("--max-bytes", c.sweep.max_bytes, "largest message")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 34))
      ->capture_default_str();
  ar->add_option("--factor", c.sweep.factor, "ratio of consecutive sizes")
      ->check(CLI::Range(std::size_t{2}, std::size_t{1024}))
      ->capture_default_str();
  ar->add_option("--iters", c.sweep.iters,
                 "timed iterations per size (0: adaptive, enough for --seconds-per-size)")
      ->capture_default_str();
  ar->add_option("--warmup", c.sweep.warmup, "untimed iterations per size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  ar->add_option("--seconds-per-size", c.sweep.seconds_per_size, "adaptive target time per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  ar->add_option("--cores-seconds", c.cores_seconds,
                 "seconds the available-cores measurement burns on every core")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  auto* work = ar->add_option("--step-work-us", c.step_work_us,
                              "also time emulated training steps: every rank burns this many "
                              "microseconds of CPU, then reduces --step-bytes (no line-up)")
                   ->check(CLI::NonNegativeNumber);
  ar->add_option(
        "--step-bytes", c.step_bytes,
        "bytes each emulated step reduces (a train report's ledger.bytes_reduced_per_step)")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 34))
      ->needs(work)
      ->capture_default_str();
  ar->add_option("--step-iters", c.step_iters, "timed emulated steps")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}))
      ->needs(work)
      ->capture_default_str();
  ar->add_option("--json", c.json, "also write the rows and the fit as JSON to this file");
  ar->add_option("--save-link", c.save_link,
                 "write the fit as a link profile (JSON) for tutti plan --link-file");
  ar->add_option("--link-name", c.link_name, "name of the saved link profile")
      ->capture_default_str();
  return bench;
}

namespace detail::bench {

// What one world size measured: its sweep and, when asked for, its emulated steps.
struct world_result {
  int ranks = 0;
  std::vector<allreduce_bench_row> rows;
  std::optional<step_bench_result> step;
};

// The measurements of a whole run, the same on every rank.
struct bench_result {
  std::string reducer;
  double cores = 0;            // of the host
  int core_threads = 0;        // threads that burned to measure the available cores
  double available_cores = 0;  // what they got
  std::vector<world_result> worlds;
};

// The step's synchronisation: its measured mean less the CPU work at the host's core share and
// the allreduce the fit predicts. What `tutti plan` adds per step for ranks that share a host.
inline double step_sync_s(const step_bench_result& s, const alpha_beta_fit& fit,
                          double available_cores) {
  const shared_host h{.cores = available_cores, .available_cores = available_cores};
  return s.mean_s - s.work_s * h.core_share(s.ranks, 1.0) - fit.seconds(s.bytes, s.ranks);
}

// One world size on `reducer` (a collective of its group): the sweep, then the emulated steps.
template <class Reducer>
world_result measure_world(Reducer& reducer, const bench_config& c, const std::string& name) {
  world_result w;
  w.ranks = reducer.world_size();
  w.rows = bench_allreduce(reducer, c.sweep, name);
  if (c.step_work_us >= 0)
    w.step = bench_step(reducer, c.step_bytes / sizeof(float) * sizeof(float),
                        c.step_work_us * 1e-6, c.step_iters, name);
  return w;
}

// The alpha-beta fit of `rows`, or none, said on stdout with the reason: on a busy machine a
// small message can take longer than a larger one, and no positive bandwidth fits.
inline std::optional<alpha_beta_fit> try_fit(const std::vector<allreduce_bench_row>& rows) {
  try {
    return fit_alpha_beta(rows);
  } catch (const invalid_argument& e) {
    std::printf(
        "# no alpha-beta fit: %s (timings that do not grow with the message size: a busy "
        "machine? more --iters or a larger --max-bytes help)\n",
        e.what());
    return std::nullopt;
  }
}

// What the printed tables gathered over the world sizes, for the fit and the files.
struct bench_tables {
  std::vector<allreduce_bench_row> all;  // every row of every world size
  nlohmann::json fits = nlohmann::json::array();
  nlohmann::json steps = nlohmann::json::array();
  std::optional<nlohmann::json> saved_step;  // the first emulated step, for --save-link
  std::optional<alpha_beta_fit> single_fit;  // the one world size's fit, when there is one
};

// The emulated steps of one world size, printed and returned as JSON.
inline nlohmann::json report_step(const step_bench_result& s,
                                  const std::optional<alpha_beta_fit>& f, double available_cores) {
  const shared_host h{.cores = available_cores, .available_cores = available_cores};
  const double share = h.core_share(s.ranks, 1.0);
  const double reduce = f ? f->seconds(s.bytes, s.ranks) : 0.0;
  const double sync = f ? step_sync_s(s, *f, available_cores) : 0.0;
  std::printf(
      "# emulated steps (%zu, %d ranks): %.1f us of CPU each, then allreduce of %.0f B: step "
      "mean %.1f us, p50 %.1f, p95 %.1f\n#   = work %.1f us x core share %.2f + allreduce "
      "%.1f us (fit) + sync %.1f us\n",
      s.iters, s.ranks, s.work_s * 1e6, s.bytes, s.mean_s * 1e6, s.p50_s * 1e6, s.p95_s * 1e6,
      s.work_s * 1e6, share, reduce * 1e6, sync * 1e6);
  return {{"ranks", s.ranks},        {"work_us", s.work_s * 1e6}, {"bytes", s.bytes},
          {"iters", s.iters},        {"mean_us", s.mean_s * 1e6}, {"p50_us", s.p50_s * 1e6},
          {"p95_us", s.p95_s * 1e6}, {"core_share", share},       {"allreduce_us", reduce * 1e6},
          {"sync_us", sync * 1e6}};
}

// One world size: its table, its fit and its emulated steps, printed and gathered into `t`.
inline void report_world(const bench_result& r, const world_result& w, bench_tables& t) {
  std::fputs(format_allreduce_header(r.reducer, w.ranks).c_str(), stdout);
  double sum = 0;
  for (const auto& row : w.rows) {
    std::fputs(format_allreduce_row(row).c_str(), stdout);
    sum += row.busbw_gbs;
  }
  std::printf("# average busbw: %.3f GB/s\n", sum / double(w.rows.size()));
  std::optional<alpha_beta_fit> f;
  if (w.rows.size() >= 2 && w.ranks > 1)  // one rank moves no data: nothing to fit
    f = try_fit(w.rows);
  if (f) {
    std::fputs(format_alpha_beta(*f).c_str(), stdout);
    t.fits.push_back({{"ranks", w.ranks},
                      {"alpha_us", f->alpha_s * 1e6},
                      {"gb_per_s", 1.0 / f->beta_s_per_byte / 1e9},
                      {"max_rel_error", f->max_rel_error},
                      {"rms_rel_error", f->rms_rel_error}});
  }
  if (w.step) {
    nlohmann::json js = report_step(*w.step, f, r.available_cores);
    t.steps.push_back(js);
    if (!t.saved_step) t.saved_step = js;
  }
  if (r.worlds.size() == 1) t.single_fit = f;
  std::fflush(stdout);
  t.all.insert(t.all.end(), w.rows.begin(), w.rows.end());
}

// --save-link: the fitted link profile, with the host's cores and the emulated step.
inline void write_link_profile(const bench_config& c, const bench_result& r,
                               const alpha_beta_fit& fit, const nlohmann::json& host,
                               const std::optional<nlohmann::json>& saved_step) {
  const link_profile link = fit.as_link(c.link_name);
  nlohmann::json j = link_profile_json(link);
  std::vector<int> ranks;
  for (const auto& w : r.worlds) ranks.push_back(w.ranks);
  j["fit"] = {{"alpha_s", fit.alpha_s},
              {"beta_s_per_byte", fit.beta_s_per_byte},
              {"points", fit.points},
              {"max_rel_error", fit.max_rel_error},
              {"rms_rel_error", fit.rms_rel_error},
              {"reducer", r.reducer},
              {"ranks", ranks}};
  j["host"] = host;
  if (saved_step) j["step"] = *saved_step;
  write_json_file(c.save_link, j, "tutti bench allreduce --save-link");
  std::printf(
      "\nwrote link profile %s (%s: %.3f GB/s, %.3f us per step; %.2f cores available%s); use "
      "it with tutti plan --link-file %s\n",
      c.save_link.c_str(), link.name.c_str(), link.gb_per_s, link.latency_us, r.available_cores,
      saved_step ? ", step sync measured" : "", c.save_link.c_str());
}

// --json: every row, the fits, the host, the emulated steps and the link.
inline void write_bench_json(const bench_config& c, const bench_tables& t,
                             const nlohmann::json& host, const std::optional<alpha_beta_fit>& fit) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : t.all)
    rows.push_back({{"reducer", row.reducer},
                    {"ranks", row.ranks},
                    {"bytes", row.bytes},
                    {"count", row.count},
                    {"iters", row.iters},
                    {"time_us", row.time_us},
                    {"algbw_gbs", row.algbw_gbs},
                    {"busbw_gbs", row.busbw_gbs},
                    {"wrong", row.wrong}});
  nlohmann::json j = {{"benchmark", "allreduce"},
                      {"results", rows},
                      {"fits", t.fits},
                      {"host", host},
                      {"steps", t.steps},
                      {"link", fit ? nlohmann::json(link_profile_json(fit->as_link(c.link_name)))
                                   : nlohmann::json()}};
  write_json_file(c.json, j, "tutti bench allreduce --json");
}

// Prints the tables and fits, and writes --save-link and --json (the caller is rank 0).
// Returns the exit code: 1 when a reduced value was wrong.
inline int report(const bench_config& c, const bench_result& r) {
  std::printf(
      "# host: %g cores; %d threads burning for %.2f s got %.2f cores (the rest is other "
      "jobs' load)\n",
      r.cores, r.core_threads, c.cores_seconds, r.available_cores);
  bench_tables t;
  for (const auto& w : r.worlds) report_world(r, w, t);
  std::size_t wrong = 0;
  for (const auto& row : t.all) wrong += row.wrong;
  const bool fits_any =
      std::count_if(t.all.begin(), t.all.end(), [](const auto& row) { return row.ranks > 1; }) >= 2;
  if (!fits_any) {
    std::printf("# no alpha-beta fit: one rank moves no data\n");
    TUTTI_EXPECTS(c.save_link.empty(), "tutti bench allreduce",
                  "--save-link: a link profile is fitted to timings of 2 or more ranks; expected "
                  "--ranks 2 or more");
  }
  std::optional<alpha_beta_fit> fit;
  if (fits_any && r.worlds.size() > 1) {
    std::printf("\n# over all world sizes:\n");
    fit = try_fit(t.all);
    if (fit) std::fputs(format_alpha_beta(*fit).c_str(), stdout);
  } else if (fits_any) {
    fit = t.single_fit;
  }
  TUTTI_EXPECTS(c.save_link.empty() || fit || !fits_any, "tutti bench allreduce",
                "--save-link: the timings gave no alpha-beta fit (see above); expected timings "
                "that grow with the message size: rerun on a quieter machine, with more --iters "
                "or a larger --max-bytes");
  const nlohmann::json host = {{"cores", r.cores},
                               {"available_cores", r.available_cores},
                               {"threads", r.core_threads},
                               {"seconds", c.cores_seconds}};
  if (!c.save_link.empty()) write_link_profile(c, r, *fit, host, t.saved_step);
  if (!c.json.empty()) write_bench_json(c, t, host, fit);
  if (wrong > 0) {
    std::fprintf(stderr, "tutti bench allreduce: %zu wrong values\n", wrong);
    return 1;
  }
  return 0;
}

inline double host_cores() {
  return double(std::max(1u, std::thread::hardware_concurrency()));
}

inline void print_banner(const bench_config& c) {
  const auto sizes = allreduce_bench_sizes(c.sweep);
  std::printf(
      "tutti bench allreduce: %zu sizes, %zu B ... %zu B (x%zu), %s iterations, %zu warmup; "
      "time = median over iterations of the slowest rank\n",
      sizes.size(), sizes.front(), sizes.back(), c.sweep.factor,
      c.sweep.iters ? std::to_string(c.sweep.iters).c_str() : "adaptive", c.sweep.warmup);
  std::fflush(stdout);
}

#if defined(TUTTI_CLI_CUDA) && TUTTI_HAS_NCCL
// `--reducer nccl`, defined in the program's CUDA translation unit (cuda_parts.cu).
int run_bench_nccl_cuda(const bench_config& c);
#endif

#if defined(TUTTI_HAS_CUDA) && TUTTI_HAS_NCCL
// `--reducer nccl`: one world size's sweep on `ring`, one rank of `run_nccl`. The message lives
// in device memory, filled on the host and copied; each timed `all_reduce_mean` (which returns
// once queued) is followed by a wait for the compute stream, which the collective's event
// orders after it; after the last iteration the values are copied back and checked.
inline world_result measure_world_nccl(nccl_ring& ring, const bench_config& c) {
  namespace tb = tutti::detail::bench;
  world_result w;
  w.ranks = ring.world_size();
  const cuda_space space = ring.space();
  const auto wait = [&] {
    TUTTI_CUDA_CHECK(cudaStreamSynchronize(space.stream()));
  };
  for (const std::size_t bytes : allreduce_bench_sizes(c.sweep)) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<float> host(count);
    tb::bench_fill(host, ring.rank());
    buffer<float, cuda_space> message(count, space);
    copy_from_host(space, std::span<const float>(host), message.span());
    wait();
    tb::bench_rank_sample sample;
    sample.seconds = tb::bench_time(ring, message.span(), c.sweep, wait);
    copy_to_host(space, std::span<const float>(message.span()), std::span<float>(host));
    sample.wrong = tb::bench_count_wrong(host, ring.world_size());
    tb::bench_gather_slowest(ring, sample);
    w.rows.push_back(
        tb::bench_row("nccl_ring", ring.world_size(), count, sample.seconds, sample.wrong));
  }
  return w;
}

inline int run_bench_nccl(const bench_config& c) {
  TUTTI_EXPECTS(c.step_work_us < 0, "tutti bench allreduce",
                "--step-work-us with --reducer nccl: the emulated steps burn host CPU; expected "
                "them with --reducer local or mpi");
  const int gpus = cuda_device_count();
  TUTTI_EXPECTS(gpus > 0, "tutti bench allreduce",
                "--reducer nccl: no CUDA device is visible; expected at least one GPU");
  print_banner(c);
  bench_result r;
  r.reducer = "nccl_ring";
  r.cores = host_cores();
  r.core_threads = int(r.cores);
  r.available_cores = measure_available_cores(r.core_threads, c.cores_seconds);
  for (const int world : c.ranks_given ? c.ranks : std::vector<int>{gpus}) {
    world_result w;
    run_nccl(world, [&](nccl_ring& ring) {
      auto mine = measure_world_nccl(ring, c);
      if (ring.rank() == 0) w = std::move(mine);
    });
    r.worlds.push_back(std::move(w));
  }
  return report(c, r);
}
#endif

#if TUTTI_HAS_MPI
// `--reducer mpi`: this process is one rank of MPI_COMM_WORLD, all assumed on one host (the
// available cores are summed over the processes). Rank 0 prints and writes.
inline int run_bench_mpi(const bench_config& c) {
  mpi_session session;
  int world = 1, rank = 0;
  TUTTI_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  TUTTI_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (c.ranks_given || world < 2) {
    // The same usage error on every process; rank 0 says it once, and nobody exits first.
    if (rank == 0) {
      std::fprintf(stderr, "tutti: error: tutti bench allreduce --reducer mpi: %s\n",
                   world < 2 ? "mpiexec started 1 process; expected at least 2 (mpiexec -n 2 ...)"
                             : "--ranks is the world size of local ranks; with --reducer mpi "
                               "the processes of mpiexec are the ranks, so leave it out");
      std::fflush(stderr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return 2;
  }
  return mpi_abort_on_exception([&] {
    if (rank == 0) print_banner(c);
    mpi_allreduce reducer(MPI_COMM_WORLD, {.shared_arena = c.shared_arena == "on"});
    // One arena for the largest message (and the emulated steps'); empty where the processes
    // span hosts, and then every message goes through MPI_Allreduce.
    std::size_t largest = 0;
    for (const std::size_t bytes : allreduce_bench_sizes(c.sweep))
      largest = std::max(largest, bytes);
    if (c.step_work_us >= 0) largest = std::max(largest, c.step_bytes);
    const bool shared = !reducer.shared_gradient_arena(largest / sizeof(float)).empty();
    bench_result r;
    r.reducer = shared ? "mpi_shared_arena" : "mpi";
    r.cores = host_cores();
    // Every process burns its share of the cores at once; together they ask for all of them.
    const int threads = std::max(1, int(r.cores) / world);
    r.core_threads = threads * world;
    double line_up[1] = {0.0};
    reducer.all_reduce_max(std::span<double>(line_up));
    double got[1] = {measure_available_cores(threads, c.cores_seconds)};
    reducer.all_reduce_sum(std::span<double>(got));
    r.available_cores = std::min(r.cores, got[0]);
    r.worlds.push_back(measure_world(reducer, c, r.reducer));
    return rank == 0 ? report(c, r) : 0;
  });
}
#endif

}  // namespace detail::bench

/// Runs `tutti bench allreduce`; returns the process exit code (1 when a value was wrong).
inline int run_bench_allreduce(const bench_config& c) {
  check_outputs("tutti bench allreduce", {{"--json", c.json}, {"--save-link", c.save_link}}, {},
                {});
  if (c.reducer == "mpi") {
#if TUTTI_HAS_MPI
    return detail::bench::run_bench_mpi(c);
#else
    tutti::detail::throw_invalid("tutti bench allreduce",
                                 "--reducer mpi: this tutti was built without MPI; expected "
                                 "--reducer local, or a build that found MPI");
#endif
  }
  if (c.reducer == "nccl") {
#if defined(TUTTI_CLI_CUDA) && TUTTI_HAS_NCCL
    return detail::bench::run_bench_nccl_cuda(c);
#else
    tutti::detail::throw_invalid("tutti bench allreduce",
                                 "--reducer nccl: this tutti was built without CUDA and NCCL; "
                                 "expected --reducer local or mpi, or a build with nvcc and NCCL");
#endif
  }
  for (const int world : c.ranks)
    TUTTI_EXPECTS(world >= 2, "tutti bench allreduce",
                  "--ranks " + std::to_string(world) +
                      " with --reducer local; expected world sizes of at least 2");
  detail::bench::print_banner(c);
  detail::bench::bench_result r;
  r.reducer = "local_ring";
  r.cores = detail::bench::host_cores();
  r.core_threads = int(r.cores);
  r.available_cores = measure_available_cores(r.core_threads, c.cores_seconds);
  for (const int world : c.ranks) {
    detail::bench::world_result w;
    run_local(world, [&](local_ring& ring) {
      auto mine = detail::bench::measure_world(ring, c, "local_ring");
      if (ring.rank() == 0) w = std::move(mine);
    });
    r.worlds.push_back(std::move(w));
  }
  return detail::bench::report(c, r);
}

}  // namespace tutti::cli
