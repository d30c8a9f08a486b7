// SPDX-License-Identifier: Apache-2.0
// `tutti audit verify DIR`: checks every rank's hash chain and each epoch's exactly-once
// coverage; prints a summary and exits 1 on any problem. See docs/security.md.
#pragma once

#include "json_output.hpp"

#include <tutti/error.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#if __has_include(<sodium.h>)
#include <tutti/data/audit.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#endif

namespace tutti::cli {

/// Everything `tutti audit` can be told.
struct audit_config {
  std::string dir;
  bool allow_incomplete = false;
  std::string json;
};

/// The `audit` subcommand (with its `verify` action): registers on construction.
class audit_command {
 public:
  explicit audit_command(CLI::App& parent) {
    m_app = parent.add_subcommand("audit", "audit trails of training runs");
    m_app->require_subcommand(1);
    m_verify = m_app->add_subcommand(
        "verify", "check every rank's hash chain and each epoch's exactly-once coverage");
    m_verify->add_option("dir", m_cfg.dir, "directory holding audit-rank-R.jsonl files")
        ->required();
    m_verify->add_flag("--allow-incomplete", m_cfg.allow_incomplete,
                       "accept trails without their end line (a run that did not finish)");
    m_verify->add_option("--json", m_cfg.json, "also write the report as JSON to this file");
  }
  audit_command(const audit_command&) = delete;
  audit_command& operator=(const audit_command&) = delete;

  /// True when the command line chose `audit`.
  bool parsed() const { return m_app->parsed(); }

  /// Verifies and prints; 0 when the trail is sound, 1 otherwise.
  int run() const {
#if __has_include(<sodium.h>)
    data::audit_verify_options opt;
    opt.allow_incomplete = m_cfg.allow_incomplete;
    const data::audit_report rep = data::verify_audit(m_cfg.dir, opt);
    std::printf("audit trail %s: %d ranks, %llu training rows, seed %llu, dataset %s\n",
                m_cfg.dir.c_str(), rep.world_size, static_cast<unsigned long long>(rep.train_rows),
                static_cast<unsigned long long>(rep.seed), rep.dataset_digest.c_str());
    std::size_t chain_problems = 0;
    for (const auto& p : rep.problems) chain_problems += !p.file.empty();
    std::printf("  %-10s %zu lines, %zu records: %s\n", "chains", rep.lines, rep.records,
                chain_problems == 0 ? "intact" : "BROKEN");
    for (const auto& e : rep.epochs)
      std::printf("  epoch %-4llu %llu samples consumed, %llu sat out: %s\n",
                  static_cast<unsigned long long>(e.epoch),
                  static_cast<unsigned long long>(e.consumed),
                  static_cast<unsigned long long>(e.sat_out),
                  e.exactly_once ? "exactly once" : "NOT exactly once");
    for (std::size_t r = 0; r < rep.heads.size(); ++r)
      std::printf("  head %-5zu %s\n", r, rep.heads[r].empty() ? "-" : rep.heads[r].c_str());
    if (!rep.problems.empty()) {
      std::printf("problems (%zu):\n", rep.problems.size());
      for (const auto& p : rep.problems) {
        if (p.file.empty())
          std::printf("  %s\n", p.what.c_str());
        else if (p.line == 0)
          std::printf("  %s: %s\n", p.file.c_str(), p.what.c_str());
        else
          std::printf("  %s:%zu: %s\n", p.file.c_str(), p.line, p.what.c_str());
      }
    }
    std::printf("verdict: %s\n", rep.ok() ? "ok" : "FAILED");
    if (!m_cfg.json.empty()) write_json(rep);
    return rep.ok() ? 0 : 1;
#else
    std::fprintf(stderr,
                 "tutti: error: this tutti was built without libsodium; `tutti audit` needs it "
                 "(Debian: apt-get install libsodium-dev pkg-config, then rebuild)\n");
    return 1;
#endif
  }

 private:
#if __has_include(<sodium.h>)
  void write_json(const data::audit_report& rep) const {
    nlohmann::json j = {{"dir", m_cfg.dir},
                        {"ok", rep.ok()},
                        {"world_size", rep.world_size},
                        {"train_rows", rep.train_rows},
                        {"seed", rep.seed},
                        {"dataset_digest", rep.dataset_digest},
                        {"lines", rep.lines},
                        {"records", rep.records},
                        {"heads", rep.heads},
                        {"epochs", nlohmann::json::array()},
                        {"problems", nlohmann::json::array()}};
    for (const auto& e : rep.epochs)
      j["epochs"].push_back({{"epoch", e.epoch},
                             {"consumed", e.consumed},
                             {"sat_out", e.sat_out},
                             {"exactly_once", e.exactly_once}});
    for (const auto& p : rep.problems)
      j["problems"].push_back({{"file", p.file}, {"line", p.line}, {"what", p.what}});
    write_json_file(m_cfg.json, j, "tutti audit verify --json");
  }
#endif

  CLI::App* m_app = nullptr;
  CLI::App* m_verify = nullptr;
  audit_config m_cfg;
};

}  // namespace tutti::cli
