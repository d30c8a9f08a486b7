// SPDX-License-Identifier: Apache-2.0
/// @file trainer/finite_guard.hpp
/// @brief The finite guard of a trainer's steps (`nonfinite_policy`): this rank's flag of each
/// step, the flag after the reduction (any rank), and on a device space the snapshot that
/// reverts a skipped step.
#pragma once

#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/trainer/epoch_summary.hpp>
#include <tutti/trainer/options.hpp>
#include <tutti/trainer/step_kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tutti::detail {

/// The guard's state and its four moves. Each step: `check` sets this rank's flag (the float
/// after the gradient arena, which the reduction carries to every rank) and its entry of the
/// step log; after the reduction `commit` logs the reduced flag and adds the step's loss to
/// the epoch's sums when it is applied. The host reads the reduced flag and skips the
/// optimizer; a device cannot without synchronising, so it `protect`s (snapshots) parameters
/// and state before the update and `revert`s them when the flag is set. At the epoch's end
/// `skips` reads the logs.
///
/// On a device the step in progress keeps both flags at a fixed place (`local_entry`,
/// `skip_flag`) and `commit`'s kernel copies them into the logs at the step's index, which it
/// reads from the space's memory: every kernel of a step then has the same arguments at every
/// step, so a step can be replayed from a graph.
template <class Space>
class finite_guard {
 public:
  finite_guard(nonfinite_policy policy, const Space& space)
      : m_policy(policy), m_space(space), m_sticky(1, space), m_now(2, space) {}

  /// Whether steps are checked at all (`nonfinite_policy::off` checks nothing).
  bool on() const noexcept { return m_policy != nonfinite_policy::off; }

  /// A device space under the stop policy: every step after the first bad one is skipped too
  /// (the host stops at the bad step itself).
  bool sticky_skips() const noexcept {
    return !Space::host_accessible && m_policy == nonfinite_policy::stop;
  }

  /// Allocates the step logs of an epoch of `steps` steps and, on a device space unless
  /// `snapshot` is false (a step that checks before it updates), the snapshot of `params`
  /// parameters and `state` floats of optimizer state.
  void begin_fit(std::size_t steps, std::size_t params, std::size_t state, bool snapshot = true) {
    m_local = buffer<float, Space>(steps, m_space);
    m_global = buffer<float, Space>(steps, m_space);
    if constexpr (!Space::host_accessible) {
      if (!snapshot)
        m_snapshot = buffer<float, Space>(0, m_space);
      else if (on() && m_snapshot.size() != params + state)
        m_snapshot = buffer<float, Space>(params + state, m_space);
    }
  }

  /// Device spaces: the flag (memory of the space) that is set when step `step` is skipped,
  /// for kernels that check it themselves; null when nothing is checked.
  const float* skip_flag(std::size_t step) const noexcept {
    if (!on()) return nullptr;
    if (sticky_skips()) return m_sticky.data();
    if constexpr (Space::host_accessible)
      return m_global.data() + step;
    else
      return m_now.data() + 1;
  }

  /// A new epoch: no step flagged.
  void begin_epoch() {
    fill(m_space, m_local.span(), 0.f);
    fill(m_space, m_global.span(), 0.f);
    fill(m_space, m_sticky.span(), 0.f);
    fill(m_space, m_now.span(), 0.f);
  }

  /// This rank's entry of step `step`'s log (memory of the space); on a device, the flag of the
  /// step in progress, which `commit` logs.
  float* local_entry(std::size_t step) noexcept {
    if constexpr (Space::host_accessible)
      return m_local.data() + step;
    else
      return m_now.data();
  }

  /// Sets this rank's flag `*flag` and its log entry of `step` from the step's loss and the
  /// first `unchecked` values of the gradient `g`. On the host `arena_bad` is a verdict on the
  /// arena already taken (the buckets of the overlapped reduction) and `arena_nonfinite()`
  /// checks what is left; a device checks in a kernel, so the step never waits for the answer.
  template <class ArenaCheck>
  void check(std::size_t step, const float* loss, const float* g, std::size_t unchecked,
             float* flag, bool arena_bad, const ArenaCheck& arena_nonfinite) {
    float* entry = local_entry(step);
    if constexpr (Space::host_accessible) {
      const bool bad = !finite_value(loss[0]) || arena_bad || arena_nonfinite();
      *flag = bad ? 1.f : 0.f;
      *entry = bad ? 1.f : 0.f;
    } else {
      (void)arena_bad, (void)arena_nonfinite;
      parallel_for(m_space, std::max<std::size_t>(unchecked, 1),
                   finite_check_fn{g, unchecked, loss, flag, entry});
    }
  }

  /// After the reduction: logs the reduced flag `*flag` of `step`, adds the step's loss and
  /// `weight` to `sums` when the step is applied, and zeroes the loss for the next one. A device
  /// logs at `*entry` (the step's index, memory of the space). Returns whether the host skips the
  /// step (a device always answers false).
  bool commit(std::size_t step, const float* flag, float* loss, double* sums, double weight,
              const std::uint64_t* entry) {
    if constexpr (Space::host_accessible) {
      (void)entry;
      parallel_for(m_space, 1,
                   guard_commit_fn{flag, m_global.data() + step, m_sticky.data(), sticky_skips(),
                                   loss, sums, weight});
      return on() && !(*flag == 0.f);
    } else {
      const guard_commit_fn commit{
          flag, m_now.data() + 1, m_sticky.data(), sticky_skips(), loss, sums, weight};
      parallel_for(
          m_space, 1,
          guard_commit_logged_fn{commit, m_now.data(), m_local.data(), m_global.data(), entry});
      return false;
    }
  }

  /// Device spaces: the snapshot of the parameters and optimizer state before the update.
  void protect(std::span<const float> params, std::span<const float> state) {
    if constexpr (!Space::host_accessible) {
      if (!on()) return;
      m_space.copy(m_snapshot.data(), params.data(), params.size() * sizeof(float));
      if (!state.empty())
        m_space.copy(m_snapshot.data() + params.size(), state.data(), state.size() * sizeof(float));
    } else {
      (void)params, (void)state;
    }
  }

  /// Device spaces: reverts the update of `step` from the snapshot when it is to be skipped.
  void revert(std::size_t step, std::span<float> params, std::span<float> state) {
    if constexpr (!Space::host_accessible) {
      const float* skip = skip_flag(step);
      parallel_for(m_space, params.size() + state.size(),
                   guard_restore_fn{skip, params.data(), m_snapshot.data(), params.size(),
                                    state.data(), m_snapshot.data() + params.size()});
    } else {
      (void)step, (void)params, (void)state;
    }
  }

  /// Host: whether this rank's own loss or gradient was not finite at `step`.
  bool local_bad(std::size_t step) const { return m_local.data()[step] != 0.f; }

  /// The epoch's skipped steps and this rank's bad ones (none when the guard is off).
  epoch_skips skips() const {
    if (!on()) return {};
    return read_skips(to_host_vector(m_space, std::span<const float>(m_local.span())),
                      to_host_vector(m_space, std::span<const float>(m_global.span())));
  }

 private:
  nonfinite_policy m_policy;
  Space m_space;
  buffer<float, Space> m_local;     // this rank's flag per step of the epoch
  buffer<float, Space> m_global;    // the reduced flag per step: some rank was not finite
  buffer<float, Space> m_sticky;    // set once a step of the epoch was non-finite
  buffer<float, Space> m_snapshot;  // device spaces: parameters and state before the update
  buffer<float, Space> m_now;       // device spaces: the step in progress, this rank's, reduced
};

}  // namespace tutti::detail
