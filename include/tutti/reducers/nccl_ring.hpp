// SPDX-License-Identifier: Apache-2.0
/// @file reducers/nccl_ring.hpp
/// @brief `tutti::nccl_ring`: gradients averaged across GPUs by NCCL, on a communication stream.
///
/// Compiled only by nvcc, linked with NCCL. Two launch modes: `tutti::run_nccl` drives N GPUs
/// from one process (one thread per GPU, communicators from one unique id), and under `mpirun`
/// one process per GPU builds a `nccl_ring` from a unique id broadcast over MPI
/// (`tutti::nccl_unique_id_from_mpi` in reducers/nccl_mpi.hpp).
#pragma once

#include <tutti/error.hpp>
#include <tutti/reducers/detail/comm_group.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/cuda.hpp>

#include <nccl.h>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace tutti {

/// An NCCL call failed; the message names the call, NCCL's error string and the place.
class nccl_error : public error {
 public:
  nccl_error(ncclResult_t code, const char* call, const char* file, int line)
      : error(std::string(call) + " failed: " + ncclGetErrorString(code) + " at " + file + ":" +
              std::to_string(line)),
        m_code(code) {}
  /// NCCL's result code.
  ncclResult_t code() const noexcept { return m_code; }

 private:
  ncclResult_t m_code;
};

namespace detail {
inline void nccl_check(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess && code != ncclInProgress) throw nccl_error(code, call, file, line);
}
}  // namespace detail

}  // namespace tutti

/// Calls an NCCL function and throws `tutti::nccl_error` (call, NCCL's string, file:line).
#define TUTTI_NCCL_CHECK(call) ::tutti::detail::nccl_check((call), #call, __FILE__, __LINE__)

namespace tutti {

/// Options of the NCCL reducer.
struct nccl_options {
  /// How long a host-side wait on a collective may take before the communicator is aborted.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// Create the communication stream at the device's greatest stream priority, so that with the
  /// overlapped reduction a bucket's allreduce is scheduled ahead of backward's queued kernels
  /// (the host path's counterpart is `train_options::comm_thread_nice`); false: default
  /// priority.
  bool high_priority_stream = true;
};

namespace detail {

/// NCCL's communicator as a `tutti::detail::group_communicator`: `poll` reports the
/// communicator's asynchronous error, then whether `stream` (the rank's communication stream)
/// finished its work.
struct nccl_comm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;

  void abort() { (void)ncclCommAbort(comm); }
  void destroy() { (void)ncclCommDestroy(comm); }
  comm_poll poll() {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess)
      return {comm_state::failed, std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r)};
    if (async != ncclSuccess && async != ncclInProgress)
      return {comm_state::failed, std::string("NCCL reported ") + ncclGetErrorString(async)};
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return {comm_state::done, {}};
    if (q == cudaErrorNotReady) return {comm_state::running, {}};
    return {comm_state::failed, std::string("cudaStreamQuery: ") + cudaGetErrorString(q)};
  }
};

/// Sets NCCL_ALGO=Ring unless the user set NCCL_ALGO, once per process. setenv races with every
/// other thread's getenv, so the launchers call this before they start threads or NCCL.
inline void default_nccl_algo() {
  static std::once_flag once;
  std::call_once(once, [] { ::setenv("NCCL_ALGO", "Ring", 0); });
}

/// Page-locked host memory, grown on demand: a device-to-host copy into pageable memory blocks
/// the host until the copy ran, so a wait behind it could not poll for failures or the timeout.
class pinned_host_buffer {
 public:
  pinned_host_buffer() = default;
  pinned_host_buffer(const pinned_host_buffer&) = delete;
  pinned_host_buffer& operator=(const pinned_host_buffer&) = delete;
  ~pinned_host_buffer() {
    if (m_data) (void)cudaFreeHost(m_data);
  }
  /// At least `bytes` bytes; earlier contents are not kept.
  void* reserve(std::size_t bytes) {
    if (bytes > m_bytes) {
      if (m_data) (void)cudaFreeHost(m_data);
      m_data = nullptr;
      m_bytes = 0;
      TUTTI_CUDA_CHECK(cudaMallocHost(&m_data, bytes));
      m_bytes = bytes;
    }
    return m_data;
  }

