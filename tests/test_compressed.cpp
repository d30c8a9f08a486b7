// SPDX-License-Identifier: Apache-2.0
// `tutti::compressed<R, bf16>`: the bf16 conversions, the bf16 mean against the exact mean, the
// pre-divide against overflow, non-finite values and the trainer's flags, exact forwarding of
// everything else, and training against the uncompressed reducer.
#include <doctest/doctest.h>

#include <tutti/detail/bf16.hpp>
#include <tutti/tutti.hpp>

#include "wrapped_model.hpp"

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace test_compressed {

namespace {

using tutti::detail::bf16_to_float;
using tutti::detail::float_to_bf16;

std::uint32_t bits_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
float float_of(std::uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// The nearest bf16 to a finite float by comparing the two candidates in double (exact there);
// ties go to the even one. Independent of the bit trick under test.
std::uint16_t reference_bf16(float v) {
  const std::uint32_t u = bits_of(v);
  const std::uint16_t down = static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t up = static_cast<std::uint16_t>(down + 1);  // the next one away from zero
  const double x = v, a = bf16_to_float(down);
  // Past bf16's largest finite value the next pattern is infinity; IEEE rounding treats it as
  // 2^128 for the comparison.
  const double b = (up & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), x)
                                             : double(bf16_to_float(up));
  const double da = std::abs(x - a), db = std::abs(b - x);
  if (da < db) return down;
  if (db < da) return up;
  return (down & 1u) ? up : down;
}

// An execution space whose memory the host cannot read, to check `accepts`.
struct device_only_space {
  static constexpr bool host_accessible = false;
};

static_assert(tutti::gradient_reducer<tutti::compressed<tutti::local_ring>>);
static_assert(tutti::gradient_reducer<tutti::compressed<tutti::single_rank, tutti::bf16>>);
static_assert(tutti::compressed<tutti::local_ring>::accepts<tutti::host_space>);
// single_rank accepts every space; the host-side conversions do not.
static_assert(tutti::single_rank::accepts<device_only_space>);
static_assert(!tutti::compressed<tutti::single_rank>::accepts<device_only_space>);
// local_ring has no set_position, so neither has its decorator (the trainer detects it).
template <class R>
concept has_set_position = requires(R& r) {
  r.set_position(0, 0);
};
static_assert(!has_set_position<tutti::compressed<tutti::local_ring>>);

// Rank k's value at i: magnitudes over many binades and both signs, none of them bf16-exact.
float mixed_value(int rank, std::size_t i) {
  const double mantissa = 1.0 + std::fmod(0.6180339887 * double(i * 7 + rank * 13 + 1), 1.0);
  const int exponent = int((i * 5 + std::size_t(rank) * 3) % 41) - 20;
  const double sign = ((i + std::size_t(rank)) % 3 == 0) ? -1.0 : 1.0;
  return static_cast<float>(sign * std::ldexp(mantissa, exponent) * (1.0 + 1e-6));
}

// What compressed<local_ring> computes by definition: x/W in fp32 rounded to bf16, summed in
// rank order in fp32, rounded once.
float model_mean(int world, std::size_t i, float (*value)(int, std::size_t)) {
  float acc = 0.f;
  for (int k = 0; k < world; ++k)
    acc += bf16_to_float(float_to_bf16(value(k, i) / static_cast<float>(world)));
  return bf16_to_float(float_to_bf16(acc));
}

// Runs `f(compressed<local_ring>&)` on W ranks and returns each rank's `values` after it.
template <class Init, class F>
std::vector<std::vector<float>> on_ranks(int world, std::size_t n, Init init, F f) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(world));
  tutti::run_local(world, [&](tutti::local_ring ring) {
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = init(ring.rank(), i);
    tutti::compressed<tutti::local_ring> c(ring);
    f(c, g);
    out[static_cast<std::size_t>(ring.rank())] = std::move(g);
  });
  return out;
}

using mf = tutti::models::matrix_factorization<tutti::host_space>;

tutti::data::split_result small_data() {
  auto all = tutti::data::synthetic_courses({.learners = 300,
                                             .courses = 60,
                                             .interactions_per_learner = 12,
                                             .implicit = true,
                                             .seed = 5});
  return tutti::data::split(all, {.test_fraction = 0.2, .seed = 3});
}

mf make_mf(const tutti::data::interactions& d) {
  return mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, d.n_users(), d.n_items());
}

