// SPDX-License-Identifier: Apache-2.0
// `tutti plan`: the planner's three questions from flags or from a `tutti train --json` report.
#pragma once

#include "output_paths.hpp"
#include "plan/memory.hpp"
#include "plan/reports.hpp"

#include <tutti/detail/checked_file.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/links.hpp>
#include <tutti/plan/plan_format.hpp>
#include <tutti/plan/planner.hpp>
#include <tutti/plan/projection.hpp>
#include <tutti/plan/report.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti::cli {

/// Everything `tutti plan` can be told. Quantities stay strings until `run_plan` parses their
/// units (2e9, 25M; 16GB, 512MiB; 12h, 90m).
struct plan_config {
  std::string params;
  std::string learners, courses;  // a matrix factorisation's shape, instead of --params
  int dim = 0;
  double bytes_per_param = 4;
  std::string optimizer;  // empty: from --from, else adam
  std::string activation_bytes;
  std::string device_memory;   // empty: 80GB, or this machine's memory with --host
  bool host = false;           // forecast a host run's peak resident memory
  std::string rows;            // --host: the log's positives
  int sampled_negatives = -1;  // --host: negatives a positive (< 0: the report's, else 4)
  std::string samples;
  double epochs = 0;  // 0: from --from, else 1
  std::string deadline;
  double reasonable_hours = 1.0;      // without a deadline: a job worth no more devices
  double min_steps_per_epoch = 50.0;  // the global batch is at most samples per epoch / this
  double step_ms = 0;
  std::string batch;
  std::string link;
  double link_gbps = 0;
  double link_latency_us = -1;
  std::string link_file;
  std::string inter_link;
  int nics_per_node = 1;
  int devices_per_node = 8;
  int max_devices = 1024;
  double price = 1.0;
  std::string scaling = "weak";
  double knee_fraction = 0.5;
  double overlap = -1;          // < 0: from --from (measured), else 0
  std::string sparse_exchange;  // off, auto, on; empty: as the --from run sent its tables
  // Ranks sharing one host's cores (0: every rank owns its device).
  double host_cores = 0;
  double available_cores = 0;    // 0: --link-file's measurement, else host_cores
  double measured_threads = 0;   // 0: host_cores / the measured run's ranks per node
  double thread_speedup = 0;     // 0: --thread-baseline's, else linear
  std::string thread_baseline;   // a train report of the same run with one thread
  double sync_us = -1;           // < 0: --link-file's step measurement, else 0
  std::string max_safe_batch;    // the largest global batch that keeps the accuracy (e.g. 16k)
  std::string study;             // a `tutti study large-batch --json` report to take it from
  std::string noise_scale;       // B_noise in samples (20k); empty: the --from report's, if any
  bool no_noise_scale = false;   // plan per epoch even when the report has a noise scale
  double useful_fraction = 0.2;  // a device is worth adding while this share of it is useful
  std::string from;
  std::string json;
  std::string report;
};

