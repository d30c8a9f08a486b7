// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include "spaces.hpp"

#include <tutti/concepts.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/optimizers/adam.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/schedules/cosine.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

namespace test_optimizers {

static_assert(tutti::optimizer<tutti::sgd, tutti::host_space>);
static_assert(tutti::optimizer<tutti::adam, tutti::host_space>);
static_assert(tutti::check_optimizer<tutti::sgd, tutti::host_space>());
static_assert(tutti::check_optimizer<tutti::adam, tutti::host_space>());

namespace {

std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed, double lo, double hi) {
  tutti::detail::splitmix rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// Straightforward scalar references in double, transcribed from PyTorch's update rules.
void sgd_reference(const tutti::sgd& o, std::vector<double>& p, const std::vector<float>& g,
                   std::vector<double>& buf, double lr) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + double(o.weight_decay) * p[i];
    if (o.momentum > 0) {
      buf[i] = double(o.momentum) * buf[i] + d;
      d = o.nesterov ? d + double(o.momentum) * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

void adam_reference(const tutti::adam& o, std::vector<double>& p, const std::vector<float>& g,
                    std::vector<double>& m, std::vector<double>& v, double lr, std::uint64_t t) {
  const double b1 = o.beta1, b2 = o.beta2, eps = o.eps, wd = o.weight_decay;
  for (std::size_t i = 0; i < p.size(); ++i) {
    double d = g[i];
    if (o.decoupled)
      p[i] *= 1.0 - lr * wd;
    else
      d += wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * d;
    v[i] = b2 * v[i] + (1 - b2) * d * d;
    const double mhat = m[i] / (1 - std::pow(b1, double(t)));
    const double vhat = v[i] / (1 - std::pow(b2, double(t)));
    p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

// Float arithmetic in the kernel vs double here: the error scales with the magnitude of the
// terms (parameters of order 1), not of the result, hence the floor of 1 in the scale.
bool close(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-6) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(double(got[i]) - want[i]) > tol * std::max(1.0, std::abs(want[i]))) return false;
  return true;
}

constexpr std::size_t arena = 1003;  // not a multiple of anything: every thread's tail runs
constexpr double rates[] = {0.1, 0.05, 0.2, 0.01, 0.07, 0.0, 0.03};

template <class Space, class Opt, class Reference>
void compare_with_reference(const Opt& opt, Reference reference) {
  Space space{};
  const std::vector<float> p0 = uniform_floats(arena, 1, -1.0, 1.0);
  tutti::buffer<float, Space> params = tutti::make_buffer(space, std::span<const float>(p0));
  tutti::buffer<float, Space> grads(arena, space);
  tutti::buffer<float, Space> state(opt.state_size(arena), space);
  tutti::fill(space, state.span(), 0.f);

  std::vector<double> p(p0.begin(), p0.end());
  std::vector<double> s(opt.state_size(arena), 0.0);
  std::uint64_t t = 0;
  for (double lr : rates) {
    ++t;
    const std::vector<float> g = uniform_floats(arena, 100 + t, -1.0, 1.0);
    tutti::copy_from_host(space, std::span<const float>(g), grads.span());
    opt.step(space, params.span(), std::span<const float>(grads.span()), state.span(),
             static_cast<float>(lr), t);
    reference(p, g, s, lr, t);
  }
  const std::vector<float> got = tutti::to_host_vector(space, params.span());
  CHECK(close(got, p));
  CHECK(!close(got, std::vector<double>(p0.begin(), p0.end())));  // the run moved the parameters
  if (!s.empty()) CHECK(close(tutti::to_host_vector(space, state.span()), s));
}

// Gradient of f(p) = 1/2 sum a_i (p_i - c_i)^2, computed on the space like a model would.
struct quadratic_gradient {
  const float* p;
  const float* a;
  const float* c;
  float* g;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { g[i] = a[i] * (p[i] - c[i]); }
};

// Runs `steps` optimizer steps on the quadratic and returns the final parameters.
template <class Space, class Opt, class Rate>
std::vector<float> minimise(const Opt& opt, std::size_t steps, Rate rate,
                            const std::vector<float>& a, const std::vector<float>& c) {
  Space space{};
  const std::size_t n = a.size();
  auto ad = tutti::make_buffer(space, std::span<const float>(a));
  auto cd = tutti::make_buffer(space, std::span<const float>(c));
  tutti::buffer<float, Space> p(n, space), g(n, space), state(opt.state_size(n), space);
  tutti::fill(space, p.span(), 0.f);
  tutti::fill(space, state.span(), 0.f);
  for (std::size_t k = 0; k < steps; ++k) {
    tutti::parallel_for(space, n, quadratic_gradient{p.data(), ad.data(), cd.data(), g.data()});
    opt.step(space, p.span(), std::span<const float>(g.span()), state.span(),
             static_cast<float>(rate(k, steps)), k + 1);
  }
  return tutti::to_host_vector(space, p.span());
}

double max_error(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got[i] - want[i]));
  return e;
}

}  // namespace

