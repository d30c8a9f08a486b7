// SPDX-License-Identifier: Apache-2.0
/// @file benchmarks/overlap.cpp
/// @brief `tutti_bench_overlap`: the overlapped, bucketed gradient reduction
/// (`train_options::overlap_reduce`) against the plain one, on W local ranks: how much of the
/// reduce a step still waits for, what it costs backward, and whether the parameters stay equal.
///
/// For each configuration (learners × global batch) every round trains matrix factorisation
/// once per mode (plain, then overlap at each bucket size), the order rotated from round to
/// round so that no mode always runs first on a warm or a cold machine. A run is one epoch over
/// `--steps` global batches taken evenly across the synthetic course data (every learner's
/// table row is in the arena and the reduce moves all of it, whatever the rows). Figures are the
/// ledger's per-step p50 on rank 0, the median over rounds; ratios are medians of per-round
/// ratios, whose two sides ran seconds apart in the same process.
///
/// Compare compute + guard across modes: with overlap the finite check runs per bucket as it
/// leaves, inside backward (compute), instead of over the whole arena after it (guard). The
/// overlapped reduce total is the communication thread's time in collectives, which includes
/// waiting for the peers' buckets; hence "exposed vs plain" next to "exposed/total".
///
/// Each bucket size runs once per `--comm-nice` value: the communication thread at the
/// process's priority (`inherit`) and at a lower nice value (`train_options::comm_thread_nice`,
/// -10 by default), which lets it preempt backward when a bucket completes. The *nice* column is
/// the value the thread ran at (read back), so a refused request shows.

#include "common.hpp"

#include <tutti/data/interactions.hpp>
#include <tutti/data/synthetic.hpp>
#include <tutti/launch.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/samplers/shuffled_shards.hpp>
#include <tutti/schedules/constant.hpp>
#include <tutti/space/host.hpp>
#include <tutti/trainer.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

struct config {
  int ranks = 2;
  std::vector<std::int32_t> learners{20000, 50000, 100000};
  std::vector<std::size_t> batches{8192, 32768};
  std::vector<double> bucket_mb{1, 25};
  std::vector<std::string> comm_nice{"inherit", "-10"};
  double last_bucket_mb = 0.25;  // train_options::last_bucket_bytes, in MiB
  std::int32_t courses = 2000;
  int dim = 64;
  float l2 = 0.03f;  // the tutti program's default
  double lr = 0.05;
  float momentum = 0.9f;
  std::size_t steps = 30;
  std::size_t repeats = 3;
  std::uint64_t seed = 1;
  std::string json;
};

using model_t = tutti::models::matrix_factorization<tutti::host_space>;
using trainer_t =
    tutti::trainer<model_t, tutti::shuffled_shards, tutti::local_ring, tutti::constant, tutti::sgd>;

/// One way of reducing: plain (overlap off) or overlapped with buckets of `bucket_bytes`, the
/// communication thread at nice value `nice` (nullopt: the process's).
struct mode {
  std::string name;
  bool overlap = false;
  std::size_t bucket_bytes = 0;
  std::optional<int> nice;
};

std::size_t bucket_bytes_of(double mib) {
  return static_cast<std::size_t>(std::llround(mib * 1048576.0));
}

std::string mode_name(double mib, std::optional<int> nice) {
  char buf[64];
  if (nice)
    std::snprintf(buf, sizeof buf, "overlap %g MiB, nice %d", mib, *nice);
  else
    std::snprintf(buf, sizeof buf, "overlap %g MiB, inherit", mib);
  return buf;
}

std::optional<int> nice_of(const std::string& text) {
  if (text == "inherit") return std::nullopt;
  return std::stoi(text);
}

/// One run's figures: rank 0's ledger p50s, in seconds.
struct run_figures {
  double data = 0;
  double compute = 0;
  double guard = 0;
  double reduce_total = 0;
  double reduce_exposed = 0;
  double optimizer = 0;
  double step = 0;
  double samples_per_second = 0;  // global batch / step p50
  double fit_seconds = 0;
  std::size_t steps = 0;
  std::uint64_t bytes_per_step = 0;
  int threads_per_rank = 1;
  std::optional<int> comm_thread_nice;  // the nice value rank 0's communication thread ran at
  bool equal_to_plain = true;           // rank 0's parameters equal the same round's plain run's
  double relative_to_plain = 0;         // ||p - p_plain|| / ||p_plain||
  std::vector<float> params;            // rank 0's, until compared
};