// What one rank of a training run ended with.
struct rank_run {
  tutti::fit_result result;
  std::uint64_t checksum = 0;
  std::uint64_t bytes = 0;
  std::size_t arena = 0;  // gradient values reduced per step (parameters + the trailing floats)
  std::vector<float> params;
  std::string error;
  std::size_t stopped_at = 0;
};

// Matrix factorisation whose gradient turns NaN on one rank at one call, as an overflow would.
class nan_mf : public tutti_test::wrapped_model<mf> {
 public:
  nan_mf(mf inner, int poisoned_rank, std::size_t poisoned_call, int rank)
      : wrapped_model(std::move(inner)), m_poisoned(poisoned_rank == rank), m_call(poisoned_call) {}
  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum) {
    m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
    if (m_poisoned && m_calls == m_call) grads[grads.size() / 2] = std::nanf("");
    ++m_calls;
  }

 private:
  bool m_poisoned;
  std::size_t m_call;
  std::size_t m_calls = 0;
};

// Trains W ranks of local_ring, compressed or not; `Model` is mf or nan_mf.
template <bool Compressed, class MakeModel>
std::vector<rank_run> train_ranks(int world, const tutti::data::split_result& parts,
                                  const tutti::train_options& opt, MakeModel make_model,
                                  const std::vector<const std::atomic<bool>*>& stops = {}) {
  std::vector<rank_run> out(static_cast<std::size_t>(world));
  tutti::run_local(world, [&](tutti::local_ring ring) {
    using reducer =
        std::conditional_t<Compressed, tutti::compressed<tutti::local_ring>, tutti::local_ring>;
    auto model = make_model(ring.rank());
    tutti::train_options o = opt;
    if (!stops.empty()) o.stop = stops[static_cast<std::size_t>(ring.rank())];
    tutti::trainer<decltype(model), tutti::shuffled_shards, reducer, tutti::constant, tutti::sgd> t(
        std::move(model), {}, reducer(ring), {}, tutti::sgd{.momentum = 0.9f}, o);
    auto& mine = out[static_cast<std::size_t>(ring.rank())];
    try {
      mine.result = t.fit(parts.train, parts.test);
    } catch (const tutti::interrupted_error& e) {
      mine.error = e.what();
      mine.stopped_at = e.global_step();
    }
    mine.checksum = t.replica_checksum();
    mine.bytes = t.reducer().bytes_reduced();
    mine.arena = t.parameters().size() + tutti::gradient_trailing_floats;
    mine.params = t.parameters_on_host();
  });
  return out;
}

}  // namespace

TEST_CASE("compressed: every bf16 pattern round-trips through float, NaNs stay NaN") {
  std::size_t nans = 0;
  for (std::uint32_t u = 0; u <= 0xffffu; ++u) {
    const auto b = static_cast<std::uint16_t>(u);
    const float f = bf16_to_float(b);
    CHECK(bits_of(f) == u << 16);  // widening is the upper half of the float
    const std::uint16_t back = float_to_bf16(f);
    if (std::isnan(f)) {
      ++nans;
      CHECK(std::isnan(bf16_to_float(back)));
      CHECK((back & 0x8000u) == (b & 0x8000u));  // the sign is kept
      if (b & 0x0040u) CHECK(back == b);         // a quiet NaN comes back unchanged
    } else {
      CHECK(back == b);
    }
  }
  CHECK(nans == 2 * 127);  // exponent all ones, 7-bit mantissa nonzero, both signs
}