TEST_CASE_TEMPLATE("sgd matches a double-precision reference", Space, TUTTI_TEST_SPACES) {
  const tutti::sgd configs[] = {
      {},
      {.momentum = 0.9f},
      {.momentum = 0.9f, .nesterov = true},
      {.weight_decay = 0.05f},
      {.momentum = 0.5f, .nesterov = true, .weight_decay = 0.1f},
  };
  for (const tutti::sgd& o : configs) {
    CAPTURE(o.momentum);
    CAPTURE(o.nesterov);
    CAPTURE(o.weight_decay);
    compare_with_reference<Space>(o, [&](auto& p, const auto& g, auto& s, double lr, auto) {
      sgd_reference(o, p, g, s, lr);
    });
  }
}

TEST_CASE_TEMPLATE("adam and adamw match a double-precision reference", Space, TUTTI_TEST_SPACES) {
  const tutti::adam configs[] = {
      {},
      {.weight_decay = 0.1f},
      {.weight_decay = 0.1f, .decoupled = true},
      {.beta1 = 0.5f, .beta2 = 0.9f, .eps = 1e-3f},
      {.beta1 = 0.f, .beta2 = 0.99f, .weight_decay = 0.3f, .decoupled = true},
  };
  for (const tutti::adam& o : configs) {
    CAPTURE(o.beta1);
    CAPTURE(o.beta2);
    CAPTURE(o.weight_decay);
    CAPTURE(o.decoupled);
    compare_with_reference<Space>(o, [&](auto& p, const auto& g, auto& s, double lr, auto t) {
      std::vector<double> m(s.begin(), s.begin() + long(arena));
      std::vector<double> v(s.begin() + long(arena), s.end());
      adam_reference(o, p, g, m, v, lr, t);
      std::copy(m.begin(), m.end(), s.begin());
      std::copy(v.begin(), v.end(), s.begin() + long(arena));
    });
  }
}

TEST_CASE_TEMPLATE("optimizers minimise a quadratic", Space, TUTTI_TEST_SPACES) {
  const std::size_t n = 257;
  const std::vector<float> a = uniform_floats(n, 7, 0.5, 2.0);
  const std::vector<float> c = uniform_floats(n, 8, -3.0, 3.0);
  const std::vector<double> optimum(c.begin(), c.end());
  auto constant = [](std::size_t, std::size_t) {
    return 0.1;
  };
  auto annealed = [](std::size_t k, std::size_t total) {
    return tutti::cosine{}.lr(k, total, 0.05);
  };

  CHECK(max_error(minimise<Space>(tutti::sgd{}, 300, constant, a, c), optimum) < 1e-4);
  CHECK(max_error(minimise<Space>(tutti::sgd{.momentum = 0.9f}, 300, constant, a, c), optimum) <
        1e-4);
  CHECK(max_error(
            minimise<Space>(tutti::sgd{.momentum = 0.9f, .nesterov = true}, 300, constant, a, c),
            optimum) < 1e-4);
  CHECK(max_error(minimise<Space>(tutti::adam{}, 2000, annealed, a, c), optimum) < 1e-3);
  CHECK(max_error(minimise<Space>(tutti::adam{.decoupled = true}, 2000, annealed, a, c), optimum) <
        1e-3);

  // An L2 penalty moves the minimum of 1/2 a (p - c)^2 + 1/2 wd p^2 to a c / (a + wd).
  std::vector<double> shrunk(n);
  for (std::size_t i = 0; i < n; ++i) shrunk[i] = double(a[i]) * c[i] / (double(a[i]) + 0.5);
  CHECK(max_error(minimise<Space>(tutti::sgd{.weight_decay = 0.5f}, 300, constant, a, c), shrunk) <
        1e-4);
  CHECK(max_error(minimise<Space>(tutti::adam{.weight_decay = 0.5f}, 2000, annealed, a, c),
                  shrunk) < 1e-3);
  CHECK(max_error(minimise<Space>(tutti::sgd{}, 300, constant, a, c), shrunk) > 0.1);
}

