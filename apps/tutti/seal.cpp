// SPDX-License-Identifier: Apache-2.0
// `tutti seal`: encrypts a dataset into shards, writes and exports keys (seal_command.hpp).
#include "command.hpp"
#include "seal_command.hpp"

namespace tutti::cli {

std::unique_ptr<command> make_seal_command(CLI::App& app) {
  return std::make_unique<wrapped_command<seal_command>>(app);
}

}  // namespace tutti::cli