TEST_CASE("compressed: float to bf16 rounds to nearest, ties to even") {
  struct rounding {
    std::uint32_t in;
    std::uint16_t out;
  };
  const rounding cases[] = {
      {0x3f800000u, 0x3f80u},  // 1 is exact
      {0x3f808000u, 0x3f80u},  // 1 + 2^-8: halfway, down to the even 1
      {0x3f818000u, 0x3f82u},  // halfway above an odd one: up to the even one
      {0x3f808001u, 0x3f81u},  // just above halfway: up
      {0x3f807fffu, 0x3f80u},  // just below halfway: down
      {0xbf818000u, 0xbf82u},  // the same for negatives (away from zero when up is even)
      {0xbf808000u, 0xbf80u}, {0x3fff8000u, 0x4000u},  // a tie that carries into the exponent
      {0x00008000u, 0x0000u},                          // subnormal tie to the even zero
      {0x00018000u, 0x0002u},                          // subnormal tie to even
      {0x7f7f7fffu, 0x7f7fu},  // below the midpoint to infinity: bf16's largest
      {0x7f7f8000u, 0x7f80u},  // the midpoint to "2^128", odd below: infinity
      {0x7f7fffffu, 0x7f80u},  // FLT_MAX overflows bf16
      {0xff7fffffu, 0xff80u},  // -FLT_MAX
      {0x7f800000u, 0x7f80u},  // +inf
      {0xff800000u, 0xff80u},  // -inf
      {0x80000000u, 0x8000u},  // -0 keeps its sign
  };
  for (const auto& c : cases) {
    CAPTURE(c.in);
    CHECK(float_to_bf16(float_of(c.in)) == c.out);
  }
  // NaNs whose payload sits only in the low half would become infinities (or zero, after a
  // carry) under plain rounding; they must stay NaN.
  for (std::uint32_t nan :
       {0x7f800001u, 0x7f807fffu, 0x7fffffffu, 0xffffffffu, 0xff800001u, 0x7fc00000u}) {
    CAPTURE(nan);
    CHECK(std::isnan(bf16_to_float(float_to_bf16(float_of(nan)))));
    CHECK((float_to_bf16(float_of(nan)) & 0x8000u) == ((nan >> 16) & 0x8000u));
  }
  // Random finite floats of every binade against the independent reference.
  std::mt19937 gen(17);
  std::size_t checked = 0;
  for (int k = 0; k < 400000; ++k) {
    std::uint32_t u = gen();
    if (k % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // a quarter are exact ties
    const float v = float_of(u);
    if (!std::isfinite(v)) continue;
    ++checked;
    if (float_to_bf16(v) != reference_bf16(v)) {
      CAPTURE(u);
      CHECK(float_to_bf16(v) == reference_bf16(v));
    }
  }
  CHECK(checked > 390000);
}

TEST_CASE("compressed<local_ring>: the mean of W = 1..4 ranks is within bf16's error bound") {
  const std::size_t n = 1001;  // not a multiple of W: uneven chunks
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    const auto ranks = on_ranks(world, n, mixed_value,
                                [](auto& c, std::vector<float>& g) { c.all_reduce_mean(g); });
    std::size_t inexact = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double exact = 0, magnitude = 0;
      for (int k = 0; k < world; ++k) {
        exact += double(mixed_value(k, i)) / world;
        magnitude += std::abs(double(mixed_value(k, i))) / world;
      }
      const float got = ranks[0][i];
      // bf16 keeps 8 significant bits: each term x/W rounds by at most 2^-8 of itself and the
      // total once more by 2^-8 of itself (fp32 accumulation adds ~2^-24).
      const double bound = std::ldexp(1.0, -8) * (magnitude + std::abs(exact)) * (1 + 1e-4);
      if (!(std::abs(double(got) - exact) <= bound)) {
        CAPTURE(i);
        CHECK(std::abs(double(got) - exact) <= bound);
      }
      // With same-sign terms the error is also at most 1e-2 of the mean itself.
      if (std::abs(exact) == magnitude && !(std::abs(double(got) - exact) <= 1e-2 * magnitude)) {
        CAPTURE(i);
        CHECK(std::abs(double(got) - exact) <= 1e-2 * magnitude);
      }
      // What travelled was bf16: the result is a bf16 value, and exactly the defined sum.
      CHECK((bits_of(got) & 0xffffu) == 0u);
      if (bits_of(got) != bits_of(model_mean(world, i, mixed_value))) {
        CAPTURE(i);
        CHECK(got == model_mean(world, i, mixed_value));
      }
      if (double(got) != exact) ++inexact;
    }
    CHECK(inexact > n / 2);  // the inputs are not bf16-exact, so the mean mostly is not either
    for (int k = 1; k < world; ++k) CHECK(ranks[static_cast<std::size_t>(k)] == ranks[0]);
  }
}