// A host kernel's vectorised blocks against its scalar loop: the same bits, unless the build may
// contract multiply-adds (-mfma), which contracts each loop its own way.
static void check_same_bits(const std::vector<float>& blocked, const std::vector<float>& scalar) {
  REQUIRE(blocked.size() == scalar.size());
#if defined(__FMA__)
  for (std::size_t i = 0; i < blocked.size(); ++i)
    CHECK(blocked[i] == doctest::Approx(scalar[i]).epsilon(1e-6));
#else
  CHECK(std::memcmp(blocked.data(), scalar.data(), blocked.size() * sizeof(float)) == 0);
#endif
}

TEST_CASE("adam's blocked host loop computes bitwise what its scalar kernel computes") {
  // The host runs Adam in vectorised blocks (detail/host_simd.hpp), the device per element:
  // the same operations in the same order, so without FMA contraction the bits agree, tails,
  // zero gradients, L2 and decoupled decay included.
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4095},
                              tutti::detail::host_block + 3, std::size_t{3 * 8192 + 11}}) {
    for (const int mode : {0, 1, 2}) {
      CAPTURE(n);
      CAPTURE(mode);
      std::vector<float> p = uniform_floats(n, 11, -1.0, 1.0);
      std::vector<float> g = uniform_floats(n, 12, -0.5, 0.5);
      std::vector<float> m = uniform_floats(n, 13, -0.1, 0.1);
      std::vector<float> v = uniform_floats(n, 14, 0.0, 0.01);
      for (std::size_t i = 0; i < n; i += 3) g[i] = 0.f;  // untouched rows' gradients
      std::vector<float> p2 = p, m2 = m, v2 = v;
      const tutti::detail::adam_kernel blocked{p.data(),
                                               g.data(),
                                               m.data(),
                                               v.data(),
                                               0.9f,
                                               0.999f,
                                               1e-8f,
                                               0.0123f,
                                               1.7f,
                                               mode == 1 ? 0.01f : 0.f,
                                               mode == 2 ? 0.999f : 1.f,
                                               mode == 2};
      tutti::detail::adam_kernel scalar = blocked;
      scalar.p = p2.data();
      scalar.m = m2.data();
      scalar.v = v2.data();
      tutti::detail::parallel_blocks(tutti::host_space{}, n, blocked);
      for (std::size_t i = 0; i < n; ++i) scalar(i);
      check_same_bits(p, p2);
      check_same_bits(m, m2);
      check_same_bits(v, v2);
      CHECK(p != uniform_floats(n, 11, -1.0, 1.0));  // the update happened
    }
  }
}

TEST_CASE("sgd's blocked host loop computes bitwise what its scalar kernel computes") {
  for (const std::size_t n :
       {std::size_t{3}, std::size_t{4097}, 2 * tutti::detail::host_block + 9}) {
    for (const int mode : {0, 1, 2, 3}) {
      CAPTURE(n);
      CAPTURE(mode);  // plain, weight decay, momentum, Nesterov momentum with weight decay
      std::vector<float> p = uniform_floats(n, 21, -1.0, 1.0);
      const std::vector<float> g = uniform_floats(n, 22, -0.5, 0.5);
      std::vector<float> v = uniform_floats(n, 23, -0.1, 0.1);
      std::vector<float> p2 = p, v2 = v;
      const tutti::detail::sgd_kernel blocked{p.data(), g.data(), mode >= 2 ? v.data() : nullptr,
                                              0.05f,    0.9f,     mode % 2 == 1 ? 0.01f : 0.f,
                                              mode == 3};
      tutti::detail::sgd_kernel scalar = blocked;
      scalar.p = p2.data();
      if (mode >= 2) scalar.v = v2.data();
      tutti::detail::parallel_blocks(tutti::host_space{}, n, blocked);
      for (std::size_t i = 0; i < n; ++i) scalar(i);
      check_same_bits(p, p2);
      check_same_bits(v, v2);
      CHECK(p != uniform_floats(n, 21, -1.0, 1.0));
    }
  }
}

