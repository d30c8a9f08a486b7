// SPDX-License-Identifier: Apache-2.0
// The parts of the `tutti` program that run on a GPU, compiled by nvcc: `tutti train --space
// cuda` and `tutti bench allreduce --reducer nccl`. Everything else is compiled by the host
// compiler (main.cpp), whose host kernels are vectorised; nvcc's front end has no
// <experimental/simd>, so host code compiled here would run the scalar loops.
#include "bench_command.hpp"
#include "train/ranks.hpp"

namespace tutti::cli {
namespace detail {

void train_models_cuda(const train_config& c, const loaded_data& d, loss_kind loss,
                       json_lines_log* log_ptr, progress_line& bar, run_output& out) {
  train_models<cuda_space>(c, d, loss, log_ptr, bar, out);
}

int visible_cuda_devices() {
  return cuda_device_count();
}

}  // namespace detail

#if TUTTI_HAS_NCCL
namespace detail::bench {
int run_bench_nccl_cuda(const bench_config& c) {
  return run_bench_nccl(c);
}
}  // namespace detail::bench
#endif

}  // namespace tutti::cli