TEST_CASE("compressed<local_ring>: values bf16 represents give the exact mean") {
  const std::size_t n = 257;
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    // x = W · m with a small integer m (so x/W = m exactly and sums of W of them stay below
    // 256), or W · 2^e with the same e on every rank; 0 everywhere in between.
    const auto value = [world](int rank, std::size_t i) -> float {
      if (i % 3 == 0) return float(world) * float(int((i * 7 + std::size_t(rank) * 11) % 121) - 60);
      if (i % 3 == 1) return float(world) * std::ldexp(1.f, int(i % 200) - 100);
      return 0.f;
    };
    const auto ranks =
        on_ranks(world, n, value, [](auto& c, std::vector<float>& g) { c.all_reduce_mean(g); });
    for (std::size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int k = 0; k < world; ++k) sum += value(k, i);
      CAPTURE(i);
      CHECK(double(ranks[0][i]) == sum / world);
    }
  }
}

TEST_CASE("compressed<local_ring>: values near FLT_MAX / 2 on every rank do not overflow") {
  const float big = FLT_MAX / 2;
  const auto value = [big](int rank, std::size_t i) -> float {
    switch (i) {
      case 0:
        return big;
      case 1:
        return -big;
      case 2:
        return 0.9f * FLT_MAX * (rank % 2 ? 1.f : 0.99f);
      default:
        return 1.f;
    }
  };
  for (int world = 2; world <= 4; ++world) {
    CAPTURE(world);
    std::vector<std::vector<std::uint16_t>> raw(static_cast<std::size_t>(world));
    const auto ranks = on_ranks(world, 4, value, [&](auto& c, std::vector<float>& g) {
      // Without the pre-divide: bf16 of the values themselves, summed by the same inner reducer.
      std::vector<std::uint16_t> w(g.size());
      for (std::size_t i = 0; i < g.size(); ++i) w[i] = float_to_bf16(g[i]);
      c.inner().all_reduce_sum_bf16(std::span<std::uint16_t>(w));
      raw[static_cast<std::size_t>(c.rank())] = w;
      c.all_reduce_mean(g);
    });
    for (std::size_t i = 0; i < 4; ++i) {
      double exact = 0;
      for (int k = 0; k < world; ++k) exact += double(value(k, i)) / world;
      CAPTURE(i);
      CHECK(std::isfinite(ranks[0][i]));
      CHECK(std::abs(double(ranks[0][i]) - exact) <= std::ldexp(1.0, -7) * std::abs(exact));
    }
    CHECK(std::isinf(bf16_to_float(raw[0][0])));
    CHECK(std::isinf(bf16_to_float(raw[0][1])));
    CHECK(std::isinf(bf16_to_float(raw[0][2])));
    CHECK(bf16_to_float(raw[0][3]) == float(world));
  }
}

TEST_CASE("compressed<local_ring>: a NaN on one rank is NaN everywhere, the flags survive") {
  // The trainer's arena: gradients, then this rank's finite flag, then its stop request.
  const std::size_t n = 12, finite_flag = n - 2, stop_flag = n - 1;
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    const int last = world - 1;
    const auto value = [&](int rank, std::size_t i) -> float {
      if (i == 3 && rank == 0) return std::numeric_limits<float>::quiet_NaN();
      if (i == 4 && rank == last) return std::numeric_limits<float>::infinity();
      if (i == 5 && rank == last) return -std::numeric_limits<float>::infinity();
      if (i == finite_flag) return rank == last ? 1.f : 0.f;
      if (i == stop_flag) return 0.f;
      return 0.25f * float(i) + float(rank);
    };
    const auto ranks =
        on_ranks(world, n, value, [](auto& c, std::vector<float>& g) { c.all_reduce_mean(g); });
    for (int k = 0; k < world; ++k) {
      const auto& g = ranks[static_cast<std::size_t>(k)];
      CAPTURE(k);
      CHECK(std::isnan(g[3]));
      CHECK(g[4] == std::numeric_limits<float>::infinity());
      CHECK(g[5] == -std::numeric_limits<float>::infinity());
      CHECK(g[finite_flag] != 0.f);  // 1/W on one rank, nonzero after bf16
      CHECK(g[finite_flag] == doctest::Approx(1.0 / world).epsilon(1e-2));
      CHECK(g[stop_flag] == 0.f);
      CHECK(std::isfinite(g[0]));
    }
  }
}

