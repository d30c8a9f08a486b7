// SPDX-License-Identifier: Apache-2.0
// The reports `tutti plan` reads: a `tutti train --json` report (`--from`, `--thread-baseline`),
// as the planner's measured step, and a `tutti study large-batch --json` report
// (`--max-batch-from`), as the largest safe global batch. A report that lacks what the planner
// needs is refused naming the file and the key.
#pragma once

#include "../train_report.hpp"
#include "memory.hpp"

#include <tutti/error.hpp>
#include <tutti/plan/planner.hpp>
#include <tutti/plan/projection.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

namespace tutti::cli::detail::plan {

/// What the planner takes from a `tutti train --json` report: the measured step and the model.
struct measured_run {
  measured_step step;
  std::optional<double> params;
  std::optional<double> optimizer_state_bytes;
  std::string optimizer;
  double epochs = 0;
  double samples_per_s = 0;  // measured, from the accounts
  double omp_threads = 0;    // OpenMP threads of the measured rank, when the report says
  std::optional<noise_scale_input> noise;  // the run's gradient noise scale, when it has one
  // A host run of the recommender: its shape (for --host's forecast), else why not.
  std::optional<train_shape> shape;
  std::string shape_refused;
  double peak_resident_bytes = 0;       // the process's, when the report has it
  std::optional<std::string> exchange;  // the run's --sparse-exchange, when the report says
};

/// The recommender's shape of a one-rank host run's report: the learners, courses and rows it
/// read, its dim (from the parameter count), batch, optimizer and sampled negatives.
inline void take_shape(const train_report& rep, measured_run& r) {
  const auto refuse = [&](std::string why) {
    r.shape_refused = std::move(why);
  };
  if (rep.model != "mf") return refuse("its model is '" + rep.model + "', not mf");
  if (rep.space != "host" || rep.world_size != 1)
    return refuse("the forecast is of one rank on the host space; the report's run had " +
                  std::to_string(rep.world_size) + " rank(s) on '" + rep.space + "'");
  const std::uint64_t ids = std::uint64_t(rep.dataset.users) + std::uint64_t(rep.dataset.items);
  if (!rep.ledger || !rep.ledger->param_count || ids == 0)
    return refuse("it lacks ledger.param_count or the dataset's users and items");
  const std::uint64_t params = *rep.ledger->param_count;
  if (params < 1 || (params - 1) % ids != 0 || (params - 1) / ids < 2)
    return refuse("its " + std::to_string(params) + " parameters are not (users + items) x " +
                  "(dim + 1) + 1");
  train_shape s;
  s.learners = std::uint64_t(rep.dataset.users);
  s.courses = std::uint64_t(rep.dataset.items);
  s.dim = (params - 1) / ids - 1;
  s.train_rows = rep.dataset.train_rows;
  s.test_rows = rep.dataset.test_rows;
  s.batch = rep.global_batch;
  s.optimizer = rep.optimizer;
  const nlohmann::json& neg = rep.dataset.sampled_negatives;
  s.negatives = neg.is_object() ? neg.value("per_positive", 0u) : 0u;
  s.popularity = neg.is_object() && neg.value("sampler", std::string()) == "popularity";
  // A run that read its rows in place (--rows-in-place) held no copy of them.
  s.rows_in_place = rep.memory.is_object() && rep.memory.contains("rows") &&
                    rep.memory["rows"].get<std::uint64_t>() == 0;
  // The step's copy holds a pair a row where every label is the same (a log of positives), a
  // record with the label otherwise; a report that held no copy says it by its feedback.
  s.one_label = s.rows_in_place || !rep.memory.is_object() || !rep.memory.contains("rows")
                    ? rep.dataset.implicit
                    : rep.memory["rows"].get<std::uint64_t>() ==
                          s.train_rows * sizeof(tutti::detail::sample_pair);
  r.shape = s;
}

/// Parses the JSON file `path` given to `flag`.
inline nlohmann::json read_json_file(const char* flag, const std::string& path) {
  std::ifstream f(path);
  TUTTI_EXPECTS(static_cast<bool>(f), "tutti plan",
                std::string("cannot read ") + flag + " '" + path + "'");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(std::string("tutti plan(): ") + flag + " '" + path +
                           "' is not JSON: " + e.what());
  }
}

