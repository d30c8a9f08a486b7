// SPDX-License-Identifier: Apache-2.0
/// @file mpi_reducer_test.cpp
/// @brief `tutti::mpi_allreduce` under `mpiexec -n 2` (any W >= 2 works): every collective against
/// its exact result, the agreement checks, TUTTI_MPI_CHECK, and a trainer on W processes against
/// the same trainer on W threads (`tutti::run_local`, run on rank 0); the same for the bf16 sum
/// and `tutti::compressed<mpi_allreduce, bf16>`.
///
/// Rank 0 prints one line per check; the program exits 1 on every rank if any check failed
/// anywhere. An unexpected exception ends the whole job through `tutti::mpi_abort_on_exception`.
#include <tutti/reducers/mpi.hpp>
#include <tutti/tutti.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

static_assert(std::is_base_of_v<tutti::error, tutti::mpi_error>);
static_assert(tutti::gradient_reducer<tutti::mpi_allreduce>);
static_assert(tutti::mpi_allreduce::accepts<tutti::host_space>);
static_assert(!std::is_copy_constructible_v<tutti::mpi_allreduce> &&
              std::is_nothrow_move_constructible_v<tutti::mpi_allreduce>);
using compressed_mpi = tutti::compressed<tutti::mpi_allreduce, tutti::bf16>;
static_assert(tutti::gradient_reducer<compressed_mpi>);
// Its optional capabilities (docs/concepts.md#optional-capabilities), checked by name.
static_assert(tutti::check_gradient_reducer<tutti::mpi_allreduce>());
static_assert(tutti::reducer_tracks_position<tutti::mpi_allreduce> &&
              tutti::reducer_lends_gradient_arena<tutti::mpi_allreduce> &&
              tutti::reducer_says_thread_safety<tutti::mpi_allreduce>);
static_assert(tutti::reducer_tracks_position<compressed_mpi> &&
              tutti::reducer_says_thread_safety<compressed_mpi> &&
              tutti::reducer_counts_wire_bytes<compressed_mpi> &&
              !tutti::reducer_lends_gradient_arena<compressed_mpi>);
static_assert(compressed_mpi::accepts<tutti::host_space>);
static_assert(!std::is_copy_constructible_v<compressed_mpi> &&
              std::is_move_constructible_v<compressed_mpi>);
// The trainer detects set_position; the decorator must pass it on to mpi_allreduce's timeout.
static_assert(requires(compressed_mpi & r) { r.set_position(0, 0); });

// Bookkeeping goes over MPI_COMM_WORLD, the communicator every reducer here duplicates.
class checks {
 public:
  checks() {
    MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m_world);
  }
  int rank() const { return m_rank; }
  int world() const { return m_world; }
  int failures() const { return m_failures; }

  // Collective: every rank reports whether `name` held here; rank 0 prints the verdict.
  void expect(const std::string& name, bool ok, const std::string& detail = "") {
    if (!ok && !detail.empty())
      std::fprintf(stderr, "rank %d: %s: %s\n", m_rank, name.c_str(), detail.c_str());
    int mine = ok ? 1 : 0;
    std::vector<int> all(static_cast<std::size_t>(m_world));
    MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::string failed_on;
    for (int k = 0; k < m_world; ++k)
      if (!all[static_cast<std::size_t>(k)])
        failed_on += (failed_on.empty() ? "" : ", ") + std::to_string(k);
    if (!failed_on.empty()) ++m_failures;
    if (m_rank == 0) {
      if (failed_on.empty())
        std::printf("ok    %s\n", name.c_str());
      else
        std::printf("FAIL  %s (on rank %s)\n", name.c_str(), failed_on.c_str());
      std::fflush(stdout);
    }
  }

  // Collective: `f` must throw `E` on this rank (and, by the check, on every rank).
  template <class E, class F>
  void expect_throw(const std::string& name, F&& f, const std::string& must_contain = "") {
    std::string detail;
    bool ok = false;
    try {
      f();
      detail = "no exception";
    } catch (const E& e) {
      const std::string what = e.what();
      ok = what.find(must_contain) != std::string::npos;
      if (!ok) detail = "message '" + what + "' lacks '" + must_contain + "'";
      if (ok && m_rank == 0) std::printf("      %s\n", e.what());
    } catch (const std::exception& e) {
      detail = std::string("wrong exception: ") + e.what();
    }
    expect(name, ok, detail);
  }

 private:
  int m_rank = 0;
  int m_world = 1;
  int m_failures = 0;
};

// Values whose sum over ranks is exact in float, so the correctly rounded mean is known.
template <class T>
T value_at(int rank, std::size_t i) {
  return static_cast<T>(static_cast<double>(i % 97) * 0.25 + rank * 8 - 3);
}

template <class T>
bool mean_is_exact(std::span<const T> got, int world, std::string& detail) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    T sum = 0;
    for (int k = 0; k < world; ++k) sum += value_at<T>(k, i);
    const T expected = sum / static_cast<T>(world);
    if (got[i] != expected) {
      detail = "element " + std::to_string(i) + " is " + std::to_string(got[i]) + "; expected " +
               std::to_string(expected);
      return false;
    }
  }
  return true;
}

