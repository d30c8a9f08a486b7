// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <tutti/concepts.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/launch.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/single_rank.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace test_reducers {

namespace {

static_assert(tutti::gradient_reducer<tutti::single_rank>);
static_assert(tutti::gradient_reducer<tutti::local_ring>);
static_assert(tutti::check_gradient_reducer<tutti::single_rank>());
static_assert(tutti::check_gradient_reducer<tutti::local_ring>());

struct device_only_space {
  static constexpr bool host_accessible = false;
};
static_assert(tutti::local_ring::accepts<tutti::host_space>);
static_assert(!tutti::local_ring::accepts<device_only_space>);
static_assert(tutti::single_rank::accepts<device_only_space>);

// A rank-specific input in [-1, 1), reproducible without storing it.
template <class T>
T input(int rank, std::size_t i) {
  return static_cast<T>(
      2.0 * tutti::detail::uniform01(0x5eed + static_cast<std::uint64_t>(rank), i) - 1.0);
}

template <class T>
void check_mean(int world, std::size_t n) {
  INFO("W = " << world << ", n = " << n << ", " << sizeof(T) << "-byte values");
  std::vector<std::vector<T>> data(static_cast<std::size_t>(world), std::vector<T>(n));
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < n; ++i) data[static_cast<std::size_t>(r)][i] = input<T>(r, i);
  std::vector<std::uint64_t> bytes(static_cast<std::size_t>(world));
  tutti::run_local(world, [&](tutti::local_ring& ring) {
    ring.all_reduce_mean(std::span<T>(data[static_cast<std::size_t>(ring.rank())]));
    bytes[static_cast<std::size_t>(ring.rank())] = ring.bytes_reduced();
  });

  // Reference in double from the same T inputs; the ring adds W values in T.
  const double eps = std::numeric_limits<T>::epsilon();
  std::size_t wrong = 0;
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0, magnitude = 0;
    for (int r = 0; r < world; ++r) {
      sum += static_cast<double>(input<T>(r, i));
      magnitude += std::abs(static_cast<double>(input<T>(r, i)));
    }
    const double err = std::abs(static_cast<double>(data[0][i]) - sum / world);
    worst = std::max(worst, err);
    // W - 1 additions and one division, each within eps of the running magnitude.
    if (err > (world + 1) * eps * magnitude / world) ++wrong;
  }
  CHECK(wrong == 0);
  INFO("worst absolute error " << worst);
  // At W = 2 the mean is one addition and one division in T, whatever the order and however
  // vectorised: exactly the scalar (a + b) / 2.
  if (world == 2) {
    std::size_t inexact = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (data[0][i] != (input<T>(0, i) + input<T>(1, i)) / T(2)) ++inexact;
    CHECK(inexact == 0);
  }
  // Empty vectors may hold null pointers, which memcmp must not receive even for 0 bytes.
  if (n > 0)
    for (int r = 1; r < world; ++r)
      CHECK(std::memcmp(data[static_cast<std::size_t>(r)].data(), data[0].data(), n * sizeof(T)) ==
            0);
  for (auto b : bytes) CHECK(b == n * sizeof(T));
}

}  // namespace

TEST_CASE("local_ring::all_reduce_mean is the element-wise mean, bitwise equal on every rank") {
  for (int world = 1; world <= 6; ++world) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t(world > 1 ? world - 1 : 1),
          std::size_t(world + 1), std::size_t(13 * world + 5), std::size_t{1000003}}) {
      check_mean<float>(world, n);
      if (n < 1000) check_mean<double>(world, n);
    }
  }
}

TEST_CASE("local_ring::all_reduce_mean stays correct over many back-to-back calls") {
  const int world = 4;
  std::vector<int> bad(world, 0);
  tutti::run_local(world, [&](tutti::local_ring& ring) {
    std::vector<float> g(37);
    for (int it = 0; it < 300; ++it) {
      // Rank r holds it + r everywhere; the mean is it + 1.5, exactly representable.
      std::fill(g.begin(), g.end(), float(it + ring.rank()));
      ring.all_reduce_mean(std::span<float>(g));
      for (float v : g)
        if (v != float(it) + 1.5f) ++bad[static_cast<std::size_t>(ring.rank())];
    }
    CHECK(ring.bytes_reduced() == 300u * 37u * sizeof(float));
  });
  CHECK(bad == std::vector<int>(world, 0));
}

