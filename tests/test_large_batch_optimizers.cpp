// SPDX-License-Identifier: Apache-2.0
// LARS and LAMB: per-segment trust ratios against double-precision references, bias exclusion,
// zero norms, padding, the layout-free overload and hyper-parameter checks.
#include <doctest/doctest.h>

#include "spaces.hpp"

#include <tutti/concepts.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/layout.hpp>
#include <tutti/optimizers/lamb.hpp>
#include <tutti/optimizers/lars.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace test_large_batch_optimizers {

static_assert(tutti::optimizer<tutti::lars, tutti::host_space>);
static_assert(tutti::optimizer<tutti::lamb, tutti::host_space>);
static_assert(tutti::check_optimizer<tutti::lars, tutti::host_space>());
static_assert(tutti::check_optimizer<tutti::lamb, tutti::host_space>());

namespace {

using tutti::segment_kind;

// Three kinds, every one padded; the embedding is longer than host_space::serial_below, so its
// norms go through the parallel reduction while the others stay serial.
tutti::parameter_layout mixed_layout() {
  tutti::parameter_layout l;
  l.add("dense", 13, 11, segment_kind::dense);           // 143 values, 1 of padding
  l.add("embedding", 301, 17, segment_kind::embedding);  // 5117 values, 3 of padding
  l.add("bias", 13, 1, segment_kind::bias);              // 13 values, 3 of padding
  return l;
}

bool excluded(bool exclude_bias, const tutti::segment& s) {
  return exclude_bias && s.kind == segment_kind::bias;
}

bool in_padding(const tutti::parameter_layout& l, std::size_t i) {
  for (const auto& s : l.segments())
    if (i >= s.offset && i < s.offset + s.size()) return false;
  return true;
}

// Weights in [-1, 1) in every segment, 0 in the padding (as the trainer's zero-filled arena).
std::vector<float> initial_weights(const tutti::parameter_layout& l, std::uint64_t seed) {
  tutti::detail::splitmix rng(seed);
  std::vector<float> p(l.total(), 0.f);
  for (const auto& s : l.segments())
    for (std::size_t i = s.offset; i < s.offset + s.size(); ++i)
      p[i] = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return p;
}

// Gradients of a different scale per segment, so one global ratio would not pass for per-segment
// ratios. The padding holds a large value: a step that reads it gets wrong norms, one that
// updates it moves the padding off 0.
std::vector<float> gradients(const tutti::parameter_layout& l, std::uint64_t seed,
                             float padding = 1000.f) {
  const double scale[] = {0.1, 1.0, 0.5};
  tutti::detail::splitmix rng(seed);
  std::vector<float> g(l.total(), padding);
  for (std::size_t k = 0; k < l.segments().size(); ++k) {
    const auto& s = l[k];
    for (std::size_t i = s.offset; i < s.offset + s.size(); ++i)
      g[i] = static_cast<float>(scale[k % 3] * (2.0 * rng.uniform() - 1.0));
  }
  return g;
}

double norm_of(const std::vector<double>& x, const tutti::segment& s) {
  double sum = 0;
  for (std::size_t i = s.offset; i < s.offset + s.size(); ++i) sum += x[i] * x[i];
  return std::sqrt(sum);
}

// The papers' formulas in double, one segment at a time.
void lars_reference(const tutti::lars& o, const tutti::parameter_layout& l, std::vector<double>& p,
                    const std::vector<float>& gf, std::vector<double>& v, double lr) {
  const std::vector<double> g(gf.begin(), gf.end());
  for (const auto& s : l.segments()) {
    const bool ex = excluded(o.exclude_bias, s);
    const double wd = ex ? 0.0 : o.weight_decay;
    double local = 1.0;
    if (!ex) {
      const double wn = norm_of(p, s), gn = norm_of(g, s);
      if (wn > 0 && gn > 0) local = o.trust_coefficient * wn / (gn + wd * wn + o.eps);
    }
    for (std::size_t i = s.offset; i < s.offset + s.size(); ++i) {
      v[i] = o.momentum * v[i] + lr * local * (g[i] + wd * p[i]);
      p[i] -= v[i];
    }
  }
}

// State as the optimizer lays it out: m over [0, n), v over [n, 2n).
void lamb_reference(const tutti::lamb& o, const tutti::parameter_layout& l, std::vector<double>& p,
                    const std::vector<float>& g, std::vector<double>& state, double lr,
                    std::uint64_t t) {
  const std::size_t n = l.total();
  const double b1 = o.beta1, b2 = o.beta2;
  std::vector<double> r(n, 0.0);
  for (const auto& s : l.segments()) {
    const bool ex = excluded(o.exclude_bias, s);
    const double wd = ex ? 0.0 : o.weight_decay;
    for (std::size_t i = s.offset; i < s.offset + s.size(); ++i) {
      double& m = state[i];
      double& v = state[n + i];
      m = b1 * m + (1 - b1) * g[i];
      v = b2 * v + (1 - b2) * double(g[i]) * g[i];
      const double mhat = m / (1 - std::pow(b1, double(t)));
      const double vhat = v / (1 - std::pow(b2, double(t)));
      r[i] = mhat / (std::sqrt(vhat) + o.eps) + wd * p[i];
    }
    double ratio = 1.0;
    if (!ex) {
      const double wn = norm_of(p, s), rn = norm_of(r, s);
      if (wn > 0 && rn > 0) ratio = wn / rn;
    }
    for (std::size_t i = s.offset; i < s.offset + s.size(); ++i) p[i] -= lr * ratio * r[i];
  }
}

// Float kernels vs double references: the error scales with the terms (weights of order 1), not
// with the result, hence the floor of 1 in the scale.
bool close(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-5) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= tol * std::max(1.0, std::abs(want[i]))))
      return false;
  return true;
}

