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
#include <tutti/space/buffer.hpp>
#include <tutti/space/cuda.hpp>

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

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

/// What the ranks of one process share: the communicators, so that a failing rank can abort all
/// of them and release peers blocked inside a collective, and who failed first.
class nccl_group {
 public:
  explicit nccl_group(int world_size) : m_comms(static_cast<std::size_t>(world_size), nullptr) {}
  /// Registers rank `rank`'s communicator.
  void attach(int rank, ncclComm_t comm) {
    std::lock_guard lock(m_mutex);
    m_comms[static_cast<std::size_t>(rank)] = comm;
  }
  /// Marks the group failed by `rank` and aborts every communicator, which ends their kernels.
  void abort(int rank, const std::string& why) {
    std::lock_guard lock(m_mutex);
    if (m_failed_rank < 0) {
      m_failed_rank = rank;
      m_why = why;
    }
    m_aborted.store(true);
    for (auto& c : m_comms)
      if (c) {
        (void)ncclCommAbort(c);
        c = nullptr;
      }
  }
  /// Forgets a communicator that its rank destroyed itself.
  void detach(int rank) {
    std::lock_guard lock(m_mutex);
    m_comms[static_cast<std::size_t>(rank)] = nullptr;
  }
  /// True once any rank failed.
  bool aborted() const noexcept { return m_aborted.load(); }
  /// The first failed rank and its reason.
  std::pair<int, std::string> failure() const {
    std::lock_guard lock(m_mutex);
    return {m_failed_rank, m_why};
  }

 private:
  mutable std::mutex m_mutex;
  std::vector<ncclComm_t> m_comms;
  std::atomic<bool> m_aborted{false};
  int m_failed_rank = -1;
  std::string m_why;
};

