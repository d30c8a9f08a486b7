// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/lars.hpp
/// @brief `tutti::lars`: layer-wise adaptive rate scaling, the trust ratio taken per segment of
/// the parameter layout.
#pragma once

#include <tutti/config.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/optimizers/sgd.hpp>  // detail::check_optimizer_step
#include <tutti/space/algorithms.hpp>
#include <tutti/space/traits.hpp>
#include <tutti/state_map.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tutti {
namespace detail {

/// Two sums of squares reduced together, so a segment's two norms cost one pass (and, on a device
/// space, one read-back). Double: a segment may hold millions of values.
struct sum_squares {
  double a;
  double b;
};

struct sum_squares_plus {
  TUTTI_HOST_DEVICE sum_squares operator()(const sum_squares& x, const sum_squares& y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

/// `transform_reduce` that, like `parallel_for`, stays serial on spaces that say where a
/// fork-join costs more than it saves: most segments (biases, small dense layers) are short and
/// a step reduces every one of them.
template <execution_space Space, class F>
sum_squares reduce_sum_squares(const Space& space, std::size_t n, F f) {
  sum_squares init{0.0, 0.0};
  if constexpr (requires { Space::serial_below; }) {
    if (n < Space::serial_below) {
      for (std::size_t i = 0; i < n; ++i) init = sum_squares_plus{}(init, f(i));
      return init;
    }
  }
  return transform_reduce(space, n, f, init, sum_squares_plus{});
}

/// A range of the arena that gets its own trust ratio; `excluded` ranges take ratio 1 and no
/// weight decay.
struct trust_segment {
  std::size_t offset;
  std::size_t size;
  bool excluded;
};

/// The layout's segments as trust ranges, checked against the arena the step was handed.
inline std::vector<trust_segment> trust_segments(const char* fn, const parameter_layout& layout,
                                                 std::size_t arena, bool exclude_bias) {
  TUTTI_EXPECTS(arena == layout.total(), fn,
                "params has " + std::to_string(arena) + " elements, the layout " +
                    std::to_string(layout.total()) + "; expected params of layout.total() values");
  std::vector<trust_segment> out;
  out.reserve(layout.segments().size());
  for (const segment& s : layout.segments())
    out.push_back({s.offset, s.size(), exclude_bias && s.kind == segment_kind::bias});
  return out;
}

/// The trust ratio `numerator / denominator`, or 1 when a norm is 0: a zero-initialised layer or
/// one the batch did not reach takes the plain rate instead of none (or NaN).
inline double trust_ratio(double weight_norm, double other_norm, double numerator,
                          double denominator) {
  if (!(weight_norm > 0.0) || !(other_norm > 0.0)) return 1.0;
  return numerator / denominator;
}

/// Squares of a segment's weights and gradients, for LARS's two norms.
struct lars_norms_fn {
  const float* p;
  const float* g;
  TUTTI_HOST_DEVICE sum_squares operator()(std::size_t i) const {
    const double w = p[i];
    const double d = g[i];
    return {w * w, d * d};
  }
};

/// One element of LARS within a segment; the pointers start at the segment's offset. `v` is null
/// without momentum.
struct lars_kernel {
  float* p;
  const float* g;
  float* v;
  float scale;  // lr * local_lr
  float momentum;
  float weight_decay;  // 0 in excluded segments

  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    float d = g[i];
    // Skipped when zero (as sgd) so an infinite parameter does not turn into NaN via 0 * inf.
    if (weight_decay != 0.f) d += weight_decay * p[i];
    float u = scale * d;
    if (v != nullptr) {
      u += momentum * v[i];
      v[i] = u;
    }
    p[i] -= u;
  }
};

}  // namespace detail

/// LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks"): SGD
/// with momentum whose rate is scaled, per segment of the parameter layout, by a trust ratio:
///
///     local_lr = trust_coefficient * ‖w‖ / (‖g‖ + weight_decay * ‖w‖ + eps)
///                (1 when ‖w‖ or ‖g‖ is 0)
///     v  = momentum * v + lr * local_lr * (g + weight_decay * w)      (v starts at 0)
///     w -= v
///
/// with the norms over each segment's `size()` values. Segments of kind `segment_kind::bias`
/// take local_lr = 1 and no weight decay while `exclude_bias` is set, as widely used
/// implementations do: a bias's norm says little about the scale of its gradient.
///
/// Two `step` overloads. The layout overload is the one to use: it visits each segment, never
/// reads or writes the padding between segments (which therefore stays 0). The layout-free
/// overload satisfies `tutti::optimizer` and treats the whole span as one dense segment: a
/// single trust ratio for all parameters (padding included in the norms, where it contributes 0
/// as long as its gradient is 0; then it also stays 0).
///
/// Cost per step: one reduction per segment that is not excluded (both norms in one pass, summed
/// in double), then one `parallel_for` per segment. On a device space each reduction returns its
/// two sums to the host, so a step synchronises once per segment and reads back two doubles per
/// segment; the ratio is folded into one scalar on the host.
struct lars {
  /// Momentum factor in [0, 1); 0 disables momentum (and its state).
  float momentum = 0.9f;
  /// L2 penalty added to the gradient (and to the ratio's denominator); finite and >= 0.
  float weight_decay = 0.f;
  /// The trust coefficient η scaling each segment's rate; finite and > 0.
  float trust_coefficient = 0.001f;
  /// Added to the ratio's denominator; finite and >= 0.
  float eps = 0.f;
  /// Bias segments take trust ratio 1 and no weight decay.
  bool exclude_bias = true;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const {
    TUTTI_EXPECTS(std::isfinite(momentum) && momentum >= 0.f && momentum < 1.f, "tutti::lars::step",
                  "momentum is " + std::to_string(momentum) + "; expected a value in [0, 1)");
    TUTTI_EXPECTS(
        std::isfinite(weight_decay) && weight_decay >= 0.f, "tutti::lars::step",
        "weight_decay is " + std::to_string(weight_decay) + "; expected a finite value >= 0");
    TUTTI_EXPECTS(std::isfinite(trust_coefficient) && trust_coefficient > 0.f, "tutti::lars::step",
                  "trust_coefficient is " + std::to_string(trust_coefficient) +
                      "; expected a finite value > 0");
    TUTTI_EXPECTS(std::isfinite(eps) && eps >= 0.f, "tutti::lars::step",
                  "eps is " + std::to_string(eps) + "; expected a finite value >= 0");
  }

