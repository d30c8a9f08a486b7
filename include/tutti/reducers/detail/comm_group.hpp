// SPDX-License-Identifier: Apache-2.0
/// @file reducers/detail/comm_group.hpp
/// @brief `tutti::detail::comm_group`: the communicators of one process's ranks, each aborted or
/// destroyed exactly once, and host waits on their collectives that always end.
///
/// Plain C++ over a communicator policy, so the failure paths of `tutti::nccl_ring` (which
/// plugs in NCCL's communicator) are tested with a fake one on machines without a GPU.
#pragma once

#include <tutti/detail/rank_threads.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tutti::detail {

/// Where a communicator's work enqueued so far stands.
enum class comm_state { done, running, failed };

/// The answer of `Comm::poll()`: the state, and when failed, why.
struct comm_poll {
  comm_state state = comm_state::done;
  std::string why;
};

/// A communicator `tutti::detail::comm_group` can own: `abort()` ends it at once, releasing a
/// collective its peers wait in; `destroy()` ends it after its work; `poll()` never blocks.
/// The group calls each of them under its lock, so a communicator needs no lock of its own.
template <class C>
concept group_communicator = std::movable<C> && requires(C& c) {
  c.abort();
  c.destroy();
  { c.poll() } -> std::same_as<comm_poll>;
};

/// The communicators of `world_size` ranks of one process, and who failed first.
///
/// Each attached communicator is ended exactly once: by `abort` (every one still alive, when any
/// rank fails), or by its rank's `release` (destroy, when the group was not aborted), or by the
/// group's destructor. A rank waits on its collectives with `wait`, which returns when they
/// completed and otherwise throws `tutti::collective_error` once the group is aborted, its own
/// communicator fails, or the timeout passes (the last two abort the group first, releasing the
/// peers). The group must outlive the ranks' use of it.
/// @tparam Comm a `group_communicator`.
template <group_communicator Comm>
class comm_group {
 public:
  /// A group of `world_size` ranks; `name` prefixes the errors its waits raise.
  explicit comm_group(int world_size, std::string name = "tutti::detail::comm_group")
      : m_name(std::move(name)), m_slots(static_cast<std::size_t>(world_size)) {}

  comm_group(const comm_group&) = delete;
  comm_group& operator=(const comm_group&) = delete;

  // A communicator no rank released (its rank never finished) still has an owner: this group.
  ~comm_group() {
    std::lock_guard lock(m_mutex);
    for (auto& s : m_slots)
      if (s.comm && s.alive) end(s, &Comm::destroy);
  }

  /// Number of ranks.
  int world_size() const noexcept { return static_cast<int>(m_slots.size()); }

  /// Hands rank `rank`'s communicator to the group. One that arrives after the group was
  /// aborted is aborted at once: its peers are gone.
  void attach(int rank, Comm comm) {
    std::lock_guard lock(m_mutex);
    slot& s = slot_of(rank, "attach");
    TUTTI_EXPECTS(!s.comm, "tutti::detail::comm_group::attach",
                  "rank " + std::to_string(rank) + " attached a second communicator; expected one");
    s.comm.emplace(std::move(comm));
    s.alive = true;
    if (m_aborted) end(s, &Comm::abort);
  }

  /// Rank `rank` is done with its communicator: destroys it, unless an abort already ended it.
  /// Destroy may wait for the communicator's work, so it runs outside the lock; an abort meanwhile
  /// leaves this communicator to its destroy.
  void release(int rank) {
    std::optional<Comm> doomed;
    {
      std::lock_guard lock(m_mutex);
      slot& s = slot_of(rank, "release");
      if (!s.comm || !s.alive) return;
      s.alive = false;
      doomed.emplace(std::move(*s.comm));
    }
    doomed->destroy();
  }

  /// Fails the group on behalf of `failed_rank` (-1 when unknown) and aborts every communicator
  /// still alive, ending the collectives the other ranks wait in. The first abort's reason wins.
  void abort(int failed_rank, const std::string& why) {
    abort_with(failed_rank,
               (failed_rank >= 0 ? "rank " + std::to_string(failed_rank) : std::string("a rank")) +
                   " failed: " + why);
  }

  /// True once the group was aborted.
  bool aborted() const noexcept {
    std::lock_guard lock(m_mutex);
    return m_aborted;
  }

  /// The rank at fault (-1 if unknown) and the group's failure message; {-1, ""} until aborted.
  std::pair<int, std::string> failure() const {
    std::lock_guard lock(m_mutex);
    return {m_failed_rank, m_message};
  }

  /// Rank `rank` starts its next collective, `what`: throws `tutti::collective_error` if the
  /// group was aborted or the rank's communicator failed. Counting collectives lets a rank that
  /// times out name the ranks that never started the collective it waits for.
  void enter(int rank, const char* what) {
    std::lock_guard lock(m_mutex);
    slot& s = slot_of(rank, what);
    throw_if_aborted(rank, what);
    if (s.comm) {
      comm_poll p = s.comm->poll();
      if (p.state == comm_state::failed) fail_locked(rank, what, std::move(p.why));
    }
    ++s.started;
  }