/// The largest safe global batch a `tutti study large-batch --json` report supports: the largest
/// batch B such that at every studied batch up to B some recipe ends within 1% of the panel's
/// small-batch baseline (`gap_percent` <= 1). Panels (model x dataset) are taken together: the
/// smallest of their limits. Throws when the report has no cells or no batch holds.
inline double study_safe_batch(const std::string& path) {
  const nlohmann::json j = read_json_file("--study", path);
  TUTTI_EXPECTS(
      j.is_object() && j.value("study", std::string()) == "large-batch" && j.contains("cells") &&
          j["cells"].is_array() && !j["cells"].empty(),
      "tutti plan",
      "--study '" + path + "' is not a `tutti study large-batch --json` report with cells");
  // panel -> batch -> best (smallest) gap over recipes
  std::map<std::string, std::map<double, double>> best;
  for (const auto& cell : j["cells"]) {
    const std::string panel =
        cell.value("model", std::string()) + "/" + cell.value("dataset", std::string());
    const double batch = cell.value("batch", 0.0);
    const double gap = cell.contains("gap_percent") && cell["gap_percent"].is_number()
                           ? cell["gap_percent"].get<double>()
                           : std::numeric_limits<double>::infinity();
    auto [it, fresh] = best[panel].emplace(batch, gap);
    if (!fresh) it->second = std::min(it->second, gap);
  }
  double limit = std::numeric_limits<double>::infinity();
  for (const auto& [panel, gaps] : best) {
    double safe = 0;
    for (const auto& [batch, gap] : gaps) {
      if (!(gap <= 1.0)) break;
      safe = batch;
    }
    TUTTI_EXPECTS(safe > 0, "tutti plan",
                  "--study '" + path + "': in " + panel +
                      " no recipe holds the small-batch metric within 1% even at the smallest "
                      "batch; expected a report whose baseline cell exists");
    limit = std::min(limit, safe);
  }
  return limit;
}

/// A train report's gradient noise scale: B_simple, else its lower bound, else none.
inline std::optional<noise_scale_input> noise_scale_of(const nlohmann::json& n,
                                                       const std::string& path) {
  if (!n.is_object()) return std::nullopt;
  const auto positive = [&](const char* key) -> std::optional<double> {
    if (!n.contains(key) || n[key].is_null()) return std::nullopt;
    TUTTI_EXPECTS(n[key].is_number() && n[key].get<double>() > 0, "tutti plan",
                  "--from '" + path + "': noise_scale." + key + " is not a positive number");
    return n[key].get<double>();
  };
  if (const auto b = positive("b_simple"))
    return noise_scale_input{*b, false, "B_simple at the end of " + path};
  if (const auto b = positive("b_simple_at_least"))
    return noise_scale_input{*b, true, "a lower bound at the end of " + path};
  return std::nullopt;
}