// The error of each segment's total displacement, relative to that segment's largest: checks
// the trust ratios far more tightly than the parameters themselves (their steps are small next
// to weights of order 1).
double displacement_error(const tutti::parameter_layout& l, const std::vector<float>& got,
                          const std::vector<double>& want, const std::vector<float>& p0) {
  double worst = 0;
  for (const auto& s : l.segments()) {
    double largest = 0, err = 0;
    for (std::size_t i = s.offset; i < s.offset + s.size(); ++i) {
      largest = std::max(largest, std::abs(want[i] - p0[i]));
      err = std::max(err, std::abs((double(got[i]) - p0[i]) - (want[i] - p0[i])));
    }
    if (largest > 0) worst = std::max(worst, err / largest);
  }
  return worst;
}

bool padding_is_zero(const tutti::parameter_layout& l, const std::vector<float>& x,
                     std::size_t copies = 1) {
  for (std::size_t c = 0; c < copies; ++c)
    for (std::size_t i = 0; i < l.total(); ++i)
      if (in_padding(l, i) && x[c * l.total() + i] != 0.f) return false;
  return true;
}

bool all_finite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

constexpr double rates[] = {1.0, 0.5, 2.0, 0.0, 0.7, 1.3};
// LAMB moves each segment by about lr * ‖w‖ a step: its rates are those of LARS times this.
constexpr double lamb_rate_scale = 0.01;

struct run {
  std::vector<float> params, state;
  std::vector<double> want_params, want_state;
};

// Steps `opt` (layout overload) and `reference` side by side over `rates`, gradients from
// `grads_at(t)`.
template <class Space, class Opt, class Reference>
run run_with_reference(const Opt& opt, const tutti::parameter_layout& l,
                       const std::vector<float>& p0,
                       const std::function<std::vector<float>(std::uint64_t)>& grads_at,
                       Reference reference, double rate_scale = 1.0) {
  Space space{};
  const std::size_t n = l.total();
  auto params = tutti::make_buffer(space, std::span<const float>(p0));
  tutti::buffer<float, Space> grads(n, space), state(opt.state_size(n), space);
  tutti::fill(space, state.span(), 0.f);
  run r;
  r.want_params.assign(p0.begin(), p0.end());
  r.want_state.assign(opt.state_size(n) > 0 ? opt.state_size(n) : n, 0.0);
  std::uint64_t t = 0;
  for (double rate : rates) {
    const double lr = static_cast<double>(static_cast<float>(rate * rate_scale));
    ++t;
    const std::vector<float> g = grads_at(t);
    tutti::copy_from_host(space, std::span<const float>(g), grads.span());
    opt.step(space, l, params.span(), std::span<const float>(grads.span()), state.span(),
             static_cast<float>(lr), t);
    reference(r.want_params, g, r.want_state, lr, t);
  }
  r.params = tutti::to_host_vector(space, params.span());
  r.state = tutti::to_host_vector(space, state.span());
  if (opt.state_size(n) == 0) r.want_state.clear();
  return r;
}