/// A configuration and mode's rounds and their medians.
struct row {
  std::int32_t learners = 0;
  std::size_t batch = 0;
  mode m;
  std::vector<run_figures> rounds;
  double compute = 0, guard = 0, reduce_total = 0, reduce_exposed = 0, step = 0;
  double samples_per_second = 0;
  double exposed_share = 0;     // exposed ÷ total
  double exposed_vs_plain = 0;  // exposed ÷ the plain run's exposed
  double step_vs_plain = 0;     // step ÷ the plain run's step
  bool equal = true;
  double max_relative = 0;  // the largest relative_to_plain over rounds
};

int omp_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// `steps` × `batch` rows taken evenly across `all` (its users and items keep their index
/// spaces), or all of it when it is smaller.
tutti::data::interactions evenly(const tutti::data::interactions& all, std::size_t rows) {
  if (rows >= all.size()) return all;
  tutti::data::interactions out;
  out.user_ids = all.user_ids;
  out.item_ids = all.item_ids;
  out.implicit = all.implicit;
  out.users.reserve(rows);
  out.items.reserve(rows);
  out.labels.reserve(rows);
  for (std::size_t k = 0; k < rows; ++k) {
    const std::size_t i = k * all.size() / rows;
    out.users.push_back(all.users[i]);
    out.items.push_back(all.items[i]);
    out.labels.push_back(all.labels[i]);
    if (all.has_timestamps()) out.timestamps.push_back(all.timestamps[i]);
  }
  return out;
}