 private:
  void* m_data = nullptr;
  std::size_t m_bytes = 0;
};

}  // namespace detail

/// What the ranks of one process share: the communicators, so that a failing rank can abort all
/// of them and release peers blocked inside a collective, and who failed first. The group owns
/// each attached communicator: it ends each exactly once, by `ncclCommAbort` when any rank
/// failed, else by `ncclCommDestroy` when its rank detaches it.
class nccl_group : public detail::comm_group<detail::nccl_comm> {
 public:
  explicit nccl_group(int world_size) : comm_group(world_size, "tutti::nccl_ring") {}
  /// Hands rank `rank`'s communicator to the group; `stream` is the one its host waits poll.
  void attach(int rank, ncclComm_t comm, cudaStream_t stream = nullptr) {
    comm_group::attach(rank, detail::nccl_comm{comm, stream});
  }
  /// Rank `rank` is done with its communicator: destroyed, unless an abort already ended it.
  void detach(int rank) { release(rank); }
};

/// A `tutti::gradient_reducer` over NCCL for parameters on `tutti::cuda_space`.
///
/// `all_reduce_mean` is an in-place `ncclAllReduce` with `ncclAvg` on the reducer's own
/// communication stream, which first waits on an event recorded on the compute stream; the
/// compute stream then waits on the collective's completion event. Nothing synchronises the
/// host. NCCL picks its algorithm; tutti sets NCCL_ALGO=Ring unless the user set NCCL_ALGO.
/// Scalar reductions and gathers go through a small device buffer and page-locked host memory
/// and wait on the host, polling NCCL's asynchronous error state with a timeout: a failed or
/// stalled peer aborts the group's communicators and raises `tutti::collective_error` on every
/// rank instead of hanging. Without a `group` the ring owns a group of its own.
class nccl_ring {
 public:
  /// Accepts device memory only.
  template <class Space>
  static constexpr bool accepts = std::is_same_v<Space, cuda_space>;

  /// Joins the communicator of `world_size` ranks identified by `id` as `rank`, on the current
  /// device, with `compute` as the stream gradients are produced on. Collective over all ranks.
  nccl_ring(const ncclUniqueId& id, int world_size, int rank, cuda_space compute,
            nccl_options options = {}, nccl_group* group = nullptr)
      : m_state(std::make_shared<state>()) {
    TUTTI_EXPECTS(world_size >= 1 && rank >= 0 && rank < world_size, "tutti::nccl_ring",
                  "rank " + std::to_string(rank) + " of world size " + std::to_string(world_size) +
                      "; expected 0 <= rank < world size");
    detail::default_nccl_algo();  // a no-op after run_nccl's or make_nccl_ring_mpi's call
    m_state->rank = rank;
    m_state->world = world_size;
    m_state->compute = compute;
    m_state->options = options;
    if (!group) {
      m_state->own_group = std::make_unique<nccl_group>(world_size);
      group = m_state->own_group.get();
    }
    m_state->group = group;
    int least = 0, greatest = 0;  // numerically lower is higher priority
    if (options.high_priority_stream)
      TUTTI_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TUTTI_CUDA_CHECK(cudaStreamCreateWithPriority(&m_state->comm_stream, cudaStreamNonBlocking,
                                                  options.high_priority_stream ? greatest : 0));
    TUTTI_CUDA_CHECK(cudaEventCreateWithFlags(&m_state->ready, cudaEventDisableTiming));
    TUTTI_CUDA_CHECK(cudaEventCreateWithFlags(&m_state->done, cudaEventDisableTiming));
    // Everything that can fail comes before the communicator: once attached, nothing here
    // throws, so a rank never destroys its communicator while its peers start collectives.
    m_state->scratch = buffer<std::uint64_t, cuda_space>(64, cuda_space(m_state->comm_stream));
    (void)m_state->staging.reserve(64 * sizeof(std::uint64_t));
    TUTTI_NCCL_CHECK(ncclCommInitRank(&m_state->comm, world_size, id, rank));
    group->attach(rank, m_state->comm, m_state->comm_stream);
    m_state->attached = true;
  }