// The test cases stay inside the namespace so that unqualified names find these helpers first.

TEST_CASE_TEMPLATE("lars matches a double-precision reference per segment", Space,
                   TUTTI_TEST_SPACES) {
  const tutti::parameter_layout l = mixed_layout();
  const tutti::lars configs[] = {
      {},
      {.momentum = 0.f, .weight_decay = 0.01f, .trust_coefficient = 0.02f},
      {.momentum = 0.5f, .weight_decay = 0.1f, .trust_coefficient = 0.01f, .eps = 1e-3f},
      {.weight_decay = 0.05f, .trust_coefficient = 0.02f, .exclude_bias = false},
  };
  const std::vector<float> p0 = initial_weights(l, 1);
  for (const tutti::lars& o : configs) {
    CAPTURE(o.momentum);
    CAPTURE(o.weight_decay);
    CAPTURE(o.trust_coefficient);
    CAPTURE(o.eps);
    CAPTURE(o.exclude_bias);
    const run r = run_with_reference<Space>(
        o, l, p0, [&](std::uint64_t t) { return gradients(l, 100 + t); },
        [&](auto& p, const auto& g, auto& v, double lr, std::uint64_t) {
          lars_reference(o, l, p, g, v, lr);
        });
    CHECK(close(r.params, r.want_params));
    CHECK(displacement_error(l, r.params, r.want_params, p0) < 1e-4);
    CHECK(close(r.state, r.want_state));
    CHECK(!close(r.params, std::vector<double>(p0.begin(), p0.end()), 1e-4));  // it moved
    CHECK(padding_is_zero(l, r.params));
    if (!r.state.empty()) CHECK(padding_is_zero(l, r.state));
  }
}

TEST_CASE_TEMPLATE("lamb matches a double-precision reference per segment", Space,
                   TUTTI_TEST_SPACES) {
  const tutti::parameter_layout l = mixed_layout();
  const tutti::lamb configs[] = {
      {},
      {.weight_decay = 0.f},
      {.beta1 = 0.5f, .beta2 = 0.9f, .eps = 1e-3f, .weight_decay = 0.1f},
      {.beta1 = 0.f, .beta2 = 0.99f, .weight_decay = 0.3f, .exclude_bias = false},
  };
  const std::vector<float> p0 = initial_weights(l, 2);
  for (const tutti::lamb& o : configs) {
    CAPTURE(o.beta1);
    CAPTURE(o.beta2);
    CAPTURE(o.eps);
    CAPTURE(o.weight_decay);
    CAPTURE(o.exclude_bias);
    const run r = run_with_reference<Space>(
        o, l, p0, [&](std::uint64_t t) { return gradients(l, 200 + t); },
        [&](auto& p, const auto& g, auto& s, double lr, std::uint64_t t) {
          lamb_reference(o, l, p, g, s, lr, t);
        },
        lamb_rate_scale);
    CHECK(close(r.params, r.want_params));
    CHECK(displacement_error(l, r.params, r.want_params, p0) < 1e-4);
    CHECK(close(r.state, r.want_state));
    CHECK(!close(r.params, std::vector<double>(p0.begin(), p0.end()), 1e-4));
    CHECK(padding_is_zero(l, r.params));
    CHECK(padding_is_zero(l, r.state, 2));
  }
}

