// SPDX-License-Identifier: Apache-2.0
// `tutti plan`: does the model fit, is there enough data, what N devices buy (plan_command.hpp).
#include "command.hpp"
#include "plan_command.hpp"

namespace tutti::cli {
namespace {

CLI::App* add_plan_command(CLI::App& app, plan_config& c) {
  CLI::App* plan =
      app.add_subcommand("plan", "advise: does the model fit, is there enough data, what N buys");
  add_plan_options(*plan, c);
  return plan;
}

int run_plan_command(plan_config& c) {
  return run_plan(c);
}

}  // namespace

std::unique_ptr<command> make_plan_command(CLI::App& app) {
  return make_configured<plan_config>(app, add_plan_command, run_plan_command);
}

}  // namespace tutti::cli