  /// This rank.
  int rank() const noexcept { return m_state->rank; }
  /// Number of ranks.
  int world_size() const noexcept { return m_state->world; }
  /// Gradient bytes handed to `all_reduce_mean` so far.
  std::uint64_t bytes_reduced() const noexcept { return m_state->bytes; }
  /// The communication stream.
  cudaStream_t comm_stream() const noexcept { return m_state->comm_stream; }
  /// The compute space whose stream the collectives are ordered with: build the model on it
  /// (`Model(options, users, items, ring.space())`), or gradients race with their reduction.
  const cuda_space& space() const noexcept { return m_state->compute; }

  /// Averages `grads` (device memory) across ranks in place, ordered after the compute stream's
  /// earlier work and before its later work; returns without waiting.
  void all_reduce_mean(std::span<float> grads) {
    enter("all_reduce_mean");
    m_state->bytes += grads.size_bytes();
    if (grads.empty()) return;
    ordered_on_comm_stream([&] {
      TUTTI_NCCL_CHECK(ncclAllReduce(grads.data(), grads.data(), grads.size(), ncclFloat, ncclAvg,
                                     m_state->comm, m_state->comm_stream));
    });
  }

  /// Starts averaging `grads` (device memory) in place, ordered after the compute stream's
  /// earlier work but, unlike `all_reduce_mean`, not before its later work: the compute stream
  /// keeps running (the trainer's overlapped reduction starts one bucket while backward computes
  /// the next). Call `finish_started` before the compute stream touches `grads` again.
  void start_all_reduce_mean(std::span<float> grads) {
    enter("start_all_reduce_mean");
    m_state->bytes += grads.size_bytes();
    if (grads.empty()) return;
    auto& s = *m_state;
    TUTTI_CUDA_CHECK(cudaEventRecord(s.ready, s.compute.stream()));
    TUTTI_CUDA_CHECK(cudaStreamWaitEvent(s.comm_stream, s.ready, 0));
    TUTTI_NCCL_CHECK(ncclAllReduce(grads.data(), grads.data(), grads.size(), ncclFloat, ncclAvg,
                                   s.comm, s.comm_stream));
  }

  /// Orders the compute stream's later work after every collective started so far; returns
  /// without waiting.
  void finish_started() {
    auto& s = *m_state;
    TUTTI_CUDA_CHECK(cudaEventRecord(s.done, s.comm_stream));
    TUTTI_CUDA_CHECK(cudaStreamWaitEvent(s.compute.stream(), s.done, 0));
  }

  /// Copies `root`'s `values` (device memory) to every rank; returns without waiting.
  void broadcast(std::span<float> values, int root) {
    enter("broadcast");
    TUTTI_EXPECTS(root >= 0 && root < world_size(), "tutti::nccl_ring::broadcast",
                  "root " + std::to_string(root) + "; expected a rank");
    if (values.empty()) return;
    ordered_on_comm_stream([&] {
      TUTTI_NCCL_CHECK(ncclBroadcast(values.data(), values.data(), values.size(), ncclFloat, root,
                                     m_state->comm, m_state->comm_stream));
    });
  }

  /// Sums host `values` across ranks in place (waits).
  void all_reduce_sum(std::span<double> values) {
    host_all_reduce(values, ncclSum, "all_reduce_sum");
  }
  /// Maximum of host `values` across ranks in place (waits).
  void all_reduce_max(std::span<double> values) {
    host_all_reduce(values, ncclMax, "all_reduce_max");
  }

  /// Gathers every rank's `mine` (device memory) into `all` (device memory), rank-major, on the
  /// communication stream ordered with the compute stream; returns without waiting
  /// (`tutti::reducer_gathers_on_space`: the row-sparse step's rows travel this way).
  template <class T>
  requires(std::same_as<T, std::int32_t> ||
           std::same_as<T, float>) void all_gather_on_space(std::span<const T> mine,
                                                            std::span<T> all) {
    TUTTI_EXPECTS(all.size() == mine.size() * static_cast<std::size_t>(world_size()),
                  "tutti::nccl_ring::all_gather_on_space",
                  "output holds " + std::to_string(all.size()) + " values; expected " +
                      std::to_string(mine.size() * static_cast<std::size_t>(world_size())));
    enter("all_gather_on_space");
    if (mine.empty()) return;
    const ncclDataType_t type = std::same_as<T, float> ? ncclFloat : ncclInt32;
    ordered_on_comm_stream([&] {
      TUTTI_NCCL_CHECK(ncclAllGather(mine.data(), all.data(), mine.size(), type, m_state->comm,
                                     m_state->comm_stream));
    });
  }

