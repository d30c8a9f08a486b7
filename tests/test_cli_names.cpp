// SPDX-License-Identifier: Apache-2.0
// The names of the program's choices (apps/tutti/names.hpp): each enumerator has one name that
// reads back as itself, CLI11 stores the choice a name stands for and refuses any other name with
// the list, and the optimizer a name builds carries the capabilities of the optimizer it names.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "../apps/tutti/names.hpp"
#include "../apps/tutti/plan/memory.hpp"
#include "../apps/tutti/run_policies.hpp"

#include <CLI/CLI.hpp>

#include <set>
#include <string>
#include <variant>
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

/// The optimizer the name of `O` builds holds `O`, and what the trainer reads from it (the
/// row-sparse step or not, the state's size and where each row's state lies) is `O`'s.
template <class O>
void check_builds(optimizer_choice choice, const O& concrete) {
  const run_optimizer built = make_optimizer(choice, 0.9f, 0.f);
  CHECK(std::holds_alternative<O>(built.chosen));
  CHECK(built.row_sparse() == optimizer_steps_rows<O, host_space>);
  parameter_layout layout;
  layout.add("user_factors", 50, 8, segment_kind::embedding);
  layout.add("item_factors", 20, 8, segment_kind::embedding);
  layout.add("bias", 1, 1, segment_kind::bias);
  CHECK(built.state_size(layout) == tutti::detail::optimizer_state_floats(concrete, layout));
  const state_map from_built = built.state_map(layout);
  const state_map from_concrete = concrete.state_map(layout);
  REQUIRE(from_built.size() == from_concrete.size());
  for (std::size_t s = 0; s < from_built.size(); ++s) {
    REQUIRE(from_built[s].size() == from_concrete[s].size());
    for (std::size_t k = 0; k < from_built[s].size(); ++k) {
      CHECK(from_built[s][k].offset == from_concrete[s][k].offset);
      CHECK(from_built[s][k].width == from_concrete[s][k].width);
    }
  }
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
  CHECK(
      std::holds_alternative<lazy_adam>(cli::detail::plan::planned_optimizer("lazy-adam").chosen));
  CHECK(std::holds_alternative<adam>(cli::detail::plan::planned_optimizer("adamw").chosen));
  try {
    (void)cli::detail::plan::planned_optimizer("adagrad");
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

TEST_CASE("cli names: the optimizer a name builds carries the named optimizer's capabilities") {
  check_builds(optimizer_choice::sgd, sgd{.momentum = 0.9f});
  check_builds(optimizer_choice::adam, adam{});
  check_builds(optimizer_choice::lars, lars{.momentum = 0.9f});
  check_builds(optimizer_choice::lamb, lamb{});
  check_builds(optimizer_choice::lazy_adam, lazy_adam{});
  check_builds(optimizer_choice::rowwise_adagrad, rowwise_adagrad{});
  check_builds(optimizer_choice::row_sparse_sgd, row_sparse_sgd{.momentum = 0.9f});
}

}  // namespace test_cli_names
