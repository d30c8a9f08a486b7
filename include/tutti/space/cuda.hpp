// SPDX-License-Identifier: Apache-2.0
/// @file space/cuda.hpp
/// @brief `tutti::cuda_space`: kernels on a CUDA stream through Thrust's CUDA system.
///
/// Compiled only by nvcc (`TUTTI_HAS_CUDA`). The same `TUTTI_HOST_DEVICE` functors that run on
/// `tutti::host_space` run here; memory is stream-ordered (`cudaMallocAsync`), never managed.
#pragma once

#include <tutti/config.hpp>
#include <tutti/error.hpp>

#if !defined(__CUDACC__)
#error "tutti/space/cuda.hpp needs nvcc: compile this translation unit as CUDA"
#endif

#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace tutti {

/// A CUDA runtime call failed; the message names the call, the error and where it was made.
class cuda_error : public error {
 public:
  cuda_error(cudaError_t code, const char* call, const char* file, int line)
      : error(std::string(call) + " failed: " + cudaGetErrorName(code) + " (" +
              cudaGetErrorString(code) + ") at " + file + ":" + std::to_string(line)),
        m_code(code) {}
  /// The CUDA error code.
  cudaError_t code() const noexcept { return m_code; }

 private:
  cudaError_t m_code;
};

namespace detail {
inline void cuda_check(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky-free error so the next call starts clean
    throw cuda_error(code, call, file, line);
  }
}
}  // namespace detail

}  // namespace tutti

/// Calls a CUDA runtime function and throws `tutti::cuda_error` (call, error name and string,
/// file:line) when it fails.
#define TUTTI_CUDA_CHECK(call) ::tutti::detail::cuda_check((call), #call, __FILE__, __LINE__)

namespace tutti {

namespace detail {
/// Thrust's temporary storage (CUB sort and scan buffers) from the stream-ordered pool: its
/// default allocator calls cudaMalloc/cudaFree, which synchronise the device.
struct stream_ordered_allocator {
  using value_type = char;
  cudaStream_t stream;
  char* allocate(std::ptrdiff_t bytes) {
    void* p = nullptr;
    TUTTI_CUDA_CHECK(cudaMallocAsync(&p, static_cast<std::size_t>(bytes), stream));
    return static_cast<char*>(p);
  }
  void deallocate(char* p, std::size_t) noexcept { (void)cudaFreeAsync(p, stream); }
};

/// Lets the current device's default memory pool keep freed memory instead of returning it to
/// the driver at each synchronisation, so steady-state steps allocate without system calls.
inline void retain_pool_memory() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return;
  std::uint64_t threshold = UINT64_MAX;
  (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
}
}  // namespace detail

/// An instantiated CUDA Graph (`cudaGraphExec_t`), owned: what `cuda_space::capture` recorded.
class cuda_step_graph {
 public:
  cuda_step_graph() = default;
  explicit cuda_step_graph(cudaGraphExec_t exec) noexcept : m_exec(exec) {}
  cuda_step_graph(cuda_step_graph&& o) noexcept : m_exec(std::exchange(o.m_exec, nullptr)) {}
  cuda_step_graph& operator=(cuda_step_graph&& o) noexcept {
    std::swap(m_exec, o.m_exec);
    return *this;
  }
  cuda_step_graph(const cuda_step_graph&) = delete;
  cuda_step_graph& operator=(const cuda_step_graph&) = delete;
  ~cuda_step_graph() {
    if (m_exec != nullptr) (void)cudaGraphExecDestroy(m_exec);
  }
  cudaGraphExec_t get() const noexcept { return m_exec; }

