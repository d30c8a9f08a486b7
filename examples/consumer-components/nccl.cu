// SPDX-License-Identifier: Apache-2.0
/// @file nccl.cu
/// @brief tutti::nccl: averages one gradient across every visible GPU with tutti::nccl_ring and
/// exits non-zero unless each GPU holds the mean; without a visible GPU it says so and exits 77
/// (skipped).
#include <tutti/reducers/nccl_ring.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#if !TUTTI_HAS_NCCL
#error "tutti::nccl defines TUTTI_HAS_NCCL=1"
#endif

int main() {
  const int devices = tutti::cuda_device_count();
  if (devices == 0) {
    std::printf("consumer (nccl): built; skipped running: no CUDA device is visible\n");
    return 77;
  }
  try {
    std::vector<int> wrong(static_cast<std::size_t>(devices), 0);
    tutti::run_nccl(devices, [&](tutti::nccl_ring& ring) {
      const std::size_t n = 1000;
      std::vector<float> host(n, static_cast<float>(ring.rank() + 1));
      float* grads = nullptr;
      TUTTI_CUDA_CHECK(cudaMalloc(&grads, n * sizeof(float)));
      TUTTI_CUDA_CHECK(cudaMemcpy(grads, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      ring.all_reduce_mean(std::span<float>(grads, n));
      ring.synchronize();
      TUTTI_CUDA_CHECK(cudaMemcpy(host.data(), grads, n * sizeof(float), cudaMemcpyDeviceToHost));
      TUTTI_CUDA_CHECK(cudaFree(grads));
      const float expected = static_cast<float>(ring.world_size() + 1) / 2.0f;
      for (float g : host) wrong[static_cast<std::size_t>(ring.rank())] += g != expected;
    });
    int failures = 0;
    for (int r = 0; r < devices; ++r) failures += wrong[static_cast<std::size_t>(r)];
    std::printf("consumer (nccl): mean over %d GPUs, %d values wrong\n", devices, failures);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("consumer (nccl): %s\n", e.what());
    return 1;
  }
}
