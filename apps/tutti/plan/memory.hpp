// SPDX-License-Identifier: Apache-2.0
// `tutti plan --host`'s answer to "does it fit": the peak resident memory of a `tutti train` run
// of the course recommender on this host, forecast from the accounts the run will report (the
// trainer's, by the trainer's own sizing rules: trainer/memory_forecast.hpp) and what the program
// holds beside them: the split's rows and the id dictionaries, the negatives' tables while the
// step's buffers are built, and the program itself (this process's own peak: the same binary and
// libraries, before any data).
#pragma once

#include "../resident_memory.hpp"
#include "../run_policies.hpp"
#include "../train/config.hpp"

#include <tutti/error.hpp>
#include <tutti/memory_accounts.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/trainer/memory_forecast.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace tutti::cli::detail::plan {

/// A `tutti train` run of matrix factorisation on one host rank, as far as memory goes. What is
/// not given takes `tutti train`'s defaults.
struct train_shape {
  std::uint64_t learners = 0, courses = 0, dim = 0;
  std::uint64_t train_rows = 0, test_rows = 0;  ///< the split's two sides
  std::string optimizer = "adam";
  std::size_t batch = train_config{}.batch;
  std::uint32_t negatives = 4;  ///< sampled a positive (a log's default)
  bool popularity = false;      ///< negatives drawn by popularity
  bool compact_gradient = true;
  bool rows_in_place = false;  ///< `tutti train --rows-in-place`
  bool one_label = true;       ///< every training row's label the same (a log of positives)
};

/// This machine's physical memory, bytes.
inline double host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  TUTTI_EXPECTS(pages > 0 && page > 0, "tutti plan",
                "cannot read this machine's memory; give --device-memory");
  return double(pages) * double(page);
}

/// The rows of a log of `rows` positives on each side of `tutti train`'s default split.
inline void split_rows(train_shape& s, double rows) {
  s.test_rows = static_cast<std::uint64_t>(std::llround(rows * train_config{}.test_fraction));
  s.train_rows = static_cast<std::uint64_t>(std::llround(rows)) - s.test_rows;
}

/// Calls `use(o)` with the optimizer `tutti plan --optimizer` names as its own type, as `tutti
/// train` would run it: `sgd` without momentum (no state), `momentum` SGD with `tutti train`'s
/// momentum, `adamw` Adam with decoupled weight decay (Adam's state); the others by their `tutti
/// train` names.
template <class Use>
decltype(auto) with_planned_optimizer(const std::string& name, Use&& use) {
  const train_config defaults;
  if (name == "sgd") return with_optimizer(optimizer_choice::sgd, 0.f, defaults.weight_decay, use);
  if (name == "momentum")
    return with_optimizer(optimizer_choice::sgd, defaults.momentum, defaults.weight_decay, use);
  if (name == "adamw") return use(adam{.weight_decay = defaults.weight_decay, .decoupled = true});
  // A name from the command line (checked there) or from a report's JSON.
  const std::optional<optimizer_choice> chosen = choice_named<optimizer_choice>(name);
  if (!chosen) {
    std::string train_names;
    for (const std::string& n : all_names<optimizer_choice>())
      if (n != "sgd") train_names += (train_names.empty() ? "" : ", ") + n;
    tutti::detail::throw_invalid("tutti plan",
                                 "unknown optimizer '" + name +
                                     "'; expected sgd, momentum, adamw or one of tutti "
                                     "train's (" +
                                     train_names + ")");
  }
  return with_optimizer(*chosen, defaults.momentum, defaults.weight_decay, use);
}

/// The forecast for `s`, with `process` the program's own resident bytes.
inline memory_forecast forecast_train_memory(const train_shape& s, std::uint64_t process) {
  TUTTI_EXPECTS(s.learners >= 1 && s.courses >= 1 && s.dim >= 1 && s.train_rows >= 1, "tutti plan",
                "the memory forecast needs the recommender's learners, courses, dim and rows");
  TUTTI_EXPECTS(s.learners <= INT32_MAX && s.courses <= INT32_MAX, "tutti plan",
                "--learners and --courses index 32-bit ids; expected at most 2^31 - 1 each");
  const models::matrix_factorization<host_space> model({.dim = static_cast<int>(s.dim)},
                                                       static_cast<std::int32_t>(s.learners),
                                                       static_cast<std::int32_t>(s.courses));
  train_options o{.batch = s.batch};
  o.negatives.per_positive = s.negatives;
  o.negatives.sampler = s.popularity ? negative_sampler::popularity : negative_sampler::uniform;
  o.compact_gradient = s.compact_gradient;
  o.rows_in_place = s.rows_in_place;
  memory_forecast f;
  f.trainer = with_planned_optimizer(s.optimizer, [&](const auto& optimizer) {
    return forecast_trainer_memory(model, optimizer, o,
                                   {.train_rows = s.train_rows,
                                    .learners = s.learners,
                                    .one_label = s.one_label,
                                    .courses = s.courses});
  });
  // Held beside the trainer: the split's rows (learner, course, label) and each side's copy of
  // the id dictionaries.
  const std::uint64_t rows = s.train_rows + s.test_rows;
  const std::uint64_t row_bytes = 2 * sizeof(std::int32_t) + sizeof(float);
  const std::uint64_t dictionary = (s.learners + s.courses) * sizeof(std::int64_t);
  f.data = rows * row_bytes + 2 * dictionary;
  // The negatives' tables are built where the step reads them on a host (each learner's courses
  // and their offsets written into the trainer's buffers): nothing is held twice while the
  // buffers are built (`building` stays 0; where repeated pairs were dropped the lists are
  // copied into a buffer of their size, a moment this shape does not know of).
  // Loading: the log's rows read and read again as positives, then split (its rows and the
  // split's at once), with the log's dictionaries and the split's.
  f.loading = 2 * rows * row_bytes + 3 * dictionary;
  f.process = process > 0 ? process : peak_resident_bytes();
  return f;
}

}  // namespace tutti::cli::detail::plan
