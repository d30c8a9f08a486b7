// SPDX-License-Identifier: Apache-2.0
// The `tutti` program: trains the course recommender (`train`), measures the machine's allreduce
// (`bench`), advises on going parallel (`plan`), runs the large-batch study (`study`), seals
// datasets (`seal`), verifies audit trails (`audit`) and recommends courses from an exported
// model (`recommend`).
#include "audit_command.hpp"
#include "bench_command.hpp"
#include "plan_command.hpp"
#include "recommend_command.hpp"
#include "seal_command.hpp"
#include "study_command.hpp"
#include "train_command.hpp"

#include <tutti/openmp_wait.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{"tutti: data-parallel training that keeps the books"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tutti 0.1.0");
  tutti::cli::train_config train_cfg;
  CLI::App* train = app.add_subcommand("train", "train the course recommender");
  tutti::cli::add_train_options(*train, train_cfg);
  tutti::cli::plan_config plan_cfg;
  CLI::App* plan =
      app.add_subcommand("plan", "advise: does the model fit, is there enough data, what N buys");
  tutti::cli::add_plan_options(*plan, plan_cfg);
  tutti::cli::bench_config bench_cfg;
  CLI::App* bench = tutti::cli::add_bench_commands(app, bench_cfg);
  tutti::cli::seal_command seal(app);
  tutti::cli::audit_command audit(app);
  tutti::cli::study_config study_cfg;
  CLI::App* study = tutti::cli::add_study_commands(app, study_cfg);
  tutti::cli::recommend_config recommend_cfg;
  CLI::App* recommend = tutti::cli::add_recommend_command(app, recommend_cfg);

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
  try {
    if (train->parsed()) return tutti::cli::run_train(train_cfg);
    if (plan->parsed()) return tutti::cli::run_plan(plan_cfg);
    if (bench->parsed()) return tutti::cli::run_bench_allreduce(bench_cfg);
    if (seal.parsed()) return seal.run();
    if (audit.parsed()) return audit.run();
    if (study->parsed()) return tutti::cli::run_study_large_batch(study_cfg);
    if (recommend->parsed()) return tutti::cli::run_recommend(recommend_cfg);
  } catch (const tutti::invalid_argument& e) {
    std::fprintf(stderr, "tutti: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
