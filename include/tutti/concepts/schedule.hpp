// SPDX-License-Identifier: Apache-2.0
/// @file concepts/schedule.hpp
/// @brief The learning-rate-schedule slot of `tutti::trainer`: the `tutti::lr_schedule`
/// concept, its check, and the schedule's optional capability.
#pragma once

#include <concepts>
#include <cstddef>

namespace tutti {
namespace detail {

template <class S>
concept schedule_has_lr = requires(const S& s, std::size_t step, std::size_t total, double base) {
  { s.lr(step, total, base) } -> std::convertible_to<double>;
};

template <class S>
concept names_warmup_steps = requires {
  &S::warmup_steps;
};

}  // namespace detail

/// A learning-rate schedule: the rate at a step. See docs/concepts.md#lr-schedule.
template <class S>
concept lr_schedule = detail::schedule_has_lr<S>;

// ---- optional capabilities (docs/concepts.md#optional-capabilities) ----------------------------

/// Capability: a public `warmup_steps` (convertible to std::size_t), which the trainer writes
/// into its learning-rate record.
template <class S>
concept schedule_has_warmup = requires(const S& s) {
  { s.warmup_steps } -> std::convertible_to<std::size_t>;
};

/// Asserts `tutti::lr_schedule`, then that a member with the optional capability's name has its
/// type; returns true when all hold.
template <class S>
consteval bool check_lr_schedule() {
  static_assert(detail::schedule_has_lr<S>,
                "tutti::lr_schedule: missing `double lr(std::size_t step, std::size_t total_steps, "
                "double base_lr) const` (see docs/concepts.md#lr-schedule)");
  static_assert(!detail::names_warmup_steps<S> || schedule_has_warmup<S>,
                "tutti::lr_schedule: `warmup_steps` is not the capability "
                "tutti::schedule_has_warmup; expected a public data member convertible to "
                "std::size_t (see docs/concepts.md#optional-capabilities)");
  return true;
}

}  // namespace tutti