 private:
  cudaGraphExec_t m_exec = nullptr;
};

/// Execution space of one CUDA device: kernels run on the stream this instance carries.
///
/// Work is stream-ordered: allocation (`cudaMallocAsync`), kernels, copies into the space and
/// frees are enqueued and do not synchronise the host. `copy_to_host` and `fence` wait.
/// The default instance uses the per-thread default stream, so ranks as threads do not
/// serialise on the legacy default stream.
class cuda_space {
 public:
  /// Device memory cannot be dereferenced by host code.
  static constexpr bool host_accessible = false;
  /// Short name, as printed in reports and accepted by `tutti train --space`.
  static constexpr const char* name() noexcept { return "cuda"; }

  /// The current device's per-thread default stream.
  cuda_space() noexcept : cuda_space(cudaStreamPerThread) {}
  /// Runs on `stream` (not owned; it must outlive every use of this space instance).
  explicit cuda_space(cudaStream_t stream) noexcept : m_stream(stream), m_alloc{stream} {
    detail::retain_pool_memory();
  }
  cuda_space(const cuda_space& o) noexcept : m_stream(o.m_stream), m_alloc{o.m_stream} {}
  cuda_space& operator=(const cuda_space& o) noexcept {
    m_stream = o.m_stream;
    m_alloc.stream = o.m_stream;
    return *this;
  }

  /// The stream this instance enqueues on.
  cudaStream_t stream() const noexcept { return m_stream; }
  /// The explicit Thrust policy: CUDA system, this stream, no synchronisation after algorithms,
  /// temporary storage from the stream-ordered pool.
  auto policy() const { return thrust::cuda::par_nosync(m_alloc).on(m_stream); }

  /// Allocates `bytes` bytes of device memory, ordered on the stream.
  void* allocate(std::size_t bytes) const {
    void* p = nullptr;
    TUTTI_CUDA_CHECK(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, m_stream));
    return p;
  }
  /// Frees memory from `allocate`, ordered after the stream's earlier work.
  void deallocate(void* p, std::size_t /*bytes*/) const noexcept {
    (void)cudaFreeAsync(p, m_stream);
  }
  /// Copies host memory to the device. Returns once `src` may be reused (pageable sources are
  /// staged before the call returns).
  void copy_from_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    TUTTI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, m_stream));
  }
  /// Copies device memory to the host; waits for it (and all earlier work on the stream).
  void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    TUTTI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, m_stream));
    TUTTI_CUDA_CHECK(cudaStreamSynchronize(m_stream));
  }
  /// Copies within device memory, ordered on the stream.
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    TUTTI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m_stream));
  }
  /// Waits for all work enqueued on the stream; surfaces asynchronous kernel errors.
  void fence() const { TUTTI_CUDA_CHECK(cudaStreamSynchronize(m_stream)); }

  /// The graph `capture` returns (`tutti::space_captures_steps`).
  using step_graph = cuda_step_graph;

  /// Records what `enqueue` puts on the stream as a CUDA Graph and instantiates it; nothing runs.
  /// Throws `tutti::cuda_error` (the stream is left out of capture) when `enqueue` does what a
  /// capture refuses: a synchronisation, a copy from pageable host memory, another stream's work.
  step_graph capture(const std::function<void()>& enqueue) const {
    TUTTI_CUDA_CHECK(cudaStreamBeginCapture(m_stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      enqueue();
    } catch (...) {
      (void)cudaStreamEndCapture(m_stream, &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      throw;
    }
    TUTTI_CUDA_CHECK(cudaStreamEndCapture(m_stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    detail::cuda_check(made, "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__);
    return step_graph(exec);
  }

  /// Runs a captured graph on this instance's stream, ordered after its earlier work.
  void replay(const step_graph& graph) const {
    TUTTI_CUDA_CHECK(cudaGraphLaunch(graph.get(), m_stream));
  }

  friend bool operator==(const cuda_space& a, const cuda_space& b) noexcept {
    return a.m_stream == b.m_stream;
  }

 private:
  cudaStream_t m_stream;
  mutable detail::stream_ordered_allocator m_alloc;
};

/// Number of CUDA devices visible to this process (0 when there is no driver or device).
inline int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace tutti