// One step from zero state with momentum 0: the bias moves by exactly lr * g when excluded, and by
// the ratio-scaled, decayed step when not.
TEST_CASE_TEMPLATE("lars excludes biases by default and includes them on request", Space,
                   TUTTI_TEST_SPACES) {
  Space space{};
  const tutti::parameter_layout l = mixed_layout();
  const tutti::segment& bias = l.find("bias");
  const std::vector<float> p0 = initial_weights(l, 3);
  const std::vector<float> g = gradients(l, 4);
  const float lr = 0.5f;
  auto one_step = [&](const tutti::lars& o) {
    auto params = tutti::make_buffer(space, std::span<const float>(p0));
    auto grads = tutti::make_buffer(space, std::span<const float>(g));
    o.step(space, l, params.span(), std::span<const float>(grads.span()), std::span<float>{}, lr,
           1);
    return tutti::to_host_vector(space, params.span());
  };
  const tutti::lars base{.momentum = 0.f, .weight_decay = 0.1f, .trust_coefficient = 0.05f};
  tutti::lars included = base;
  included.exclude_bias = false;

  const std::vector<float> ex = one_step(base);
  const std::vector<float> in = one_step(included);
  std::vector<double> w(p0.begin(), p0.end()), gd(g.begin(), g.end());
  const double wn = norm_of(w, bias), gn = norm_of(gd, bias);
  const double local = 0.05 * wn / (gn + 0.1 * wn);
  REQUIRE(std::abs(local - 1.0) > 0.1);  // the two cases differ measurably
  for (std::size_t i = bias.offset; i < bias.offset + bias.size(); ++i) {
    CAPTURE(i);
    CHECK(ex[i] == doctest::Approx(w[i] - lr * gd[i]).epsilon(1e-6));
    CHECK(in[i] == doctest::Approx(w[i] - lr * local * (gd[i] + 0.1 * w[i])).epsilon(1e-6));
  }
  // Other segments do not depend on the bias's treatment.
  const tutti::segment& dense = l.find("dense");
  for (std::size_t i = dense.offset; i < dense.offset + dense.size(); ++i) CHECK(ex[i] == in[i]);
}

TEST_CASE_TEMPLATE("lamb excludes biases by default and includes them on request", Space,
                   TUTTI_TEST_SPACES) {
  Space space{};
  const tutti::parameter_layout l = mixed_layout();
  const tutti::segment& bias = l.find("bias");
  const std::vector<float> p0 = initial_weights(l, 5);
  const std::vector<float> g = gradients(l, 6);
  const float lr = 0.01f;
  auto one_step = [&](const tutti::lamb& o) {
    auto params = tutti::make_buffer(space, std::span<const float>(p0));
    auto grads = tutti::make_buffer(space, std::span<const float>(g));
    tutti::buffer<float, Space> state(o.state_size(l.total()), space);
    tutti::fill(space, state.span(), 0.f);
    o.step(space, l, params.span(), std::span<const float>(grads.span()), state.span(), lr, 1);
    return tutti::to_host_vector(space, params.span());
  };
  const tutti::lamb base{.eps = 1e-8f, .weight_decay = 0.2f};
  tutti::lamb included = base;
  included.exclude_bias = false;
  const std::vector<float> ex = one_step(base);
  const std::vector<float> in = one_step(included);

  // At step 1 the bias-corrected Adam direction is g / (|g| + eps) = sign(g).
  std::vector<double> w(p0.begin(), p0.end()), r(l.total(), 0.0);
  for (std::size_t i = bias.offset; i < bias.offset + bias.size(); ++i)
    r[i] = (g[i] > 0 ? 1.0 : -1.0) + 0.2 * w[i];
  const double ratio = norm_of(w, bias) / norm_of(r, bias);
  REQUIRE(std::abs(ratio - 1.0) > 0.1);
  for (std::size_t i = bias.offset; i < bias.offset + bias.size(); ++i) {
    CAPTURE(i);
    CHECK(ex[i] == doctest::Approx(w[i] - lr * (g[i] > 0 ? 1.0 : -1.0)).epsilon(1e-5));
    CHECK(in[i] == doctest::Approx(w[i] - lr * ratio * r[i]).epsilon(1e-5));
  }
  const tutti::segment& emb = l.find("embedding");
  for (std::size_t i = emb.offset; i < emb.offset + emb.size(); ++i) CHECK(ex[i] == in[i]);
}