TEST_CASE("compressed<local_ring>: broadcast, scalars and gathers are bitwise the inner's") {
  const int world = 3;
  tutti::run_local(world, [&](tutti::local_ring ring) {
    tutti::compressed<tutti::local_ring> c(ring);
    CHECK(c.rank() == ring.rank());
    CHECK(c.world_size() == world);
    // Values bf16 cannot hold: a compressed broadcast would change them.
    std::vector<float> mine(101), theirs(101);
    std::vector<double> dmine(7);
    for (std::size_t i = 0; i < mine.size(); ++i)
      mine[i] = theirs[i] = mixed_value(ring.rank(), i) * (1.f + 1e-6f * float(i));
    for (std::size_t i = 0; i < dmine.size(); ++i) dmine[i] = 1.0 / 3 + ring.rank() + 1e-12 * i;
    std::vector<double> dtheirs = dmine;
    c.broadcast(std::span<float>(mine), 1);
    ring.broadcast(std::span<float>(theirs), 1);
    CHECK(mine == theirs);
    for (std::size_t i = 0; i < mine.size(); ++i)
      CHECK(mine[i] == mixed_value(1, i) * (1.f + 1e-6f * float(i)));
    c.broadcast(std::span<double>(dmine), 2);
    ring.broadcast(std::span<double>(dtheirs), 2);
    CHECK(dmine == dtheirs);

    std::vector<double> s{0.1 * (ring.rank() + 1), 1e-17, 1.0 / 7};
    std::vector<double> s2 = s;
    c.all_reduce_sum(std::span<double>(s));
    ring.all_reduce_sum(std::span<double>(s2));
    CHECK(std::memcmp(s.data(), s2.data(), s.size() * sizeof(double)) == 0);
    CHECK(s[0] == 0.1 * 1 + 0.1 * 2 + 0.1 * 3);

    std::vector<double> m{double(ring.rank()), ring.rank() == 1 ? std::nan("") : 0.0};
    c.all_reduce_max(std::span<double>(m));
    CHECK(m[0] == world - 1);
    CHECK(std::isnan(m[1]));

    const std::uint64_t id = (std::uint64_t(1) << 60) + std::uint64_t(ring.rank());
    std::vector<std::uint64_t> all(world);
    c.all_gather(std::span<const std::uint64_t>(&id, 1), std::span<std::uint64_t>(all));
    for (int k = 0; k < world; ++k)
      CHECK(all[static_cast<std::size_t>(k)] == (std::uint64_t(1) << 60) + std::uint64_t(k));

    // Only the gradient reduce is compressed, and it counts the bf16 bytes.
    const std::uint64_t before = c.bytes_reduced();
    std::vector<float> g(40, 1.f);
    c.all_reduce_mean(std::span<float>(g));
    CHECK(c.bytes_reduced() - before == 40 * sizeof(std::uint16_t));
    CHECK(c.wire_bytes(40) == 80);
  });
}

TEST_CASE("compressed<local_ring>: a bf16 sum that disagrees throws mismatch_error on every rank") {
  std::atomic<int> raised{0};
  CHECK_THROWS_WITH_AS(tutti::run_local(3,
                                        [&](tutti::local_ring ring) {
                                          std::vector<std::uint16_t> v(ring.rank() == 2 ? 9 : 8);
                                          try {
                                            ring.all_reduce_sum_bf16(std::span<std::uint16_t>(v));
                                          } catch (const tutti::mismatch_error&) {
                                            ++raised;
                                            throw;
                                          }
                                        }),
                       "tutti::local_ring::all_reduce_sum_bf16(): rank 2 passed 9 values and rank "
                       "0 8; expected the same size on every rank",
                       tutti::mismatch_error);
  CHECK(raised == 3);
  // A compressed rank and an uncompressed one: named, on both ranks.
  raised = 0;
  CHECK_THROWS_WITH_AS(tutti::run_local(2,
                                        [&](tutti::local_ring ring) {
                                          std::vector<float> g(8);
                                          tutti::compressed<tutti::local_ring> c(ring);
                                          try {
                                            if (ring.rank() == 0)
                                              c.all_reduce_mean(std::span<float>(g));
                                            else
                                              ring.all_reduce_mean(std::span<float>(g));
                                          } catch (const tutti::mismatch_error&) {
                                            ++raised;
                                            throw;
                                          }
                                        }),
                       doctest::Contains("rank 1 called all_reduce_mean while rank 0 called "
                                         "all_reduce_sum_bf16"),
                       tutti::mismatch_error);
  CHECK(raised == 2);
}

