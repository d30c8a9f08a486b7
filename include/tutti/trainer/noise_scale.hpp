// SPDX-License-Identifier: Apache-2.0
/// @file trainer/noise_scale.hpp
/// @brief The gradient noise scale B_simple = tr(Σ) / |G|² from gradients at two batch sizes
/// (McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training", 2018,
/// appendix A.1), smoothed as the paper recommends.
#pragma once

#include <tutti/detail/host_simd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace tutti {

/// The gradient noise scale of a run, as `fit` reports it per epoch and at the end.
///
/// B_simple = tr(Σ) / |G|², where G is the true gradient and Σ the per-sample gradient
/// covariance: near the batch size beyond which a larger batch buys little more progress per
/// sample. `grad_sq` and `trace` are exponential moving averages of the unbiased per-step
/// estimates (bias-corrected like Adam's moments); their ratio is `b_simple`.
struct noise_scale_estimate {
  /// trace / grad_sq once grad_sq is resolved (more than two standard errors above 0); else 0.
  double b_simple = 0;
  /// While grad_sq is not resolved, the smallest B_simple it allows: trace / (grad_sq + 2
  /// standard errors), the gradient's mean being lost in its noise at the batches measured; 0
  /// once resolved (or before any measurement).
  double b_simple_at_least = 0;
  double grad_sq = 0;            ///< smoothed estimate of |G|²
  double grad_sq_error = 0;      ///< its standard error, from the spread of the estimates
  double trace = 0;              ///< smoothed estimate of tr(Σ)
  std::size_t measurements = 0;  ///< steps measured so far
  double small_batch = 0;        ///< the smaller batch measured (harmonic mean over ranks)
  double big_batch = 0;          ///< the larger batch measured (the global batch)

  /// Whether there is an estimate to report.
  bool known() const noexcept { return measurements > 0 && grad_sq > 0 && b_simple > 0; }
  /// Whether there is an estimate or a lower bound to report.
  bool bounded() const noexcept { return known() || b_simple_at_least > 0; }
};

namespace detail {

/// Σ x² over x[lo, hi), in float lanes summed into a double (an estimate's precision).
inline double squared_sum(const float* x, std::size_t lo, std::size_t hi) {
  double sum = 0;
#if TUTTI_HOST_SIMD
  host_floats acc(0.f);
  for (; lo + host_floats::size() <= hi; lo += host_floats::size()) {
    const host_floats v(x + lo, stdx::element_aligned);
    acc += v * v;
  }
  for (std::size_t k = 0; k < host_floats::size(); ++k) sum += double(acc[k]);
#endif
  for (; lo < hi; ++lo) sum += double(x[lo]) * double(x[lo]);
  return sum;
}

/// Host: Σ x² over block b (of `host_block` values) of x[0, n).
struct squared_block_fn {
  const float* x;
  std::size_t n;
  double operator()(std::size_t b) const {
    const std::size_t lo = b * host_block;
    return squared_sum(x, lo, lo + host_block < n ? lo + host_block : n);
  }
};

/// Device: x[i]² in double.
struct square_at_fn {
  const float* x;
  TUTTI_HOST_DEVICE double operator()(std::size_t i) const {
    const double v = x[i];
    return v * v;
  }
};

struct double_plus_fn {
  TUTTI_HOST_DEVICE double operator()(double a, double b) const { return a + b; }
};

/// The squared Euclidean norm of x[0, n): on the host in parallel blocks of float lanes; on a
/// device one reduction in double, which synchronises the host (it returns the value).
template <class Space>
double squared_norm(const Space& space, const float* x, std::size_t n) {
  if constexpr (Space::host_accessible) {
    return reduce_blocks(space, n, squared_block_fn{x, n}, 0.0, double_plus_fn{});
  } else {
    if (n == 0) return 0.0;
    return thrust::transform_reduce(space.policy(), thrust::counting_iterator<std::size_t>(0),
                                    thrust::counting_iterator<std::size_t>(n), square_at_fn{x}, 0.0,
                                    double_plus_fn{});
  }
}

/// One step's plan for measuring the noise scale; inactive (the default) on a step not measured.
struct noise_step {
  double inv_small = 0;  ///< mean over the small gradients of 1 / their batch
  /// Turns the squared norm of this rank's share of the arena into that of its small-batch
  /// (mean) gradient.
  double factor = 0;
  bool first_micro = false;  ///< one rank: the small gradient is the first micro-batch's
  bool active() const noexcept { return inv_small > 0; }
};

/// Accumulates measurements of |G_small|² and |G_big|² into `noise_scale_estimate`.
class noise_scale_tracker {
 public:
  /// `decay`: the moving averages' weight on the past, per measurement (0 < decay < 1).
  explicit noise_scale_tracker(double decay = 0.95) : m_decay(decay) {}

  /// One step's measurement: `small_sq` is the mean over the small gradients of their squared
  /// norms, whose batches b_k have mean(1/b_k) = `inv_small`; `big_sq` is the squared norm of
  /// their mean, the gradient of `big_batch` samples. Since E|G_b|² = |G|² + tr(Σ)/b:
  ///   tr(Σ) ≈ (small_sq − big_sq) / (inv_small − 1/B),   |G|² ≈ big_sq − tr(Σ)/B.
  /// Ignored unless inv_small > 1/big_batch and both norms are finite.
  void add(double small_sq, double inv_small, double big_sq, double big_batch) {
    const double inv_big = 1.0 / big_batch;
    if (!(inv_small > inv_big) || !std::isfinite(small_sq) || !std::isfinite(big_sq)) return;
    const double trace = (small_sq - big_sq) / (inv_small - inv_big);
    const double grad_sq = big_sq - trace * inv_big;
    m_trace = m_decay * m_trace + (1 - m_decay) * trace;
    m_grad_sq = m_decay * m_grad_sq + (1 - m_decay) * grad_sq;
    m_grad_sq2 = m_decay * m_grad_sq2 + (1 - m_decay) * grad_sq * grad_sq;
    m_weight = m_decay * m_weight + (1 - m_decay);
    m_weight2 = m_decay * m_decay * m_weight2 + (1 - m_decay) * (1 - m_decay);
    m_small = 1.0 / inv_small;
    m_big = big_batch;
    ++m_count;
  }

  /// The smoothed estimate so far.
  noise_scale_estimate estimate() const {
    noise_scale_estimate e;
    e.measurements = m_count;
    e.small_batch = m_small;
    e.big_batch = m_big;
    if (m_count == 0) return e;
    e.grad_sq = m_grad_sq / m_weight;
    e.trace = m_trace / m_weight;
    // The weighted mean's variance: the estimates' spread times Σw² / (Σw)².
    const double spread = std::max(0.0, m_grad_sq2 / m_weight - e.grad_sq * e.grad_sq);
    e.grad_sq_error = m_count > 1 ? std::sqrt(spread * m_weight2) / m_weight : 0;
    if (e.trace <= 0) return e;
    if (m_count > 1 && e.grad_sq > 2 * e.grad_sq_error)
      e.b_simple = e.trace / e.grad_sq;
    else if (m_count > 1)
      e.b_simple_at_least = e.trace / (std::max(e.grad_sq, 0.0) + 2 * e.grad_sq_error);
    return e;
  }

 private:
  double m_decay;
  double m_trace = 0, m_grad_sq = 0, m_grad_sq2 = 0, m_weight = 0, m_weight2 = 0;
  double m_small = 0, m_big = 0;
  std::size_t m_count = 0;
};

}  // namespace detail
}  // namespace tutti