/// The measured step of `rep`: the ledger's mean accounts, which add up to the measured step
/// (guard, wait and other host work scale with a device's work, so they count as compute, as
/// tutti train projects); a report without them gives the rank-0 phases over the steps.
inline measured_step step_of(const train_report& rep, const std::string& path) {
  const std::optional<report_ledger>& ledger = rep.ledger;
  double steps = ledger ? double(ledger->steps) : 0.0;
  if (steps == 0)
    for (const auto& e : rep.epochs) steps += double(e.steps);
  TUTTI_EXPECTS(steps > 0, "tutti plan", "--from '" + path + "' records no steps");
  measured_step m;
  if (ledger && !ledger->accounts.empty()) {
    const auto mean = [&](const char* account) {
      const auto it = ledger->accounts.find(account);
      TUTTI_EXPECTS(it != ledger->accounts.end(), "tutti plan",
                    "--from '" + path + "' lacks the ledger's '" + account +
                        "' account; expected a report written by tutti train --json");
      return it->second.mean;
    };
    m.data_s = mean("data");
    m.compute_s = mean("compute") + mean("guard") + mean("wait") + mean("other");
    m.optimizer_s = mean("optimizer");
    m.reduce_total_s = mean("reduce_total");
    m.reduce_exposed_s = std::min(mean("reduce_exposed"), m.reduce_total_s);
  } else {
    m.data_s = rep.phases.data / steps;
    m.compute_s = rep.phases.compute / steps;
    m.optimizer_s = rep.phases.optimizer / steps;
    m.reduce_total_s = rep.phases.reduce / steps;
    m.reduce_exposed_s = ledger && ledger->reduce_exposed_seconds
                             ? *ledger->reduce_exposed_seconds / steps
                             : m.reduce_total_s;
  }
  m.global_batch = double(rep.global_batch);
  m.world_size = rep.world_size;
  m.samples_per_epoch = double(rep.dataset.train_rows);
  if (ledger) m.bytes_reduced = double(ledger->bytes_reduced_per_step);
  if (ledger && ledger->row_segments.is_array()) {
    m.dense_bytes = double(ledger->dense_bytes_per_step);
    for (const nlohmann::json& g : ledger->row_segments)
      m.row_segments.push_back(
          {.dense_bytes = detail::report_get<double>(g, "dense_bytes"),
           .row_bytes = detail::report_get<double>(g, "row_bytes"),
           .id_bytes = detail::report_get_or<double>(g, "id_bytes", 0),
           .table_rows = detail::report_get_or<double>(g, "table_rows", 0),
           .cols = detail::report_get_or<double>(g, "cols", 0),
           .rows = detail::report_get_or<double>(g, "rows_per_step", 0),
           .updated_rows = detail::report_get_or<double>(g, "updated_rows_per_step", 0)});
  }
  return m;
}

/// How the embedding tables of `rep` travel at N devices: `flag` (--sparse-exchange: off, auto,
/// on), or, when empty, as the measured run sent them (its `ledger.projection.sparse_exchange`;
/// `measured` as `auto`). `flag` needs a report that lists the rows its step touched.
inline projected_exchange exchange_of(const std::string& flag, const measured_run* rep,
                                      const std::string& path) {
  std::string name = flag;
  if (!flag.empty()) {
    TUTTI_EXPECTS(rep && !rep->step.row_segments.empty(), "tutti plan",
                  "--sparse-exchange " + flag + ": " +
                      (rep ? "--from '" + path + "' lists no rows its step touched"
                           : std::string("no --from report")) +
                      "; expected a report of tutti train --json whose step listed them (a "
                      "row-sparse optimizer, or --sparse-exchange, on the host: "
                      "ledger.row_segments)");
  } else if (rep && rep->exchange) {
    name = *rep->exchange;
  }
  return projected_exchange_of(name);
}

/// Reads `tutti train --json`'s report at `path` (`flag`: --from or --thread-baseline).
inline measured_run read_train_report(const std::string& path, const char* flag = "--from") {
  const nlohmann::json j = read_json_file(flag, path);
  train_report rep;
  try {
    rep = j.get<train_report>();
  } catch (const train_report_error& e) {
    throw invalid_argument(std::string("tutti plan(): ") + flag + " '" + path + "' " + e.what() +
                           "; expected a report written by tutti train --json");
  }
  measured_run r;
  r.step = step_of(rep, path);
  r.epochs = static_cast<double>(rep.epochs.size());
  if (rep.omp_threads) r.omp_threads = *rep.omp_threads;
  if (rep.ledger && rep.ledger->param_count) r.params = double(*rep.ledger->param_count);
  if (rep.ledger && rep.ledger->optimizer_state_floats)
    r.optimizer_state_bytes = 4.0 * double(*rep.ledger->optimizer_state_floats);
  r.optimizer = rep.optimizer;
  r.noise = noise_scale_of(rep.noise_scale, path);
  take_shape(rep, r);
  if (rep.memory.is_object() && rep.memory.contains("peak_resident_bytes"))
    r.peak_resident_bytes = rep.memory["peak_resident_bytes"].get<double>();
  if (rep.ledger && rep.ledger->projection.is_object() &&
      rep.ledger->projection.contains("sparse_exchange"))
    r.exchange = detail::report_get<std::string>(rep.ledger->projection, "sparse_exchange");
  r.samples_per_s = r.step.global_batch / r.step.step_s();
  return r;
}

}  // namespace tutti::cli::detail::plan