/// A `tutti::gradient_reducer` over NCCL for parameters on `tutti::cuda_space`.
///
/// `all_reduce_mean` is an in-place `ncclAllReduce` with `ncclAvg` on the reducer's own
/// communication stream, which first waits on an event recorded on the compute stream; the
/// compute stream then waits on the collective's completion event. Nothing synchronises the
/// host. NCCL picks its algorithm; tutti sets NCCL_ALGO=Ring unless the user set NCCL_ALGO.
/// Scalar reductions and gathers go through a small device buffer and wait on the host,
/// polling NCCL's asynchronous error state with a timeout: a failed or stalled peer aborts the
/// communicator and raises `tutti::collective_error` instead of hanging.
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
    ::setenv("NCCL_ALGO", "Ring", 0);  // the ring by default; NCCL_ALGO from the user wins
    m_state->rank = rank;
    m_state->world = world_size;
    m_state->compute = compute;
    m_state->options = options;
    m_state->group = group;
    int least = 0, greatest = 0;  // numerically lower is higher priority
    if (options.high_priority_stream)
      TUTTI_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TUTTI_CUDA_CHECK(cudaStreamCreateWithPriority(&m_state->comm_stream, cudaStreamNonBlocking,
                                                  options.high_priority_stream ? greatest : 0));
    TUTTI_CUDA_CHECK(cudaEventCreateWithFlags(&m_state->ready, cudaEventDisableTiming));
    TUTTI_CUDA_CHECK(cudaEventCreateWithFlags(&m_state->done, cudaEventDisableTiming));
    TUTTI_NCCL_CHECK(ncclCommInitRank(&m_state->comm, world_size, id, rank));
    if (group) group->attach(rank, m_state->comm);
    m_state->scratch = buffer<std::uint64_t, cuda_space>(64, cuda_space(m_state->comm_stream));
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
    check_alive("all_reduce_mean");
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
    check_alive("start_all_reduce_mean");
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
    check_alive("broadcast");
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

  /// Gathers every rank's host `mine` into host `all`, rank-major (waits).
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    check_alive("all_gather");
    TUTTI_EXPECTS(all.size() == mine.size() * static_cast<std::size_t>(world_size()),
                  "tutti::nccl_ring::all_gather",
                  "output holds " + std::to_string(all.size()) + " values; expected " +
                      std::to_string(mine.size() * static_cast<std::size_t>(world_size())));
    if (mine.empty()) return;
    auto& s = *m_state;
    ensure_scratch(mine.size() + all.size());
    std::uint64_t* d_mine = s.scratch.data();
    std::uint64_t* d_all = s.scratch.data() + mine.size();
    TUTTI_CUDA_CHECK(cudaMemcpyAsync(d_mine, mine.data(), mine.size_bytes(), cudaMemcpyHostToDevice,
                                     s.comm_stream));
    TUTTI_NCCL_CHECK(ncclAllGather(d_mine, d_all, mine.size(), ncclUint64, s.comm, s.comm_stream));
    TUTTI_CUDA_CHECK(cudaMemcpyAsync(all.data(), d_all, all.size_bytes(), cudaMemcpyDeviceToHost,
                                     s.comm_stream));
    wait(s.comm_stream, "all_gather");
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
    nccl_group* group = nullptr;
    ncclComm_t comm = nullptr;
    cudaStream_t comm_stream = nullptr;
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    buffer<std::uint64_t, cuda_space> scratch;
    std::uint64_t bytes = 0;
    ~state() {
      scratch = {};
      if (comm) {
        if (group && group->aborted())
          (void)ncclCommAbort(comm);
        else
          (void)ncclCommDestroy(comm);
        if (group) group->detach(rank);
      }
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
    check_alive(what);
    if (values.empty()) return;
    auto& s = *m_state;
    ensure_scratch(values.size());
    auto* d = reinterpret_cast<double*>(s.scratch.data());
    // Ordered after the compute stream, so a value the host read from it is current everywhere.
    ordered_on_comm_stream([&] {
      TUTTI_CUDA_CHECK(cudaMemcpyAsync(d, values.data(), values.size_bytes(),
                                       cudaMemcpyHostToDevice, s.comm_stream));
      TUTTI_NCCL_CHECK(ncclAllReduce(d, d, values.size(), ncclDouble, op, s.comm, s.comm_stream));
      TUTTI_CUDA_CHECK(cudaMemcpyAsync(values.data(), d, values.size_bytes(),
                                       cudaMemcpyDeviceToHost, s.comm_stream));
    });
    wait(s.comm_stream, what);
  }

  void ensure_scratch(std::size_t words) {
    auto& s = *m_state;
    if (s.scratch.size() < words)
      s.scratch = buffer<std::uint64_t, cuda_space>(words, cuda_space(s.comm_stream));
  }

  [[noreturn]] void fail(const std::string& what) {
    auto& s = *m_state;
    int failed = -1;
    std::string why = what;
    if (s.group) {
      auto [r, reason] = s.group->failure();
      failed = r;
      if (r >= 0) why = "rank " + std::to_string(r) + " failed: " + reason;
    }
    throw collective_error(failed,
                           "tutti::nccl_ring (rank " + std::to_string(s.rank) + "): " + why);
  }

  void check_alive(const char* what) {
    auto& s = *m_state;
    if (s.group && s.group->aborted()) fail(std::string(what) + ": the group was aborted");
    ncclResult_t async = ncclSuccess;
    if (s.comm && ncclCommGetAsyncError(s.comm, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress)
      fail(std::string(what) + ": NCCL reported " + ncclGetErrorString(async));
  }

  // Waits for `stream` while watching NCCL's asynchronous errors, the group and the timeout.
  void wait(cudaStream_t stream, const char* what) {
    auto& s = *m_state;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) TUTTI_CUDA_CHECK(q);
      check_alive(what);
      if (std::chrono::steady_clock::now() - start > s.options.timeout) {
        const std::string why = std::string(what) + ": no completion within " +
                                std::to_string(s.options.timeout.count()) +
                                " ms; a peer failed or stalled";
        if (s.group)
          s.group->abort(s.rank, why);
        else
          (void)ncclCommAbort(s.comm), s.comm = nullptr;
        throw collective_error(-1,
                               "tutti::nccl_ring (rank " + std::to_string(s.rank) + "): " + why);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::shared_ptr<state> m_state;
};

/// Runs `f(tutti::nccl_ring&)` on `world_size` GPUs of this process, one thread per GPU
/// (device = rank), each with its own compute stream (`ring.space()`). When one rank throws, every
/// communicator is aborted, all threads are joined, and the first rank's exception is rethrown.
template <class F>
void run_nccl(int world_size, F&& f, nccl_options options = {}) {
  TUTTI_EXPECTS(world_size >= 1, "tutti::run_nccl",
                "world size " + std::to_string(world_size) + "; expected >= 1");
  const int devices = cuda_device_count();
  TUTTI_EXPECTS(devices >= world_size, "tutti::run_nccl",
                std::to_string(world_size) + " ranks need as many GPUs; " +
                    std::to_string(devices) + " visible (NCCL allows one rank per GPU)");
  ncclUniqueId id;
  TUTTI_NCCL_CHECK(ncclGetUniqueId(&id));
  nccl_group group(world_size);
  std::mutex m;
  std::exception_ptr first;
  auto body = [&](int rank) {
    try {
      TUTTI_CUDA_CHECK(cudaSetDevice(rank));
      cudaStream_t stream;
      TUTTI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      struct stream_guard {
        cudaStream_t s;
        ~stream_guard() { (void)cudaStreamDestroy(s); }
      } guard{stream};
      nccl_ring ring(id, world_size, rank, cuda_space(stream), options, &group);
      f(ring);
      TUTTI_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (const collective_error&) {
      std::lock_guard lock(m);
      if (!first) first = std::current_exception();
      group.abort(rank, "collective error");
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(m);
        // The original failure wins over the collective errors it causes in other ranks.
        if (!first || !group.aborted()) first = std::current_exception();
      }
      group.abort(rank, e.what());
    } catch (...) {
      {
        std::lock_guard lock(m);
        if (!first) first = std::current_exception();
      }
      group.abort(rank, "unknown exception");
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < world_size; ++r) threads.emplace_back(body, r);
  body(0);
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace tutti