run_figures train_once(const tutti::data::interactions& train, std::size_t batch, const mode& m,
                       const config& c) {
  run_figures f;
  tutti::fit_result rank0;
  std::mutex lock;
  tutti::run_local(c.ranks, [&](tutti::local_ring& ring) {
    tutti::train_options opt{
        .batch = batch, .epochs = 1, .base_lr = c.lr, .seed = c.seed, .evaluate_each_epoch = false};
    opt.overlap_reduce = m.overlap;
    if (m.overlap) opt.bucket_bytes = m.bucket_bytes;
    opt.comm_thread_nice = m.nice;
    opt.last_bucket_bytes = bucket_bytes_of(c.last_bucket_mb);
    // A refused priority is no error here: the nice column shows what the thread got.
    opt.on_warning = [](const std::string&) {
    };
    trainer_t t(model_t({.dim = c.dim, .l2 = c.l2, .loss = tutti::loss_kind::logistic},
                        train.n_users(), train.n_items()),
                tutti::shuffled_shards{}, ring, tutti::constant{},
                tutti::sgd{.momentum = c.momentum}, std::move(opt));
    auto r = t.fit(train, tutti::data::interactions{});
    if (ring.rank() == 0) {
      std::lock_guard g(lock);
      rank0 = std::move(r);
      f.params = t.parameters_on_host();
      f.threads_per_rank = omp_threads();
    }
  });
  const auto& l = rank0.ledger;
  f.data = l.data.p50;
  f.compute = l.compute.p50;
  f.guard = l.guard.p50;
  f.optimizer = l.optimizer.p50;
  f.reduce_total = l.reduce_total.p50;
  f.reduce_exposed = l.reduce_exposed.p50;
  f.step = l.step.p50;
  f.samples_per_second = f.step > 0 ? double(rank0.global_batch) / f.step : 0.0;
  f.fit_seconds = rank0.seconds;
  f.steps = rank0.steps;
  f.bytes_per_step = rank0.bytes_reduced_per_step;
  f.comm_thread_nice = rank0.comm_thread_nice;
  return f;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

/// Medians over rounds; the ratios per round first (against the same round's plain run, which is
/// `plain`'s round k), then their median.
void summarise(row& r, const row& plain) {
  std::vector<double> compute, guard, total, exposed, step, sps, share, vs_plain, step_ratio;
  for (std::size_t k = 0; k < r.rounds.size(); ++k) {
    const auto& f = r.rounds[k];
    compute.push_back(f.compute);
    guard.push_back(f.guard);
    total.push_back(f.reduce_total);
    exposed.push_back(f.reduce_exposed);
    step.push_back(f.step);
    sps.push_back(f.samples_per_second);
    share.push_back(f.reduce_total > 0 ? f.reduce_exposed / f.reduce_total : 0.0);
    const double base = plain.rounds[k].reduce_exposed;
    vs_plain.push_back(base > 0 ? f.reduce_exposed / base : 0.0);
    const double base_step = plain.rounds[k].step;
    step_ratio.push_back(base_step > 0 ? f.step / base_step : 0.0);
    r.equal = r.equal && f.equal_to_plain;
    r.max_relative = std::max(r.max_relative, f.relative_to_plain);
  }
  using tutti::bench::median;
  r.compute = median(compute);
  r.guard = median(guard);
  r.reduce_total = median(total);
  r.reduce_exposed = median(exposed);
  r.step = median(step);
  r.samples_per_second = median(sps);
  r.exposed_share = median(share);
  r.exposed_vs_plain = median(vs_plain);
  r.step_vs_plain = median(step_ratio);
}

void print_header() {
  std::printf(
      "\n| learners | batch | mode | nice | steps | grad MB | compute (ms) | guard (ms) | reduce "
      "total "
      "(ms) | exposed (ms) | step (ms) | samples/s | exposed/total | exposed vs plain | step vs "
      "plain | equal |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
}

// "yes" when every round's parameters equal the plain run's bitwise; otherwise "NO" on 2 ranks
// (a bug) and the largest relative difference on more (sums in another order).
std::string equal_cell(const row& r, int ranks) {
  if (!r.m.overlap) return "ref";
  if (r.equal) return "yes";
  if (ranks == 2) return "NO";
  char buf[32];
  std::snprintf(buf, sizeof buf, "rel. %.1e", r.max_relative);
  return buf;
}

void print_row(const row& r, int ranks) {
  const auto& f = r.rounds.front();
  // The value every round's thread ran at, or "mixed" if they differ ("–" without a thread).
  std::string nice = f.comm_thread_nice ? std::to_string(*f.comm_thread_nice) : "–";
  for (const auto& g : r.rounds)
    if (g.comm_thread_nice != f.comm_thread_nice) nice = "mixed";
  std::printf("| %d | %zu | %s | %s | %zu | %.1f ", r.learners, r.batch, r.m.name.c_str(),
              nice.c_str(), f.steps, double(f.bytes_per_step) / 1e6);
  std::printf("| %.2f | %.2f | %.2f | %.2f | %.2f | %.0f ", r.compute * 1e3, r.guard * 1e3,
              r.reduce_total * 1e3, r.reduce_exposed * 1e3, r.step * 1e3, r.samples_per_second);
  std::printf("| %.2f | %.2f | %.2f | %s |\n", r.exposed_share, r.exposed_vs_plain, r.step_vs_plain,
              equal_cell(r, ranks).c_str());
  std::fflush(stdout);
}

nlohmann::json to_json(const row& r) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& f : r.rounds)
    rounds.push_back({{"data_p50_s", f.data},
                      {"compute_p50_s", f.compute},
                      {"guard_p50_s", f.guard},
                      {"reduce_total_p50_s", f.reduce_total},
                      {"reduce_exposed_p50_s", f.reduce_exposed},
                      {"optimizer_p50_s", f.optimizer},
                      {"step_p50_s", f.step},
                      {"samples_per_s", f.samples_per_second},
                      {"fit_seconds", f.fit_seconds},
                      {"steps", f.steps},
                      {"bytes_reduced_per_step", f.bytes_per_step},
                      {"threads_per_rank", f.threads_per_rank},
                      {"comm_thread_nice",
                       f.comm_thread_nice ? nlohmann::json(*f.comm_thread_nice) : nlohmann::json()},
                      {"equal_to_plain", f.equal_to_plain},
                      {"relative_difference_to_plain", f.relative_to_plain}});
  return {{"learners", r.learners},
          {"batch", r.batch},
          {"mode", r.m.name},
          {"overlap", r.m.overlap},
          {"bucket_bytes", r.m.overlap ? nlohmann::json(r.m.bucket_bytes) : nlohmann::json()},
          {"comm_thread_nice_requested", r.m.nice ? nlohmann::json(*r.m.nice) : nlohmann::json()},
          {"rounds", rounds},
          {"median",
           {{"compute_p50_s", r.compute},
            {"guard_p50_s", r.guard},
            {"reduce_total_p50_s", r.reduce_total},
            {"reduce_exposed_p50_s", r.reduce_exposed},
            {"step_p50_s", r.step},
            {"samples_per_s", r.samples_per_second},
            {"exposed_over_total", r.exposed_share},
            {"exposed_over_plain_exposed", r.exposed_vs_plain},
            {"step_over_plain_step", r.step_vs_plain}}},
          {"parameters_equal_to_plain", r.equal},
          {"max_relative_difference_to_plain", r.max_relative}};
}

