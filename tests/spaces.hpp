// SPDX-License-Identifier: Apache-2.0
// The execution spaces every space-generic test runs on: host always, cuda under nvcc.
#pragma once

#include <tutti/space/host.hpp>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#if defined(TUTTI_HAS_CUDA)
#include <tutti/space/cuda.hpp>
#define TUTTI_TEST_SPACES tutti::host_space, tutti::cuda_space
#else
#define TUTTI_TEST_SPACES tutti::host_space
#endif

namespace tutti_test {

/// Host memory and OpenMP kernels that the library must treat as a device's: it never reads
/// or writes this space's memory from host code, so the trainer takes the path it takes on a
/// GPU (kernels through `parallel_for` and Thrust, copies through `copy_to_host`). Runs that
/// path's logic on a machine without one.
struct opaque_host_space : tutti::host_space {
  static constexpr bool host_accessible = false;
  static constexpr const char* name() noexcept { return "opaque-host"; }
  friend constexpr bool operator==(const opaque_host_space&, const opaque_host_space&) noexcept {
    return true;
  }
};

/// `opaque_host_space` that records work as a graph with a CUDA Graph's semantics, so the
/// trainer's replayed steps run here (`tutti::space_captures_steps`):
/// - `capture(enqueue)` runs nothing; it keeps `enqueue`;
/// - `replay` runs `enqueue`, and every `parallel_for` in it gets the functor it had at the first
///   replay (a captured kernel keeps the arguments it was captured with). A value that changes
///   from step to step and reaches a kernel by argument, not through the space's memory, stays
///   the recorded step's, as on a GPU;
/// - a replay whose kernels differ from the recorded ones in type or size, and a copy between the
///   host and the space or a fence inside a record (a capture refuses them), throw.
/// Thrust algorithms other than `parallel_for` run with their current arguments.
struct replaying_host_space : opaque_host_space {
  static constexpr const char* name() noexcept { return "replaying-host"; }

  struct recorded_kernel {
    const std::type_info* type;
    std::size_t n;
    std::vector<std::byte> functor;
  };
  struct step_graph {
    std::function<void()> enqueue;
    std::shared_ptr<std::vector<recorded_kernel>> launches;  // filled by the first replay
    std::shared_ptr<bool> recorded;
  };

  step_graph capture(const std::function<void()>& enqueue) const {
    if (current().graph != nullptr) throw std::logic_error("capture inside a record");
    return {enqueue, std::make_shared<std::vector<recorded_kernel>>(),
            std::make_shared<bool>(false)};
  }

  void replay(const step_graph& g) const {
    state& st = current();
    st.graph = &g;
    st.cursor = 0;
    try {
      g.enqueue();
    } catch (...) {
      st.graph = nullptr;
      throw;
    }
    st.graph = nullptr;
    if (*g.recorded && st.cursor != g.launches->size())
      throw std::logic_error("a replay ran " + std::to_string(st.cursor) + " kernels of the " +
                             std::to_string(g.launches->size()) + " recorded");
    *g.recorded = true;
  }

  /// `tutti::parallel_for` on this space.
  template <class F>
  void launch(std::size_t n, const F& f) const {
    static_assert(std::is_trivially_copyable_v<F>, "a kernel's functor is copied as bytes");
    state& st = current();
    if (st.graph == nullptr) return run(n, f);
    std::vector<recorded_kernel>& launches = *st.graph->launches;
    if (!*st.graph->recorded) {
      recorded_kernel l{&typeid(F), n, std::vector<std::byte>(sizeof(F))};
      std::memcpy(l.functor.data(), &f, sizeof(F));
      launches.push_back(std::move(l));
      ++st.cursor;
      return run(n, f);
    }
    const std::size_t k = st.cursor++;
    if (k >= launches.size() || *launches[k].type != typeid(F) || launches[k].n != n)
      throw std::logic_error("kernel " + std::to_string(k) +
                             " of a replay is not the recorded one");
    alignas(F) std::byte bytes[sizeof(F)];
    std::memcpy(bytes, launches[k].functor.data(), sizeof(F));
    run(n, *std::launder(reinterpret_cast<const F*>(bytes)));
  }

  void copy_from_host(void* dst, const void* src, std::size_t bytes) const {
    refuse_in_record("copy_from_host");
    opaque_host_space::copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
    refuse_in_record("copy_to_host");
    opaque_host_space::copy_to_host(dst, src, bytes);
  }
  void fence() const {
    refuse_in_record("fence");
    opaque_host_space::fence();
  }

  friend constexpr bool operator==(const replaying_host_space&,
                                   const replaying_host_space&) noexcept {
    return true;
  }

 private:
  struct state {
    const step_graph* graph = nullptr;  // the record being replayed on this thread
    std::size_t cursor = 0;             // its next kernel
  };
  static state& current() {
    thread_local state s;
    return s;
  }
  static void refuse_in_record(const char* what) {
    if (current().graph != nullptr)
      throw std::logic_error(std::string(what) + " inside a recorded step");
  }
  template <class F>
  static void run(std::size_t n, const F& f) {
    if (n < serial_below) {
      for (std::size_t i = 0; i < n; ++i) f(i);
      return;
    }
    thrust::for_each_n(thrust::omp::par, thrust::counting_iterator<std::size_t>(0), n, f);
  }
};

}  // namespace tutti_test
