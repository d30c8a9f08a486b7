// SPDX-License-Identifier: Apache-2.0
/// @file custom_reducer.cpp
/// @brief A gradient reducer of your own: ranks that are threads of one process average their
/// gradients through shared memory (docs/concepts.md#gradient-reducer). The same matrix
/// factorisation is trained on two ranks with it and with tutti's `local_ring`; exits 1 unless
/// the final parameters are bitwise equal.
#include <tutti/tutti.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace {

/// What the ranks share: one slot per rank, where each posts its buffer for the collective in
/// progress, and a barrier.
class shared_board {
 public:
  struct slot {
    const void* data = nullptr;
    std::size_t size = 0;
  };

  explicit shared_board(int world_size,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : m_world(world_size), m_timeout(timeout), m_slots(static_cast<std::size_t>(world_size)) {}

  int world_size() const noexcept { return m_world; }
  slot& slot_of(int rank) { return m_slots[static_cast<std::size_t>(rank)]; }

  /// Returns when every rank has arrived; what a rank wrote before arriving is then visible to
  /// all (the mutex orders it). A rank that fails or stalls never arrives: the others throw after
  /// the timeout instead of waiting for ever, as the reducer contract asks.
  void arrive_and_wait() {
    std::unique_lock lock(m_mutex);
    const std::uint64_t generation = m_generation;
    if (++m_arrived == m_world) {
      m_arrived = 0;
      ++m_generation;
      m_all_arrived.notify_all();
      return;
    }
    if (!m_all_arrived.wait_for(lock, m_timeout, [&] { return m_generation != generation; }))
      throw tutti::collective_error(-1, "shared_board: a rank did not reach the collective");
  }

 private:
  int m_world;
  std::chrono::milliseconds m_timeout;
  std::vector<slot> m_slots;
  std::mutex m_mutex;
  std::condition_variable m_all_arrived;
  int m_arrived = 0;
  std::uint64_t m_generation = 0;
};

/// One rank's handle on a `shared_board`. Every collective: post this rank's buffer, wait for
/// all, read the others' buffers directly, wait again before anyone overwrites a buffer the
/// others may still read. Values are combined in rank order, so every rank computes the same
/// bits. (tutti's `local_ring` also checks that all ranks called the same collective, and splits
/// the work so each rank reduces one chunk; this one reduces everything on every rank.)
class shared_memory_reducer {
 public:
  /// It reads the other ranks' memory from the host: host memory only.
  template <class Space>
  static constexpr bool accepts = Space::host_accessible;

  shared_memory_reducer(shared_board& board, int rank) : m_board(&board), m_rank(rank) {}

  int rank() const noexcept { return m_rank; }
  int world_size() const noexcept { return m_board->world_size(); }
  /// Optional: gradient bytes handed to all_reduce_mean so far (the trainer's ledger reads it).
  std::uint64_t bytes_reduced() const noexcept { return m_bytes; }

  /// The element-wise mean over ranks: the sum in rank order, divided by the world size.
  void all_reduce_mean(std::span<float> grads) {
    reduce(grads, [](float a, float b) { return a + b; });
    const float world = static_cast<float>(world_size());
    for (float& g : grads) g /= world;
    m_bytes += grads.size_bytes();
  }
  void all_reduce_sum(std::span<double> values) {
    reduce(values, [](double a, double b) { return a + b; });
  }
  /// A NaN on any rank wins, so a non-finite flag cannot be lost.
  void all_reduce_max(std::span<double> values) {
    reduce(values, [](double a, double b) { return (b > a || std::isnan(b)) ? b : a; });
  }
  void broadcast(std::span<float> values, int root) {
    post(values.data(), values.size());
    if (m_rank != root) {
      const auto* from = static_cast<const float*>(m_board->slot_of(root).data);
      std::copy(from, from + values.size(), values.begin());
    }
    m_board->arrive_and_wait();  // the root's buffer is read until here
  }
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    post(mine.data(), mine.size());
    for (int k = 0; k < world_size(); ++k) {
      const auto* from = static_cast<const std::uint64_t*>(m_board->slot_of(k).data);
      std::uint64_t* to = all.data() + static_cast<std::size_t>(k) * mine.size();
      if (to != from) std::copy(from, from + mine.size(), to);  // `mine` may sit inside `all`
    }
    m_board->arrive_and_wait();
  }

