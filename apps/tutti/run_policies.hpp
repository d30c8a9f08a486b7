// SPDX-License-Identifier: Apache-2.0
// Policies chosen on the command line. A library user composes schedule and optimizer as types;
// a program that takes them as options needs a policy that picks at run time. These two are
// ordinary models of `tutti::lr_schedule` and `tutti::optimizer` that hold a std::variant.
#pragma once

#include "names.hpp"

#include <tutti/tutti.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <variant>

namespace tutti::cli {

/// A `tutti::lr_schedule` chosen by name: constant, step, cosine or poly, each behind warmup.
struct run_schedule {
  std::variant<warmup<constant>, warmup<step_decay>, warmup<cosine>, warmup<polynomial>> chosen;
  std::size_t warmup_steps = 0;  // read by the trainer's global-batch guard
  double lr(std::size_t step, std::size_t total, double base) const {
    return std::visit([&](const auto& s) { return s.lr(step, total, base); }, chosen);
  }
};

namespace detail {
/// `O`'s `row_step_values` type, or one byte for an optimizer without them.
template <class O>
struct row_values_or_byte {
  using type = unsigned char;
};
template <class O>
requires requires {
  typename row_step_values_t<O>;
}
struct row_values_or_byte<O> {
  using type = row_step_values_t<O>;
};
}  // namespace detail

/// A `tutti::optimizer` chosen by name: sgd, adam, lars, lamb, or the row-sparse lazy-adam,
/// rowwise-adagrad and row-sparse-sgd. It holds every capability of the optimizer it holds, the
/// values of a step read from the space's memory included (`row_step_values`), so a device step
/// can be replayed from a graph as with the optimizer itself.
struct run_optimizer {
  using variant = std::variant<sgd, adam, lars, lamb, lazy_adam, rowwise_adagrad, row_sparse_sgd>;
  variant chosen;

  /// The values of one row-sparse step of whichever optimizer is chosen: the bytes of its own
  /// `row_step_values`, in room for the largest of them (trivially copyable, as the trainer
  /// copies them into the space's memory).
  template <class V>
  struct room_of;
  template <class... O>
  struct room_of<std::variant<O...>> {
    static constexpr std::size_t size =
        std::max({sizeof(typename detail::row_values_or_byte<O>::type)...});
    static constexpr std::size_t align =
        std::max({alignof(typename detail::row_values_or_byte<O>::type)...});
  };
  struct row_values {
    alignas(room_of<variant>::align) unsigned char bytes[room_of<variant>::size];
  };

