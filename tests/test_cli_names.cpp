// SPDX-License-Identifier: Apache-2.0
// The names of the program's choices (apps/tutti/names.hpp): each enumerator has one name that
// reads back as itself, CLI11 stores the choice a name stands for and refuses any other name with
// the list, and the trainer `tutti train` builds holds the optimizer a name chooses and the
// reducer it runs as their own types, every capability of theirs included.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "../apps/tutti/names.hpp"
#include "../apps/tutti/plan/memory.hpp"
#include "../apps/tutti/run_policies.hpp"

#include <CLI/CLI.hpp>

#include <array>
#include <set>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace test_cli_names {

using namespace tutti;
using namespace tutti::cli;

namespace {

/// Every enumerator of `E` from 0 to `last` has a name of its own that reads back as itself, and
/// no name stands for a value outside them.
template <class E>
void check_names(E last) {
  const auto names = names_of(E{});
  CHECK(names.size() == static_cast<std::size_t>(last) + 1);
  std::set<std::string_view> seen;
  for (int i = 0; i <= static_cast<int>(last); ++i) {
    const E e = static_cast<E>(i);
    const std::string_view name = name_of(e);
    CHECK(name != "?");
    CHECK(seen.insert(name).second);
    REQUIRE(choice_named<E>(name).has_value());
    CHECK(*choice_named<E>(name) == e);
  }
  CHECK_FALSE(choice_named<E>("").has_value());
  CHECK_FALSE(choice_named<E>("no-such-name").has_value());
}

/// Parses `args` (after the program's name) with one `--pick` option of type `E`.
template <class E>
E parse_pick(std::vector<std::string> args, E start) {
  CLI::App app("names");
  E picked = start;
  add_choice(app, "--pick", picked, "a choice");
  args.insert(args.begin(), "names");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return picked;
}

/// What the trainer reads from an optimizer's type, each capability on a host space.
template <class O>
constexpr std::array<bool, 7> optimizer_capabilities() {
  return {optimizer_steps_rows<O, host_space>, optimizer_fuses_rows<O, host_space>,
          optimizer_steps_rows_on_space<O, host_space>,
          optimizer_steps_rows_from_memory<O, host_space>, optimizer_steps_by_layout<O, host_space>,
          optimizer_sizes_state_by_layout<O>,
          requires(const O& o, const parameter_layout& l){o.state_map(l);
}
};  // namespace
}  // namespace test_cli_names

/// What the trainer reads from a reducer's type.
template <class R>
constexpr std::array<bool, 8> reducer_capabilities() {
  return {reducer_tracks_position<R>,      reducer_reports_wait<R>,
          reducer_counts_wire_bytes<R>,    reducer_keeps_clock<R>,
          reducer_lends_gradient_arena<R>, reducer_says_thread_safety<R>,
          reducer_starts_collectives<R>,   reducer_gathers_on_space<R>};
}

/// The trainer `tutti train` builds around optimizer `O` and reducer `R` (a matrix
/// factorisation on the host; the other models and samplers alike).
template <class R, class O>
using cli_trainer =
    trainer<models::matrix_factorization<host_space>, shuffled_shards, R, run_schedule, O>;

/// The optimizer `with_optimizer` hands for the name of `O` is `O` itself, the trainer built
/// around it holds `O`, and their capabilities and what the trainer sizes by them (the state,
/// where each row's state lies) are `concrete`'s.
template <class O>
void check_builds(optimizer_choice choice, const O& concrete) {
  parameter_layout layout;
  layout.add("user_factors", 50, 8, segment_kind::embedding);
  layout.add("item_factors", 20, 8, segment_kind::embedding);
  layout.add("bias", 1, 1, segment_kind::bias);
  bool called = false;
  with_optimizer(choice, 0.9f, 0.f, [&](const auto& handed) {
    using H = std::decay_t<decltype(handed)>;
    using held =
        std::decay_t<decltype(std::declval<const cli_trainer<single_rank, H>&>().optimizer())>;
    called = true;
    CHECK(std::is_same_v<H, O>);
    CHECK(std::is_same_v<held, H>);
    CHECK(optimizer_capabilities<held>() == optimizer_capabilities<O>());
    CHECK(tutti::detail::optimizer_state_floats(handed, layout) ==
          tutti::detail::optimizer_state_floats(concrete, layout));
    const state_map from_handed = handed.state_map(layout);
    const state_map from_concrete = concrete.state_map(layout);
    REQUIRE(from_handed.size() == from_concrete.size());
    for (std::size_t s = 0; s < from_handed.size(); ++s) {
      REQUIRE(from_handed[s].size() == from_concrete[s].size());
      for (std::size_t k = 0; k < from_handed[s].size(); ++k) {
        CHECK(from_handed[s][k].offset == from_concrete[s][k].offset);
        CHECK(from_handed[s][k].width == from_concrete[s][k].width);
      }
    }
  });
  CHECK(called);
}

/// The trainer built around reducer `R` holds `R`, with `R`'s capabilities.
template <class R>
void check_holds_reducer() {
  using held = std::decay_t<decltype(std::declval<cli_trainer<R, sgd>&>().reducer())>;
  CHECK(std::is_same_v<held, R>);
  CHECK(reducer_capabilities<held>() == reducer_capabilities<R>());
}

}  // namespace

