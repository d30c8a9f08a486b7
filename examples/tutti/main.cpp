// SPDX-License-Identifier: Apache-2.0
// The `tutti` program: trains the course recommender (and, in later issues, benchmarks, plans).
#include "train_command.hpp"

#include <tutti/openmp_wait.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{"tutti: data-parallel training that keeps the books"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tutti 0.1.0");
  tutti::cli::train_config train_cfg;
  CLI::App* train = app.add_subcommand("train", "train the course recommender");
  tutti::cli::add_train_options(*train, train_cfg);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, as a shell user expects; exit code 2 marks a usage error.
    std::fprintf(stderr, "tutti: error: %s (see tutti %s--help)\n", e.what(),
                 app.get_subcommands().empty() ? "" : "train ");
    return 2;
  }
  try {
    if (train->parsed()) return tutti::cli::run_train(train_cfg);
  } catch (const tutti::invalid_argument& e) {
    std::fprintf(stderr, "tutti: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