  std::size_t state_size(std::size_t n) const {
    return std::visit([&](const auto& o) { return o.state_size(n); }, chosen);
  }
  /// Where each row's state lies (tutti/state_map.hpp): every optimizer offered has the map.
  tutti::state_map state_map(const parameter_layout& layout) const {
    return std::visit([&](const auto& o) { return tutti::state_map(o.state_map(layout)); }, chosen);
  }
  std::size_t state_size(const parameter_layout& layout) const {
    return std::visit(
        [&](const auto& o) { return tutti::detail::optimizer_state_floats(o, layout); }, chosen);
  }
  /// True for the row-sparse optimizers: the trainer then takes the row-sparse step.
  bool row_sparse() const {
    return std::visit(
        [](const auto& o) {
          if constexpr (requires { o.row_sparse(); })
            return o.row_sparse();
          else
            return false;
        },
        chosen);
  }
  template <class Space>
  void step(const Space& space, std::span<float> p, std::span<const float> g,
            std::span<float> state, float lr, std::uint64_t t) const {
    std::visit([&](const auto& o) { o.step(space, p, g, state, lr, t); }, chosen);
  }
  /// The trainer calls this one: LARS and LAMB take a trust ratio per segment of `layout`.
  template <class Space>
  void step(const Space& space, const parameter_layout& layout, std::span<float> p,
            std::span<const float> g, std::span<float> state, float lr, std::uint64_t t) const {
    std::visit(
        [&](const auto& o) {
          if constexpr (requires { o.step(space, layout, p, g, state, lr, t); })
            o.step(space, layout, p, g, state, lr, t);
          else
            o.step(space, p, g, state, lr, t);
        },
        chosen);
  }
  /// The row-sparse step; the trainer calls it only when `row_sparse()` is true.
  template <class Space>
  requires(Space::host_accessible) void step_rows(const Space& space,
                                                  const parameter_layout& layout,
                                                  std::span<float> p, std::span<const float> g,
                                                  std::span<float> state, row_selection rows,
                                                  float lr, std::uint64_t t) const {
    std::visit(
        [&](const auto& o) {
          if constexpr (optimizer_steps_rows<std::decay_t<decltype(o)>, Space>)
            o.step_rows(space, layout, p, g, state, rows, lr, t);
          else
            tutti::detail::throw_invalid("tutti train",
                                         "a dense optimizer was asked for a row-sparse step");
        },
        chosen);
  }
  /// The row-sparse step on a device space (`tutti::optimizer_steps_rows_on_space`).
  template <class Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout, std::span<float> p,
                          std::span<const float> g, std::span<float> state,
                          row_selection_on_space rows, const float* skip, float lr,
                          std::uint64_t t) const {
    std::visit(
        [&](const auto& o) {
          if constexpr (optimizer_steps_rows_on_space<std::decay_t<decltype(o)>, Space>)
            o.step_rows_on_space(space, layout, p, g, state, rows, skip, lr, t);
          else
            tutti::detail::throw_invalid("tutti train",
                                         "a dense optimizer was asked for a row-sparse step");
        },
        chosen);
  }
  /// The values the chosen optimizer's row-sparse step reads from the space's memory
  /// (`tutti::optimizer_steps_rows_from_memory`); the trainer asks only for a row-sparse one.
  row_values row_step_values(const parameter_layout& layout, std::span<float> p,
                             std::span<const float> g, std::span<float> state, float lr,
                             std::uint64_t t) const {
    row_values out{};
    std::visit(
        [&](const auto& o) {
          using O = std::decay_t<decltype(o)>;
          if constexpr (requires { typename row_step_values_t<O>; }) {
            const row_step_values_t<O> v = o.row_step_values(layout, p, g, state, lr, t);
            static_assert(sizeof v <= sizeof out.bytes &&
                          alignof(decltype(v)) <= alignof(row_values));
            std::memcpy(out.bytes, &v, sizeof v);
          } else {
            tutti::detail::throw_invalid("tutti train",
                                         "a dense optimizer was asked for a row-sparse step");
          }
        },
        chosen);
    return out;
  }
  /// The row-sparse step on a device space reading its values (`row_step_values`, copied into
  /// the space's memory at `values`) there: every kernel has the same arguments at every step.
  template <class Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout, std::span<float> p,
                          std::span<const float> g, std::span<float> state,
                          row_selection_on_space rows, const float* skip,
                          const row_values* values) const {
    std::visit(
        [&](const auto& o) {
          using O = std::decay_t<decltype(o)>;
          if constexpr (optimizer_steps_rows_from_memory<O, Space>)
            // The chosen optimizer's values sit at the start of the bytes (only an address here:
            // the memory may be a device's).
            o.step_rows_on_space(
                space, layout, p, g, state, rows, skip,
                reinterpret_cast<const row_step_values_t<O>*>(static_cast<const void*>(values)));
          else
            tutti::detail::throw_invalid("tutti train",
                                         "a dense optimizer was asked for a row-sparse step");
        },
        chosen);
  }
  /// The row-sparse step as a function of one run of rows (`tutti::optimizer_fuses_rows`).
  template <class Use>
  void with_row_update(const parameter_layout& layout, std::span<float> p, std::span<const float> g,
                       std::span<float> state, float lr, std::uint64_t t, Use&& use) const {
    std::visit(
        [&](const auto& o) {
          if constexpr (optimizer_fuses_rows<std::decay_t<decltype(o)>, host_space>)
            o.with_row_update(layout, p, g, state, lr, t, use);
          else
            tutti::detail::throw_invalid("tutti train",
                                         "a dense optimizer was asked for a row-sparse step");
        },
        chosen);
  }
};

/// The schedule `name` chooses, with `warmup_steps` of linear warmup in front.
inline run_schedule make_schedule(schedule_choice name, std::size_t warmup_steps) {
  switch (name) {
    case schedule_choice::constant:
      return {warmup<constant>{.warmup_steps = warmup_steps}, warmup_steps};
    case schedule_choice::step:
      return {warmup<step_decay>{.warmup_steps = warmup_steps}, warmup_steps};
    case schedule_choice::cosine:
      return {warmup<cosine>{.warmup_steps = warmup_steps}, warmup_steps};
    case schedule_choice::poly:
      return {warmup<polynomial>{.warmup_steps = warmup_steps}, warmup_steps};
  }
  tutti::detail::throw_invalid("tutti train", "a schedule without a name");
}

/// The optimizer `name` chooses.
inline run_optimizer make_optimizer(optimizer_choice name, float momentum, float weight_decay) {
  switch (name) {
    case optimizer_choice::sgd:
      return {sgd{.momentum = momentum, .weight_decay = weight_decay}};
    case optimizer_choice::adam:
      return {adam{.weight_decay = weight_decay}};
    case optimizer_choice::lars:
      return {lars{.momentum = momentum, .weight_decay = weight_decay}};
    case optimizer_choice::lamb:
      return {lamb{.weight_decay = weight_decay}};
    case optimizer_choice::lazy_adam:
      return {lazy_adam{.weight_decay = weight_decay}};
    case optimizer_choice::rowwise_adagrad:
      return {rowwise_adagrad{}};
    case optimizer_choice::row_sparse_sgd:
      return {row_sparse_sgd{.momentum = momentum, .weight_decay = weight_decay}};
  }
  tutti::detail::throw_invalid("tutti train", "an optimizer without a name");
}

}  // namespace tutti::cli
