// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/sgd.hpp
/// @brief `tutti::sgd`: stochastic gradient descent with optional (Nesterov) momentum.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/error.hpp>
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

/// One element of SGD, PyTorch's formulas (dampening 0). `v` is null without momentum.
struct sgd_kernel {
  float* p;
  const float* g;
  float* v;
  float lr;
  float momentum;
  float weight_decay;
  bool nesterov;

  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { update(i, g[i]); }

  /// Element i with gradient `d`.
  TUTTI_HOST_DEVICE void update(std::size_t i, float d) const {
    // Skipped when zero (as PyTorch) so an infinite parameter does not turn into NaN via 0 * inf.
    if (weight_decay != 0.f) d += weight_decay * p[i];
    if (v != nullptr) {
      const float buf = momentum * v[i] + d;
      v[i] = buf;
      d = nesterov ? d + momentum * buf : buf;
    }
    p[i] -= lr * d;
  }

  /// Elements [lo, hi) on the host: the operations of `operator()`, in its order, on vectors
  /// (see detail/host_simd.hpp), then the scalar tail.
  void run(std::size_t lo, std::size_t hi) const { run(lo, hi, g + lo); }

  /// The same with the gradient of element lo at gl[0] (a gradient sized by the batch).
  void run(std::size_t lo, std::size_t hi, const float* gl) const {
#if TUTTI_HOST_SIMD
    using V = host_floats;
    constexpr auto aligned = stdx::element_aligned;
    const V vlr(lr), vmomentum(momentum), vwd(weight_decay);
    for (; lo + V::size() <= hi; lo += V::size(), gl += V::size()) {
      const V w(p + lo, aligned);
      V d(gl, aligned);
      if (weight_decay != 0.f) d += vwd * w;
      if (v != nullptr) {
        const V buf = vmomentum * V(v + lo, aligned) + d;
        buf.copy_to(v + lo, aligned);
        d = nesterov ? d + vmomentum * buf : buf;
      }
      const V out = w - vlr * d;
      out.copy_to(p + lo, aligned);
    }
#endif
    for (; lo < hi; ++lo, ++gl) update(lo, *gl);
  }
};

/// Checks the spans and rate handed to an optimizer's `step`; `fn` names the caller.
/// `in_slots`: a row-sparse update whose runs say where each row's gradient is (a gradient in
/// slots, sized by the batch), so `grads` may be smaller than `params`.
inline void check_optimizer_step(const char* fn, std::size_t params, std::size_t grads,
                                 std::size_t state, std::size_t state_needed, float lr,
                                 bool in_slots = false) {
  TUTTI_EXPECTS(grads == params || (in_slots && grads < params), fn,
                "grads has " + std::to_string(grads) + " elements, params " +
                    std::to_string(params) + "; expected equal sizes" +
                    (in_slots ? " (or fewer: a gradient in slots)" : ""));
  TUTTI_EXPECTS(state >= state_needed, fn,
                "state has " + std::to_string(state) + " elements; expected at least state_size(" +
                    std::to_string(params) + ") = " + std::to_string(state_needed));
  TUTTI_EXPECTS(std::isfinite(lr) && lr >= 0.f, fn,
                "lr is " + std::to_string(lr) + "; expected a finite value >= 0");
}

}  // namespace detail

/// Stochastic gradient descent with PyTorch's semantics (`torch.optim.SGD`, dampening 0):
///
///     g' = g + weight_decay * p
///     v  = momentum * v + g'                        (momentum > 0; v starts at 0)
///     p -= lr * (nesterov ? g' + momentum * v : v)  (without momentum: p -= lr * g')
///
/// It is the trivial `tutti::optimizer` and the example to copy when writing your own: an
/// aggregate of hyper-parameters; `state_size(n)` says how many floats of per-parameter state it
/// needs (the trainer owns that arena and zero-fills it before the first step); `step` makes one
/// fused parallel pass over the arena with a `TUTTI_HOST_DEVICE` functor holding raw pointers,
/// so the same code runs on every space and never reads device memory from the host.
///
/// Hyper-parameters are checked by `validate()`, which `step` calls before touching the arena:
/// a handful of comparisons per step, and no way to forget it. Call it yourself to fail earlier.
struct sgd {
  /// Momentum factor in [0, 1); 0 disables momentum (and its state).
  float momentum = 0.f;
  /// Nesterov momentum (Sutskever et al. 2013); requires momentum > 0.
  bool nesterov = false;
  /// L2 penalty added to the gradient; finite and >= 0.
  float weight_decay = 0.f;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const {
    TUTTI_EXPECTS(std::isfinite(momentum) && momentum >= 0.f && momentum < 1.f, "tutti::sgd::step",
                  "momentum is " + std::to_string(momentum) + "; expected a value in [0, 1)");
    TUTTI_EXPECTS(!nesterov || momentum > 0.f, "tutti::sgd::step",
                  "nesterov is set but momentum is 0; expected momentum > 0 with nesterov");
    TUTTI_EXPECTS(
        std::isfinite(weight_decay) && weight_decay >= 0.f, "tutti::sgd::step",
        "weight_decay is " + std::to_string(weight_decay) + "; expected a finite value >= 0");
  }

  /// Floats of state for `parameters` parameters: one momentum buffer, or none.
  std::size_t state_size(std::size_t parameters) const { return momentum > 0.f ? parameters : 0; }
  /// Where each row's state lies: the momentum laid out as the arena, or none without momentum
  /// (tutti/state_map.hpp).
  tutti::state_map state_map(const parameter_layout& layout) const {
    return arena_state_map(layout, momentum > 0.f ? 1 : 0);
  }

  /// Applies one update to `params` in place on `space`; `step` (1-based) plays no part.
  /// @tparam Space a type modelling `tutti::execution_space`; all spans live in its memory
  template <execution_space Space>
  void step(const Space& space, std::span<float> params, std::span<const float> grads,
            std::span<float> state, float lr, std::uint64_t /*step*/) const {
    validate();
    detail::check_optimizer_step("tutti::sgd::step", params.size(), grads.size(), state.size(),
                                 state_size(params.size()), lr);
    const detail::sgd_kernel kernel{
        params.data(), grads.data(), momentum > 0.f ? state.data() : nullptr, lr, momentum,
        weight_decay,  nesterov};
    if constexpr (Space::host_accessible)
      detail::parallel_blocks(space, params.size(), kernel);
    else
      parallel_for(space, params.size(), kernel);
  }
};

}  // namespace tutti
