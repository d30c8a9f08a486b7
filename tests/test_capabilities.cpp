// SPDX-License-Identifier: Apache-2.0
// The optional capabilities (docs/concepts.md#optional-capabilities): which shipped policies
// have which, that every shipped policy passes its slot's check (a member with a capability's
// name has its signature), and that a capability the trainer uses changes what it does.
#include <tutti/models/neural_cf.hpp>
#include <tutti/tutti.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace test_capabilities {

using namespace tutti;
using namespace tutti::models;

namespace {

using mf = matrix_factorization<host_space>;
using ncf = neural_cf<host_space>;
using lr_model = logistic_regression<host_space>;
using bf16_ring = compressed<local_ring>;

// Every shipped policy passes its slot's check, capabilities included.
static_assert(check_model<mf>() && check_model<ncf>() && check_model<lr_model>());
static_assert(check_shard_sampler<contiguous_shards>() && check_shard_sampler<shuffled_shards>() &&
              check_shard_sampler<owned_shards>());
static_assert(check_lr_schedule<constant>() && check_lr_schedule<cosine>() &&
              check_lr_schedule<warmup<cosine>>() && check_lr_schedule<step_decay>());
static_assert(check_gradient_reducer<local_ring>() && check_gradient_reducer<single_rank>() &&
              check_gradient_reducer<bf16_ring>());
static_assert(check_optimizer<sgd, host_space>() && check_optimizer<adam, host_space>() &&
              check_optimizer<lars, host_space>() && check_optimizer<lamb, host_space>() &&
              check_optimizer<lazy_adam, host_space>() &&
              check_optimizer<rowwise_adagrad, host_space>() &&
              check_optimizer<row_sparse_sgd, host_space>());

}  // namespace

TEST_CASE("capabilities: the models that report touched rows, row-sparse segments, ready ranges") {
  CHECK(model_reports_touched_rows<mf>);
  CHECK(model_reports_touched_rows<ncf>);
  CHECK_FALSE(model_reports_touched_rows<lr_model>);
  CHECK(model_names_row_sparse<mf>);
  CHECK(model_names_row_sparse<ncf>);
  CHECK(model_reports_gradient_ready<mf>);
  CHECK(model_reports_gradient_ready<ncf>);
  CHECK_FALSE(model_reports_gradient_ready<lr_model>);
}

TEST_CASE("capabilities: samplers and schedules") {
  CHECK(sampler_can_reshard<shuffled_shards>);
  CHECK_FALSE(sampler_can_reshard<contiguous_shards>);
  CHECK(rank_local_sampler<owned_shards>);
  CHECK_FALSE(rank_local_sampler<shuffled_shards>);
  CHECK(schedule_has_warmup<warmup<cosine>>);
  CHECK_FALSE(schedule_has_warmup<cosine>);
}

TEST_CASE("capabilities: reducers") {
  CHECK_FALSE(reducer_counts_wire_bytes<local_ring>);
  CHECK(reducer_counts_wire_bytes<bf16_ring>);
  CHECK_FALSE(reducer_starts_collectives<local_ring>);
  CHECK_FALSE(reducer_lends_gradient_arena<local_ring>);
  CHECK_FALSE(reducer_reports_wait<local_ring>);
  CHECK_FALSE(reducer_keeps_clock<local_ring>);
  // compressed<R> forwards a capability exactly when R has it.
  CHECK(reducer_tracks_position<bf16_ring> == reducer_tracks_position<local_ring>);
  CHECK(reducer_says_thread_safety<bf16_ring> == reducer_says_thread_safety<local_ring>);
  CHECK(reducer_reports_wait<bf16_ring> == reducer_reports_wait<local_ring>);
  CHECK(reducer_keeps_clock<bf16_ring> == reducer_keeps_clock<local_ring>);
}

TEST_CASE("capabilities: optimizers") {
  CHECK(optimizer_steps_by_layout<lars, host_space>);
  CHECK(optimizer_steps_by_layout<lamb, host_space>);
  CHECK_FALSE(optimizer_steps_by_layout<adam, host_space>);
  CHECK(optimizer_sizes_state_by_layout<rowwise_adagrad>);
  CHECK_FALSE(optimizer_sizes_state_by_layout<adam>);
  CHECK(optimizer_steps_rows<lazy_adam, host_space>);
  CHECK(optimizer_steps_rows<rowwise_adagrad, host_space>);
  CHECK(optimizer_steps_rows<row_sparse_sgd, host_space>);
  CHECK_FALSE(optimizer_steps_rows<sgd, host_space>);
}

namespace {

/// single_rank that counts two bytes a value (`reducer_counts_wire_bytes`).
class half_bytes_reducer : public single_rank {
 public:
  std::uint64_t wire_bytes(std::size_t floats) const { return 2 * std::uint64_t(floats); }
};

template <class Reducer>
fit_result train_small(Reducer reducer) {
  const data::interactions rows =
      data::synthetic_courses({.learners = 60, .courses = 20, .seed = 3});
  mf model({.dim = 4}, rows.n_users(), rows.n_items());
  trainer<mf, shuffled_shards, Reducer> t(model, {}, std::move(reducer), {}, {},
                                          {.batch = 64, .epochs = 1, .base_lr = 0.05});
  return t.fit(rows, data::interactions{});
}

}  // namespace

TEST_CASE("capabilities: the trainer counts what a reducer with wire_bytes says travels") {
  static_assert(reducer_counts_wire_bytes<half_bytes_reducer>);
  const fit_result plain = train_small(single_rank{});
  const fit_result halved = train_small(half_bytes_reducer{});
  CHECK(plain.dense_bytes_per_step == 4 * (plain.arena_floats + gradient_trailing_floats));
  CHECK(halved.dense_bytes_per_step == 2 * (halved.arena_floats + gradient_trailing_floats));
  CHECK(halved.parameters_checksum == plain.parameters_checksum);  // the step is the same
}

}  // namespace test_capabilities