  /// Blocks rank `rank` until its communicator's work completed. Throws
  /// `tutti::collective_error` when the group is or becomes aborted, when the communicator
  /// fails, or after `timeout`; in the last two cases it first aborts the group.
  void wait(int rank, const char* what, std::chrono::milliseconds timeout) {
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      {
        std::lock_guard lock(m_mutex);
        slot& s = slot_of(rank, what);
        throw_if_aborted(rank, what);
        TUTTI_EXPECTS(
            s.comm && s.alive, "tutti::detail::comm_group::wait",
            "rank " + std::to_string(rank) + " has no communicator; expected one attached");
        comm_poll p = s.comm->poll();
        if (p.state == comm_state::done) return;
        if (p.state == comm_state::failed) fail_locked(rank, what, std::move(p.why));
        if (std::chrono::steady_clock::now() - start > timeout)
          time_out_locked(rank, what, timeout);
      }
      // Short sleeps first: a host reduction of a few scalars completes in microseconds.
      std::this_thread::sleep_for(polls < 100 ? std::chrono::microseconds(50)
                                              : std::chrono::microseconds(1000));
    }
  }

 private:
  struct slot {
    std::optional<Comm> comm;
    bool alive = false;         // attached and neither aborted nor handed to its destroy
    std::uint64_t started = 0;  // collectives the rank entered
  };

  slot& slot_of(int rank, const char* what) {
    TUTTI_EXPECTS(rank >= 0 && rank < world_size(), "tutti::detail::comm_group",
                  std::string(what) + ": rank " + std::to_string(rank) + " of world size " +
                      std::to_string(world_size()) + "; expected 0 <= rank < world size");
    return m_slots[static_cast<std::size_t>(rank)];
  }

  static void end(slot& s, void (Comm::*how)()) {
    s.alive = false;
    ((*s.comm).*how)();
  }

  void abort_with(int failed_rank, std::string message) {
    std::lock_guard lock(m_mutex);
    abort_locked(failed_rank, std::move(message));
  }

  void abort_locked(int failed_rank, std::string message) {
    if (m_aborted) return;
    m_aborted = true;
    m_failed_rank = failed_rank;
    m_message = std::move(message);
    for (auto& s : m_slots)
      if (s.comm && s.alive) end(s, &Comm::abort);
  }

  [[noreturn]] void raise(int rank, const char* what) const {
    throw collective_error(
        m_failed_rank, m_name + " (rank " + std::to_string(rank) + "): " + what + ": " + m_message);
  }

  void throw_if_aborted(int rank, const char* what) const {
    if (m_aborted) raise(rank, what);
  }

  [[noreturn]] void fail_locked(int rank, const char* what, std::string why) {
    abort_locked(rank, "rank " + std::to_string(rank) + " failed: " + why);
    raise(rank, what);
  }

  // The ranks that entered fewer collectives than `rank` cannot be in the one it waits for:
  // they are named. When all have entered it, the fault is in the communication itself.
  [[noreturn]] void time_out_locked(int rank, const char* what, std::chrono::milliseconds t) {
    const std::uint64_t mine = m_slots[static_cast<std::size_t>(rank)].started;
    std::string behind;
    int first_behind = -1;
    for (int k = 0; k < world_size(); ++k) {
      if (m_slots[static_cast<std::size_t>(k)].started >= mine) continue;
      if (first_behind < 0) first_behind = k;
      behind += (behind.empty() ? "" : ", ") + std::to_string(k);
    }
    const std::string limit = std::to_string(t.count()) + " ms";
    if (first_behind >= 0)
      abort_locked(first_behind, "ranks " + behind + " did not start collective " +
                                     std::to_string(mine) + " within " + limit + " (rank " +
                                     std::to_string(rank) + " waited)");
    else
      abort_locked(-1, "rank " + std::to_string(rank) + " saw no completion within " + limit +
                           "; a peer failed or stalled");
    raise(rank, what);
  }

  std::string m_name;
  mutable std::mutex m_mutex;
  std::vector<slot> m_slots;
  bool m_aborted = false;
  int m_failed_rank = -1;
  std::string m_message;
};

/// Runs `work(resources)` for every rank of `group`, where `resources = make(rank)` holds what
/// the rank needs (a ring attached to `group`): rank 0 on the calling thread, the others on their
/// own. When a rank throws, the group is aborted while that rank's resources are still alive, so
/// no communicator of a failed group is destroyed (a destroy waits for peers that wait in a
/// collective) and every peer is released; then all threads are joined and the exception of the
/// first rank that failed is rethrown, not the collective errors it caused in the others.
template <class Comm, class Make, class Work>
void run_comm_group(comm_group<Comm>& group, Make&& make, Work&& work) {
  first_failure failure;
  const auto abort = [&](int rank, const std::string& why) {
    group.abort(rank, why);
  };
  const auto run_rank = [&](int rank) {
    try {
      auto resources = make(rank);
      try {
        work(resources);
      } catch (...) {
        failure.record_current(rank, abort);  // before `resources` go
      }
    } catch (...) {
      failure.record_current(rank, abort);
    }
  };
  run_rank_threads(group.world_size(), run_rank,
                   [&](const std::string& why) { group.abort(-1, why); });
  failure.rethrow_if_any();
}

}  // namespace tutti::detail
