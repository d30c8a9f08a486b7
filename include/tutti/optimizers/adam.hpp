// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/adam.hpp
/// @brief `tutti::adam`: Adam and AdamW with bias correction.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/error.hpp>
#include <tutti/optimizers/sgd.hpp>  // detail::check_optimizer_step
#include <tutti/space/algorithms.hpp>
#include <tutti/space/traits.hpp>
#include <tutti/state_map.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tutti {
namespace detail {

/// One element of Adam, PyTorch's formulas; the step's scalars are folded on the host.
struct adam_kernel {
  float* p;
  const float* g;
  float* m;
  float* v;
  float beta1;
  float beta2;
  float eps;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float l2;            // weight decay added to the gradient (Adam); 0 for AdamW
  float decay;         // 1 - lr * weight_decay (AdamW); 1 for Adam
  bool decoupled;

  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { update(i, g[i]); }

  /// Element i with gradient `d`.
  TUTTI_HOST_DEVICE void update(std::size_t i, float d) const {
    float w = p[i];
    if (l2 != 0.f) d += l2 * w;
    if (decoupled) w *= decay;
    const float mi = beta1 * m[i] + (1.f - beta1) * d;
    const float vi = beta2 * v[i] + (1.f - beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    p[i] = w - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }

  /// Host: asks for the first lines of elements [lo, hi) of every array `run` reads, their
  /// gradient at `gl`.
  void prefetch(std::size_t lo, std::size_t hi, const float* gl) const {
    const std::size_t bytes = (hi - lo) * sizeof(float);
    prefetch_bytes(p + lo, bytes, true);
    prefetch_bytes(gl, bytes);
    prefetch_bytes(m + lo, bytes, true);
    prefetch_bytes(v + lo, bytes, true);
  }

  /// Elements [lo, hi) on the host: the operations of `operator()`, in its order, on vectors
  /// (see detail/host_simd.hpp), then the scalar tail.
  void run(std::size_t lo, std::size_t hi) const { run(lo, hi, g + lo); }

  /// The same with the gradient of element lo at gl[0] (a row's gradient kept apart from the
  /// arena's order: a gradient sized by the batch).
  void run(std::size_t lo, std::size_t hi, const float* gl) const {
#if TUTTI_HOST_SIMD
    using V = host_floats;
    constexpr auto aligned = stdx::element_aligned;
    const V b1(beta1), b1c(1.f - beta1), b2(beta2), b2c(1.f - beta2), vl2(l2), vdecay(decay);
    const V vstep(step_size), vbc2(inv_sqrt_bc2), veps(eps);
    for (; lo + V::size() <= hi; lo += V::size(), gl += V::size()) {
      V w(p + lo, aligned);
      V d(gl, aligned);
      if (l2 != 0.f) d += vl2 * w;
      if (decoupled) w *= vdecay;
      const V mi = b1 * V(m + lo, aligned) + b1c * d;
      const V vi = b2 * V(v + lo, aligned) + b2c * d * d;
      mi.copy_to(m + lo, aligned);
      vi.copy_to(v + lo, aligned);
      const V out = w - vstep * mi / (stdx::sqrt(vi) * vbc2 + veps);
      out.copy_to(p + lo, aligned);
    }
#endif
    for (; lo < hi; ++lo, ++gl) update(lo, *gl);
  }
};

/// Checks the hyper-parameters Adam and LAMB share; `fn` names the caller in the message.
inline void check_adam_family(const char* fn, float beta1, float beta2, float eps,
                              float weight_decay) {
  TUTTI_EXPECTS(std::isfinite(beta1) && beta1 >= 0.f && beta1 < 1.f, fn,
                "beta1 is " + std::to_string(beta1) + "; expected a value in [0, 1)");
  TUTTI_EXPECTS(std::isfinite(beta2) && beta2 >= 0.f && beta2 < 1.f, fn,
                "beta2 is " + std::to_string(beta2) + "; expected a value in [0, 1)");
  TUTTI_EXPECTS(std::isfinite(eps) && eps > 0.f, fn,
                "eps is " + std::to_string(eps) + "; expected a finite value > 0");
  TUTTI_EXPECTS(
      std::isfinite(weight_decay) && weight_decay >= 0.f, fn,
      "weight_decay is " + std::to_string(weight_decay) + "; expected a finite value >= 0");
}

/// Checks that `step` is 1-based (bias correction divides by 1 - beta^step).
inline void check_one_based_step(const char* fn, std::uint64_t step) {
  TUTTI_EXPECTS(step >= 1, fn,
                "step is 0; expected the 1-based optimizer step (bias correction divides by "
                "1 - beta^step)");
}

}  // namespace detail

/// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019) with PyTorch's semantics:
///
///     g' = g + weight_decay * p              (Adam: L2 penalty in the gradient)
///     p  = p * (1 - lr * weight_decay)       (AdamW, decoupled: the gradient is left alone)
///     m  = beta1 * m + (1 - beta1) * g'
///     v  = beta2 * v + (1 - beta2) * g'^2
///     p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
///
/// with `t` the 1-based step. State is `2n` floats: the first moments `m`, then the second
/// moments `v`, zero-filled by the trainer. `step` calls `validate()` first (see `tutti::sgd`).
struct adam {
  /// Decay of the first-moment average, in [0, 1).
  float beta1 = 0.9f;
  /// Decay of the second-moment average, in [0, 1).
  float beta2 = 0.999f;
  /// Added to the denominator for numerical stability; finite and > 0.
  float eps = 1e-8f;
  /// Weight decay; finite and >= 0. L2 in the gradient, or decoupled when `decoupled` is set.
  float weight_decay = 0.f;
  /// AdamW: decay the weights directly instead of adding an L2 term to the gradient.
  bool decoupled = false;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const {
    detail::check_adam_family("tutti::adam::step", beta1, beta2, eps, weight_decay);
  }