// Zero weights (a zero-initialised layer), zero gradients (a layer the batch did not reach) and
// both at once, over several steps: no NaN, and the references (ratio 1 there) agree.
TEST_CASE_TEMPLATE("lars and lamb follow the reference through zero-norm segments", Space,
                   TUTTI_TEST_SPACES) {
  const tutti::parameter_layout l = mixed_layout();
  const tutti::segment& dense = l.find("dense");
  const tutti::segment& emb = l.find("embedding");
  const tutti::segment& bias = l.find("bias");
  std::vector<float> p0 = initial_weights(l, 7);
  std::fill(p0.begin() + long(dense.offset), p0.begin() + long(dense.offset + dense.size()), 0.f);
  std::fill(p0.begin() + long(bias.offset), p0.begin() + long(bias.offset + bias.size()), 0.f);
  auto grads_at = [&](std::uint64_t t) {
    std::vector<float> g = gradients(l, 300 + t);
    std::fill(g.begin() + long(emb.offset), g.begin() + long(emb.offset + emb.size()), 0.f);
    std::fill(g.begin() + long(bias.offset), g.begin() + long(bias.offset + bias.size()), 0.f);
    return g;
  };

  for (float wd : {0.f, 0.1f}) {
    CAPTURE(wd);
    const tutti::lars lo{.weight_decay = wd, .trust_coefficient = 0.01f, .exclude_bias = false};
    const run a = run_with_reference<Space>(
        lo, l, p0, grads_at, [&](auto& p, const auto& g, auto& v, double lr, std::uint64_t) {
          lars_reference(lo, l, p, g, v, lr);
        });
    CHECK(all_finite(a.params));
    CHECK(all_finite(a.state));
    CHECK(close(a.params, a.want_params));
    CHECK(close(a.state, a.want_state));
    CHECK(padding_is_zero(l, a.params));

    const tutti::lamb la{.weight_decay = wd, .exclude_bias = false};
    const run b = run_with_reference<Space>(
        la, l, p0, grads_at,
        [&](auto& p, const auto& g, auto& s, double lr, std::uint64_t t) {
          lamb_reference(la, l, p, g, s, lr, t);
        },
        lamb_rate_scale);
    CHECK(all_finite(b.params));
    CHECK(all_finite(b.state));
    CHECK(close(b.params, b.want_params));
    CHECK(close(b.state, b.want_state));
    CHECK(padding_is_zero(l, b.params));
  }
}

// Zero-norm checks for one step, where the expected values are plain: LARS and LAMB alike.
TEST_CASE_TEMPLATE("lars and lamb zero-norm segments move by the plain rate", Space,
                   TUTTI_TEST_SPACES) {
  Space space{};
  const tutti::parameter_layout l = mixed_layout();
  const tutti::segment& dense = l.find("dense");
  const tutti::segment& emb = l.find("embedding");
  const tutti::segment& bias = l.find("bias");
  std::vector<float> p0 = initial_weights(l, 8);
  std::vector<float> g = gradients(l, 9, 0.f);
  // dense: zero weights; embedding: zero gradients; bias: both zero (0 / 0 without the rule).
  std::fill(p0.begin() + long(dense.offset), p0.begin() + long(dense.offset + dense.size()), 0.f);
  std::fill(g.begin() + long(emb.offset), g.begin() + long(emb.offset + emb.size()), 0.f);
  std::fill(p0.begin() + long(bias.offset), p0.begin() + long(bias.offset + bias.size()), 0.f);
  std::fill(g.begin() + long(bias.offset), g.begin() + long(bias.offset + bias.size()), 0.f);
  const float lr = 0.25f;

  auto one_step = [&](const auto& o) {
    auto params = tutti::make_buffer(space, std::span<const float>(p0));
    auto grads = tutti::make_buffer(space, std::span<const float>(g));
    tutti::buffer<float, Space> state(o.state_size(l.total()), space);
    tutti::fill(space, state.span(), 0.f);
    o.step(space, l, params.span(), std::span<const float>(grads.span()), state.span(), lr, 1);
    return tutti::to_host_vector(space, params.span());
  };

  for (float wd : {0.f, 0.1f}) {
    CAPTURE(wd);
    const std::vector<float> ls =
        one_step(tutti::lars{.weight_decay = wd, .eps = 0.f, .exclude_bias = false});
    CHECK(all_finite(ls));
    for (std::size_t i = dense.offset; i < dense.offset + dense.size(); ++i)
      CHECK(ls[i] == doctest::Approx(-lr * g[i]).epsilon(1e-6));
    for (std::size_t i = emb.offset; i < emb.offset + emb.size(); ++i)
      CHECK(ls[i] == doctest::Approx(p0[i] - lr * wd * p0[i]).epsilon(1e-6));
    for (std::size_t i = bias.offset; i < bias.offset + bias.size(); ++i) CHECK(ls[i] == 0.f);

    const std::vector<float> lb =
        one_step(tutti::lamb{.eps = 1e-8f, .weight_decay = wd, .exclude_bias = false});
    CHECK(all_finite(lb));
    // Zero weights: ratio 1 and, at step 1, r = sign(g).
    for (std::size_t i = dense.offset; i < dense.offset + dense.size(); ++i)
      CHECK(lb[i] == doctest::Approx(g[i] > 0 ? -lr : g[i] < 0 ? lr : 0.f).epsilon(1e-5));
    // Zero gradients: r = wd * w, so ‖r‖ = wd ‖w‖ and the step is lr * ‖w‖ / (wd ‖w‖) * wd * w
    // = lr * w; with wd = 0, r = 0 and ratio 1: no change.
    for (std::size_t i = emb.offset; i < emb.offset + emb.size(); ++i)
      CHECK(lb[i] == doctest::Approx(wd > 0 ? p0[i] - lr * p0[i] : p0[i]).epsilon(1e-5));
    for (std::size_t i = bias.offset; i < bias.offset + bias.size(); ++i) CHECK(lb[i] == 0.f);
  }
}

