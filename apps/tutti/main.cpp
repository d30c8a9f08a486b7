// SPDX-License-Identifier: Apache-2.0
// The `tutti` program: trains the course recommender (`train`), measures the machine's allreduce
// (`bench`), advises on going parallel (`plan`), runs the large-batch study (`study`), seals
// datasets (`seal`), verifies audit trails (`audit`) and recommends courses from an exported
// model (`recommend`).
// Each command is a translation unit of its own behind `command` (command.hpp).
#include "command.hpp"

#include <tutti/error.hpp>
#include <tutti/openmp_wait.hpp>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) makes a write fail with EFBIG instead of killing the process,
  // so the writer removes its temporary file and the error names the file it could not write.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"tutti: data-parallel training that keeps the books"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tutti 0.1.0");
  namespace cli = tutti::cli;
  std::unique_ptr<cli::command> commands[] = {
      cli::make_train_command(app),    cli::make_plan_command(app),  cli::make_bench_command(app),
      cli::make_seal_command(app),     cli::make_audit_command(app), cli::make_study_command(app),
      cli::make_recommend_command(app)};

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
    std::string hint;
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      hint += sub->get_name() + " ";
    }
    std::fprintf(stderr, "tutti: error: %s (see tutti %s--help)\n", e.what(), hint.c_str());
    return 2;
  }
  // Before any parallel region: the chosen command says how its ranks use the cores, and the
  // program re-executes itself once with that OpenMP wait policy (unless the user set one).
  for (auto& command : commands)
    if (command->chosen()) tutti::choose_openmp_wait(argv, command->wait_policy());
  try {
    for (auto& command : commands)
      if (command->chosen()) return command->run();
  } catch (const tutti::invalid_argument& e) {
    std::fprintf(stderr, "tutti: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