int run(const config& c) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<mode> modes{{"plain", false, 0, std::nullopt}};
  for (double mib : c.bucket_mb)
    for (const auto& text : c.comm_nice)
      modes.push_back({mode_name(mib, nice_of(text)), true, bucket_bytes_of(mib), nice_of(text)});

  std::printf(
      "tutti_bench_overlap: %d local ranks, MF dim %d (logistic, l2 %g), SGD lr %g momentum "
      "%g; synthetic courses (implicit, %d courses); %zu steps of one epoch per run, %zu "
      "rounds (mode order rotated); last bucket %g MiB; %d OpenMP thread(s) in this process, %u "
      "hardware threads\n",
      c.ranks, c.dim, double(c.l2), c.lr, double(c.momentum), c.courses, c.steps, c.repeats,
      c.last_bucket_mb, omp_threads(), std::thread::hardware_concurrency());
  std::printf(
      "figures: rank 0's ledger p50 per step, median over rounds; samples/s = batch / step; "
      "ratios: median of per-round ratios against the same round's plain run; equal: rank 0's "
      "parameters == the plain run's, bitwise\n");
  print_header();

  std::vector<row> all;
  nlohmann::json data_json = nlohmann::json::array();
  bool all_equal = true;
  for (const std::int32_t learners : c.learners) {
    const auto full = tutti::data::synthetic_courses(
        {.learners = learners, .courses = c.courses, .implicit = true, .seed = 42});
    for (const std::size_t batch : c.batches) {
      const auto train = evenly(full, c.steps * batch);
      data_json.push_back({{"learners", learners},
                           {"batch", batch},
                           {"rows_generated", full.size()},
                           {"rows_trained", train.size()}});
      std::vector<row> rows(modes.size());
      for (std::size_t i = 0; i < modes.size(); ++i) {
        rows[i].learners = learners;
        rows[i].batch = batch;
        rows[i].m = modes[i];
      }
      for (std::size_t round = 0; round < c.repeats; ++round) {
        std::vector<run_figures> figures(modes.size());
        for (std::size_t j = 0; j < modes.size(); ++j) {
          const std::size_t i = (j + round) % modes.size();
          figures[i] = train_once(train, batch, modes[i], c);
        }
        for (std::size_t i = 1; i < modes.size(); ++i) {
          figures[i].equal_to_plain = figures[i].params == figures[0].params;
          figures[i].relative_to_plain = relative_difference(figures[i].params, figures[0].params);
        }
        for (std::size_t i = 0; i < modes.size(); ++i) {
          figures[i].params.clear();
          figures[i].params.shrink_to_fit();
          rows[i].rounds.push_back(std::move(figures[i]));
        }
      }
      for (auto& r : rows) {
        summarise(r, rows[0]);
        print_row(r, c.ranks);
        all_equal = all_equal && r.equal;
      }
      all.insert(all.end(), rows.begin(), rows.end());
    }
  }
  std::printf("\ntotal %.1f s\n", tutti::bench::seconds_since(t0));
  if (!all_equal) {
    std::printf("%s\n", c.ranks == 2
                            ? "parameters differ from the plain run's in the rows marked NO: "
                              "with 2 ranks they must be equal bitwise (a bug)"
                            : "parameters differ from the plain run's in the rows marked rel.: "
                              "bitwise equality is promised with 2 ranks; with more, sums run "
                              "in another order (relative_difference_to_plain in the JSON)");
  }

  if (!c.json.empty()) {
    nlohmann::json results = nlohmann::json::array();
    for (const auto& r : all) results.push_back(to_json(r));
    tutti::bench::write_json(
        c.json, results,
        {{"benchmark", "overlap"},
         {"omp_max_threads", omp_threads()},
         {"threads_per_rank", all.empty() ? 0 : all.front().rounds.front().threads_per_rank},
         {"hardware_concurrency", std::thread::hardware_concurrency()},
         {"data", data_json},
         {"options",
          {{"ranks", c.ranks},
           {"learners", c.learners},
           {"batches", c.batches},
           {"bucket_mb", c.bucket_mb},
           {"comm_nice", c.comm_nice},
           {"last_bucket_mb", c.last_bucket_mb},
           {"courses", c.courses},
           {"dim", c.dim},
           {"l2", c.l2},
           {"lr", c.lr},
           {"momentum", c.momentum},
           {"steps", c.steps},
           {"repeats", c.repeats},
           {"seed", c.seed}}}});
    std::printf("wrote %s\n", c.json.c_str());
  }
  // Unequal parameters on 2 ranks are a wrong result; with more ranks they are expected.
  return all_equal || c.ranks != 2 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{
      "tutti_bench_overlap: the overlapped, bucketed reduction against the plain one on local "
      "ranks"};
  config c;
  app.add_option("--ranks", c.ranks, "local ranks (threads of this process)")
      ->check(CLI::Range(2, 256))
      ->capture_default_str();
  app.add_option("--learners", c.learners, "synthetic learners per configuration (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--batch", c.batches, "global batches (comma-separated; multiples of --ranks)")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb, "bucket sizes of the overlapped runs, MiB")
      ->delimiter(',')
      ->check(CLI::Range(1.0 / 262144.0, 65536.0))
      ->capture_default_str();
  app.add_option("--comm-nice", c.comm_nice,
                 "nice values of the communication thread, one run each per bucket size: -20 to "
                 "19, or inherit (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"inherit"}) | CLI::Range(-20, 19))
      ->capture_default_str();
  app.add_option("--last-bucket-mb", c.last_bucket_mb,
                 "the last bucket (the arena's first values) at most this many MiB; 0: none")
      ->check(CLI::Range(0.0, 65536.0))
      ->capture_default_str();
  app.add_option("--courses", c.courses, "synthetic courses")
      ->check(CLI::Range(2, 10000000))
      ->capture_default_str();
  app.add_option("--dim", c.dim, "embedding dimension")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--l2", c.l2, "L2 strength per touched row")->capture_default_str();
  app.add_option("--lr", c.lr, "SGD learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")
      ->check(CLI::Range(0.0f, 0.999f))
      ->capture_default_str();
  app.add_option("--steps", c.steps,
                 "global steps per run (one epoch over steps × batch rows taken evenly across "
                 "the data)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  app.add_option("--repeats", c.repeats, "rounds; each runs every mode once, order rotated")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}))
      ->capture_default_str();
  app.add_option("--seed", c.seed, "initialisation and shuffling seed")->capture_default_str();
  app.add_option("--json", c.json, "also write the rounds and medians as JSON to this file");
  try {
    app.parse(argc, argv);
    for (const std::size_t b : c.batches)
      if (b % std::size_t(c.ranks) != 0)
        throw CLI::ValidationError("--batch", std::to_string(b) + " is not a multiple of --ranks " +
                                                  std::to_string(c.ranks));
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "tutti_bench_overlap: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti_bench_overlap: error: %s\n", e.what());
    return 1;
  }
}
