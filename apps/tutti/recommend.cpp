// SPDX-License-Identifier: Apache-2.0
// `tutti recommend`: top courses for a learner from an exported model (recommend_command.hpp).
#include "command.hpp"
#include "recommend_command.hpp"

namespace tutti::cli {
namespace {

int run_recommend_command(recommend_config& c) {
  return run_recommend(c);
}

}  // namespace

std::unique_ptr<command> make_recommend_command(CLI::App& app) {
  return make_configured<recommend_config>(app, add_recommend_command, run_recommend_command);
}

}  // namespace tutti::cli