TEST_CASE("local_ring::broadcast copies the root's values to every rank") {
  for (int world : {1, 2, 3, 5}) {
    for (int root = 0; root < world; ++root) {
      std::vector<std::vector<float>> f(static_cast<std::size_t>(world));
      std::vector<std::vector<double>> d(static_cast<std::size_t>(world));
      tutti::run_local(world, [&](tutti::local_ring& ring) {
        const auto r = static_cast<std::size_t>(ring.rank());
        f[r].assign(11, float(ring.rank()) + 0.25f);
        d[r].assign(3, double(ring.rank()) - 0.5);
        ring.broadcast(std::span<float>(f[r]), root);
        ring.broadcast(std::span<double>(d[r]), root);
      });
      for (int r = 0; r < world; ++r) {
        CHECK(f[static_cast<std::size_t>(r)] == std::vector<float>(11, float(root) + 0.25f));
        CHECK(d[static_cast<std::size_t>(r)] == std::vector<double>(3, double(root) - 0.5));
      }
    }
  }
}

TEST_CASE("local_ring::all_reduce_sum and all_reduce_max agree bitwise on every rank") {
  const int world = 5;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> sums(world), maxes(world);
  tutti::run_local(world, [&](tutti::local_ring& ring) {
    const auto r = static_cast<std::size_t>(ring.rank());
    const double x = ring.rank();
    sums[r] = {x, 0.1 * x + 1e-17, -x, 1e16 * (r % 2 ? 1 : -1) + x};
    maxes[r] = {x, -x, r == 3 ? nan : 1.0};
    ring.all_reduce_sum(std::span<double>(sums[r]));
    ring.all_reduce_max(std::span<double>(maxes[r]));
  });
  // The expected value is the sum in rank order, exactly.
  std::vector<double> expect(4, 0.0);
  for (int r = 0; r < world; ++r) {
    const double x = r;
    const double v[] = {x, 0.1 * x + 1e-17, -x, 1e16 * (r % 2 ? 1 : -1) + x};
    for (int i = 0; i < 4; ++i)
      expect[static_cast<std::size_t>(i)] =
          r == 0 ? v[i] : expect[static_cast<std::size_t>(i)] + v[i];
  }
  for (int r = 0; r < world; ++r) {
    CHECK(std::memcmp(sums[static_cast<std::size_t>(r)].data(), expect.data(),
                      4 * sizeof(double)) == 0);
    CHECK(maxes[static_cast<std::size_t>(r)][0] == 4.0);
    CHECK(maxes[static_cast<std::size_t>(r)][1] == 0.0);
    CHECK(std::isnan(maxes[static_cast<std::size_t>(r)][2]));
  }
  CHECK(sums[0][0] == 10.0);
}

TEST_CASE("local_ring::all_gather concatenates in rank order") {
  for (int world : {1, 2, 4, 6}) {
    std::vector<std::vector<std::uint64_t>> all(static_cast<std::size_t>(world));
    std::vector<std::vector<std::uint64_t>> in_place(static_cast<std::size_t>(world));
    tutti::run_local(world, [&](tutti::local_ring& ring) {
      const auto r = static_cast<std::size_t>(ring.rank());
      const std::vector<std::uint64_t> mine = {r * 10, r * 10 + 1, r * 10 + 2};
      all[r].assign(3 * static_cast<std::size_t>(world), 999);
      ring.all_gather(mine, all[r]);
      // In place: this rank's own block of `all` is its contribution.
      in_place[r].assign(3 * static_cast<std::size_t>(world), 0);
      std::copy(mine.begin(), mine.end(), in_place[r].begin() + static_cast<std::ptrdiff_t>(3 * r));
      ring.all_gather(std::span<const std::uint64_t>(in_place[r]).subspan(3 * r, 3), in_place[r]);
    });
    for (int r = 0; r < world; ++r)
      for (std::size_t k = 0; k < static_cast<std::size_t>(world); ++k)
        for (std::size_t j = 0; j < 3; ++j) {
          CHECK(all[static_cast<std::size_t>(r)][3 * k + j] == k * 10 + j);
          CHECK(in_place[static_cast<std::size_t>(r)][3 * k + j] == k * 10 + j);
        }
  }
}

