// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <tutti/concepts.hpp>
#include <tutti/schedules/constant.hpp>
#include <tutti/schedules/cosine.hpp>
#include <tutti/schedules/polynomial.hpp>
#include <tutti/schedules/scaling.hpp>
#include <tutti/schedules/step_decay.hpp>
#include <tutti/schedules/warmup.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>

namespace test_schedules {

namespace {
// A user-written schedule that does not start at the base rate, to show what warmup joins.
struct half_rate {
  double lr(std::size_t, std::size_t, double base) const { return 0.5 * base; }
};

template <class S>
bool non_increasing(const S& s, std::size_t total, double base) {
  for (std::size_t i = 0; i + 1 <= total + 5; ++i)
    if (s.lr(i + 1, total, base) > s.lr(i, total, base)) return false;
  return true;
}
}  // namespace

static_assert(tutti::lr_schedule<tutti::constant>);
static_assert(tutti::lr_schedule<tutti::step_decay>);
static_assert(tutti::lr_schedule<tutti::cosine>);
static_assert(tutti::lr_schedule<tutti::polynomial>);
static_assert(tutti::lr_schedule<tutti::warmup<>>);
static_assert(tutti::lr_schedule<tutti::warmup<tutti::cosine>>);
static_assert(tutti::lr_schedule<tutti::warmup<tutti::warmup<tutti::polynomial>>>);
static_assert(tutti::check_lr_schedule<tutti::warmup<tutti::step_decay>>());

TEST_CASE("constant keeps the base rate") {
  tutti::constant s;
  CHECK(s.lr(0, 100, 0.3) == 0.3);
  CHECK(s.lr(99, 100, 0.3) == 0.3);
  CHECK(s.lr(1000, 100, 0.3) == 0.3);
  CHECK(s.lr(0, 0, 2.0) == 2.0);
}

TEST_CASE("step_decay multiplies by gamma every step_size steps") {
  tutti::step_decay s{.step_size = 10, .gamma = 0.5};
  CHECK(s.lr(0, 100, 0.8) == 0.8);
  CHECK(s.lr(9, 100, 0.8) == 0.8);
  CHECK(s.lr(10, 100, 0.8) == doctest::Approx(0.4));
  CHECK(s.lr(19, 100, 0.8) == doctest::Approx(0.4));
  CHECK(s.lr(25, 100, 0.8) == doctest::Approx(0.2));
  CHECK(s.lr(99, 100, 0.8) == doctest::Approx(0.8 * std::pow(0.5, 9)));
  CHECK(non_increasing(s, 100, 0.8));
  CHECK(tutti::step_decay{}.lr(999, 0, 1.0) == 1.0);
  CHECK(tutti::step_decay{}.lr(1000, 0, 1.0) == doctest::Approx(0.1));

  CHECK_THROWS_WITH_AS((tutti::step_decay{.step_size = 0}.lr(0, 10, 1.0)),
                       doctest::Contains("step_size is 0"), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS((tutti::step_decay{.gamma = 0.0}.lr(0, 10, 1.0)), doctest::Contains("gamma"),
                       tutti::invalid_argument);
  CHECK_THROWS_AS(
      (tutti::step_decay{.gamma = std::numeric_limits<double>::quiet_NaN()}.lr(0, 10, 1.0)),
      tutti::invalid_argument);
}

TEST_CASE("cosine anneals from base to base * final_fraction") {
  const double base = 2.0;
  tutti::cosine s{.final_fraction = 0.1};
  CHECK(s.lr(0, 100, base) == doctest::Approx(2.0));
  CHECK(s.lr(50, 100, base) == doctest::Approx(2.0 * (0.1 + 0.9 * 0.5)));
  CHECK(s.lr(25, 100, base) ==
        doctest::Approx(2.0 * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi / 4)))));
  CHECK(s.lr(100, 100, base) == doctest::Approx(0.2));
  CHECK(s.lr(150, 100, base) == doctest::Approx(0.2));  // past the end: stays at the final rate
  CHECK(s.lr(0, 0, base) == doctest::Approx(2.0));      // step 0 starts even an empty run
  CHECK(s.lr(1, 0, base) == doctest::Approx(0.2));
  CHECK(tutti::cosine{}.lr(100, 100, base) == doctest::Approx(0.0));
  // Strictly decreasing inside the run, and symmetric about its middle.
  for (std::size_t i = 0; i < 100; ++i) {
    CHECK(s.lr(i + 1, 100, base) < s.lr(i, 100, base));
    CHECK(s.lr(i, 100, base) + s.lr(100 - i, 100, base) == doctest::Approx(base * 1.1));
  }
  CHECK(non_increasing(s, 100, base));
  CHECK_THROWS_WITH_AS((tutti::cosine{.final_fraction = -0.1}.lr(0, 10, 1.0)),
                       doctest::Contains("final_fraction"), tutti::invalid_argument);
}