 private:
  // Posts this rank's buffer and waits for everyone's. Every rank sees the same sizes, so a
  // mismatch throws on all of them alike.
  void post(const void* data, std::size_t size) {
    m_board->slot_of(m_rank) = {data, size};
    m_board->arrive_and_wait();
    for (int k = 0; k < world_size(); ++k)
      if (m_board->slot_of(k).size != size)
        throw tutti::mismatch_error("shared_memory_reducer: rank " + std::to_string(k) +
                                    " passed another number of values");
  }

  template <class T, class Combine>
  void reduce(std::span<T> values, Combine combine) {
    post(values.data(), values.size());
    const auto buffer = [this](int k) {
      return static_cast<const T*>(m_board->slot_of(k).data);
    };
    std::vector<T> result(buffer(0), buffer(0) + values.size());
    for (int k = 1; k < world_size(); ++k)
      for (std::size_t i = 0; i < result.size(); ++i) result[i] = combine(result[i], buffer(k)[i]);
    m_board->arrive_and_wait();  // everyone has read every buffer: now each may overwrite its own
    std::copy(result.begin(), result.end(), values.begin());
  }

  shared_board* m_board;
  int m_rank;
  std::uint64_t m_bytes = 0;
};

// The trainer asserts this too; asserting it next to the class names a missing member sooner.
static_assert(tutti::check_gradient_reducer<shared_memory_reducer>());

using mf = tutti::models::matrix_factorization<tutti::host_space>;

struct run_result {
  std::vector<float> parameters;  // rank 0's, after training
  double auc = 0;
  std::uint64_t bytes_reduced = 0;
};

/// Trains on two ranks, each with the reducer `make_reducer(ring)` returns. `run_local` starts
/// the rank threads (and shares out the OpenMP threads); its ring handle also gives the rank.
template <class MakeReducer>
run_result train(const tutti::data::split_result& parts, MakeReducer make_reducer) {
  using reducer = std::invoke_result_t<MakeReducer&, tutti::local_ring&>;
  using trainer = tutti::trainer<mf, tutti::shuffled_shards, reducer, tutti::warmup<tutti::cosine>,
                                 tutti::adam>;
  run_result out;
  tutti::run_local(2, [&](tutti::local_ring& ring) {
    trainer t(mf({.dim = 16, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
                 parts.train.n_items()),
              tutti::shuffled_shards{}, make_reducer(ring),
              tutti::warmup<tutti::cosine>{.warmup_steps = 20}, tutti::adam{},
              {.batch = 512, .epochs = 3, .base_lr = 0.02, .seed = 7});
    const tutti::fit_result r = t.fit(parts.train, parts.test);
    if (ring.rank() == 0) out = {t.parameters_on_host(), r.eval.value, t.reducer().bytes_reduced()};
  });
  return out;
}

}  // namespace

int main(int /*argc*/, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  try {
    const auto data = tutti::data::synthetic_courses({.learners = 600, .courses = 120, .seed = 3});
    const auto parts = tutti::data::split(data, {.test_fraction = 0.1, .seed = 1});

    const run_result builtin = train(parts, [](tutti::local_ring& ring) { return ring; });
    shared_board board(2);
    const run_result own = train(parts, [&board](tutti::local_ring& ring) {
      return shared_memory_reducer(board, ring.rank());
    });
    std::printf("local_ring:            test auc %.4f, %llu gradient bytes reduced per rank\n",
                builtin.auc, static_cast<unsigned long long>(builtin.bytes_reduced));
    std::printf("shared_memory_reducer: test auc %.4f, %llu gradient bytes reduced per rank\n",
                own.auc, static_cast<unsigned long long>(own.bytes_reduced));

    // Equal by construction, bit for bit: both add each gradient value in rank order and divide
    // by the world size in float, and copy everything else exactly; the rest of the run is the
    // same code on the same data.
    const bool equal = !own.parameters.empty() &&
                       own.parameters.size() == builtin.parameters.size() &&
                       std::memcmp(own.parameters.data(), builtin.parameters.data(),
                                   own.parameters.size() * sizeof(float)) == 0;
    std::printf("final parameters (%zu floats): %s\n", own.parameters.size(),
                equal ? "bitwise equal" : "DIFFERENT");
    return equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_reducer: %s\n", e.what());
    return 1;
  }
}