// The layout overload never reads or writes padding, even when a gradient there is not 0 (the
// layout-free overload, one segment over everything, would).
TEST_CASE_TEMPLATE("lars and lamb leave padding at 0", Space, TUTTI_TEST_SPACES) {
  Space space{};
  const tutti::parameter_layout l = mixed_layout();
  const std::vector<float> p0 = initial_weights(l, 10);
  auto check_padding = [&](const auto& o) {
    auto params = tutti::make_buffer(space, std::span<const float>(p0));
    tutti::buffer<float, Space> grads(l.total(), space), state(o.state_size(l.total()), space);
    tutti::fill(space, state.span(), 0.f);
    for (std::uint64_t t = 1; t <= 3; ++t) {
      const std::vector<float> g = gradients(l, 400 + t, std::numeric_limits<float>::quiet_NaN());
      tutti::copy_from_host(space, std::span<const float>(g), grads.span());
      o.step(space, l, params.span(), std::span<const float>(grads.span()), state.span(), 0.1f, t);
    }
    const std::vector<float> p = tutti::to_host_vector(space, params.span());
    CHECK(all_finite(p));  // NaN gradients in the padding never reach a norm
    CHECK(padding_is_zero(l, p));
    CHECK(padding_is_zero(l, tutti::to_host_vector(space, state.span()),
                          o.state_size(l.total()) / l.total()));
  };
  check_padding(tutti::lars{.weight_decay = 0.1f, .exclude_bias = false});
  check_padding(tutti::lamb{.weight_decay = 0.1f, .exclude_bias = false});
}

