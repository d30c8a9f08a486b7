// SPDX-License-Identifier: Apache-2.0
// `tutti bench allreduce`: the local machine's allreduce in nccl-tests' columns, its alpha-beta
// fit, and the fit saved as a link profile for `tutti plan --link-file`.
#pragma once

#include <tutti/error.hpp>
#include <tutti/ledger/allreduce_bench.hpp>
#include <tutti/ledger/links.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace tutti::cli {

/// Everything `tutti bench allreduce` can be told.
struct bench_config {
  std::vector<int> ranks{2, 4};
  allreduce_bench_options sweep{};
  std::string json;
  std::string save_link;
  std::string link_name = "measured";
};

/// Adds `bench` with its `allreduce` subcommand to `app`; returns the `bench` command.
inline CLI::App* add_bench_commands(CLI::App& app, bench_config& c) {
  CLI::App* bench = app.add_subcommand("bench", "measure this machine (allreduce)");
  bench->require_subcommand(1);
  CLI::App* ar = bench->add_subcommand(
      "allreduce",
      "time all_reduce_mean of local_ring per message size (nccl-tests columns) and fit the "
      "alpha-beta model");
  ar->add_option("--ranks", c.ranks, "world sizes of local_ring, threads of this process")
      ->delimiter(',')
      ->check(CLI::Range(2, 256))
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
  ar->add_option("--json", c.json, "also write the rows and the fit as JSON to this file");
  ar->add_option("--save-link", c.save_link,
                 "write the fit as a link profile (JSON) for tutti plan --link-file");
  ar->add_option("--link-name", c.link_name, "name of the saved link profile")
      ->capture_default_str();
  return bench;
}

/// Runs `tutti bench allreduce`; returns the process exit code (1 when a value was wrong).
inline int run_bench_allreduce(const bench_config& c) {
  const auto sizes = allreduce_bench_sizes(c.sweep);
  std::printf(
      "tutti bench allreduce: %zu sizes, %zu B ... %zu B (x%zu), %s iterations, %zu warmup; "
      "time = median over iterations of the slowest rank\n",
      sizes.size(), sizes.front(), sizes.back(), c.sweep.factor,
      c.sweep.iters ? std::to_string(c.sweep.iters).c_str() : "adaptive", c.sweep.warmup);
  std::vector<allreduce_bench_row> all;
  nlohmann::json fits = nlohmann::json::array();
  for (const int world : c.ranks) {
    std::fputs(format_allreduce_header("local_ring", world).c_str(), stdout);
    std::fflush(stdout);
    const auto rows = bench_allreduce_local_ring(world, c.sweep);
    double sum = 0;
    for (const auto& r : rows) {
      std::fputs(format_allreduce_row(r).c_str(), stdout);
      sum += r.busbw_gbs;
    }
    std::printf("# average busbw: %.3f GB/s\n", sum / double(rows.size()));
    if (rows.size() >= 2) {
      const alpha_beta_fit f = fit_alpha_beta(rows);
      std::fputs(format_alpha_beta(f).c_str(), stdout);
      fits.push_back({{"ranks", world},
                      {"alpha_us", f.alpha_s * 1e6},
                      {"gb_per_s", 1.0 / f.beta_s_per_byte / 1e9},
                      {"max_rel_error", f.max_rel_error},
                      {"rms_rel_error", f.rms_rel_error}});
    }
    std::fflush(stdout);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  std::size_t wrong = 0;
  for (const auto& r : all) wrong += r.wrong;

  const alpha_beta_fit fit = fit_alpha_beta(all);
  if (c.ranks.size() > 1) {
    std::printf("\n# over all world sizes:\n");
    std::fputs(format_alpha_beta(fit).c_str(), stdout);
  }
  const link_profile link = fit.as_link(c.link_name);
  if (!c.save_link.empty()) {
    std::ofstream f(c.save_link);
    if (!f)
      throw error("tutti bench allreduce: cannot write the link profile '" + c.save_link + "'");
    nlohmann::json j = nlohmann::json::parse(link_profile_json(link));
    j["fit"] = {{"alpha_s", fit.alpha_s},
                {"beta_s_per_byte", fit.beta_s_per_byte},
                {"points", fit.points},
                {"max_rel_error", fit.max_rel_error},
                {"rms_rel_error", fit.rms_rel_error},
                {"reducer", "local_ring"},
                {"ranks", c.ranks}};
    f << j.dump(2) << '\n';
    if (!f) throw error("tutti bench allreduce: could not finish writing '" + c.save_link + "'");
    std::printf(
        "\nwrote link profile %s (%s: %.3f GB/s, %.3f us per step); use it with "
        "tutti plan --link-file %s\n",
        c.save_link.c_str(), link.name.c_str(), link.gb_per_s, link.latency_us,
        c.save_link.c_str());
  }
  if (!c.json.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : all)
      rows.push_back({{"reducer", r.reducer},
                      {"ranks", r.ranks},
                      {"bytes", r.bytes},
                      {"count", r.count},
                      {"iters", r.iters},
                      {"time_us", r.time_us},
                      {"algbw_gbs", r.algbw_gbs},
                      {"busbw_gbs", r.busbw_gbs},
                      {"wrong", r.wrong}});
    nlohmann::json j = {{"benchmark", "allreduce"},
                        {"results", rows},
                        {"fits", fits},
                        {"link", nlohmann::json::parse(link_profile_json(link))}};
    std::ofstream f(c.json);
    if (!f) throw error("tutti bench allreduce: cannot write the JSON report '" + c.json + "'");
    f << j.dump(2) << '\n';
    if (!f) throw error("tutti bench allreduce: could not finish writing '" + c.json + "'");
  }
  if (wrong > 0) {
    std::fprintf(stderr, "tutti bench allreduce: %zu wrong values\n", wrong);
    return 1;
  }
  return 0;
}

}  // namespace tutti::cli