  /// Floats of state for `parameters` parameters: one momentum buffer, or none.
  std::size_t state_size(std::size_t parameters) const { return momentum > 0.f ? parameters : 0; }
  /// Where each row's state lies: the momentum laid out as the arena, or none without momentum
  /// (tutti/state_map.hpp).
  tutti::state_map state_map(const parameter_layout& layout) const {
    return arena_state_map(layout, momentum > 0.f ? 1 : 0);
  }

  /// One update with a trust ratio per segment of `layout`; padding is left untouched.
  /// `params`, `grads` and the momentum buffer are arenas of `layout.total()` values.
  /// @tparam Space a type modelling `tutti::execution_space`; all spans live in its memory
  template <execution_space Space>
  void step(const Space& space, const parameter_layout& layout, std::span<float> params,
            std::span<const float> grads, std::span<float> state, float lr,
            std::uint64_t /*step*/) const {
    validate();
    detail::check_optimizer_step("tutti::lars::step", params.size(), grads.size(), state.size(),
                                 state_size(params.size()), lr);
    apply(space, detail::trust_segments("tutti::lars::step", layout, params.size(), exclude_bias),
          params, grads, state, lr);
  }

  /// One update treating all of `params` as one dense segment (one trust ratio, no exclusion);
  /// the form `tutti::optimizer` asks for. Prefer the layout overload.
  /// @tparam Space a type modelling `tutti::execution_space`; all spans live in its memory
  template <execution_space Space>
  void step(const Space& space, std::span<float> params, std::span<const float> grads,
            std::span<float> state, float lr, std::uint64_t /*step*/) const {
    validate();
    detail::check_optimizer_step("tutti::lars::step", params.size(), grads.size(), state.size(),
                                 state_size(params.size()), lr);
    apply(space, {detail::trust_segment{0, params.size(), false}}, params, grads, state, lr);
  }

 private:
  template <execution_space Space>
  void apply(const Space& space, const std::vector<detail::trust_segment>& segments,
             std::span<float> params, std::span<const float> grads, std::span<float> state,
             float lr) const {
    const double wd = weight_decay;
    for (const detail::trust_segment& s : segments) {
      if (s.size == 0) continue;
      float* p = params.data() + s.offset;
      const float* g = grads.data() + s.offset;
      double local_lr = 1.0;
      if (!s.excluded) {
        const detail::sum_squares sq =
            detail::reduce_sum_squares(space, s.size, detail::lars_norms_fn{p, g});
        const double w_norm = std::sqrt(sq.a);
        const double g_norm = std::sqrt(sq.b);
        local_lr = detail::trust_ratio(w_norm, g_norm, double(trust_coefficient) * w_norm,
                                       g_norm + wd * w_norm + double(eps));
      }
      parallel_for(space, s.size,
                   detail::lars_kernel{p, g, momentum > 0.f ? state.data() + s.offset : nullptr,
                                       static_cast<float>(double(lr) * local_lr), momentum,
                                       s.excluded ? 0.f : weight_decay});
    }
  }
};

}  // namespace tutti