// On a one-segment dense layout both overloads do the same arithmetic: bit-identical results,
// with the segment padded (serial norms) and unpadded and longer than serial_below.
TEST_CASE_TEMPLATE("lars and lamb layout-free step equals the one-segment layout step", Space,
                   TUTTI_TEST_SPACES) {
  Space space{};
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{10, 10}, {64, 80}}) {
    tutti::parameter_layout l;
    l.add("w", rows, cols, segment_kind::dense);
    const std::size_t n = l.total();
    CAPTURE(n);
    const std::vector<float> p0 = initial_weights(l, 11);
    auto compare = [&](const auto& o) {
      auto a = tutti::make_buffer(space, std::span<const float>(p0));
      auto b = tutti::make_buffer(space, std::span<const float>(p0));
      tutti::buffer<float, Space> grads(n, space), sa(o.state_size(n), space),
          sb(o.state_size(n), space);
      tutti::fill(space, sa.span(), 0.f);
      tutti::fill(space, sb.span(), 0.f);
      for (std::uint64_t t = 1; t <= 4; ++t) {
        const std::vector<float> g = gradients(l, 500 + t, 0.f);
        tutti::copy_from_host(space, std::span<const float>(g), grads.span());
        const std::span<const float> gs(grads.span());
        o.step(space, l, a.span(), gs, sa.span(), 0.3f, t);
        o.step(space, b.span(), gs, sb.span(), 0.3f, t);
      }
      const std::vector<float> pa = tutti::to_host_vector(space, a.span());
      CHECK(pa == tutti::to_host_vector(space, b.span()));
      CHECK(tutti::to_host_vector(space, sa.span()) == tutti::to_host_vector(space, sb.span()));
      CHECK(pa != p0);
      CHECK(padding_is_zero(l, pa));
    };
    compare(tutti::lars{.weight_decay = 0.01f, .trust_coefficient = 0.02f});
    compare(tutti::lamb{});
  }
}

TEST_CASE("lamb's blocked host loops compute bitwise what its scalar kernels compute") {
  // The host computes LAMB's terms on vectors (detail/host_simd.hpp): the update must give the
  // scalar kernel's bits, and a block's two sums of squares the scalar terms summed in order.
  tutti::detail::splitmix rng(17);
  for (const std::size_t n : {std::size_t{5}, std::size_t{4099}, tutti::detail::host_block}) {
    for (const float wd : {0.f, 0.01f}) {
      CAPTURE(n);
      CAPTURE(wd);
      std::vector<float> p(n), g(n), m(n), v(n);
      for (std::size_t i = 0; i < n; ++i) {
        p[i] = static_cast<float>(2.0 * rng.uniform() - 1.0);
        g[i] = i % 4 == 0 ? 0.f : static_cast<float>(rng.uniform() - 0.5);
        m[i] = static_cast<float>(0.1 * (rng.uniform() - 0.5));
        v[i] = static_cast<float>(0.01 * rng.uniform());
      }
      std::vector<float> p2 = p, m2 = m, v2 = v;
      const tutti::detail::lamb_terms terms{p.data(), g.data(), m.data(), v.data(), 0.9f,
                                            0.999f,   1e-6f,    1.4f,     1.1f,     wd};
      tutti::detail::lamb_terms terms2 = terms;
      terms2.p = p2.data();
      terms2.m = m2.data();
      terms2.v = v2.data();

      const tutti::detail::sum_squares blocked = tutti::detail::lamb_norms_block_fn{terms, n}(0);
      tutti::detail::sum_squares serial{0.0, 0.0};
      for (std::size_t i = 0; i < n; ++i)
        serial = tutti::detail::sum_squares_plus{}(serial, tutti::detail::lamb_norms_fn{terms2}(i));
      CHECK(blocked.a == serial.a);
#if !defined(__FMA__)
      CHECK(blocked.b == serial.b);
#endif
      CHECK(blocked.b > 0.0);

      tutti::detail::parallel_blocks(tutti::host_space{}, n,
                                     tutti::detail::lamb_kernel{terms, 0.02f});
      const tutti::detail::lamb_kernel scalar{terms2, 0.02f};
      for (std::size_t i = 0; i < n; ++i) scalar(i);
#if defined(__FMA__)
      for (std::size_t i = 0; i < n; ++i) CHECK(p[i] == doctest::Approx(p2[i]).epsilon(1e-6));
#else
      CHECK(p == p2);
      CHECK(m == m2);
      CHECK(v == v2);
#endif
    }
  }
}