  /// Gathers every rank's host `mine` into host `all`, rank-major (waits).
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    TUTTI_EXPECTS(all.size() == mine.size() * static_cast<std::size_t>(world_size()),
                  "tutti::nccl_ring::all_gather",
                  "output holds " + std::to_string(all.size()) + " values; expected " +
                      std::to_string(mine.size() * static_cast<std::size_t>(world_size())));
    enter("all_gather");
    if (mine.empty()) return;
    auto& s = *m_state;
    ensure_scratch(mine.size() + all.size());
    std::uint64_t* d_mine = s.scratch.data();
    std::uint64_t* d_all = s.scratch.data() + mine.size();
    auto* h = static_cast<std::uint64_t*>(s.staging.reserve(mine.size_bytes() + all.size_bytes()));
    std::uint64_t* h_all = h + mine.size();
    std::memcpy(h, mine.data(), mine.size_bytes());
    TUTTI_CUDA_CHECK(
        cudaMemcpyAsync(d_mine, h, mine.size_bytes(), cudaMemcpyHostToDevice, s.comm_stream));
    TUTTI_NCCL_CHECK(ncclAllGather(d_mine, d_all, mine.size(), ncclUint64, s.comm, s.comm_stream));
    TUTTI_CUDA_CHECK(
        cudaMemcpyAsync(h_all, d_all, all.size_bytes(), cudaMemcpyDeviceToHost, s.comm_stream));
    wait("all_gather");
    std::memcpy(all.data(), h_all, all.size_bytes());
  }

  /// Waits on the host for the work the compute stream and the communication stream hold so
  /// far, polling like the scalar reductions: a failed or stalled peer raises
  /// `tutti::collective_error` instead of hanging. `tutti::run_nccl` calls it after each rank's
  /// work.
  void synchronize() {
    auto& s = *m_state;
    // The communication stream waits on the compute stream, so polling it covers both.
    TUTTI_CUDA_CHECK(cudaEventRecord(s.ready, s.compute.stream()));
    TUTTI_CUDA_CHECK(cudaStreamWaitEvent(s.comm_stream, s.ready, 0));
    wait("synchronize");
  }

  nccl_ring(const nccl_ring&) = default;
  nccl_ring& operator=(const nccl_ring&) = default;
  nccl_ring(nccl_ring&&) noexcept = default;
  nccl_ring& operator=(nccl_ring&&) noexcept = default;

 private:
  struct state {
    int rank = 0;
    int world = 1;
    cuda_space compute;
    nccl_options options;
    std::unique_ptr<nccl_group> own_group;  // when the ring was built without a group
    nccl_group* group = nullptr;
    ncclComm_t comm = nullptr;  // owned by `group`, which aborts or destroys it
    bool attached = false;
    cudaStream_t comm_stream = nullptr;
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    buffer<std::uint64_t, cuda_space> scratch;
    detail::pinned_host_buffer staging;
    std::uint64_t bytes = 0;
    ~state() {
      scratch = {};
      // Destroyed here unless the group aborted it; never both, never twice.
      if (attached) group->detach(rank);
      if (ready) (void)cudaEventDestroy(ready);
      if (done) (void)cudaEventDestroy(done);
      if (comm_stream) (void)cudaStreamDestroy(comm_stream);
    }
  };

  template <class F>
  void ordered_on_comm_stream(F&& enqueue) {
    auto& s = *m_state;
    TUTTI_CUDA_CHECK(cudaEventRecord(s.ready, s.compute.stream()));
    TUTTI_CUDA_CHECK(cudaStreamWaitEvent(s.comm_stream, s.ready, 0));
    enqueue();
    TUTTI_CUDA_CHECK(cudaEventRecord(s.done, s.comm_stream));
    TUTTI_CUDA_CHECK(cudaStreamWaitEvent(s.compute.stream(), s.done, 0));
  }

  void host_all_reduce(std::span<double> values, ncclRedOp_t op, const char* what) {
    enter(what);
    if (values.empty()) return;
    auto& s = *m_state;
    ensure_scratch(values.size());
    auto* d = reinterpret_cast<double*>(s.scratch.data());
    auto* h = static_cast<double*>(s.staging.reserve(values.size_bytes()));
    std::memcpy(h, values.data(), values.size_bytes());
    // Ordered after the compute stream, so a value the host read from it is current everywhere.
    ordered_on_comm_stream([&] {
      TUTTI_CUDA_CHECK(
          cudaMemcpyAsync(d, h, values.size_bytes(), cudaMemcpyHostToDevice, s.comm_stream));
      TUTTI_NCCL_CHECK(ncclAllReduce(d, d, values.size(), ncclDouble, op, s.comm, s.comm_stream));
      TUTTI_CUDA_CHECK(
          cudaMemcpyAsync(h, d, values.size_bytes(), cudaMemcpyDeviceToHost, s.comm_stream));
    });
    wait(what);
    std::memcpy(values.data(), h, values.size_bytes());
  }

  void ensure_scratch(std::size_t words) {
    auto& s = *m_state;
    if (s.scratch.size() < words)
      s.scratch = buffer<std::uint64_t, cuda_space>(words, cuda_space(s.comm_stream));
  }

  // Counts a collective of this rank; throws if the group was aborted or NCCL reported an
  // error.
  void enter(const char* what) { m_state->group->enter(m_state->rank, what); }

  // Waits for the communication stream while watching NCCL's asynchronous errors, the group and
  // the timeout; a failure or the timeout aborts every communicator of the group.
  void wait(const char* what) {
    m_state->group->wait(m_state->rank, what, m_state->options.timeout);
  }

  std::shared_ptr<state> m_state;
};