TEST_CASE("state sizes") {
  CHECK(tutti::sgd{}.state_size(1000) == 0);
  CHECK(tutti::sgd{.weight_decay = 0.1f}.state_size(1000) == 0);
  CHECK(tutti::sgd{.momentum = 0.9f}.state_size(1000) == 1000);
  CHECK(tutti::sgd{.momentum = 0.9f, .nesterov = true}.state_size(7) == 7);
  CHECK(tutti::adam{}.state_size(1000) == 2000);
  CHECK(tutti::adam{.decoupled = true}.state_size(0) == 0);
}

TEST_CASE_TEMPLATE("invalid hyper-parameters and arguments raise before any update", Space,
                   TUTTI_TEST_SPACES) {
  Space space{};
  const std::vector<float> p0 = uniform_floats(64, 3, -1.0, 1.0);
  auto params = tutti::make_buffer(space, std::span<const float>(p0));
  tutti::buffer<float, Space> grads(64, space), state(128, space), small(10, space);
  tutti::fill(space, grads.span(), 1.f);
  tutti::fill(space, state.span(), 0.f);
  const std::span<const float> g(grads.span());
  const float nan = std::numeric_limits<float>::quiet_NaN();

  auto sgd_throws = [&](const tutti::sgd& o, const char* what) {
    CHECK_THROWS_WITH_AS(o.step(space, params.span(), g, state.span(), 0.1f, 1),
                         doctest::Contains(what), tutti::invalid_argument);
  };
  sgd_throws({.momentum = 1.f}, "momentum is 1.0");
  sgd_throws({.momentum = -0.1f}, "momentum");
  sgd_throws({.momentum = nan}, "momentum");
  sgd_throws({.nesterov = true}, "nesterov is set but momentum is 0");
  sgd_throws({.weight_decay = -1.f}, "weight_decay");

  auto adam_throws = [&](const tutti::adam& o, const char* what) {
    CHECK_THROWS_WITH_AS(o.step(space, params.span(), g, state.span(), 0.1f, 1),
                         doctest::Contains(what), tutti::invalid_argument);
  };
  adam_throws({.beta1 = 1.f}, "beta1");
  adam_throws({.beta1 = -0.5f}, "beta1");
  adam_throws({.beta2 = 1.5f}, "beta2");
  adam_throws({.eps = 0.f}, "eps");
  adam_throws({.weight_decay = -0.1f, .decoupled = true}, "weight_decay");

  CHECK_THROWS_WITH_AS(tutti::adam{}.step(space, params.span(), g, state.span(), 0.1f, 0),
                       doctest::Contains("step is 0"), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::adam{}.step(space, params.span(), g, small.span(), 0.1f, 1),
                       doctest::Contains("expected at least state_size(64) = 128"),
                       tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(
      tutti::sgd{.momentum = 0.9f}.step(space, params.span(), g, small.span(), 0.1f, 1),
      doctest::Contains("state_size(64) = 64"), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(
      tutti::sgd{}.step(space, params.span(), std::span<const float>(small.span()), {}, 0.1f, 1),
      doctest::Contains("grads has 10 elements, params 64"), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::sgd{}.step(space, params.span(), g, {}, -0.1f, 1),
                       doctest::Contains("lr is"), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::adam{}.step(space, params.span(), g, state.span(), nan, 1),
                  tutti::invalid_argument);

  // Nothing above touched the parameters; a valid call does.
  CHECK(tutti::to_host_vector(space, params.span()) == p0);
  tutti::sgd{}.step(space, params.span(), g, {}, 0.5f, 1);
  CHECK(tutti::to_host_vector(space, params.span())[0] == doctest::Approx(p0[0] - 0.5f));
}

}  // namespace test_optimizers
