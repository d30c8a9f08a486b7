// SPDX-License-Identifier: Apache-2.0
// The names an option's value may take, each resolved once, where the command line is parsed:
// an option that picks among named choices stores an enumerator, never its text, and the text
// comes back only where it is written out (the checkpoint's run settings, the reports).
#pragma once

#include <tutti/schedules/scaling.hpp>
#include <tutti/shard.hpp>
#include <tutti/trainer/negatives.hpp>
#include <tutti/trainer/options.hpp>

#include <CLI/CLI.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti::cli {

/// One name an option's value may take, and the choice it stands for.
template <class E>
struct named {
  std::string_view name;
  E value;
};

enum class model_choice { mf, lr, ncf };
enum class optimizer_choice { sgd, adam, lars, lamb, lazy_adam, rowwise_adagrad, row_sparse_sgd };
enum class schedule_choice { constant, step, cosine, poly };
enum class reducer_choice { local, mpi };
enum class space_choice { host, cuda };
enum class compress_choice { none, bf16 };
enum class feedback_choice { labels, implicit };
enum class loss_choice { automatic, squared, logistic, bpr, softmax };
// The library's own enumerations name the tail policy (tutti::tail_policy), the scaling rule
// (tutti::lr_scaling), the non-finite guard (tutti::nonfinite_policy) and the negatives'
// distribution (tutti::negative_sampler); where the library names one (`to_string`), the CLI
// takes that name.

/// The names of each choice, in the order `--help` lists them.
constexpr auto names_of(model_choice) {
  using enum model_choice;
  return std::array<named<model_choice>, 3>{{{"mf", mf}, {"lr", lr}, {"ncf", ncf}}};
}
constexpr auto names_of(optimizer_choice) {
  using enum optimizer_choice;
  return std::array<named<optimizer_choice>, 7>{{{"sgd", sgd},
                                                 {"adam", adam},
                                                 {"lars", lars},
                                                 {"lamb", lamb},
                                                 {"lazy-adam", lazy_adam},
                                                 {"rowwise-adagrad", rowwise_adagrad},
                                                 {"row-sparse-sgd", row_sparse_sgd}}};
}
constexpr auto names_of(schedule_choice) {
  using enum schedule_choice;
  return std::array<named<schedule_choice>, 4>{
      {{"constant", constant}, {"step", step}, {"cosine", cosine}, {"poly", poly}}};
}
constexpr auto names_of(reducer_choice) {
  using enum reducer_choice;
  return std::array<named<reducer_choice>, 2>{{{"local", local}, {"mpi", mpi}}};
}
constexpr auto names_of(space_choice) {
  using enum space_choice;
  return std::array<named<space_choice>, 2>{{{"host", host}, {"cuda", cuda}}};
}
constexpr auto names_of(tail_policy) {
  using enum tail_policy;
  return std::array<named<tail_policy>, 3>{{{"pad", pad}, {"drop", drop}, {"none", none}}};
}
constexpr auto names_of(compress_choice) {
  using enum compress_choice;
  return std::array<named<compress_choice>, 2>{{{"none", none}, {"bf16", bf16}}};
}
constexpr auto names_of(lr_scaling) {
  using enum lr_scaling;
  return std::array<named<lr_scaling>, 3>{
      {{to_string(none), none}, {to_string(linear), linear}, {to_string(sqrt), sqrt}}};
}
constexpr auto names_of(nonfinite_policy) {
  using enum nonfinite_policy;
  return std::array<named<nonfinite_policy>, 3>{{{"skip", skip}, {"stop", stop}, {"off", off}}};
}
constexpr auto names_of(feedback_choice) {
  using enum feedback_choice;
  return std::array<named<feedback_choice>, 2>{{{"labels", labels}, {"implicit", implicit}}};
}
constexpr auto names_of(loss_choice) {
  using enum loss_choice;
  return std::array<named<loss_choice>, 5>{{{"auto", automatic},
                                            {"squared", squared},
                                            {"logistic", logistic},
                                            {"bpr", bpr},
                                            {"softmax", softmax}}};
}
constexpr auto names_of(negative_sampler) {
  using enum negative_sampler;
  return std::array<named<negative_sampler>, 2>{
      {{to_string(uniform), uniform}, {to_string(popularity), popularity}}};
}

/// An enumeration whose names `names_of` lists.
template <class E>
concept named_choice = requires(E e) {
  names_of(e);
};

/// The name of `value`.
template <named_choice E>
constexpr std::string_view name_of(E value) {
  for (const auto& n : names_of(E{}))
    if (n.value == value) return n.name;
  return "?";  // unreachable: every enumerator has a name (tests/test_cli_names.cpp)
}

/// The name of `value`, as a string.
template <named_choice E>
std::string choice_name(E value) {
  return std::string(name_of(value));
}

/// The choice called `name`, or nullopt.
template <named_choice E>
constexpr std::optional<E> choice_named(std::string_view name) {
  for (const auto& n : names_of(E{}))
    if (n.name == name) return n.value;
  return std::nullopt;
}

/// Every name of `E`, in order (CLI11's `IsMember` list).
template <named_choice E>
std::vector<std::string> all_names() {
  std::vector<std::string> out;
  for (const auto& n : names_of(E{})) out.emplace_back(n.name);
  return out;
}

/// Registers `flag` on `app`, storing the choice its value names into `out`: CLI11 checks the
/// name (its message lists the names), the choice is stored once, and `--help` shows the
/// default's name.
template <named_choice E>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, E& out, const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag, [&out](const std::string& name) { out = *choice_named<E>(name); }, help)
      ->check(CLI::IsMember(all_names<E>()))
      ->default_str(choice_name(out));
}

}  // namespace tutti::cli
