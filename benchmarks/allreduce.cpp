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

#include "common.hpp"

#include <tutti/launch.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/no_op.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

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

/// What one rank measured for one message size.
struct rank_sample {
  std::vector<double> seconds;  // per timed iteration
  std::size_t wrong = 0;
};

/// One row of the table.
struct row {
  std::string reducer;
  int ranks = 1;
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::size_t iters = 0;
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  std::size_t wrong = 0;
};

std::vector<std::size_t> message_sizes(const config& c) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = c.min_bytes; b <= c.max_bytes; b *= c.factor) {
    sizes.push_back(b);
    if (b > c.max_bytes / c.factor) break;  // the next step would overflow or pass the end
  }
  return sizes;
}

// Rank r holds r + 1 + (i % 7): every value and partial sum is an exact float, so the mean
// (W + 1) / 2 + (i % 7) is known exactly, and the mean of W equal buffers is the buffer itself:
// the check after many iterations tests the last one as strictly as the first.
void fill_pattern(std::span<float> v, int rank) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(rank + 1) + float(i % 7);
}

std::size_t count_wrong(std::span<const float> v, int world) {
  const double base = (world + 1) / 2.0;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double expected = base + double(i % 7);
    if (!(std::abs(double(v[i]) - expected) <= 1e-6 * std::abs(expected))) ++wrong;
  }
  return wrong;
}

// A collective on one value: the ranks leave it within a wake-up of each other.
template <class Reducer>
void line_up(Reducer& reducer) {
  double v[1] = {0.0};
  reducer.all_reduce_max(std::span<double>(v));
}

/// Runs warmup and timed iterations of all_reduce_mean over one buffer on one rank. Every rank
/// of the group must call it with the same arguments (the iteration count is agreed on).
template <class Reducer>
rank_sample measure(Reducer& reducer, std::size_t count, const config& c) {
  std::vector<float> buf(count);  // first touched by this rank's thread
  fill_pattern(buf, reducer.rank());
  const std::span<float> s(buf);

  line_up(reducer);
  const auto warm_start = clock_type::now();
  for (std::size_t k = 0; k < c.warmup; ++k) reducer.all_reduce_mean(s);
  double per_iter[1] = {tutti::bench::seconds_since(warm_start) /
                        double(std::max<std::size_t>(c.warmup, 1))};
  // Every rank must run the same number of iterations: agree on the slowest rank's estimate.
  reducer.all_reduce_max(std::span<double>(per_iter));
  std::size_t iters = c.iters;
  if (iters == 0) {
    const double want = per_iter[0] > 0 ? c.seconds_per_size / per_iter[0] : 1e6;
    iters = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(want)), c.min_iters,
                                    std::size_t{1000000});
  }

  rank_sample out;
  out.seconds.reserve(iters);
  for (std::size_t k = 0; k < iters; ++k) {
    line_up(reducer);
    const auto t0 = clock_type::now();
    reducer.all_reduce_mean(s);
    out.seconds.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  out.wrong = count_wrong(s, reducer.world_size());
  return out;
}

row summarise(const std::string& reducer, int world, std::size_t count,
              const std::vector<rank_sample>& per_rank) {
  const std::size_t iters = per_rank.front().seconds.size();
  std::vector<double> slowest(iters, 0.0);
  std::size_t wrong = 0;
  for (const auto& r : per_rank) {
    for (std::size_t k = 0; k < iters; ++k) slowest[k] = std::max(slowest[k], r.seconds[k]);
    wrong += r.wrong;
  }
  row out;
  out.reducer = reducer;
  out.ranks = world;
  out.count = count;
  out.bytes = count * sizeof(float);
  out.iters = iters;
  const double t = tutti::bench::median(slowest);
  out.time_us = t * 1e6;
  out.algbw_gbs = t > 0 ? double(out.bytes) / t / 1e9 : 0.0;
  out.busbw_gbs = out.algbw_gbs * 2.0 * double(world - 1) / double(world);
  out.wrong = wrong;
  return out;
}

void print_header(const std::string& reducer, int world) {
  if (reducer == "no_op")
    std::printf(
        "\n# no_op, 1 rank, float32, all_reduce_mean (an early return: the time is the "
        "clock's own overhead, algbw is not a bandwidth)\n");
  else
    std::printf("\n# %s, %d rank%s (threads of one process), float32, all_reduce_mean\n",
                reducer.c_str(), world, world == 1 ? "" : "s");
  std::printf("# %12s %11s %8s %12s %12s %12s %7s\n", "size(B)", "count", "iters", "time(us)",
              "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  std::fflush(stdout);
}

void print_row(const row& r) {
  std::printf("  %12zu %11zu %8zu %12.3f %12.3f %12.3f %7zu\n", r.bytes, r.count, r.iters,
              r.time_us, r.algbw_gbs, r.busbw_gbs, r.wrong);
  std::fflush(stdout);
}

void print_footer(const std::vector<row>& rows) {
  if (rows.empty()) return;
  double sum = 0;
  for (const auto& r : rows) sum += r.busbw_gbs;
  std::printf("# average busbw: %.3f GB/s\n", sum / double(rows.size()));
}

std::vector<row> bench_local_ring(int world, const std::vector<std::size_t>& sizes,
                                  const config& c) {
  std::vector<std::vector<rank_sample>> samples(sizes.size(),
                                                std::vector<rank_sample>(std::size_t(world)));
  // One group for all sizes: the ranks stay up while the sizes run in order.
  tutti::run_local(world, [&](tutti::local_ring& ring) {
    for (std::size_t k = 0; k < sizes.size(); ++k)
      samples[k][std::size_t(ring.rank())] = measure(ring, sizes[k] / sizeof(float), c);
  });
  std::vector<row> rows;
  for (std::size_t k = 0; k < sizes.size(); ++k)
    rows.push_back(summarise("local_ring", world, sizes[k] / sizeof(float), samples[k]));
  return rows;
}

std::vector<row> bench_no_op(const std::vector<std::size_t>& sizes, const config& c) {
  std::vector<row> rows;
  for (std::size_t bytes : sizes) {
    tutti::no_op_reducer reducer;
    std::vector<rank_sample> one{measure(reducer, bytes / sizeof(float), c)};
    rows.push_back(summarise("no_op", 1, bytes / sizeof(float), one));
  }
  return rows;
}

nlohmann::json to_json(const row& r) {
  return {{"reducer", r.reducer},     {"ranks", r.ranks},         {"bytes", r.bytes},
          {"count", r.count},         {"iters", r.iters},         {"time_us", r.time_us},
          {"algbw_gbs", r.algbw_gbs}, {"busbw_gbs", r.busbw_gbs}, {"wrong", r.wrong}};
}

int run(const config& c) {
  const auto sizes = message_sizes(c);
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
        auto rows = bench_local_ring(world, sizes, c);
        for (const auto& r : rows) print_row(r);
        print_footer(rows);
        all.insert(all.end(), rows.begin(), rows.end());
      }
    } else {
      print_header(name, 1);
      auto rows = bench_no_op(sizes, c);
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