/// Runs `f(tutti::nccl_ring&)` on `world_size` GPUs of this process, one thread per GPU
/// (device = rank), each with its own compute stream (`ring.space()`), then waits for each rank's
/// streams with `options.timeout`. When one rank throws, every communicator is aborted before
/// that rank's ring is released, all threads are joined, and the first rank's exception is
/// rethrown.
template <class F>
void run_nccl(int world_size, F&& f, nccl_options options = {}) {
  TUTTI_EXPECTS(world_size >= 1, "tutti::run_nccl",
                "world size " + std::to_string(world_size) + "; expected >= 1");
  const int devices = cuda_device_count();
  TUTTI_EXPECTS(devices >= world_size, "tutti::run_nccl",
                std::to_string(world_size) + " ranks need as many GPUs; " +
                    std::to_string(devices) + " visible (NCCL allows one rank per GPU)");
  detail::default_nccl_algo();  // before any thread or NCCL reads the environment
  ncclUniqueId id;
  TUTTI_NCCL_CHECK(ncclGetUniqueId(&id));
  nccl_group group(world_size);

  // One rank's compute stream and ring; the ring goes first, then the stream it uses.
  class rank_resources {
   public:
    rank_resources(const ncclUniqueId& id, int world, int rank, nccl_options options,
                   nccl_group& group)
        : m_stream(make_stream(rank)),
          m_ring(make_ring(id, world, rank, m_stream.get(), options, group)) {}
    nccl_ring& ring() { return *m_ring; }

   private:
    struct stream_deleter {
      void operator()(CUstream_st* s) const { (void)cudaStreamDestroy(s); }
    };
    static std::unique_ptr<CUstream_st, stream_deleter> make_stream(int rank) {
      TUTTI_CUDA_CHECK(cudaSetDevice(rank));
      cudaStream_t s = nullptr;
      TUTTI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      return std::unique_ptr<CUstream_st, stream_deleter>(s);
    }
    static std::unique_ptr<nccl_ring> make_ring(const ncclUniqueId& id, int world, int rank,
                                                cudaStream_t stream, nccl_options options,
                                                nccl_group& group) {
      return std::make_unique<nccl_ring>(id, world, rank, cuda_space(stream), options, &group);
    }
    std::unique_ptr<CUstream_st, stream_deleter> m_stream;
    std::unique_ptr<nccl_ring> m_ring;
  };

  detail::run_comm_group(
      group, [&](int rank) { return rank_resources(id, world_size, rank, options, group); },
      [&](rank_resources& r) {
        f(r.ring());
        r.ring().synchronize();
      });
}

}  // namespace tutti
