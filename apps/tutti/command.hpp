// SPDX-License-Identifier: Apache-2.0
// The program's one small command interface. Each subcommand lives in its own translation unit
// (train.cpp, plan.cpp, ...) and is made by a factory declared here, so main.cpp sees only this
// interface and each command's code is compiled once, by the compiler it needs.
#pragma once

#include <tutti/openmp_wait.hpp>

#include <CLI/CLI.hpp>

#include <memory>
#include <utility>

namespace tutti::cli {

/// A subcommand: registers its options when made, runs when the command line chose it.
class command {
 public:
  virtual ~command() = default;
  /// Whether the command line named this command.
  virtual bool chosen() const = 0;
  /// Runs it; returns the process exit code.
  virtual int run() = 0;
  /// The OpenMP wait policy its ranks want (see tutti/openmp_wait.hpp): passive unless the
  /// command knows its one rank has the cores to itself.
  virtual openmp_wait wait_policy() const { return openmp_wait::passive; }
};

/// A command whose settings are one `Config` filled by the command line: `add(app, config)`
/// registers the subcommand on `app` and returns it; `run(config)` runs it.
template <class Config>
class configured_command final : public command {
 public:
  using add_fn = CLI::App* (*)(CLI::App&, Config&);
  using run_fn = int (*)(Config&);
  using wait_fn = openmp_wait (*)(const Config&);
  configured_command(CLI::App& app, add_fn add, run_fn run_it, wait_fn wait = nullptr)
      : m_app(add(app, m_config)), m_run(run_it), m_wait(wait) {}
  bool chosen() const override { return m_app->parsed(); }
  int run() override { return m_run(m_config); }
  openmp_wait wait_policy() const override {
    return m_wait != nullptr ? m_wait(m_config) : openmp_wait::passive;
  }

 private:
  Config m_config{};
  CLI::App* m_app;
  run_fn m_run;
  wait_fn m_wait;
};

/// Makes a `configured_command<Config>`.
template <class Config>
std::unique_ptr<command> make_configured(CLI::App& app, CLI::App* (*add)(CLI::App&, Config&),
                                         int (*run_it)(Config&),
                                         openmp_wait (*wait)(const Config&) = nullptr) {
  return std::make_unique<configured_command<Config>>(app, add, run_it, wait);
}

/// A command written as a class with `parsed()` and `run()` that registers itself on `app`.
template <class Command>
class wrapped_command final : public command {
 public:
  explicit wrapped_command(CLI::App& app) : m_command(app) {}
  bool chosen() const override { return m_command.parsed(); }
  int run() override { return m_command.run(); }

 private:
  Command m_command;
};

std::unique_ptr<command> make_train_command(CLI::App& app);
std::unique_ptr<command> make_plan_command(CLI::App& app);
std::unique_ptr<command> make_bench_command(CLI::App& app);
std::unique_ptr<command> make_seal_command(CLI::App& app);
std::unique_ptr<command> make_audit_command(CLI::App& app);
std::unique_ptr<command> make_study_command(CLI::App& app);
std::unique_ptr<command> make_recommend_command(CLI::App& app);

}  // namespace tutti::cli
