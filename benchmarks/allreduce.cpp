// SPDX-License-Identifier: Apache-2.0
/// @file benchmarks/allreduce.cpp
/// @brief `tutti_bench_allreduce`: time and bandwidth of `all_reduce_mean` per message size, in
/// the convention of nccl-tests (time, algbw, busbw, #wrong).
///
/// For each world size W the ranks run as threads of this process (`tutti::run_local`) and
/// reduce float buffers of 4 KB ... 64 MB. Every timed iteration starts right after a tiny
/// collective, so the ranks start together; a rank times its own call, the iteration's time is
/// the slowest rank's, and the reported time is the median over iterations. After the timed loop
/// each rank checks its buffer against the known mean. The `no_op` rows time the single-process
/// reducer, whose all_reduce_mean is an early return: the floor of what a step pays to reduce.
/// The measuring core is <tutti/bench/allreduce.hpp>, shared with `tutti bench allreduce`,
/// which also fits the alpha-beta model printed under each local_ring table.

#include "common.hpp"

#include <tutti/bench/allreduce.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

struct config {
  std::vector<int> ranks{2, 4};
  std::vector<std::string> reducers{"local_ring", "no_op"};
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t factor = 4;
  std::size_t iters = 0;  // 0: adaptive
  std::size_t warmup = 3;
  double seconds_per_size = 0.2;
  std::size_t min_iters = 5;
  std::string json;
};

using row = tutti::allreduce_bench_row;

tutti::allreduce_bench_options sweep_options(const config& c) {
  return {.min_bytes = c.min_bytes,
          .max_bytes = c.max_bytes,
          .factor = c.factor,
          .iters = c.iters,
          .warmup = c.warmup,
          .seconds_per_size = c.seconds_per_size,
          .min_iters = c.min_iters};
}

void print_header(const std::string& reducer, int world) {
  std::fputs(tutti::format_allreduce_header(reducer, world).c_str(), stdout);
  std::fflush(stdout);
}

void print_row(const row& r) {
  std::fputs(tutti::format_allreduce_row(r).c_str(), stdout);
  std::fflush(stdout);
}

void print_footer(const std::vector<row>& rows) {
  if (rows.empty()) return;
  double sum = 0;
  for (const auto& r : rows) sum += r.busbw_gbs;
  std::printf("# average busbw: %.3f GB/s\n", sum / double(rows.size()));
}

// The alpha-beta fit of one world size's rows, or why there is none (one rank, one size).
void print_fit(const std::vector<row>& rows) {
  try {
    std::fputs(tutti::format_alpha_beta(tutti::fit_alpha_beta(rows)).c_str(), stdout);
  } catch (const tutti::invalid_argument& e) {
    std::printf("# alpha-beta fit: none (%s)\n", e.what());
  }
}

nlohmann::json to_json(const row& r) {
  return {{"reducer", r.reducer},     {"ranks", r.ranks},         {"bytes", r.bytes},
          {"count", r.count},         {"iters", r.iters},         {"time_us", r.time_us},
          {"algbw_gbs", r.algbw_gbs}, {"busbw_gbs", r.busbw_gbs}, {"wrong", r.wrong}};
}

int run(const config& c) {
  const auto sizes = tutti::allreduce_bench_sizes(sweep_options(c));
  std::printf(
      "tutti_bench_allreduce: %zu sizes, %zu B ... %zu B (x%zu), %s iterations, "
      "%zu warmup; time = median over iterations of the slowest rank\n",
      sizes.size(), sizes.front(), sizes.back(), c.factor,
      c.iters ? std::to_string(c.iters).c_str() : "adaptive", c.warmup);
  std::vector<row> all;
  std::size_t wrong = 0;
  for (const auto& name : c.reducers) {
    if (name == "local_ring") {
      for (int world : c.ranks) {
        print_header(name, world);
        auto rows = tutti::bench_allreduce_local_ring(world, sweep_options(c));
        for (const auto& r : rows) print_row(r);
        print_footer(rows);
        print_fit(rows);
        all.insert(all.end(), rows.begin(), rows.end());
      }
    } else {
      print_header(name, 1);
      auto rows = tutti::bench_allreduce_no_op(sweep_options(c));
      for (const auto& r : rows) print_row(r);
      all.insert(all.end(), rows.begin(), rows.end());
    }
  }
  for (const auto& r : all) wrong += r.wrong;
  if (!c.json.empty()) {
    nlohmann::json results = nlohmann::json::array();
    for (const auto& r : all) results.push_back(to_json(r));
    tutti::bench::write_json(c.json, results,
                             {{"benchmark", "allreduce"},
                              {"config",
                               {{"min_bytes", c.min_bytes},
                                {"max_bytes", c.max_bytes},
                                {"factor", c.factor},
                                {"iters", c.iters},
                                {"warmup", c.warmup},
                                {"seconds_per_size", c.seconds_per_size}}}});
    std::printf("\nwrote %s\n", c.json.c_str());
  }
  if (wrong > 0) {
    std::fprintf(stderr, "tutti_bench_allreduce: %zu wrong values\n", wrong);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{"tutti_bench_allreduce: all_reduce_mean time and bandwidth per message size"};
  config c;
  app.add_option("--ranks", c.ranks, "world sizes of local_ring (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--reducer", c.reducers, "reducers to run (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"local_ring", "no_op"}))
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
  app.add_option("--iters", c.iters,
                 "timed iterations per size (0: adaptive, enough for --seconds-per-size)")
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed iterations per size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  app.add_option("--seconds-per-size", c.seconds_per_size, "adaptive target time per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--json", c.json, "also write the results as JSON to this file");
  try {
    app.parse(argc, argv);
    if (c.min_bytes % sizeof(float) != 0)
      throw CLI::ValidationError("--min-bytes", "must be a multiple of 4 (float32 messages)");
    if (c.max_bytes < c.min_bytes)
      throw CLI::ValidationError("--max-bytes", "must be at least --min-bytes");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, as a shell user expects; exit code 2 marks a usage error.
    std::fprintf(stderr, "%s: error: %s (see --help)\n", "tutti_bench_allreduce", e.what());
    return 2;
  }
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti_bench_allreduce: error: %s\n", e.what());
    return 1;
  }
}