TEST_CASE("polynomial decays as (1 - t)^power towards the final fraction") {
  tutti::polynomial lin;
  CHECK(lin.lr(0, 100, 1.0) == doctest::Approx(1.0));
  CHECK(lin.lr(30, 100, 1.0) == doctest::Approx(0.7));
  CHECK(lin.lr(100, 100, 1.0) == doctest::Approx(0.0));
  // Linear decay: equal steps.
  CHECK(lin.lr(10, 100, 1.0) - lin.lr(11, 100, 1.0) == doctest::Approx(0.01));
  CHECK(lin.lr(80, 100, 1.0) - lin.lr(81, 100, 1.0) == doctest::Approx(0.01));

  tutti::polynomial sq{.power = 2.0, .final_fraction = 0.1};
  CHECK(sq.lr(0, 100, 0.5) == doctest::Approx(0.5));
  CHECK(sq.lr(30, 100, 0.5) == doctest::Approx(0.5 * (0.1 + 0.9 * 0.49)));
  CHECK(sq.lr(100, 100, 0.5) == doctest::Approx(0.05));
  CHECK(sq.lr(500, 100, 0.5) == doctest::Approx(0.05));
  CHECK(non_increasing(sq, 100, 0.5));
  for (std::size_t i = 0; i < 100; ++i) CHECK(sq.lr(i + 1, 100, 0.5) < sq.lr(i, 100, 0.5));

  CHECK_THROWS_WITH_AS((tutti::polynomial{.power = 0.0}.lr(0, 10, 1.0)), doctest::Contains("power"),
                       tutti::invalid_argument);
  CHECK_THROWS_AS((tutti::polynomial{.final_fraction = -1.0}.lr(0, 10, 1.0)),
                  tutti::invalid_argument);
}

TEST_CASE("warmup with zero steps is exactly the inner schedule") {
  const tutti::cosine c{.final_fraction = 0.05};
  const tutti::warmup<tutti::cosine> w{.warmup_steps = 0, .inner = c};
  const tutti::step_decay d{.step_size = 7, .gamma = 0.3};
  const tutti::warmup<tutti::step_decay> wd{.inner = d};
  const tutti::polynomial p{.power = 3.0};
  const tutti::warmup<tutti::polynomial> wp{.inner = p, .start_fraction = 0.5};
  for (std::size_t i = 0; i <= 60; ++i) {
    CHECK(w.lr(i, 50, 0.7) == c.lr(i, 50, 0.7));
    CHECK(wd.lr(i, 50, 0.7) == d.lr(i, 50, 0.7));
    CHECK(wp.lr(i, 50, 0.7) == p.lr(i, 50, 0.7));
  }
  CHECK(tutti::warmup<>{}.lr(3, 10, 0.25) == 0.25);
}

TEST_CASE("warmup ramps linearly and joins the inner schedule continuously") {
  const auto s =
      tutti::warmup<tutti::cosine>{.warmup_steps = 100, .inner = {.final_fraction = 0.01}};
  CHECK(s.inner.final_fraction == 0.01);
  const double base = 0.4;
  const std::size_t total = 1100;
  CHECK(s.lr(0, total, base) == 0.0);
  CHECK(s.lr(50, total, base) == doctest::Approx(0.2));
  CHECK(s.lr(99, total, base) == doctest::Approx(0.396));
  // Linear: every warmup step adds the same amount, and the line extended by one step lands on
  // the inner schedule's first value.
  const double slope = s.lr(1, total, base) - s.lr(0, total, base);
  CHECK(slope == doctest::Approx(base / 100));
  for (std::size_t i = 0; i < 100; ++i)
    CHECK(s.lr(i + 1, total, base) - s.lr(i, total, base) == doctest::Approx(slope));
  // After warmup the inner schedule runs over the remaining 1000 steps.
  const tutti::cosine c{.final_fraction = 0.01};
  CHECK(s.lr(100, total, base) == c.lr(0, 1000, base));
  CHECK(s.lr(600, total, base) == c.lr(500, 1000, base));
  CHECK(s.lr(600, total, base) == doctest::Approx(base * (0.01 + 0.99 * 0.5)));
  CHECK(s.lr(1100, total, base) == doctest::Approx(base * 0.01));
  for (std::size_t i = 100; i < 1100; ++i) CHECK(s.lr(i + 1, total, base) < s.lr(i, total, base));

  // start_fraction sets step 0; the ramp still ends on the inner value.
  const tutti::warmup<tutti::polynomial> p{.warmup_steps = 4, .start_fraction = 0.2};
  CHECK(p.lr(0, 14, 1.0) == doctest::Approx(0.2));
  CHECK(p.lr(2, 14, 1.0) == doctest::Approx(0.6));
  CHECK(p.lr(4, 14, 1.0) == doctest::Approx(1.0));
  CHECK(p.lr(9, 14, 1.0) == doctest::Approx(0.5));

  // An inner schedule that starts below the base rate: the ramp heads for its value instead.
  const tutti::warmup<half_rate> h{.warmup_steps = 4};
  CHECK(h.lr(0, 10, 1.0) == 0.0);
  CHECK(h.lr(2, 10, 1.0) == doctest::Approx(0.25));
  CHECK(h.lr(3, 10, 1.0) == doctest::Approx(0.375));
  CHECK(h.lr(4, 10, 1.0) == 0.5);
}

