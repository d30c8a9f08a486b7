// SPDX-License-Identifier: Apache-2.0
// `tutti audit verify`: checks an audit trail's hash chains and coverage (audit_command.hpp).
#include "audit_command.hpp"
#include "command.hpp"

namespace tutti::cli {

std::unique_ptr<command> make_audit_command(CLI::App& app) {
  return std::make_unique<wrapped_command<audit_command>>(app);
}

}  // namespace tutti::cli