TEST_CASE("compressed<single_rank>: one rank rounds to bf16 and counts 2 bytes per value") {
  tutti::compressed<tutti::single_rank> c{tutti::single_rank{}};
  std::vector<float> g{1.f, 1.00390625f /* 1 + 2^-8: a tie, to 1 */, 1.01171875f, -3.3e-3f};
  c.all_reduce_mean(std::span<float>(g));
  CHECK(g[0] == 1.f);
  CHECK(g[1] == 1.f);
  CHECK(g[2] == 1.015625f);  // 1 + 3·2^-8 ties to the even 1 + 4·2^-8
  CHECK(g[3] == bf16_to_float(float_to_bf16(-3.3e-3f)));
  CHECK(c.bytes_reduced() == 4 * sizeof(std::uint16_t));
  CHECK_THROWS_AS(c.broadcast(std::span<float>(g), 1), tutti::invalid_argument);
}

TEST_CASE("compressed<local_ring>: training ends within 2% of local_ring, replicas identical") {
  const auto parts = small_data();
  for (int world : {2, 4}) {
    CAPTURE(world);
    const tutti::train_options opt{.batch = 60 * std::size_t(world),
                                   .epochs = 10,
                                   .base_lr = 2.0,
                                   .seed = 11,
                                   .evaluate_each_epoch = false};
    const auto make = [&](int) {
      return make_mf(parts.train);
    };
    const auto plain = train_ranks<false>(world, parts, opt, make);
    const auto bf = train_ranks<true>(world, parts, opt, make);
    const double plain_loss = plain[0].result.epochs.back().train_loss;
    const double bf_loss = bf[0].result.epochs.back().train_loss;
    MESSAGE("W = " << world << ": final train loss " << std::setprecision(8) << plain_loss
                   << " (fp32) vs " << bf_loss << " (bf16)");
    // The run learns (from ln 2 = 0.693 at the start), so the comparison means something.
    CHECK(plain_loss < 0.5);
    CHECK(std::abs(bf_loss - plain_loss) <= 0.02 * std::abs(plain_loss));
    CHECK(bf[0].result.steps == plain[0].result.steps);
    // The bf16 gradients did change the run (else the decorator did nothing) ...
    CHECK(bf[0].params != plain[0].params);
    for (int k = 0; k < world; ++k) {
      const auto& r = bf[static_cast<std::size_t>(k)];
      CAPTURE(k);
      CHECK(r.checksum == bf[0].checksum);  // ... identically on every rank
      CHECK(r.params == bf[0].params);
      CHECK(r.result.skipped_steps == 0);  // no flag raised by rounding
      // Half the bytes of the fp32 run: one bf16 per arena value per step.
      CHECK(r.bytes * 2 == plain[static_cast<std::size_t>(k)].bytes);
      CHECK(r.bytes == r.result.steps * r.arena * sizeof(std::uint16_t));
    }
  }
}

TEST_CASE("compressed<local_ring>: the trainer's finite flag and stop request cross in bf16") {
  const auto parts = small_data();
  const int world = 3;  // 1/3 is not a bf16: the flag arrives rounded, and must stay nonzero
  const tutti::train_options opt{
      .batch = 60 * world, .epochs = 1, .base_lr = 0.05, .seed = 11, .evaluate_each_epoch = false};

  // A NaN gradient on rank 2 at step 3 is skipped on every rank.
  const auto skipped = train_ranks<true>(
      world, parts, opt, [&](int rank) { return nan_mf(make_mf(parts.train), 2, 3, rank); });
  for (const auto& r : skipped) {
    CHECK(r.error.empty());
    CHECK(r.result.skipped_steps == 1);
    REQUIRE(r.result.nonfinite.size() == 1);
    CHECK(r.result.nonfinite[0].rank == 2);
    CHECK(r.result.nonfinite[0].global_step == 3);
    CHECK(r.checksum == skipped[0].checksum);
    bool finite = true;
    for (float p : r.params) finite = finite && std::isfinite(p);
    CHECK(finite);
  }

  // A stop request on rank 1 alone stops every rank after the same step.
  std::atomic<bool> no{false}, yes{true};
  const auto stopped = train_ranks<true>(
      world, parts, opt, [&](int) { return make_mf(parts.train); }, {&no, &yes, &no});
  for (const auto& r : stopped) {
    CHECK(r.error.find("stopped on request") != std::string::npos);
    CHECK(r.stopped_at == 1);
  }
}

}  // namespace test_compressed