TEST_CASE("warmup longer than the run stays finite and never exceeds the base") {
  const tutti::warmup<tutti::cosine> s{.warmup_steps = 50};
  for (std::size_t i = 0; i < 60; ++i) {
    const double v = s.lr(i, 20, 1.0);
    CHECK(std::isfinite(v));
    CHECK(v >= 0.0);
    CHECK(v <= 1.0);
  }
  CHECK(s.lr(10, 20, 1.0) == doctest::Approx(0.2));
  CHECK_THROWS_WITH_AS((tutti::warmup<>{.start_fraction = 1.5}.lr(0, 10, 1.0)),
                       doctest::Contains("start_fraction"), tutti::invalid_argument);
  CHECK_THROWS_AS(
      (tutti::warmup<tutti::cosine>{.warmup_steps = 5, .inner = {.final_fraction = -1}}.lr(7, 10,
                                                                                           1.0)),
      tutti::invalid_argument);
}

TEST_CASE("scaled_lr applies the linear and square-root rules") {
  using tutti::lr_scaling;
  CHECK(tutti::scaled_lr(0.1, 1024, 256, lr_scaling::none) == 0.1);
  CHECK(tutti::scaled_lr(0.1, 1024, 256, lr_scaling::linear) == doctest::Approx(0.4));
  CHECK(tutti::scaled_lr(0.1, 1024, 256, lr_scaling::sqrt) == doctest::Approx(0.2));
  CHECK(tutti::scaled_lr(0.1, 64, 256, lr_scaling::linear) == doctest::Approx(0.025));
  CHECK(tutti::scaled_lr(0.1, 64, 256, lr_scaling::sqrt) == doctest::Approx(0.05));
  CHECK(tutti::scaled_lr(0.3, 256, 256, lr_scaling::linear) == 0.3);
  CHECK(tutti::scaled_lr(0.0, 8192, 256, lr_scaling::linear) == 0.0);

  CHECK_THROWS_WITH_AS(tutti::scaled_lr(0.1, 1024, 0, lr_scaling::linear),
                       doctest::Contains("reference_batch is 0"), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::scaled_lr(0.1, 0, 256, lr_scaling::linear),
                       doctest::Contains("global_batch is 0"), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::scaled_lr(-0.1, 1024, 256, lr_scaling::linear), tutti::invalid_argument);
  CHECK_THROWS_AS(
      tutti::scaled_lr(std::numeric_limits<double>::infinity(), 1024, 256, lr_scaling::none),
      tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::scaled_lr(0.1, 1024, 256, static_cast<lr_scaling>(7)),
                  tutti::invalid_argument);
}

TEST_CASE("lr_scaling names round-trip and bad names list the valid ones") {
  using tutti::lr_scaling;
  for (lr_scaling r : {lr_scaling::none, lr_scaling::linear, lr_scaling::sqrt})
    CHECK(tutti::parse_lr_scaling(tutti::to_string(r)) == r);
  CHECK(std::string(tutti::to_string(lr_scaling::linear)) == "linear");
  CHECK(tutti::parse_lr_scaling("sqrt") == lr_scaling::sqrt);
  CHECK_THROWS_WITH_AS(tutti::parse_lr_scaling("cubic"),
                       doctest::Contains("'cubic'; expected one of: none, linear, sqrt"),
                       tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::parse_lr_scaling(""), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::parse_lr_scaling("Linear"), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::to_string(static_cast<lr_scaling>(-1)), tutti::invalid_argument);
}

}  // namespace test_schedules