  /// Floats of state for `parameters` parameters: first and second moments.
  std::size_t state_size(std::size_t parameters) const { return 2 * parameters; }
  /// Where each row's state lies: the first moments, then the second, each laid out as the
  /// arena (tutti/state_map.hpp).
  tutti::state_map state_map(const parameter_layout& layout) const {
    return arena_state_map(layout, 2);
  }

  /// Applies one update to `params` in place on `space`; `step` is the 1-based step counter.
  /// @tparam Space a type modelling `tutti::execution_space`; all spans live in its memory
  template <execution_space Space>
  void step(const Space& space, std::span<float> params, std::span<const float> grads,
            std::span<float> state, float lr, std::uint64_t step) const {
    validate();
    const std::size_t n = params.size();
    detail::check_optimizer_step("tutti::adam::step", n, grads.size(), state.size(), state_size(n),
                                 lr);
    detail::check_one_based_step("tutti::adam::step", step);
    const detail::adam_kernel kernel = make_kernel(params, grads, state, lr, step);
    if constexpr (Space::host_accessible)
      detail::parallel_blocks(space, n, kernel);  // vectorised: 3-4x the scalar loop
    else
      parallel_for(space, n, kernel);
  }

  /// The element kernel of step `step` (1-based) over `params` with state `state` (the first
  /// moments, then the second): what `step` runs over the arena, and `tutti::lazy_adam` over the
  /// rows a step touched.
  detail::adam_kernel make_kernel(std::span<float> params, std::span<const float> grads,
                                  std::span<float> state, float lr, std::uint64_t step) const {
    const std::size_t n = params.size();
    // Folded in double so that large step counts and betas near 1 keep their precision.
    const double t = static_cast<double>(step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
    const double wd = static_cast<double>(weight_decay);
    const detail::adam_kernel kernel{
        params.data(),
        grads.data(),
        state.data(),
        state.data() + n,
        beta1,
        beta2,
        eps,
        static_cast<float>(static_cast<double>(lr) / bc1),
        static_cast<float>(1.0 / std::sqrt(bc2)),
        decoupled ? 0.f : weight_decay,
        static_cast<float>(decoupled ? 1.0 - static_cast<double>(lr) * wd : 1.0),
        decoupled};
    return kernel;
  }
};

}  // namespace tutti
