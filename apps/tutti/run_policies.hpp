// SPDX-License-Identifier: Apache-2.0
// Policies chosen on the command line. A library user composes schedule and optimizer as types;
// a program that takes them as options picks at run time: the schedule is a model of
// `tutti::lr_schedule` that holds a std::variant (a rate is all the trainer asks of it), and the
// optimizer is handed to the caller as its own type (`with_optimizer`).
#pragma once

#include "names.hpp"

#include <tutti/tutti.hpp>

#include <cstddef>
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

/// Calls `use(o)` with the optimizer `name` chooses as its own type (sgd, adam, lars, lamb, or
/// the row-sparse lazy_adam, rowwise_adagrad and row_sparse_sgd), and returns what it returns:
/// the trainer built in `use` holds the optimizer itself, every capability of it included.
template <class Use>
decltype(auto) with_optimizer(optimizer_choice name, float momentum, float weight_decay,
                              Use&& use) {
  switch (name) {
    case optimizer_choice::sgd:
      return use(sgd{.momentum = momentum, .weight_decay = weight_decay});
    case optimizer_choice::adam:
      return use(adam{.weight_decay = weight_decay});
    case optimizer_choice::lars:
      return use(lars{.momentum = momentum, .weight_decay = weight_decay});
    case optimizer_choice::lamb:
      return use(lamb{.weight_decay = weight_decay});
    case optimizer_choice::lazy_adam:
      return use(lazy_adam{.weight_decay = weight_decay});
    case optimizer_choice::rowwise_adagrad:
      return use(rowwise_adagrad{});
    case optimizer_choice::row_sparse_sgd:
      return use(row_sparse_sgd{.momentum = momentum, .weight_decay = weight_decay});
  }
  tutti::detail::throw_invalid("tutti train", "an optimizer without a name");
}

}  // namespace tutti::cli