TEST_CASE("cli names: every choice has one name, and the name reads back as the choice") {
  check_names(model_choice::ncf);
  check_names(optimizer_choice::row_sparse_sgd);
  check_names(schedule_choice::poly);
  check_names(reducer_choice::mpi);
  check_names(space_choice::cuda);
  check_names(compress_choice::bf16);
  check_names(feedback_choice::implicit);
  check_names(loss_choice::softmax);
  check_names(tail_policy::none);
  check_names(lr_scaling::sqrt);
  check_names(nonfinite_policy::off);
  check_names(negative_sampler::popularity);
  // The names written into checkpoints and reports before the choices were enumerations.
  CHECK(choice_name(optimizer_choice::lazy_adam) == "lazy-adam");
  CHECK(choice_name(optimizer_choice::rowwise_adagrad) == "rowwise-adagrad");
  CHECK(choice_name(loss_choice::automatic) == "auto");
  // Where the library names a value, the program spells it the same way.
  for (const lr_scaling rule : {lr_scaling::none, lr_scaling::linear, lr_scaling::sqrt})
    CHECK(name_of(rule) == std::string_view(to_string(rule)));
  for (const negative_sampler s : {negative_sampler::uniform, negative_sampler::popularity})
    CHECK(name_of(s) == std::string_view(to_string(s)));
}

TEST_CASE("cli names: tutti plan refuses an unknown optimizer with every name it takes") {
  const auto type_of = [](const std::string& name) {
    return cli::detail::plan::with_planned_optimizer(
        name, [](const auto& o) { return std::string(typeid(o).name()); });
  };
  CHECK(type_of("lazy-adam") == typeid(lazy_adam).name());
  CHECK(type_of("adamw") == typeid(adam).name());
  CHECK(cli::detail::plan::with_planned_optimizer("adamw", [](const auto& o) {
    if constexpr (std::is_same_v<std::decay_t<decltype(o)>, adam>)
      return o.decoupled;
    else
      return false;
  }));
  try {
    (void)type_of("adagrad");
    FAIL("an unknown optimizer was accepted");
  } catch (const tutti::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("'adagrad'") != std::string::npos);
    for (const std::string& n : all_names<optimizer_choice>())
      CHECK(what.find(n) != std::string::npos);
    CHECK(what.find("momentum") != std::string::npos);
  }
}

TEST_CASE("cli names: CLI11 stores the choice a name stands for and refuses others by name") {
  CHECK(parse_pick({"--pick", "lazy-adam"}, optimizer_choice::adam) == optimizer_choice::lazy_adam);
  CHECK(parse_pick({}, optimizer_choice::lamb) == optimizer_choice::lamb);  // the default stays
  CHECK(parse_pick({"--pick", "drop"}, tail_policy::pad) == tail_policy::drop);
  try {
    parse_pick({"--pick", "adamw"}, optimizer_choice::adam);
    FAIL("an unknown name was accepted");
  } catch (const CLI::ValidationError& e) {
    const std::string what = e.what();
    CHECK(what.find("adamw") != std::string::npos);
    CHECK(what.find("rowwise-adagrad") != std::string::npos);  // the names it expected
  }
}

TEST_CASE("cli names: the trainer holds the optimizer a name chooses, with its capabilities") {
  check_builds(optimizer_choice::sgd, sgd{.momentum = 0.9f});
  check_builds(optimizer_choice::adam, adam{});
  check_builds(optimizer_choice::lars, lars{.momentum = 0.9f});
  check_builds(optimizer_choice::lamb, lamb{});
  check_builds(optimizer_choice::lazy_adam, lazy_adam{});
  check_builds(optimizer_choice::rowwise_adagrad, rowwise_adagrad{});
  check_builds(optimizer_choice::row_sparse_sgd, row_sparse_sgd{.momentum = 0.9f});
}

TEST_CASE("cli names: the trainer holds the reducer tutti train runs, with its capabilities") {
  // The ranks of one process: one rank alone, several on a local ring.
  bool alone = false, ring = false;
  tutti::run_host_ranks(
      1, [&](auto reducer) { alone = std::is_same_v<decltype(reducer), single_rank>; });
  tutti::run_host_ranks(2, [&](auto reducer) {
    if (reducer.rank() == 0) ring = std::is_same_v<decltype(reducer), local_ring>;
  });
  CHECK(alone);
  CHECK(ring);
  check_holds_reducer<single_rank>();
  check_holds_reducer<local_ring>();
  // --compress bf16 wraps either: the wrapper adds what travels and forwards the rest it can.
  check_holds_reducer<compressed<single_rank>>();
  check_holds_reducer<compressed<local_ring>>();
#if TUTTI_HAS_MPI
  check_holds_reducer<mpi_allreduce>();
  check_holds_reducer<compressed<mpi_allreduce>>();
#endif
}

TEST_CASE("cli names: the schedule a name chooses gives the named schedule's rates and warmup") {
  // The schedule stays a variant: its rate and its warmup steps are all the trainer reads.
  static_assert(schedule_has_warmup<run_schedule>);
  const auto same = [](schedule_choice choice, auto concrete) {
    const run_schedule chosen = make_schedule(choice, 7);
    CHECK(chosen.warmup_steps == 7);
    for (std::size_t step : {0, 3, 7, 50, 99})
      CHECK(chosen.lr(step, 100, 0.1) == concrete.lr(step, 100, 0.1));
  };
  same(schedule_choice::constant, warmup<constant>{.warmup_steps = 7});
  same(schedule_choice::step, warmup<step_decay>{.warmup_steps = 7});
  same(schedule_choice::cosine, warmup<cosine>{.warmup_steps = 7});
  same(schedule_choice::poly, warmup<polynomial>{.warmup_steps = 7});
}

}  // namespace test_cli_names