template <class T>
void check_mean(checks& c, tutti::mpi_allreduce& r, std::size_t n, const std::string& label) {
  std::vector<T> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = value_at<T>(c.rank(), i);
  const std::uint64_t before = r.bytes_reduced();
  r.all_reduce_mean(std::span<T>(g));
  std::string detail;
  c.expect("all_reduce_mean<" + label + "> of " + std::to_string(n) +
               " values is the exact mean (max " +
               std::to_string(r.options().max_elements_per_call) + " per MPI call)",
           mean_is_exact<T>(g, c.world(), detail), detail);
  c.expect("bytes_reduced grows by the span's bytes", r.bytes_reduced() - before == n * sizeof(T),
           std::to_string(r.bytes_reduced() - before) + " bytes");
}

template <class T>
void check_broadcast(checks& c, tutti::mpi_allreduce& r, std::size_t n, int root) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value_at<T>(c.rank(), i);
  r.broadcast(std::span<T>(v), root);
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) ok = ok && v[i] == value_at<T>(root, i);
  c.expect("broadcast of " + std::to_string(n) + " values from root " + std::to_string(root) +
               " (max " + std::to_string(r.options().max_elements_per_call) + " per MPI call)",
           ok);
}

void check_all_gather(checks& c, tutti::mpi_allreduce& r, std::size_t m) {
  const std::size_t w = static_cast<std::size_t>(c.world());
  const auto expected = [&](std::size_t k, std::size_t j) {
    return std::uint64_t(1000 * k + j + (std::uint64_t(1) << 40));
  };
  std::vector<std::uint64_t> mine(m), all(m * w, 0);
  for (std::size_t j = 0; j < m; ++j) mine[j] = expected(static_cast<std::size_t>(c.rank()), j);
  r.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
  bool ok = true;
  for (std::size_t k = 0; k < w; ++k)
    for (std::size_t j = 0; j < m; ++j) ok = ok && all[k * m + j] == expected(k, j);
  const std::string per_call =
      " (max " + std::to_string(r.options().max_elements_per_call) + " per MPI call)";
  c.expect("all_gather of " + std::to_string(m) + " values per rank, in rank order" + per_call, ok);

  // In place: this rank's block of `all` is its contribution.
  std::vector<std::uint64_t> in_place(m * w, 0);
  const std::size_t own = static_cast<std::size_t>(c.rank()) * m;
  for (std::size_t j = 0; j < m; ++j) in_place[own + j] = mine[j];
  r.all_gather(std::span<const std::uint64_t>(in_place.data() + own, m),
               std::span<std::uint64_t>(in_place));
  c.expect("all_gather in place" + per_call, in_place == all);
}

using tutti::detail::bf16_to_float;
using tutti::detail::float_to_bf16;

// Rank k's value at i: not bf16-exact, both signs, many binades.
float bf16_input(int rank, std::size_t i) {
  const double mantissa = 1.0 + std::fmod(0.6180339887 * double(i * 7 + rank * 13 + 1), 1.0);
  const int exponent = int((i * 5 + std::size_t(rank) * 3) % 41) - 20;
  const double sign = ((i + std::size_t(rank)) % 3 == 0) ? -1.0 : 1.0;
  return static_cast<float>(sign * std::ldexp(mantissa, exponent) * (1.0 + 1e-6));
}

// all_reduce_sum_bf16 against its definition: with W = 2 the one fp32 addition rounded once
// (bitwise; a + b = b + a), otherwise within two bf16 roundings of the exact sum per hop.
void check_bf16_sum(checks& c, tutti::mpi_allreduce& r, std::size_t n) {
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float_to_bf16(bf16_input(c.rank(), i));
  if (n > 3 && c.rank() == c.world() - 1) v[3] = float_to_bf16(std::nanf(""));
  const std::uint64_t before = r.bytes_reduced();
  r.all_reduce_sum_bf16(std::span<std::uint16_t>(v));
  std::string detail;
  bool ok = true;
  for (std::size_t i = 0; i < n && ok; ++i) {
    const float got = bf16_to_float(v[i]);
    if (i == 3) {
      ok = std::isnan(got);
      if (!ok) detail = "element 3 is " + std::to_string(got) + "; expected NaN";
      continue;
    }
    double exact = 0, magnitude = 0;
    for (int k = 0; k < c.world(); ++k) {
      exact += bf16_to_float(float_to_bf16(bf16_input(k, i)));
      magnitude += std::abs(double(bf16_to_float(float_to_bf16(bf16_input(k, i)))));
    }
    if (c.world() == 2) {
      const std::uint16_t expected =
          tutti::detail::bf16_add(float_to_bf16(bf16_input(0, i)), float_to_bf16(bf16_input(1, i)));
      ok = v[i] == expected;
    } else {
      ok = std::abs(double(got) - exact) <= std::ldexp(1.0, -8) * c.world() * magnitude;
    }
    if (!ok)
      detail = "element " + std::to_string(i) + " is " + std::to_string(got) + "; exact sum " +
               std::to_string(exact);
  }
  c.expect("all_reduce_sum_bf16 of " + std::to_string(n) +
               " values: fp32 additions rounded to bf16, a NaN on one rank wins (max " +
               std::to_string(r.options().max_elements_per_call) + " per MPI call)",
           ok, detail);
  std::vector<std::uint16_t> rank0 = v;
  MPI_Bcast(rank0.data(), static_cast<int>(n), MPI_UINT16_T, 0, MPI_COMM_WORLD);
  c.expect("all_reduce_sum_bf16: every rank gets the same bits", rank0 == v);
  c.expect("all_reduce_sum_bf16: bytes_reduced grows by 2 bytes per value",
           r.bytes_reduced() - before == n * sizeof(std::uint16_t),
           std::to_string(r.bytes_reduced() - before) + " bytes");
}

