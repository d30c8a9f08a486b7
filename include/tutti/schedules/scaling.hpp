// SPDX-License-Identifier: Apache-2.0
/// @file schedules/scaling.hpp
/// @brief The linear scaling rule and friends: the base rate for a global batch size.
#pragma once

#include <tutti/error.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>

namespace tutti {

/// How the base learning rate follows the global batch size.
enum class lr_scaling {
  none,    ///< keep the base rate whatever the batch
  linear,  ///< base × global/reference (Goyal et al. 2017; pair it with `tutti::warmup`)
  sqrt,    ///< base × sqrt(global/reference) (Krizhevsky 2014; often used with Adam)
};

/// The lower-case name of a scaling rule, as `parse_lr_scaling` accepts it.
constexpr const char* to_string(lr_scaling rule) {
  switch (rule) {
    case lr_scaling::none:
      return "none";
    case lr_scaling::linear:
      return "linear";
    case lr_scaling::sqrt:
      return "sqrt";
  }
  detail::throw_invalid("tutti::to_string",
                        "lr_scaling value " + std::to_string(static_cast<int>(rule)) +
                            " is not an enumerator; expected none, linear or sqrt");
}

/// Parses a scaling rule from its lower-case name ("none", "linear", "sqrt"), e.g. a CLI flag.
inline lr_scaling parse_lr_scaling(std::string_view name) {
  for (lr_scaling rule : {lr_scaling::none, lr_scaling::linear, lr_scaling::sqrt}) {
    if (name == to_string(rule)) return rule;
  }
  detail::throw_invalid("tutti::parse_lr_scaling", "unknown learning-rate scaling rule '" +
                                                       std::string(name) +
                                                       "'; expected one of: none, linear, sqrt");
}

/// The base rate for `global_batch` samples per step, given a rate `base_lr` tuned at
/// `reference_batch` samples per step.
inline double scaled_lr(double base_lr, std::size_t global_batch, std::size_t reference_batch,
                        lr_scaling rule) {
  TUTTI_EXPECTS(std::isfinite(base_lr) && base_lr >= 0.0, "tutti::scaled_lr",
                "base_lr is " + std::to_string(base_lr) + "; expected a finite value >= 0");
  TUTTI_EXPECTS(reference_batch > 0, "tutti::scaled_lr",
                "reference_batch is 0; expected the positive batch size base_lr was tuned at");
  TUTTI_EXPECTS(global_batch > 0, "tutti::scaled_lr",
                "global_batch is 0; expected the positive number of samples per step");
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(reference_batch);
  switch (rule) {
    case lr_scaling::none:
      return base_lr;
    case lr_scaling::linear:
      return base_lr * ratio;
    case lr_scaling::sqrt:
      return base_lr * std::sqrt(ratio);
  }
  detail::throw_invalid("tutti::scaled_lr",
                        "rule value " + std::to_string(static_cast<int>(rule)) +
                            " is not an lr_scaling enumerator; expected none, linear or sqrt");
}

}  // namespace tutti
