// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/lamb.hpp
/// @brief `tutti::lamb`: layer-wise adaptive moments, the trust ratio taken per segment of the
/// parameter layout.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/optimizers/adam.hpp>  // detail::check_adam_family, check_one_based_step
#include <tutti/optimizers/lars.hpp>  // detail::reduce_sum_squares, trust_segments, trust_ratio
#include <tutti/optimizers/sgd.hpp>   // detail::check_optimizer_step
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

/// LAMB's per-element terms within a segment (pointers start at the segment's offset): the new
/// moments and the update direction r. The norm pass and the update pass both call `terms`, so
/// the moments are written once, after the segment's ratio is known, and no scratch is needed.
struct lamb_terms {
  float* p;
  const float* g;
  float* m;
  float* v;
  float beta1;
  float beta2;
  float eps;
  float inv_bc1;       // 1 / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float weight_decay;  // 0 in excluded segments

  TUTTI_HOST_DEVICE void terms(std::size_t i, float& mi, float& vi, float& r) const {
    const float d = g[i];
    mi = beta1 * m[i] + (1.f - beta1) * d;
    vi = beta2 * v[i] + (1.f - beta2) * d * d;
    r = mi * inv_bc1 / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    // Skipped when zero so an infinite parameter does not turn into NaN via 0 * inf.
    if (weight_decay != 0.f) r += weight_decay * p[i];
  }

#if TUTTI_HOST_SIMD
  /// `terms` for the vector of values at `i`, the same operations in the same order.
  void terms(std::size_t i, host_floats& mi, host_floats& vi, host_floats& r) const {
    using V = host_floats;
    constexpr auto aligned = stdx::element_aligned;
    const V d(g + i, aligned);
    mi = V(beta1) * V(m + i, aligned) + V(1.f - beta1) * d;
    vi = V(beta2) * V(v + i, aligned) + V(1.f - beta2) * d * d;
    r = mi * V(inv_bc1) / (stdx::sqrt(vi) * V(inv_sqrt_bc2) + V(eps));
    if (weight_decay != 0.f) r += V(weight_decay) * V(p + i, aligned);
  }
#endif
};

/// Squares of a segment's weights and update directions, for LAMB's two norms.
struct lamb_norms_fn {
  lamb_terms t;
  TUTTI_HOST_DEVICE sum_squares operator()(std::size_t i) const {
    float mi, vi, r;
    t.terms(i, mi, vi, r);
    const double w = t.p[i];
    const double rd = r;
    return {w * w, rd * rd};
  }
};

/// Host: lamb_norms_fn summed over block b (of `host_block` values) of a segment of n values,
/// in value order, with the float terms computed on vectors.
struct lamb_norms_block_fn {
  lamb_terms t;
  std::size_t n;
  sum_squares operator()(std::size_t b) const {
    std::size_t i = b * host_block;
    const std::size_t hi = i + host_block < n ? i + host_block : n;
    sum_squares s{0.0, 0.0};
#if TUTTI_HOST_SIMD
    using V = host_floats;
    for (; i + V::size() <= hi; i += V::size()) {
      V mi, vi, r;
      t.terms(i, mi, vi, r);
      for (std::size_t k = 0; k < V::size(); ++k) {
        const double w = t.p[i + k];
        const double rd = r[k];
        s.a += w * w;
        s.b += rd * rd;
      }
    }
#endif
    for (; i < hi; ++i) s = sum_squares_plus{}(s, lamb_norms_fn{t}(i));
    return s;
  }
};

/// One element of LAMB: stores the moments and moves the weight by `scale` (lr * ratio) times r.
struct lamb_kernel {
  lamb_terms t;
  float scale;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    float mi, vi, r;
    t.terms(i, mi, vi, r);
    t.m[i] = mi;
    t.v[i] = vi;
    t.p[i] -= scale * r;
  }

  /// Values [lo, hi) on the host: `operator()` on vectors, then the scalar tail.
  void run(std::size_t lo, std::size_t hi) const {
#if TUTTI_HOST_SIMD
    using V = host_floats;
    constexpr auto aligned = stdx::element_aligned;
    for (; lo + V::size() <= hi; lo += V::size()) {
      V mi, vi, r;
      t.terms(lo, mi, vi, r);
      mi.copy_to(t.m + lo, aligned);
      vi.copy_to(t.v + lo, aligned);
      const V out = V(t.p + lo, aligned) - V(scale) * r;
      out.copy_to(t.p + lo, aligned);
    }
#endif
    for (; lo < hi; ++lo) (*this)(lo);
  }
};

}  // namespace detail

/// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76
/// minutes"): Adam's moments with bias correction, and a trust ratio per segment of the
/// parameter layout:
///
///     m  = beta1 * m + (1 - beta1) * g            v = beta2 * v + (1 - beta2) * g^2
///     r  = m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * w
///     w -= lr * ‖w‖ / ‖r‖ * r                      (ratio 1 when ‖w‖ or ‖r‖ is 0)
///
/// with `t` the 1-based step, φ the identity, and the norms over each segment's `size()` values.
/// Segments of kind `segment_kind::bias` take ratio 1 and no weight decay while `exclude_bias` is
/// set. State is `2n` floats: the first moments, then the second moments, at the parameters'
/// offsets, zero-filled by the trainer.
///
/// Two `step` overloads, as `tutti::lars`: the layout overload (use it) visits each segment and
/// leaves the padding between segments, and its moments, untouched; the layout-free overload
/// satisfies `tutti::optimizer` and treats the whole span as one dense segment.
///
/// Cost per step: one reduction per segment that is not excluded (‖w‖ and ‖r‖ in one pass, in
/// double; r is recomputed from the old moments rather than stored), then one `parallel_for`
/// per segment. On a device space each reduction returns its two sums to the host: a step
/// synchronises once per segment and reads back two doubles per segment.
struct lamb {
  /// Decay of the first-moment average, in [0, 1).
  float beta1 = 0.9f;
  /// Decay of the second-moment average, in [0, 1).
  float beta2 = 0.999f;
  /// Added to the denominator for numerical stability; finite and > 0.
  float eps = 1e-6f;
  /// Decoupled weight decay, added to the update direction r; finite and >= 0.
  float weight_decay = 0.01f;
  /// Bias segments take trust ratio 1 and no weight decay.
  bool exclude_bias = true;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const {
    detail::check_adam_family("tutti::lamb::step", beta1, beta2, eps, weight_decay);
  }

  /// Floats of state for `parameters` parameters: first and second moments.
  std::size_t state_size(std::size_t parameters) const { return 2 * parameters; }
  /// Where each row's state lies: the first moments, then the second, each laid out as the
  /// arena (tutti/state_map.hpp).
  tutti::state_map state_map(const parameter_layout& layout) const {
    return arena_state_map(layout, 2);
  }

  /// One update with a trust ratio per segment of `layout`; padding is left untouched.
  /// `params` and `grads` are arenas of `layout.total()` values; `step` is 1-based.
  /// @tparam Space a type modelling `tutti::execution_space`; all spans live in its memory
  template <execution_space Space>
  void step(const Space& space, const parameter_layout& layout, std::span<float> params,
            std::span<const float> grads, std::span<float> state, float lr,
            std::uint64_t step) const {
    check(params, grads, state, lr, step);
    apply(space, detail::trust_segments("tutti::lamb::step", layout, params.size(), exclude_bias),
          params, grads, state, lr, step);
  }

  /// One update treating all of `params` as one dense segment (one trust ratio, no exclusion);
  /// the form `tutti::optimizer` asks for. Prefer the layout overload.
  /// @tparam Space a type modelling `tutti::execution_space`; all spans live in its memory
  template <execution_space Space>
  void step(const Space& space, std::span<float> params, std::span<const float> grads,
            std::span<float> state, float lr, std::uint64_t step) const {
    check(params, grads, state, lr, step);
    apply(space, {detail::trust_segment{0, params.size(), false}}, params, grads, state, lr, step);
  }

 private:
  void check(std::span<float> params, std::span<const float> grads, std::span<float> state,
             float lr, std::uint64_t step) const {
    validate();
    detail::check_optimizer_step("tutti::lamb::step", params.size(), grads.size(), state.size(),
                                 state_size(params.size()), lr);
    detail::check_one_based_step("tutti::lamb::step", step);
  }

  template <execution_space Space>
  void apply(const Space& space, const std::vector<detail::trust_segment>& segments,
             std::span<float> params, std::span<const float> grads, std::span<float> state,
             float lr, std::uint64_t step) const {
    const std::size_t n = params.size();
    // Folded in double so that large step counts and betas near 1 keep their precision.
    const double t = static_cast<double>(step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
    for (const detail::trust_segment& s : segments) {
      if (s.size == 0) continue;
      const detail::lamb_terms terms{params.data() + s.offset,
                                     grads.data() + s.offset,
                                     state.data() + s.offset,
                                     state.data() + n + s.offset,
                                     beta1,
                                     beta2,
                                     eps,
                                     static_cast<float>(1.0 / bc1),
                                     static_cast<float>(1.0 / std::sqrt(bc2)),
                                     s.excluded ? 0.f : weight_decay};
      double ratio = 1.0;
      if (!s.excluded) {
        detail::sum_squares sq{0.0, 0.0};
        if constexpr (Space::host_accessible)
          sq = detail::reduce_blocks(space, s.size, detail::lamb_norms_block_fn{terms, s.size}, sq,
                                     detail::sum_squares_plus{});
        else
          sq = detail::reduce_sum_squares(space, s.size, detail::lamb_norms_fn{terms});
        const double w_norm = std::sqrt(sq.a);
        const double r_norm = std::sqrt(sq.b);
        ratio = detail::trust_ratio(w_norm, r_norm, w_norm, r_norm);
      }
      const detail::lamb_kernel kernel{terms, static_cast<float>(double(lr) * ratio)};
      if constexpr (Space::host_accessible)
        detail::parallel_blocks(space, s.size, kernel);
      else
        parallel_for(space, s.size, kernel);
    }
  }
};

}  // namespace tutti