TEST_CASE_TEMPLATE("lars and lamb reject bad hyper-parameters and arguments before any update",
                   Space, TUTTI_TEST_SPACES) {
  Space space{};
  const tutti::parameter_layout l = mixed_layout();
  const std::size_t n = l.total();
  const std::vector<float> p0 = initial_weights(l, 12);
  auto params = tutti::make_buffer(space, std::span<const float>(p0));
  tutti::buffer<float, Space> grads(n, space), state(2 * n, space), small(10, space);
  tutti::fill(space, grads.span(), 1.f);
  tutti::fill(space, state.span(), 0.f);
  const std::span<const float> g(grads.span());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  auto lars_throws = [&](const tutti::lars& o, const char* what) {
    CHECK_THROWS_WITH_AS(o.validate(), doctest::Contains(what), tutti::invalid_argument);
    CHECK_THROWS_WITH_AS(o.step(space, l, params.span(), g, state.span(), 0.1f, 1),
                         doctest::Contains(what), tutti::invalid_argument);
    CHECK_THROWS_WITH_AS(o.step(space, params.span(), g, state.span(), 0.1f, 1),
                         doctest::Contains(what), tutti::invalid_argument);
  };
  lars_throws({.momentum = 1.f}, "momentum is 1.0");
  lars_throws({.momentum = -0.1f}, "momentum");
  lars_throws({.momentum = nan}, "momentum");
  lars_throws({.weight_decay = -1.f}, "weight_decay");
  lars_throws({.weight_decay = inf}, "weight_decay");
  lars_throws({.trust_coefficient = 0.f}, "trust_coefficient");
  lars_throws({.trust_coefficient = -0.001f}, "trust_coefficient");
  lars_throws({.trust_coefficient = nan}, "trust_coefficient");
  lars_throws({.eps = -1e-9f}, "eps");
  lars_throws({.eps = inf}, "eps");

  auto lamb_throws = [&](const tutti::lamb& o, const char* what) {
    CHECK_THROWS_WITH_AS(o.validate(), doctest::Contains(what), tutti::invalid_argument);
    CHECK_THROWS_WITH_AS(o.step(space, l, params.span(), g, state.span(), 0.1f, 1),
                         doctest::Contains(what), tutti::invalid_argument);
    CHECK_THROWS_WITH_AS(o.step(space, params.span(), g, state.span(), 0.1f, 1),
                         doctest::Contains(what), tutti::invalid_argument);
  };
  lamb_throws({.beta1 = 1.f}, "beta1");
  lamb_throws({.beta1 = -0.5f}, "beta1");
  lamb_throws({.beta2 = 1.5f}, "beta2");
  lamb_throws({.beta2 = nan}, "beta2");
  lamb_throws({.eps = 0.f}, "eps");
  lamb_throws({.eps = inf}, "eps");
  lamb_throws({.weight_decay = -0.1f}, "weight_decay");

  CHECK_NOTHROW(tutti::lars{}.validate());
  CHECK_NOTHROW(tutti::lamb{}.validate());
  CHECK(tutti::lars{}.state_size(100) == 100);
  CHECK(tutti::lars{.momentum = 0.f}.state_size(100) == 0);
  CHECK(tutti::lamb{}.state_size(100) == 200);

  const std::string state_size_text = "state_size(" + std::to_string(n) + ")";
  CHECK_THROWS_WITH_AS(tutti::lamb{}.step(space, l, params.span(), g, state.span(), 0.1f, 0),
                       doctest::Contains("step is 0"), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::lamb{}.step(space, l, params.span(), g, small.span(), 0.1f, 1),
                       doctest::Contains(state_size_text.c_str()), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::lars{}.step(space, l, params.span(), g, small.span(), 0.1f, 1),
                       doctest::Contains(state_size_text.c_str()), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::lars{}.step(space, l, params.span(), g, state.span(), -1.f, 1),
                       doctest::Contains("lr is"), tutti::invalid_argument);
  // A layout that does not describe the arena.
  tutti::parameter_layout other;
  other.add("w", 3, 3, segment_kind::dense);
  CHECK_THROWS_WITH_AS(tutti::lars{}.step(space, other, params.span(), g, state.span(), 0.1f, 1),
                       doctest::Contains("expected params of layout.total() values"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::lamb{}.step(space, other, params.span(), g, state.span(), 0.1f, 1),
                       doctest::Contains("expected params of layout.total() values"),
                       tutti::invalid_argument);

  // Nothing above touched the parameters.
  CHECK(tutti::to_host_vector(space, params.span()) == p0);
}

}  // namespace

}  // namespace test_large_batch_optimizers