// compressed<mpi_allreduce>: the bf16 mean equals compressed<local_ring>'s on W threads of rank 0
// bitwise with W = 2 (one addition), is within bf16's bound for any W, keeps a flag and a NaN;
// everything else passes through exactly.
void check_compressed(checks& c) {
  compressed_mpi r{tutti::mpi_allreduce{}};
  const std::size_t n = 1001, flag = n - 2;
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = bf16_input(c.rank(), i);
  g[flag] = c.rank() == c.world() - 1 ? 1.f : 0.f;  // the trainer's finite flag on one rank
  g[n - 1] = 0.f;                                   // the stop request, down everywhere
  if (c.rank() == 0) g[5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> input = g;
  r.all_reduce_mean(std::span<float>(g));

  std::vector<float> local(n);
  if (c.rank() == 0)
    tutti::run_local(c.world(), [&](tutti::local_ring ring) {
      std::vector<float> h(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = bf16_input(ring.rank(), i);
      h[flag] = ring.rank() == c.world() - 1 ? 1.f : 0.f;
      h[n - 1] = 0.f;
      if (ring.rank() == 0) h[5] = std::numeric_limits<float>::quiet_NaN();
      tutti::compressed<tutti::local_ring> lr(ring);
      lr.all_reduce_mean(std::span<float>(h));
      if (ring.rank() == 0) local = h;
    });
  MPI_Bcast(local.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);

  bool bounded = true;
  std::string detail;
  for (std::size_t i = 0; i < flag && bounded; ++i) {
    if (i == 5) continue;
    double exact = 0, magnitude = 0;
    for (int k = 0; k < c.world(); ++k) {
      exact += double(bf16_input(k, i)) / c.world();
      magnitude += std::abs(double(bf16_input(k, i))) / c.world();
    }
    bounded = std::abs(double(g[i]) - exact) <= std::ldexp(1.0, -8) * c.world() * magnitude;
    if (!bounded)
      detail = "element " + std::to_string(i) + " is " + std::to_string(g[i]) + "; exact mean " +
               std::to_string(exact);
  }
  c.expect("compressed<mpi_allreduce>: the mean is within bf16's error bound", bounded, detail);
  c.expect(
      "compressed<mpi_allreduce>: a NaN on one rank is NaN everywhere; the flag stays "
      "nonzero, the zero flag zero",
      std::isnan(g[5]) && g[flag] > 0.f && g[n - 1] == 0.f,
      "flag " + std::to_string(g[flag]) + ", stop " + std::to_string(g[n - 1]));
  bool same_as_local = true;
  for (std::size_t i = 0; i < n; ++i)
    if (i != 5 && std::memcmp(&g[i], &local[i], sizeof(float)) != 0) same_as_local = false;
  if (c.world() == 2)
    c.expect(
        "compressed<mpi_allreduce> (2 processes) is bitwise compressed<local_ring> (2 threads)",
        same_as_local);
  std::vector<float> rank0 = g;
  MPI_Bcast(rank0.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
  bool replicas = true;
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(&g[i], &rank0[i], sizeof(float)) != 0) replicas = false;
  c.expect("compressed<mpi_allreduce>: every rank gets the same bits", replicas);
  c.expect("compressed<mpi_allreduce>: bytes_reduced counts 2 bytes per value",
           r.bytes_reduced() == n * sizeof(std::uint16_t) && r.wire_bytes(n) == 2 * n);

  // Not compressed: parameters and scalars stay exact.
  std::vector<float> p(input.begin(), input.begin() + 100);
  r.broadcast(std::span<float>(p), c.world() - 1);
  bool exact_bcast = true;
  for (std::size_t i = 0; i < p.size(); ++i)
    exact_bcast = exact_bcast && p[i] == bf16_input(c.world() - 1, i);
  c.expect("compressed<mpi_allreduce>: broadcast is exact (not bf16)", exact_bcast);
  std::vector<double> s{1.0 / 3 + c.rank()};
  r.all_reduce_sum(std::span<double>(s));
  double expected = 0;
  for (int k = 0; k < c.world(); ++k) expected += 1.0 / 3 + k;
  c.expect("compressed<mpi_allreduce>: all_reduce_sum is the inner's (double, exact for 2)",
           c.world() != 2 || s[0] == expected, std::to_string(s[0]));
  std::vector<double> m{c.rank() == 1 ? std::nan("") : 0.0};
  r.all_reduce_max(std::span<double>(m));
  c.expect("compressed<mpi_allreduce>: all_reduce_max keeps NaN-wins", std::isnan(m[0]));
  const std::uint64_t mine = 100 + std::uint64_t(c.rank());
  std::vector<std::uint64_t> all(static_cast<std::size_t>(c.world()));
  r.all_gather(std::span<const std::uint64_t>(&mine, 1), std::span<std::uint64_t>(all));
  bool gathered = true;
  for (int k = 0; k < c.world(); ++k) gathered = gathered && all[std::size_t(k)] == 100u + k;
  c.expect("compressed<mpi_allreduce>: all_gather in rank order", gathered);

  c.expect_throw<tutti::mismatch_error>(
      "a first all_reduce_sum_bf16 with different sizes throws mismatch_error on every rank",
      [&] {
        tutti::mpi_allreduce fresh;
        std::vector<std::uint16_t> v(c.rank() == 1 ? 9 : 10);
        fresh.all_reduce_sum_bf16(std::span<std::uint16_t>(v));
      },
      "different sizes");
}

// mpi_allreduce's shared arena: the mean of spans inside it, computed in place across processes;
// with `hosts` > 0 the ranks pretend to be spread over that many hosts (the reduction then also
// sums across hosts with MPI).
void check_shared_arena(checks& c, int hosts = 0) {
  const int w = c.world();
  const std::string where = hosts > 0 ? " [" + std::to_string(hosts) + " emulated hosts]" : "";
  if (hosts == 0) {
    tutti::mpi_allreduce off(MPI_COMM_WORLD, {.shared_arena = false});
    c.expect("shared_arena = false: shared_gradient_arena lends nothing",
             off.shared_gradient_arena(100).empty() && off.shared_arena().empty());
    tutti::mpi_allreduce none;
    c.expect("shared_gradient_arena(0) lends nothing", none.shared_gradient_arena(0).empty());
  }
  tutti::mpi_allreduce r(MPI_COMM_WORLD, {.piece_bytes = 64, .emulated_hosts = hosts});
  constexpr std::size_t n = 10007;
  const std::span<float> arena = r.shared_gradient_arena(n);
  bool zero = arena.size() == n;
  for (float v : arena) zero = zero && v == 0.f;
  c.expect("shared_gradient_arena(n) lends n zeroed floats" + where, zero,
           std::to_string(arena.size()) + " floats");
  c.expect("shared_arena() is the lent span",
           r.shared_arena().data() == arena.data() && r.shared_arena().size() == n);
  if (arena.size() != n) return;

  // The whole arena, then pieces at offsets (a chunk per rank of 0, 1, 2 and odd sizes), each
  // the exact mean; the values outside the piece are left alone.
  const auto reduce_and_check = [&](std::size_t offset, std::size_t count) {
    for (std::size_t i = 0; i < n; ++i) arena[i] = value_at<float>(c.rank(), i);
    const std::uint64_t before = r.bytes_reduced();
    r.all_reduce_mean(arena.subspan(offset, count));
    std::string detail;
    bool ok = true;
    for (std::size_t i = 0; i < n && ok; ++i) {
      float expected = value_at<float>(c.rank(), i);
      if (i >= offset && i < offset + count) {
        float sum = 0;
        for (int k = 0; k < w; ++k) sum += value_at<float>(k, i);
        expected = sum / static_cast<float>(w);
      }
      if (arena[i] != expected) {
        ok = false;
        detail = "element " + std::to_string(i) + " is " + std::to_string(arena[i]) +
                 "; expected " + std::to_string(expected);
      }
    }
    c.expect("shared arena: all_reduce_mean of [" + std::to_string(offset) + ", " +
                 std::to_string(offset + count) + ") is the exact mean, in place" + where,
             ok, detail);
    c.expect("shared arena: bytes_reduced grows by the span's bytes",
             r.bytes_reduced() - before == count * sizeof(float));
  };
  reduce_and_check(0, n);
  reduce_and_check(3, 1);
  reduce_and_check(n - 5, 5);
  reduce_and_check(17, 4099);

  if (hosts > 0) {
    // A piece smaller than the ranks of a host: some ranks have empty chunks.
    reduce_and_check(n - 1, 1);
    return;
  }
  c.expect_throw<tutti::mismatch_error>(
      "shared arena: different offsets throw mismatch_error on every rank",
      [&] { r.all_reduce_mean(arena.subspan(c.rank() == 1 ? 8 : 0, 16)); },
      "different offsets in the shared arena");
  c.expect_throw<tutti::mismatch_error>(
      "shared arena: different sizes throw mismatch_error on every rank",
      [&] { r.all_reduce_mean(arena.subspan(0, c.rank() == 1 ? 16 : 17)); }, "different sizes");
  c.expect_throw<tutti::invalid_argument>(
      "a second shared_gradient_arena throws invalid_argument",
      [&] { (void)r.shared_gradient_arena(8); }, "expected one call per reducer");
  c.expect_throw<tutti::invalid_argument>(
      "a span that runs past the arena's end throws invalid_argument",
      [&] { r.all_reduce_mean(std::span<float>(arena.data() + n - 2, 4)); }, "runs past its end");
  reduce_and_check(0, n);  // still usable after the errors

  // A private buffer still goes through MPI_Allreduce.
  check_mean<float>(c, r, 1001, "float");

  tutti::mpi_allreduce moved = std::move(r);
  c.expect("a moved reducer keeps the shared arena", moved.shared_arena().data() == arena.data());
  for (std::size_t i = 0; i < n; ++i) arena[i] = value_at<float>(c.rank(), i);
  moved.all_reduce_mean(arena);
  std::string detail;
  c.expect("the moved reducer reduces the shared arena", mean_is_exact<float>(arena, w, detail),
           detail);
  c.expect_throw<tutti::mismatch_error>(
      "ranks with different shared_arena settings throw mismatch_error on every rank",
      [&] {
        tutti::mpi_allreduce fresh(MPI_COMM_WORLD, {.shared_arena = c.rank() != 1});
        (void)fresh.shared_gradient_arena(10);
      },
      "different mpi_options::shared_arena settings");
  c.expect_throw<tutti::mismatch_error>(
      "ranks asking for shared arenas of different sizes throw mismatch_error on every rank",
      [&] {
        tutti::mpi_allreduce fresh;
        (void)fresh.shared_gradient_arena(c.rank() == 1 ? 9 : 10);
      },
      "different sizes");
}

using mf = tutti::models::matrix_factorization<tutti::host_space>;

struct run {
  std::vector<float> params;
  tutti::fit_result result;
  std::uint64_t bytes = 0;
  std::size_t shared_arena = 0;  // floats of the shared arena the trainer's reducer lent
};

template <class Reducer>
run train_with(Reducer reducer, const tutti::data::split_result& parts,
               const tutti::train_options& opt) {
  tutti::trainer<mf, tutti::shuffled_shards, Reducer, tutti::constant, tutti::sgd> t(
      mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
         parts.train.n_items()),
      tutti::shuffled_shards{}, std::move(reducer), tutti::constant{}, tutti::sgd{.momentum = 0.9f},
      opt);
  run out;
  out.result = t.fit(parts.train, parts.test);
  out.params = t.parameters_on_host();
  out.bytes = t.reducer().bytes_reduced();
  if constexpr (std::is_same_v<Reducer, tutti::mpi_allreduce>)
    out.shared_arena = t.reducer().shared_arena().size();
  return out;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

void check_trainer(checks& c) {
  const auto all = tutti::data::synthetic_courses({.learners = 300,
                                                   .courses = 60,
                                                   .interactions_per_learner = 12,
                                                   .implicit = true,
                                                   .seed = 5});
  const auto parts = tutti::data::split(all, {.test_fraction = 0.2, .seed = 3});
  const std::size_t w = static_cast<std::size_t>(c.world());
  // A batch of 60 per rank that does not divide the rows: the last step of each epoch is padded.
  const tutti::train_options opt{
      .batch = 60 * w, .epochs = 2, .base_lr = 0.05, .seed = 11, .evaluate_each_epoch = false};

  const run mpi = train_with(tutti::mpi_allreduce{}, parts, opt);
  // All ranks share this host, so the trainer's arena is the reducer's shared one by default:
  // the gradients, the finite flag and one more float.
  c.expect("trainer: the gradient arena is mpi_allreduce's shared arena (one host)",
           mpi.shared_arena == mpi.params.size() + tutti::gradient_trailing_floats,
           std::to_string(mpi.shared_arena) + " shared floats for " +
               std::to_string(mpi.params.size()) + " parameters");
  const run plain =
      train_with(tutti::mpi_allreduce(MPI_COMM_WORLD, {.shared_arena = false}), parts, opt);
  c.expect("trainer: shared_arena = false keeps the trainer's own arena", plain.shared_arena == 0);
  // With W = 2 both add the two ranks' values once and divide by 2; with more, MPI's order of
  // the additions is its own.
  const double arena_diff = relative_difference(mpi.params, plain.params);
  c.expect(
      "trainer: the shared arena ends with MPI_Allreduce's parameters (bitwise at W = 2, "
      "else within 1e-5 relative)",
      c.world() == 2 ? mpi.params == plain.params : arena_diff <= 1e-5,
      "relative difference " + std::to_string(arena_diff));
  c.expect("trainer: the shared arena counts the same bytes", mpi.bytes == plain.bytes,
           std::to_string(mpi.bytes) + " vs " + std::to_string(plain.bytes));
  if (c.world() >= 4 && c.world() % 2 == 0) {
    // Two emulated hosts: each host's sum, then MPI_Allreduce between hosts.
    const run hosts =
        train_with(tutti::mpi_allreduce(MPI_COMM_WORLD, {.emulated_hosts = 2}), parts, opt);
    std::vector<float> hosts0 = hosts.params;
    MPI_Bcast(hosts0.data(), static_cast<int>(hosts0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    const double hosts_diff = relative_difference(hosts.params, plain.params);
    c.expect(
        "trainer, 2 emulated hosts: the shared arena is lent, the replicas end bitwise equal, "
        "within 1e-5 relative of MPI_Allreduce's parameters",
        hosts.shared_arena == hosts.params.size() + tutti::gradient_trailing_floats &&
            hosts0 == hosts.params && hosts_diff <= 1e-5,
        std::to_string(hosts.shared_arena) + " shared floats, relative difference " +
            std::to_string(hosts_diff));
  }

  // The same run with W ranks as threads of rank 0's process.
  run local;
  if (c.rank() == 0) {
    std::mutex m;
    tutti::run_local(c.world(), [&](tutti::local_ring ring) {
      run r = train_with(ring, parts, opt);
      if (ring.rank() == 0) {
        std::lock_guard lock(m);
        local = std::move(r);
      }
    });
  }
  // Every rank compares against rank 0's threads: replicas must also agree with each other.
  std::uint64_t n = local.params.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  local.params.resize(n);
  MPI_Bcast(local.params.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
  double local_loss = c.rank() == 0 ? local.result.epochs.back().train_loss : 0.0;
  MPI_Bcast(&local_loss, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::uint64_t local_bytes = local.bytes;
  MPI_Bcast(&local_bytes, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

  std::vector<float> rank0 = mpi.params;
  MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  c.expect("trainer: the replicas of all processes end bitwise equal", rank0 == mpi.params);

  const double diff = relative_difference(mpi.params, local.params);
  c.expect(
      "trainer: W processes (mpi_allreduce) end with the parameters of W threads "
      "(local_ring) within 1e-5 relative",
      diff <= 1e-5, "relative difference " + std::to_string(diff));
  const double loss = mpi.result.epochs.back().train_loss;
  c.expect("trainer: the same final train loss within 1e-5 relative",
           std::abs(loss - local_loss) <= 1e-5 * std::abs(local_loss),
           std::to_string(loss) + " vs " + std::to_string(local_loss));
  std::uint64_t weighted = 0;
  for (auto s : mpi.result.epochs.back().samples_per_rank) weighted += s;
  c.expect("trainer: an epoch covers every training row exactly once",
           mpi.result.epochs.back().samples_per_rank.size() == w && weighted == parts.train.size());
  // The trainer may reduce more than the parameters' gradients (flags beside them): compare with
  // what local_ring counted for the same run, and bound by one arena per step.
  c.expect(
      "trainer: bytes_reduced equals local_ring's, at least one arena per step",
      mpi.bytes == local_bytes && mpi.bytes >= mpi.result.steps * mpi.params.size() * sizeof(float),
      std::to_string(mpi.bytes) + " bytes after " + std::to_string(mpi.result.steps) +
          " steps; local_ring counted " + std::to_string(local_bytes));

  // compressed<mpi_allreduce> on W processes against compressed<local_ring> on W threads.
  const run bf = train_with(compressed_mpi{tutti::mpi_allreduce{}}, parts, opt);
  run bf_local;
  if (c.rank() == 0) {
    std::mutex m;
    tutti::run_local(c.world(), [&](tutti::local_ring ring) {
      run r = train_with(tutti::compressed<tutti::local_ring>(ring), parts, opt);
      if (ring.rank() == 0) {
        std::lock_guard lock(m);
        bf_local = std::move(r);
      }
    });
  }
  bf_local.params.resize(bf.params.size());
  MPI_Bcast(bf_local.params.data(), static_cast<int>(bf_local.params.size()), MPI_FLOAT, 0,
            MPI_COMM_WORLD);
  double bf_local_loss = c.rank() == 0 ? bf_local.result.epochs.back().train_loss : 0.0;
  MPI_Bcast(&bf_local_loss, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::vector<float> bf_rank0 = bf.params;
  MPI_Bcast(bf_rank0.data(), static_cast<int>(bf_rank0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  c.expect("trainer, compressed<mpi_allreduce>: the replicas of all processes end bitwise equal",
           bf_rank0 == bf.params);
  // With W = 2 both sum with one rounded addition, so only 1e-5 is allowed; with more ranks
  // MPI's order of the per-hop roundings differs from local_ring's, a bf16-sized difference.
  const double bf_tolerance = c.world() == 2 ? 1e-5 : 1e-3;
  const double bf_diff = relative_difference(bf.params, bf_local.params);
  c.expect(
      "trainer, compressed: W processes (mpi_allreduce) end with the parameters of W threads "
      "(local_ring) within " +
          std::to_string(bf_tolerance) + " relative",
      bf_diff <= bf_tolerance, "relative difference " + std::to_string(bf_diff));
  const double bf_loss = bf.result.epochs.back().train_loss;
  c.expect("trainer, compressed: final train loss within 2% of the fp32 run (" +
               std::to_string(bf_loss) + " vs " + std::to_string(loss) + ")",
           std::abs(bf_loss - loss) <= 0.02 * std::abs(loss) &&
               std::abs(bf_loss - bf_local_loss) <= bf_tolerance * std::abs(bf_local_loss));
  c.expect("trainer, compressed: half the bytes of the fp32 run", 2 * bf.bytes == mpi.bytes,
           std::to_string(bf.bytes) + " vs " + std::to_string(mpi.bytes));

  // A rank with another seed is caught before the first step, on every rank.
  tutti::train_options other = opt;
  if (c.rank() == 1) other.seed = 12;
  c.expect_throw<tutti::mismatch_error>(
      "trainer: ranks with different seeds throw mismatch_error on every rank",
      [&] { train_with(tutti::mpi_allreduce{}, parts, other); }, "disagree on the seed");
}

void run_checks(checks& c) {
  c.expect("at least 2 processes (run under mpiexec -n 2)", c.world() >= 2,
           "world size " + std::to_string(c.world()));

  {
    tutti::mpi_session inner;
    c.expect("a second mpi_session is a no-op (MPI stays initialised)", !inner.owner());
  }
  int still = 0;
  MPI_Initialized(&still);
  int finalized = 0;
  MPI_Finalized(&finalized);
  c.expect("the inner session did not finalise MPI", still && !finalized);

  tutti::mpi_allreduce r;
  int congruent = MPI_UNEQUAL;
  MPI_Comm_compare(r.communicator(), MPI_COMM_WORLD, &congruent);
  c.expect("rank() and world_size() are those of MPI_COMM_WORLD",
           r.rank() == c.rank() && r.world_size() == c.world());
  c.expect("the reducer works on its own duplicate of the communicator",
           r.communicator() != MPI_COMM_WORLD && congruent == MPI_CONGRUENT);

  check_mean<float>(c, r, 1001, "float");
  check_mean<double>(c, r, 1001, "double");
  check_mean<float>(c, r, 0, "float");
  tutti::mpi_allreduce pieces(MPI_COMM_WORLD, {.max_elements_per_call = 7});
  check_mean<float>(c, pieces, 1001, "float");
  check_mean<double>(c, pieces, 50, "double");
  // Gradient spans in pieces of 64 bytes (uneven last piece), blocking (no timeout) and
  // non-blocking (a timeout) alike.
  tutti::mpi_allreduce small_pieces(MPI_COMM_WORLD, {.piece_bytes = 64});
  check_mean<float>(c, small_pieces, 1001, "float");
  check_mean<double>(c, small_pieces, 1001, "double");
  tutti::mpi_allreduce polled(MPI_COMM_WORLD,
                              {.piece_bytes = 64, .timeout = std::chrono::seconds(30)});
  check_mean<float>(c, polled, 1001, "float");
  tutti::mpi_allreduce whole(MPI_COMM_WORLD, {.piece_bytes = 0});
  check_mean<float>(c, whole, 1001, "float");

  for (int root : {0, c.world() - 1}) {
    check_broadcast<float>(c, r, 513, root);
    check_broadcast<double>(c, pieces, 513, root);
  }

  {
    const double k = c.rank();
    std::vector<double> v{k + 1, 0.5 * k, -k};
    r.all_reduce_sum(std::span<double>(v));
    const double w = c.world();
    c.expect("all_reduce_sum",
             v[0] == w * (w + 1) / 2 && v[1] == 0.25 * w * (w - 1) && v[2] == -w * (w - 1) / 2);
    std::vector<double> m{k, -k, c.rank() == 1 ? std::nan("") : 1.0, 2.0};
    r.all_reduce_max(std::span<double>(m));
    c.expect("all_reduce_max; a NaN on one rank wins",
             m[0] == w - 1 && m[1] == 0 && std::isnan(m[2]) && m[3] == 2.0);
    std::vector<double> p(20);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = double(i) + k;
    pieces.all_reduce_max(std::span<double>(p));
    bool ok = true;
    for (std::size_t i = 0; i < p.size(); ++i) ok = ok && p[i] == double(i) + w - 1;
    c.expect("all_reduce_max in pieces", ok);
  }

  check_all_gather(c, r, 3);
  check_all_gather(c, r, 1);
  check_all_gather(c, pieces, 5);

  // Disagreements throw on every rank, and the reducer stays usable afterwards.
  c.expect_throw<tutti::mismatch_error>(
      "all_gather with different sizes throws mismatch_error on every rank",
      [&] {
        std::vector<std::uint64_t> mine(c.rank() == 1 ? 2 : 3, 7);
        std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(c.world()));
        r.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
      },
      "different sizes");
  c.expect_throw<tutti::invalid_argument>(
      "all_gather into a wrong-sized `all` throws invalid_argument on every rank",
      [&] {
        std::vector<std::uint64_t> mine(3, 7), all(3);
        r.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
      },
      "expected mine.size() * world_size");
  c.expect_throw<tutti::invalid_argument>(
      "broadcast from a root out of range throws invalid_argument on every rank",
      [&] {
        std::vector<float> v(4);
        r.broadcast(std::span<float>(v), c.world());
      },
      "expected 0 <= root < world_size");
  c.expect_throw<tutti::mismatch_error>(
      "broadcast with different roots throws mismatch_error on every rank",
      [&] {
        std::vector<float> v(4);
        r.broadcast(std::span<float>(v), c.rank() == 1 ? 1 : 0);
      },
      "different roots");
  c.expect_throw<tutti::mismatch_error>(
      "different collectives on different ranks throw mismatch_error on every rank",
      [&] {
        std::vector<double> v(2);
        if (c.rank() == 1)
          r.all_reduce_max(std::span<double>(v));
        else
          r.all_reduce_sum(std::span<double>(v));
      },
      "different collectives");
  c.expect_throw<tutti::mismatch_error>(
      "a first all_reduce_mean with different sizes throws mismatch_error on every rank",
      [&] {
        tutti::mpi_allreduce fresh;
        std::vector<float> g(c.rank() == 1 ? 9 : 10);
        fresh.all_reduce_mean(std::span<float>(g));
      },
      "different sizes");
  c.expect_throw<tutti::mismatch_error>(
      "check_every_reduce catches a later change of size",
      [&] {
        tutti::mpi_allreduce strict(MPI_COMM_WORLD, {.check_every_reduce = true});
        std::vector<float> g(10);
        strict.all_reduce_mean(std::span<float>(g));
        std::vector<float> h(c.rank() == 1 ? 11 : 10);
        strict.all_reduce_mean(std::span<float>(h));
      },
      "different sizes");
  check_mean<float>(c, r, 33, "float");

  // Errors of MPI itself come back as codes on the reducer's communicator and become
  // mpi_error with the call, MPI's string and the location.
  c.expect_throw<tutti::mpi_error>(
      "TUTTI_MPI_CHECK turns an MPI error code into mpi_error",
      [&] {
        float x = 0;
        TUTTI_MPI_CHECK(MPI_Bcast(&x, -1, MPI_FLOAT, 0, r.communicator()));
      },
      "MPI_Bcast(&x, -1, MPI_FLOAT, 0, r.communicator()) failed: ");
  c.expect_throw<tutti::mpi_error>(
      "mpi_error names file:line",
      [&] {
        float x = 0;
        TUTTI_MPI_CHECK(MPI_Bcast(&x, 1, MPI_FLOAT, -5, r.communicator()));
      },
      "mpi_reducer_test.cpp:");
  c.expect_throw<tutti::invalid_argument>(
      "max_elements_per_call = 0 is rejected",
      [] { tutti::mpi_allreduce bad(MPI_COMM_WORLD, {.max_elements_per_call = 0}); },
      "expected 1 ... INT_MAX");

  {
    tutti::mpi_allreduce a;
    const MPI_Comm comm = a.communicator();
    tutti::mpi_allreduce b = std::move(a);
    std::vector<double> v{1.0};
    b.all_reduce_sum(std::span<double>(v));
    c.expect(
        "a moved reducer keeps the communicator and works; the source is empty",
        b.communicator() == comm && a.communicator() == MPI_COMM_NULL && v[0] == double(c.world()));
  }

  check_bf16_sum(c, r, 1001);
  check_bf16_sum(c, pieces, 1001);
  check_compressed(c);
  check_shared_arena(c);
  // With 4 or more processes: 2 emulated hosts (the hierarchical reduction); with 3, hosts of
  // 2 and 1 ranks, which decline the arena.
  if (c.world() >= 4 && c.world() % 2 == 0) check_shared_arena(c, 2);
  if (c.world() == 3) {
    tutti::mpi_allreduce uneven(MPI_COMM_WORLD, {.emulated_hosts = 2});
    c.expect("hosts with different numbers of ranks decline the shared arena",
             uneven.shared_gradient_arena(100).empty());
  }
  {
    tutti::mpi_allreduce alone(MPI_COMM_WORLD, {.emulated_hosts = c.world()});
    c.expect("one rank per host declines the shared arena",
             alone.shared_gradient_arena(100).empty());
  }

  check_trainer(c);
}

}  // namespace

int main(int argc, char** argv) {
  tutti::mpi_session session(argc, argv);
  if (session.thread_level() < MPI_THREAD_FUNNELED || !session.owner()) {
    std::fprintf(stderr, "mpi_reducer_test: the session did not initialise MPI as expected\n");
    return 1;
  }
  return tutti::mpi_abort_on_exception([] {
    checks c;
    run_checks(c);
    if (c.rank() == 0)
      std::printf("%s: %d failed check(s) on %d processes\n", c.failures() ? "FAILED" : "passed",
                  c.failures(), c.world());
    return c.failures() ? 1 : 0;
  });
}
