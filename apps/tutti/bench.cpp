// SPDX-License-Identifier: Apache-2.0
// `tutti bench allreduce`: measures this machine's allreduce (bench_command.hpp; the NCCL
// measurement is compiled by nvcc in cuda_parts.cu).
#include "bench_command.hpp"
#include "command.hpp"

namespace tutti::cli {
namespace {

int run_bench_command(bench_config& c) {
  return run_bench_allreduce(c);
}

}  // namespace

std::unique_ptr<command> make_bench_command(CLI::App& app) {
  return make_configured<bench_config>(app, add_bench_commands, run_bench_command);
}

}  // namespace tutti::cli
