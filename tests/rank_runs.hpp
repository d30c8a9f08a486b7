// SPDX-License-Identifier: Apache-2.0
// Training W local ranks and comparing what they end with, for the trainer's equivalence tests
// (test_overlap.cpp, test_sparse_exchange.cpp, test_trainer.cpp, test_ncf.cpp): every rank's
// results, or rank 0's.
#pragma once

#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace tutti_test {

/// Implicit course interactions (6 per learner, seed 23), split 90/10: the data of the
/// row-sparse step's tests on the host and on a device's path.
inline tutti::data::split_result implicit_courses(std::int32_t learners, std::int32_t courses) {
  auto all = tutti::data::synthetic_courses({.learners = learners,
                                             .courses = courses,
                                             .interactions_per_learner = 6,
                                             .implicit = true,
                                             .seed = 23});
  return tutti::data::split(all, {.test_fraction = 0.1, .seed = 5});
}

/// Forwards every reducer member to a `tutti::local_ring`: a test's decorator derives from it
/// and replaces the members it changes (its own `all_reduce_mean` hides this one).
class ring_forwarder {
 public:
  template <class Space>
  static constexpr bool accepts = Space::host_accessible;

  explicit ring_forwarder(tutti::local_ring ring) : m_ring(ring) {}
  int rank() const noexcept { return m_ring.rank(); }
  int world_size() const noexcept { return m_ring.world_size(); }
  template <class T>
  void all_reduce_mean(std::span<T> g) {
    m_ring.all_reduce_mean(g);
  }
  template <class T>
  void broadcast(std::span<T> v, int root) {
    m_ring.broadcast(v, root);
  }
  void all_reduce_sum(std::span<double> v) { m_ring.all_reduce_sum(v); }
  void all_reduce_max(std::span<double> v) { m_ring.all_reduce_max(v); }
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    m_ring.all_gather(mine, all);
  }

 protected:
  tutti::local_ring m_ring;
};

/// What one rank ended with.
struct rank_run {
  std::vector<float> params;
  tutti::fit_result result;
};

/// Trains `world` ranks of `local_ring` (decorated by `wrap`, e.g. into `compressed`) on
/// `train` with `opt`, each with the model `make_model(rank)` (or `make_model()`), and returns
/// every rank's parameters and result.
template <class Model, class Optimizer = tutti::sgd, class Wrap = std::identity, class MakeModel>
std::vector<rank_run> train_ranks(int world, const tutti::data::interactions& train,
                                  const tutti::train_options& opt, MakeModel make_model,
                                  Optimizer optimizer = {.momentum = 0.9f}, Wrap wrap = {}) {
  std::vector<rank_run> out(static_cast<std::size_t>(world));
  tutti::run_local(world, [&](tutti::local_ring ring) {
    auto reducer = wrap(ring);
    auto model = [&] {
      if constexpr (std::invocable<MakeModel&, int>)
        return make_model(ring.rank());
      else
        return make_model();
    };
    tutti::trainer<Model, tutti::shuffled_shards, decltype(reducer), tutti::constant, Optimizer> t(
        model(), tutti::shuffled_shards{}, reducer, {}, optimizer, opt);
    auto r = t.fit(train, tutti::data::interactions{});
    auto& mine = out[static_cast<std::size_t>(ring.rank())];
    mine.params = t.parameters_on_host();
    mine.result = std::move(r);
  });
  return out;
}

/// Trains `world` ranks (`single_rank` for one, else `local_ring` threads) on `parts.train`,
/// evaluating on `parts.test`, each with the model `make_model()`, and returns rank 0's
/// parameters and result.
template <class Model, class Schedule, class Optimizer, class MakeModel>
rank_run train_rank0(int world, const tutti::data::split_result& parts,
                     const tutti::train_options& opt, MakeModel make_model, Schedule schedule,
                     Optimizer optimizer) {
  rank_run out;
  std::mutex m;
  auto body = [&](auto reducer) {
    tutti::trainer<Model, tutti::shuffled_shards, decltype(reducer), Schedule, Optimizer> t(
        make_model(), tutti::shuffled_shards{}, reducer, schedule, optimizer, opt);
    auto r = t.fit(parts.train, parts.test);
    if (reducer.rank() == 0) {
      std::lock_guard lock(m);
      out.params = t.parameters_on_host();
      out.result = std::move(r);
    }
  };
  if (world == 1)
    body(tutti::single_rank{});
  else
    tutti::run_local(world, [&](tutti::local_ring ring) { body(ring); });
  return out;
}

/// Rows [begin, end) of `d`, keeping its index spaces: what one rank holds of a training set
/// split between the ranks.
inline tutti::data::interactions slice(const tutti::data::interactions& d, std::size_t begin,
                                       std::size_t end) {
  tutti::data::interactions out;
  out.user_ids = d.user_ids;
  out.item_ids = d.item_ids;
  out.implicit = d.implicit;
  out.users.assign(d.users.begin() + begin, d.users.begin() + end);
  out.items.assign(d.items.begin() + begin, d.items.begin() + end);
  out.labels.assign(d.labels.begin() + begin, d.labels.begin() + end);
  return out;
}

/// |a - b| / |b| over whole parameter vectors (Euclidean norms).
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

/// The number of positions where `a` and `b` hold different values: 0 for two code paths that
/// are the same arithmetic by construction (and a readable count when they are not).
inline std::size_t count_differing(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i] ? 1 : 0;
  return n;
}

/// Every rank ended with rank 0's parameters, bitwise, and the same checksum.
inline void check_replicas_agree(const std::vector<rank_run>& runs) {
  for (const auto& r : runs) {
    CHECK(r.result.parameters_checksum == runs[0].result.parameters_checksum);
    CHECK(r.params == runs[0].params);
  }
}

}  // namespace tutti_test
