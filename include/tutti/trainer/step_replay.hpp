// SPDX-License-Identifier: Apache-2.0
/// @file trainer/step_replay.hpp
/// @brief What a device step reads from the space's memory instead of its kernels' arguments
/// (`step_values`), and the record of a steady step that a space replays as a graph
/// (`step_replay`). Part of `tutti::trainer`.
#pragma once

#include <tutti/concepts/optimizer.hpp>
#include <tutti/space/traits.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <variant>

namespace tutti::detail {

/// The values of an optimizer without `row_step_values`: none.
struct no_row_values {};

/// The values `O` keeps in the space's memory on `Space`: its `row_step_values`, or none.
template <class O, class Space, bool = optimizer_steps_rows_from_memory<O, Space>>
struct row_values_of {
  using type = no_row_values;
};
template <class O, class Space>
struct row_values_of<O, Space, true> {
  using type = row_step_values_t<O>;
};

/// What changes from one device step to the next, written by the host into the space's memory
/// once per step, before the step's first kernel: the kernels read it there, so they have the
/// same arguments at every step and a recorded step replays as the current one.
template <class V>
struct step_values {
  std::uint64_t first = 0;  // the step's first slot of this rank's shard
  std::uint64_t entry = 0;  // the step's index in the epoch: where the guard logs its flags
  V optimizer{};            // the optimizer's values of the step (`row_step_values`)
};

/// Addresses of the fields of a `step_values` in the space's memory, computed without reading it.
template <class V>
const std::uint64_t* first_slot_at(const step_values<V>* at) noexcept {
  return reinterpret_cast<const std::uint64_t*>(reinterpret_cast<const char*>(at) +
                                                offsetof(step_values<V>, first));
}
template <class V>
const std::uint64_t* entry_at(const step_values<V>* at) noexcept {
  return reinterpret_cast<const std::uint64_t*>(reinterpret_cast<const char*>(at) +
                                                offsetof(step_values<V>, entry));
}
template <class V>
const V* optimizer_values_at(const step_values<V>* at) noexcept {
  return reinterpret_cast<const V*>(reinterpret_cast<const char*>(at) +
                                    offsetof(step_values<V>, optimizer));
}

/// The same, for a `step_values` held as 64-bit words (the trainer's core, which does not know
/// the optimizer's values' type): the first slot and the entry are its first two words.
static_assert(offsetof(step_values<no_row_values>, first) == 0 &&
              offsetof(step_values<no_row_values>, entry) == sizeof(std::uint64_t));
inline const std::uint64_t* first_slot_at(const std::uint64_t* at) noexcept {
  return at;
}
inline const std::uint64_t* entry_at(const std::uint64_t* at) noexcept {
  return at + 1;
}
/// 64-bit words a `step_values<V>` takes.
template <class V>
constexpr std::size_t step_values_words() noexcept {
  static_assert(alignof(step_values<V>) <= alignof(std::max_align_t));
  return (sizeof(step_values<V>) + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t);
}

/// What a recorded step depends on besides the memory it reads: a step replays the record only
/// when its own shape is the same.
struct step_shape {
  std::size_t count = 0;  // slots
  float scale = 0;        // the gradient's scale: world size ÷ real samples of the step
  double weight = 0;      // the step's sample weight, added to the epoch's sums
  friend bool operator==(const step_shape&, const step_shape&) = default;
};

template <class Space, bool = space_captures_steps<Space>>
struct graph_of {
  using type = std::monostate;
};
template <class Space>
struct graph_of<Space, true> {
  using type = typename Space::step_graph;
};

/// The steady step's record on a space that captures (`tutti::space_captures_steps`). The
/// first step of a shape runs its kernels (the model's memory grows to the shape then), the
/// second is recorded and replayed, and every later one of that shape is replayed. A space that
/// refuses the record (a kernel that waits for the host) leaves the fit to run step by step,
/// and says why.
template <class Space>
class step_replay {
 public:
  enum class action { run, capture, replay };

  /// A new fit: nothing recorded; `on` whether steps may be recorded at all.
  void begin_fit(bool on) {
    m_graph.reset();
    m_on = on;
    m_warm.reset();
    m_refused.clear();
    m_replays = 0;
  }

  /// What a step of shape `s` does.
  action next(const step_shape& s) {
    if (!m_on) return action::run;
    if (m_graph && m_shape == s) return action::replay;
    if (m_warm == s) return action::capture;
    m_warm = s;
    return action::run;
  }

  /// Records what `enqueue` puts on `space` for steps of shape `s`; false (and no more records
  /// in this fit) when the space refuses, and then nothing `enqueue` enqueued has run.
  bool capture(const Space& space, const step_shape& s, const std::function<void()>& enqueue) {
    if constexpr (space_captures_steps<Space>) {
      try {
        m_graph.emplace(space.capture(enqueue));
        m_shape = s;
        return true;
      } catch (const std::exception& e) {
        m_graph.reset();
        m_on = false;
        m_refused = e.what();
        return false;
      }
    } else {
      (void)space, (void)s, (void)enqueue;
      return false;
    }
  }

  /// The fit is over: the record goes (it names the fit's buffers).
  void end_fit() { m_graph.reset(); }

  /// Runs the record on `space`.
  void replay(const Space& space) {
    if constexpr (space_captures_steps<Space>) {
      space.replay(*m_graph);
      ++m_replays;
    } else {
      (void)space;
    }
  }

  std::size_t replays() const noexcept { return m_replays; }
  const std::string& refused() const noexcept { return m_refused; }
  /// What the recorded step charged the ledger in bytes (it reduces the same every replay).
  std::uint64_t bytes = 0;

 private:
  std::optional<typename graph_of<Space>::type> m_graph;
  step_shape m_shape;
  std::optional<step_shape> m_warm;
  bool m_on = false;
  std::string m_refused;
  std::size_t m_replays = 0;
};

}  // namespace tutti::detail