namespace {
struct rank_exploded : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace

TEST_CASE("run_local rethrows the failing rank's own exception and releases the others") {
  for (int world : {2, 3, 4}) {
    for (int bad = 0; bad < world; ++bad) {
      for (bool after_some_steps : {false, true}) {
        INFO("W = " << world << ", failing rank " << bad << ", after steps " << after_some_steps);
        std::mutex m;
        std::vector<int> failed_rank_seen;
        std::vector<std::string> messages;
        const auto start = std::chrono::steady_clock::now();
        try {
          tutti::run_local(world, [&](tutti::local_ring& ring) {
            std::vector<float> g(100, 1.0f);
            if (after_some_steps)
              for (int i = 0; i < 3; ++i) ring.all_reduce_mean(std::span<float>(g));
            if (ring.rank() == bad)
              throw rank_exploded("rank " + std::to_string(bad) + " exploded");
            try {
              for (int i = 0; i < 5; ++i) ring.all_reduce_mean(std::span<float>(g));
            } catch (const tutti::collective_error& e) {
              std::lock_guard lock(m);
              failed_rank_seen.push_back(e.failed_rank());
              messages.push_back(e.what());
              throw;
            }
          });
          FAIL("run_local returned normally");
        } catch (const rank_exploded& e) {
          CHECK(std::string(e.what()) == "rank " + std::to_string(bad) + " exploded");
        }
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
        CHECK(failed_rank_seen == std::vector<int>(static_cast<std::size_t>(world - 1), bad));
        for (const auto& msg : messages)
          CHECK(msg == "rank " + std::to_string(bad) + " failed: rank " + std::to_string(bad) +
                           " exploded");
      }
    }
  }
}

TEST_CASE("a rank that never arrives fails the others after the timeout, naming it") {
  std::mutex m;
  std::vector<std::string> messages;
  std::vector<int> failed;
  std::atomic<int> released{0};
  std::string late_rank_error;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(
      tutti::run_local(3,
                       [&](tutti::local_ring& ring) {
                         std::vector<float> g(10, 1.0f);
                         if (ring.rank() == 1) {
                           // Late until both others have given up (at most 10 s, so a bug cannot
                           // hang).
                           while (released < 2 && std::chrono::steady_clock::now() - start <
                                                      std::chrono::seconds(10))
                             std::this_thread::sleep_for(std::chrono::milliseconds(5));
                           try {
                             ring.all_reduce_mean(std::span<float>(g));
                           } catch (const tutti::collective_error& e) {
                             late_rank_error = e.what();
                             throw;
                           }
                           return;
                         }
                         try {
                           ring.all_reduce_mean(std::span<float>(g));
                         } catch (const tutti::collective_error& e) {
                           {
                             std::lock_guard lock(m);
                             messages.push_back(e.what());
                             failed.push_back(e.failed_rank());
                           }
                           ++released;
                           throw;
                         }
                       },
                       {.timeout = std::chrono::milliseconds(200)}),
      tutti::collective_error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  REQUIRE(messages.size() == 2);
  CHECK(failed == std::vector<int>{1, 1});
  for (const auto& msg : messages)
    CHECK(msg == "tutti::local_ring::all_reduce_mean: ranks 1 did not arrive within 200 ms");
  // The group stays failed: the late rank is told why instead of waiting for the others.
  CHECK(late_rank_error == messages[0]);
}

TEST_CASE("a rank that returns while others wait in a collective fails them at once") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(
      tutti::run_local(3,
                       [&](tutti::local_ring& ring) {
                         std::vector<double> x(2, 1.0);
                         if (ring.rank() != 2) ring.all_reduce_sum(x);
                       }),
      "tutti::local_ring::all_reduce_sum: rank 2 finished its work without joining "
      "this collective",
      tutti::collective_error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("local_group::abort fails every rank in or entering a collective") {
  std::atomic<int> errors{0};
  CHECK_THROWS_WITH_AS(tutti::run_local(3,
                                        [&](tutti::local_ring& ring) {
                                          std::vector<double> x(1, 1.0);
                                          if (ring.rank() == 0) ring.group().abort(2, "disk full");
                                          try {
                                            ring.all_reduce_max(x);
                                          } catch (const tutti::collective_error& e) {
                                            if (e.failed_rank() == 2) ++errors;
                                            throw;
                                          }
                                        }),
                       "rank 2 failed: disk full", tutti::collective_error);
  // Rank 0 aborted before its own collective, so all three ranks failed, none hung.
  CHECK(errors == 3);
}

TEST_CASE("mismatched arguments raise on every rank") {
  SUBCASE("all_reduce_mean sizes") {
    std::atomic<int> raised{0};
    CHECK_THROWS_WITH_AS(tutti::run_local(4,
                                          [&](tutti::local_ring& ring) {
                                            std::vector<float> g(ring.rank() == 2 ? 9 : 8);
                                            try {
                                              ring.all_reduce_mean(std::span<float>(g));
                                            } catch (const tutti::mismatch_error&) {
                                              ++raised;
                                              throw;
                                            }
                                          }),
                         "tutti::local_ring::all_reduce_mean(): rank 2 passed 9 values and rank 0 "
                         "8; expected the same size on every rank",
                         tutti::mismatch_error);
    CHECK(raised == 4);
  }
  SUBCASE("different collectives") {
    std::atomic<int> raised{0};
    CHECK_THROWS_AS(tutti::run_local(2,
                                     [&](tutti::local_ring& ring) {
                                       std::vector<double> x(3);
                                       try {
                                         if (ring.rank() == 0)
                                           ring.all_reduce_sum(x);
                                         else
                                           ring.all_reduce_max(x);
                                       } catch (const tutti::mismatch_error&) {
                                         ++raised;
                                         throw;
                                       }
                                     }),
                    tutti::mismatch_error);
    CHECK(raised == 2);
  }
  SUBCASE("all_gather output size on one rank") {
    std::atomic<int> raised{0};
    CHECK_THROWS_WITH_AS(tutti::run_local(3,
                                          [&](tutti::local_ring& ring) {
                                            std::vector<std::uint64_t> mine(2),
                                                all(ring.rank() == 1 ? 5 : 6);
                                            try {
                                              ring.all_gather(mine, all);
                                            } catch (const tutti::invalid_argument&) {
                                              ++raised;
                                              throw;
                                            }
                                          }),
                         doctest::Contains("rank 1 passed all.size() = 5; expected mine.size() * "
                                           "world_size = 6"),
                         tutti::invalid_argument);
    CHECK(raised == 3);
  }
  SUBCASE("broadcast root") {
    std::atomic<int> raised{0};
    CHECK_THROWS_AS(tutti::run_local(2,
                                     [&](tutti::local_ring& ring) {
                                       std::vector<float> x(3);
                                       try {
                                         ring.broadcast(std::span<float>(x), 2);
                                       } catch (const tutti::invalid_argument&) {
                                         ++raised;
                                         throw;
                                       }
                                     }),
                    tutti::invalid_argument);
    CHECK(raised == 2);
  }
}

TEST_CASE("run_local validates its arguments and splits OpenMP threads between ranks") {
  CHECK_THROWS_WITH_AS(tutti::run_local(0, [](tutti::local_ring&) {}),
                       "tutti::run_local(): world_size = 0; expected world_size >= 1",
                       tutti::invalid_argument);
  CHECK_THROWS_AS(
      tutti::run_local(2, [](tutti::local_ring&) {}, {.timeout = std::chrono::milliseconds(0)}),
      tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::local_group(1, {.threads_per_rank = -1}), tutti::invalid_argument);
  tutti::local_group group(2);
  CHECK_THROWS_AS(tutti::local_ring(group, 2), tutti::invalid_argument);
#if defined(_OPENMP)
  const int before = omp_get_max_threads();
  std::vector<int> seen(3);
  tutti::run_local(3,
                   [&](tutti::local_ring& ring) {
                     seen[static_cast<std::size_t>(ring.rank())] = omp_get_max_threads();
                   },
                   {.threads_per_rank = 2});
  CHECK(seen == std::vector<int>{2, 2, 2});
  tutti::run_local(3, [&](tutti::local_ring& ring) {
    seen[static_cast<std::size_t>(ring.rank())] = omp_get_max_threads();
  });
  CHECK(seen == std::vector<int>(3, std::max(1, before / 3)));
  CHECK(omp_get_max_threads() == before);
#endif
}

TEST_CASE("the former name no_op_reducer still names single_rank") {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK(std::is_same_v<tutti::no_op_reducer, tutti::single_rank>);
#pragma GCC diagnostic pop
}

TEST_CASE("single_rank leaves data alone and counts the bytes a real reducer would move") {
  tutti::single_rank r;
  CHECK(r.rank() == 0);
  CHECK(r.world_size() == 1);
  std::vector<float> g = {1.5f, -2.0f, 3.0f};
  std::vector<double> d = {4.0, 5.0};
  r.all_reduce_mean(std::span<float>(g));
  r.all_reduce_mean(std::span<double>(d));
  CHECK(g == std::vector<float>{1.5f, -2.0f, 3.0f});
  CHECK(r.bytes_reduced() == 3 * sizeof(float) + 2 * sizeof(double));
  r.all_reduce_sum(std::span<double>(d));
  r.all_reduce_max(std::span<double>(d));
  r.broadcast(std::span<float>(g), 0);
  CHECK(d == std::vector<double>{4.0, 5.0});
  CHECK(r.bytes_reduced() == 3 * sizeof(float) + 2 * sizeof(double));
  CHECK_THROWS_AS(r.broadcast(std::span<float>(g), 1), tutti::invalid_argument);
  const std::vector<std::uint64_t> mine = {7, 8};
  std::vector<std::uint64_t> all(2);
  r.all_gather(mine, all);
  CHECK(all == mine);
  std::vector<std::uint64_t> wrong(3);
  CHECK_THROWS_AS(r.all_gather(mine, wrong), tutti::invalid_argument);
}

}  // namespace test_reducers