/// Registers the model and its data: parameters, memory, samples, epochs and deadlines.
inline void add_plan_model_options(CLI::App& app, plan_config& c) {
  auto* params = app.add_option("--params", c.params, "trainable parameters (2e9, 25M, 1.5G)");
  app.add_option("--learners", c.learners,
                 "instead of --params, the course recommender's shape (with --courses and "
                 "--dim): (learners + courses) x (dim + 1) + 1 parameters, and rowwise-adagrad's "
                 "one accumulator per row (30M)")
      ->excludes(params);
  app.add_option("--courses", c.courses, "courses of --learners' recommender (5k)")
      ->excludes(params);
  app.add_option("--dim", c.dim, "embedding dimension of --learners' recommender")
      ->check(CLI::PositiveNumber)
      ->excludes(params);
  app.add_option("--bytes-per-param", c.bytes_per_param,
                 "bytes per parameter value (4: fp32, 2: bf16)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--optimizer", c.optimizer,
                 "optimizer, for its state: sgd (none), momentum and row-sparse-sgd (1x), "
                 "adam, adamw and lazy-adam (2x), rowwise-adagrad (one value per row: needs "
                 "--learners) [default: adam, or the report's]")
      ->check(CLI::IsMember(
          {"sgd", "momentum", "row-sparse-sgd", "adam", "adamw", "lazy-adam", "rowwise-adagrad"}));
  app.add_option("--activation-bytes", c.activation_bytes,
                 "activation memory of one device's batch (512MB, 2GiB) [default: 0]");
  app.add_option("--device-memory", c.device_memory,
                 "memory of one device (16GB, 80GB) [default: 80GB; with --host this machine's]");
  app.add_flag("--host", c.host,
               "plan a run on this host (tutti train's host space, one rank): \"does it fit\" "
               "forecasts the run's peak resident memory from the trainer's accounts; needs the "
               "recommender's shape (--learners, --courses, --dim, --rows) or --from a host "
               "run's report");
  app.add_option("--rows", c.rows,
                 "with --host: the positives of the recommender's log (20M); tutti train holds "
                 "10% of them out");
  app.add_option("--sampled-negatives", c.sampled_negatives,
                 "with --host: negatives sampled a positive [default: the report's, else 4]")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--samples", c.samples, "samples per epoch (10M) [default: the report's]");
  app.add_option("--epochs", c.epochs, "epochs to train [default: 1, or the report's]")
      ->check(CLI::PositiveNumber);
  app.add_option("--deadline", c.deadline,
                 "time the training must fit in: 12h, 90m, 2d, 3600s (a bare number is hours)");
  app.add_option("--reasonable-hours", c.reasonable_hours,
                 "without --deadline: a job one device finishes within this many hours stays on "
                 "one device; a longer one takes the fewest devices that bring it within, never "
                 "past the knee")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--min-steps-per-epoch", c.min_steps_per_epoch,
                 "no N is advised whose global batch leaves fewer steps per epoch (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

/// Registers the measured step: its time and batch, the largest safe batch and the noise scale.
inline void add_plan_step_options(CLI::App& app, plan_config& c) {
  app.add_option("--step-ms", c.step_ms,
                 "milliseconds of one training step on one device at --batch")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch", c.batch, "samples per step on one device (256, 4k)");
  app.add_option("--max-safe-batch", c.max_safe_batch,
                 "the largest global batch that keeps the model's accuracy (e.g. from tutti "
                 "study large-batch); the plan advises no N whose global batch exceeds it");
  app.add_option("--study", c.study,
                 "take --max-safe-batch from a `tutti study large-batch --json` report: the "
                 "largest batch whose best recipe stays within 1% of the smallest batch's metric")
      ->check(CLI::ExistingFile)
      ->excludes("--max-safe-batch");
  auto* noise = app.add_option(
      "--noise-scale", c.noise_scale,
      "the gradient noise scale B_noise in samples (20k) [default: the --from report's "
      "noise_scale]: each N's job becomes its time to the loss the measured batch reaches, and "
      "no N past the noise knee is advised without a deadline");
  app.add_flag("--no-noise-scale", c.no_noise_scale,
               "ignore the --from report's noise scale: plan per epoch")
      ->excludes(noise);
  app.add_option("--useful-fraction", c.useful_fraction,
                 "the noise knee: a device is worth adding while at least this share of the "
                 "samples/s it brings shortens the time to the same loss")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
}

/// Registers the machines: the links, the nodes, the devices and their price.
inline void add_plan_machine_options(CLI::App& app, plan_config& c) {
  auto* link = app.add_option(
      "--link", c.link,
      "link between the devices of a node: " + named_link_list() + " [default: pcie4]");
  auto* gbps = app.add_option("--link-gbps", c.link_gbps,
                              "custom link: GB/s (gigabytes) per direction one device can push")
                   ->check(CLI::PositiveNumber);
  auto* lat = app.add_option("--link-latency-us", c.link_latency_us,
                             "custom link: microseconds per collective step")
                  ->check(CLI::NonNegativeNumber);
  auto* file = app.add_option("--link-file", c.link_file,
                              "link profile JSON written by tutti bench allreduce --save-link")
                   ->check(CLI::ExistingFile);
  link->excludes(gbps)->excludes(lat)->excludes(file);
  file->excludes(gbps)->excludes(lat);
  gbps->needs(lat);
  lat->needs(gbps);
  app.add_option(
      "--inter-link", c.inter_link,
      "link between nodes (one port): " + named_link_list() + " [default: the same as --link]");
  app.add_option("--nics-per-node", c.nics_per_node, "network ports per node")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--devices-per-node", c.devices_per_node, "devices one node holds")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--max-devices", c.max_devices, "largest N of the sweep 1, 2, 4, ...")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--price", c.price, "money per device-hour (1: cost columns are device-hours)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

/// Registers how the step scales: the scaling rule, the overlap and the host's cores.
inline void add_plan_scaling_options(CLI::App& app, plan_config& c) {
  app.add_option("--scaling", c.scaling,
                 "weak: every device keeps its batch (DDP); strong: the global batch is split")
      ->check(CLI::IsMember({"weak", "strong"}))
      ->capture_default_str();
  app.add_option("--knee-fraction", c.knee_fraction,
                 "a device is worth adding while it adds this share of one device's throughput")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  app.add_option("--sparse-exchange", c.sparse_exchange,
                 "how the embedding tables of a --from run that listed the rows its step touched "
                 "travel at N devices: off (dense reduce), auto (rows where fewer bytes), on "
                 "(rows) [default: as the run sent them]")
      ->check(CLI::IsMember({"off", "auto", "on"}));
  app.add_option("--overlap", c.overlap,
                 "share of the allreduce hidden behind compute, 0-1 [default: measured by "
                 "--from, else 0]")
      ->check(CLI::Range(0.0, 1.0));
  auto* cores =
      app.add_option("--host-cores", c.host_cores,
                     "ranks share one host of this many cores per node (threads or processes of "
                     "one machine) instead of owning a device each")
          ->check(CLI::PositiveNumber);
  app.add_option("--available-cores", c.available_cores,
                 "cores other jobs leave the ranks [default: measured in --link-file, else "
                 "--host-cores]")
      ->check(CLI::PositiveNumber)
      ->needs(cores);
  app.add_option("--measured-threads", c.measured_threads,
                 "OpenMP threads of each measured rank [default: --host-cores / its ranks per "
                 "node, as tutti train gives them]")
      ->check(CLI::PositiveNumber)
      ->needs(cores);
  auto* speedup = app.add_option("--thread-speedup", c.thread_speedup,
                                 "how much faster the measured rank's threads ran than one "
                                 "thread on free cores [default: linear]")
                      ->check(CLI::PositiveNumber)
                      ->needs(cores);
  auto* baseline =
      app.add_option("--thread-baseline", c.thread_baseline,
                     "a tutti train --json report of the --from run with OMP_NUM_THREADS=1: "
                     "gives --thread-speedup")
          ->check(CLI::ExistingFile)
          ->needs(cores);
  baseline->excludes(speedup);
  app.add_option("--sync-us", c.sync_us,
                 "microseconds a step of more than one rank pays to synchronise them [default: "
                 "measured in --link-file (bench allreduce --step-work-us), else 0]")
      ->check(CLI::NonNegativeNumber)
      ->needs(cores);
}

/// Registers the report the measurements come from and what the plan writes.
inline void add_plan_output_options(CLI::App& app, plan_config& c) {
  auto* from = app.add_option("--from", c.from, "a report written by tutti train --json")
                   ->check(CLI::ExistingFile);
  app.get_option("--thread-baseline")->needs(from);
  from->excludes("--step-ms")->excludes("--batch");
  app.add_option("--json", c.json, "also write the plan as JSON to this file");
  app.add_option("--report", c.report, "write an HTML report with charts to this folder");
}

/// Registers every option of `tutti plan` on `app`.
inline void add_plan_options(CLI::App& app, plan_config& c) {
  add_plan_model_options(app, c);
  add_plan_step_options(app, c);
  add_plan_machine_options(app, c);
  add_plan_scaling_options(app, c);
  add_plan_output_options(app, c);
}

namespace detail::plan {

// Splits "16GB" into 16 and "GB"; throws invalid_argument naming the flag otherwise.
inline std::pair<double, std::string> split_quantity(const std::string& flag,
                                                     const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  TUTTI_EXPECTS(used > 0 && std::isfinite(v) && v >= 0, "tutti plan",
                flag + " '" + text + "' is not a number; expected e.g. " +
                    (flag == "--deadline" ? "12h"
                     : flag == "--params" ? "2e9 or 25M"
                                          : "16GB"));
  return {v, unit};
}

// A count with an optional SI suffix: 2e9, 25M, 1.5G, 4k.
inline double parse_count(const std::string& flag, const std::string& text) {
  auto [v, unit] = split_quantity(flag, text);
  if (unit.empty()) return v;
  if (unit == "k" || unit == "K") return v * 1e3;
  if (unit == "M") return v * 1e6;
  if (unit == "G" || unit == "B") return v * 1e9;
  if (unit == "T") return v * 1e12;
  throw invalid_argument("tutti plan(): " + flag + " '" + text +
                         "' has an unknown suffix; expected none, k, M, G (or B) or T");
}

// Bytes: 16GB and 16G are decimal (as device memory is sold), 16GiB binary.
inline double parse_bytes(const std::string& flag, const std::string& text) {
  auto [v, unit] = split_quantity(flag, text);
  std::string u;
  for (const char ch : unit) u += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::pair<const char*, double> units[] = {{"", 1},
                                                         {"B", 1},
                                                         {"K", 1e3},
                                                         {"KB", 1e3},
                                                         {"M", 1e6},
                                                         {"MB", 1e6},
                                                         {"G", 1e9},
                                                         {"GB", 1e9},
                                                         {"T", 1e12},
                                                         {"TB", 1e12},
                                                         {"KIB", 1024.0},
                                                         {"MIB", 1048576.0},
                                                         {"GIB", 1073741824.0},
                                                         {"TIB", 1099511627776.0}};
  for (const auto& [name, scale] : units)
    if (u == name) return v * scale;
  throw invalid_argument("tutti plan(): " + flag + " '" + text +
                         "' has an unknown unit; expected B, kB, MB, GB, TB or KiB, MiB, GiB, TiB");
}

// A duration: 3600s, 90m, 12h, 2d; a bare number is hours.
inline double parse_duration(const std::string& flag, const std::string& text) {
  auto [v, unit] = split_quantity(flag, text);
  if (unit.empty() || unit == "h") return v * 3600.0;
  if (unit == "s") return v;
  if (unit == "m" || unit == "min") return v * 60.0;
  if (unit == "d") return v * 86400.0;
  throw invalid_argument("tutti plan(): " + flag + " '" + text +
                         "' has an unknown unit; expected s, m, h or d (a bare number is hours)");
}

// A link profile and what `tutti bench allreduce` measured of the host beside it.
struct link_file {
  link_profile link;
  double available_cores = 0;  // 0: not measured
  double sync_s = -1;          // < 0: not measured
};

inline link_file read_link_file(const std::string& path) {
  std::ifstream f(path);
  TUTTI_EXPECTS(static_cast<bool>(f), "tutti plan", "cannot read --link-file '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument("tutti plan(): --link-file '" + path + "' is not JSON: " + e.what());
  }
  TUTTI_EXPECTS(j.is_object() && j.contains("gb_per_s") && j["gb_per_s"].is_number() &&
                    j.contains("latency_us") && j["latency_us"].is_number(),
                "tutti plan",
                "--link-file '" + path +
                    "' lacks gb_per_s or latency_us; expected a profile written by tutti bench "
                    "allreduce --save-link");
  link_file out{custom_link(j["gb_per_s"].get<double>(), j["latency_us"].get<double>(),
                            j.value("name", std::string("measured")),
                            j.value("source", std::string("read from ") + path))};
  if (j.contains("host") && j["host"].is_object() && j["host"].contains("available_cores") &&
      j["host"]["available_cores"].is_number())
    out.available_cores = j["host"]["available_cores"].get<double>();
  if (j.contains("step") && j["step"].is_object() && j["step"].contains("sync_us") &&
      j["step"]["sync_us"].is_number())
    out.sync_s = std::max(0.0, j["step"]["sync_us"].get<double>() * 1e-6);
  return out;
}

}  // namespace detail::plan

namespace detail::plan {

/// The course recommender's shape (`--learners`, `--courses`, `--dim`): matrix factorisation
/// with biases, as `tutti train --model mf` lays it out.
struct mf_shape {
  double learners = 0, courses = 0, dim = 0;
  /// Two embedding tables, two bias vectors and the global bias.
  double params() const { return (learners + courses) * (dim + 1) + 1; }
  /// rowwise-adagrad: one accumulator per embedding row, one per bias value.
  double rowwise_state_values() const { return 2 * (learners + courses) + 1; }
};

/// The shape `c` gives, if any; all three flags or none.
inline std::optional<mf_shape> mf_shape_of(const plan_config& c) {
  const bool any = !c.learners.empty() || !c.courses.empty() || c.dim > 0;
  if (!any) return std::nullopt;
  TUTTI_EXPECTS(!c.learners.empty() && !c.courses.empty() && c.dim > 0, "tutti plan",
                "--learners, --courses and --dim describe the recommender together; expected "
                "all three");
  return mf_shape{parse_count("--learners", c.learners), parse_count("--courses", c.courses),
                  static_cast<double>(c.dim)};
}

/// `--host`: the forecast of the run's peak resident memory, for the recommender's shape given
/// by flags or by the `--from` report of a host run.
inline void add_host_forecast(plan_inputs& in, const plan_config& c,
                              const std::optional<mf_shape>& mf,
                              const std::optional<measured_run>& rep) {
  train_shape s;
  if (mf) {
    TUTTI_EXPECTS(!c.rows.empty(), "tutti plan",
                  "--host with --learners, --courses and --dim needs --rows (the log's "
                  "positives) to forecast the run's memory");
    s.learners = static_cast<std::uint64_t>(mf->learners);
    s.courses = static_cast<std::uint64_t>(mf->courses);
    s.dim = static_cast<std::uint64_t>(mf->dim);
    split_rows(s, parse_count("--rows", c.rows));
    if (rep && rep->shape) s.batch = rep->shape->batch;
  } else {
    TUTTI_EXPECTS(rep && rep->shape, "tutti plan",
                  rep ? "--host --from '" + c.from + "': " + rep->shape_refused
                      : std::string("--host needs the recommender's shape (--learners, --courses, "
                                    "--dim and --rows) or --from a host run's report"));
    s = *rep->shape;
    if (!c.rows.empty()) split_rows(s, parse_count("--rows", c.rows));
    in.measured_peak_bytes = rep->peak_resident_bytes;
  }
  s.optimizer = in.optimizer;
  if (c.sampled_negatives >= 0) s.negatives = static_cast<std::uint32_t>(c.sampled_negatives);
  in.memory = forecast_train_memory(s, 0);
}

}  // namespace detail::plan

/// The planner's inputs from `c` (flags, and the report of `--from`).
inline plan_inputs make_plan_inputs(const plan_config& c) {
  plan_inputs in;
  std::optional<detail::plan::measured_run> rep;
  if (!c.from.empty()) rep = detail::plan::read_train_report(c.from);

  const std::optional<detail::plan::mf_shape> mf = detail::plan::mf_shape_of(c);
  if (!c.params.empty())
    in.params = detail::plan::parse_count("--params", c.params);
  else if (mf)
    in.params = mf->params();
  else if (rep && rep->params)
    in.params = *rep->params;
  else
    throw invalid_argument(c.from.empty()
                               ? "tutti plan(): --params is required (the model's trainable "
                                 "parameters), or --learners, --courses and --dim"
                               : "tutti plan(): --from '" + c.from +
                                     "' has no ledger.param_count; give --params");
  in.bytes_per_param = c.bytes_per_param;
  in.optimizer = !c.optimizer.empty()             ? c.optimizer
                 : rep && !rep->optimizer.empty() ? rep->optimizer
                                                  : std::string("adam");
  if (c.optimizer.empty() && rep && rep->optimizer_state_bytes)
    in.optimizer_state_bytes = *rep->optimizer_state_bytes;
  if (in.optimizer == "rowwise-adagrad" && !(c.optimizer.empty() && rep)) {
    TUTTI_EXPECTS(mf.has_value(), "tutti plan",
                  "--optimizer rowwise-adagrad keeps one value per row; give the model's shape "
                  "(--learners, --courses, --dim) instead of --params");
    in.optimizer_state_bytes = mf->rowwise_state_values() * in.bytes_per_param;
  }
  in.activation_bytes = c.activation_bytes.empty()
                            ? 0.0
                            : detail::plan::parse_bytes("--activation-bytes", c.activation_bytes);
  in.device_memory_bytes = !c.device_memory.empty()
                               ? detail::plan::parse_bytes("--device-memory", c.device_memory)
                           : c.host ? detail::plan::host_memory_bytes()
                                    : 80e9;
  if (c.host) detail::plan::add_host_forecast(in, c, mf, rep);
  TUTTI_EXPECTS(in.device_memory_bytes > 0, "tutti plan", "--device-memory must be positive");
  if (!c.deadline.empty()) {
    in.deadline_s = detail::plan::parse_duration("--deadline", c.deadline);
    TUTTI_EXPECTS(*in.deadline_s > 0, "tutti plan", "--deadline must be positive");
  }
  in.epochs = c.epochs > 0 ? c.epochs : rep ? rep->epochs : 1.0;
  in.reasonable_s = c.reasonable_hours * 3600.0;
  in.min_steps_per_epoch = c.min_steps_per_epoch;
  if (!c.max_safe_batch.empty())
    in.max_safe_batch = detail::plan::parse_count("--max-safe-batch", c.max_safe_batch);
  if (!c.study.empty()) in.max_safe_batch = detail::plan::study_safe_batch(c.study);
  if (!c.noise_scale.empty())
    in.noise_scale = noise_scale_input{detail::plan::parse_count("--noise-scale", c.noise_scale),
                                       false, "--noise-scale"};
  else if (rep && !c.no_noise_scale)
    in.noise_scale = rep->noise;
  in.useful_fraction = c.useful_fraction;

  if (rep) {
    in.step = rep->step;
    if (in.step.bytes_reduced == 0) in.step.bytes_reduced = in.params * in.bytes_per_param;
  } else {
    TUTTI_EXPECTS(c.step_ms > 0, "tutti plan",
                  "--step-ms is required (one step on one device), or --from a train report");
    TUTTI_EXPECTS(!c.batch.empty(), "tutti plan",
                  "--batch is required (samples per step on one device), or --from a train report");
    in.step.compute_s = c.step_ms / 1e3;
    in.step.global_batch = detail::plan::parse_count("--batch", c.batch);
    TUTTI_EXPECTS(in.step.global_batch >= 1, "tutti plan", "--batch must be at least 1");
    in.step.world_size = 1;
    in.step.bytes_reduced = in.params * in.bytes_per_param;
  }
  if (!c.samples.empty())
    in.step.samples_per_epoch = detail::plan::parse_count("--samples", c.samples);
  TUTTI_EXPECTS(in.step.samples_per_epoch > 0, "tutti plan",
                "--samples is required (samples per epoch), or --from a train report");

  projection_options& o = in.projection;
  std::optional<detail::plan::link_file> measured_link;
  if (!c.link_file.empty()) measured_link = detail::plan::read_link_file(c.link_file);
  if (measured_link)
    o.intra = measured_link->link;
  else if (c.link_latency_us >= 0)
    o.intra = custom_link(c.link_gbps, c.link_latency_us);
  else
    o.intra = find_link(c.link.empty() ? "pcie4" : c.link);
  o.inter = c.inter_link.empty() ? o.intra : find_link(c.inter_link);
  o.nics_per_node = c.nics_per_node;
  o.devices_per_node = c.devices_per_node;
  o.max_devices = c.max_devices;
  o.price_per_device_hour = c.price;
  o.scaling = c.scaling == "strong" ? scaling_mode::strong : scaling_mode::weak;
  o.knee_fraction = c.knee_fraction;
  o.exchange = detail::plan::exchange_of(c.sparse_exchange, rep ? &*rep : nullptr, c.from);
  if (c.overlap >= 0)
    o.exposed_ratio = 1.0 - c.overlap;
  else if (!rep)
    o.exposed_ratio = 1.0;
  if (c.host_cores > 0) {
    shared_host& h = o.host;
    h.cores = c.host_cores;
    h.available_cores = c.available_cores > 0 ? c.available_cores
                        : measured_link && measured_link->available_cores > 0
                            ? std::min(measured_link->available_cores, c.host_cores)
                            : 0.0;
    // The threads the measured rank ran: the flag, else the report's own count.
    h.measured_threads = c.measured_threads > 0 ? c.measured_threads : rep ? rep->omp_threads : 0;
    h.sync_s = c.sync_us >= 0                                ? c.sync_us * 1e-6
               : measured_link && measured_link->sync_s >= 0 ? measured_link->sync_s
                                                             : 0.0;
    if (c.thread_speedup > 0) {
      h.thread_speedup = {c.thread_speedup, c.thread_speedup, c.thread_speedup};
    } else if (!c.thread_baseline.empty()) {
      const auto one = detail::plan::read_train_report(c.thread_baseline, "--thread-baseline");
      TUTTI_EXPECTS(one.step.world_size == in.step.world_size &&
                        one.step.global_batch == in.step.global_batch,
                    "tutti plan",
                    "--thread-baseline '" + c.thread_baseline +
                        "' is not the --from run with one thread: its world size or global "
                        "batch differs; expected the same command with OMP_NUM_THREADS=1");
      h.thread_speedup = thread_speedup_from(one.step, in.step, h, o.devices_per_node);
    }
  }
  return in;
}

/// Runs `tutti plan`; returns the process exit code.
inline int run_plan(const plan_config& c) {
  check_outputs("tutti plan", {{"--json", c.json}}, {{{"--report", c.report}, {"report.html"}}},
                {{"--from", c.from},
                 {"--link-file", c.link_file},
                 {"--thread-baseline", c.thread_baseline},
                 {"--study", c.study}});
  const plan_inputs in = make_plan_inputs(c);
  const plan_result r = make_plan(in);
  std::fputs(format_plan(r).c_str(), stdout);
  if (!c.from.empty()) std::printf("(measured step from %s)\n", c.from.c_str());
  if (!c.json.empty())
    tutti::detail::write_file_replacing(c.json, plan_to_json(r), "tutti plan --json");
  if (!c.report.empty()) {
    report_input rep{.title = "tutti plan: " + std::string(to_string(r.verdict)),
                     .proj = r.proj.rows.empty() ? project(in.step, in.projection) : r.proj};
    if (!c.from.empty())
      rep.measured.push_back({in.step.world_size, in.step.global_batch / in.step.step_s()});
    rep.notes.push_back("verdict: " + r.verdict_text);
    if (r.other_scaling)
      rep.notes.push_back("under " + std::string(to_string(r.other_scaling->proj.options.scaling)) +
                          " scaling: " + r.other_scaling->verdict_text);
    for (const auto& reason : r.reasons) rep.notes.push_back("- " + reason);
    if (r.proj.rows.empty())
      rep.notes.push_back(
          "the charts show what data parallelism would buy if the model fit one device");
    const std::string path = write_report(c.report, rep);
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace tutti::cli
