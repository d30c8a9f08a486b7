// SPDX-License-Identifier: Apache-2.0
/// @file trainer/run_settings.hpp
/// @brief The settings that define a run: the digest every rank compares before the first step,
/// the list a checkpoint records, and the check that a checkpoint resumed belongs to this run.
#pragma once

#include <tutti/checkpoint.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>
#include <tutti/trainer/options.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti::detail {

using run_setting_list = std::vector<std::pair<std::string, std::string>>;

inline std::uint64_t hash_double(std::uint64_t h, double v) {
  std::uint64_t bits;
  static_assert(sizeof bits == sizeof v);
  std::memcpy(&bits, &v, sizeof bits);
  return mix64(h ^ bits);
}

/// A digest of the options that change which collectives run, or what they compute: they must
/// agree on every rank.
inline std::uint64_t options_digest(const train_options& o) {
  std::uint64_t h = mix64(o.batch);
  h = mix64(h ^ o.epochs);
  h = hash_double(h, o.base_lr);
  h = mix64(h ^ static_cast<std::uint64_t>(o.scaling));
  h = mix64(h ^ o.reference_batch);
  h = mix64(h ^ static_cast<std::uint64_t>(o.nonfinite));
  h = mix64(h ^ o.replica_check_every);
  h = mix64(h ^ (o.rebroadcast_on_mismatch ? 1u : 0u));
  h = mix64(h ^ (o.measure_wait ? 2u : 0u));
  h = mix64(h ^ o.checkpoint_every);
  h = mix64(h ^ (o.accumulation << 8));
  h = mix64(h ^ (o.resume ? o.resume->global_step + 1 : 0));
  if (o.sparse_exchange != sparse_exchange_policy::off)
    h = mix64(h ^ (0x5350ULL << 40) ^ static_cast<std::uint64_t>(o.sparse_exchange));
  if (o.sparse_exchange == sparse_exchange_policy::measured)
    h = mix64(h ^ (0x5354ULL << 40) ^ o.sparse_trial_steps);
  return h;
}

/// What a run trains, beyond its options: the shapes and the training data.
struct run_shape {
  std::uint64_t layout_digest = 0;  ///< `parameter_layout::digest()`
  std::size_t optimizer_state_floats = 0;
  std::uint64_t train_rows = 0;    ///< rows over all ranks
  std::uint64_t train_digest = 0;  ///< the data's digest (or, rank-local, of the counts)
  int world_size = 1;
};

/// What a checkpoint records of a run's settings, and compares when resuming: the options and
/// shapes that change the result, the training data, and the caller's `run_config`.
inline run_setting_list checkpoint_settings(const train_options& o, const run_shape& s) {
  const auto hex = [](std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.17g", o.base_lr);
  run_setting_list c = {{"batch", std::to_string(o.batch)},
                        {"epochs", std::to_string(o.epochs)},
                        {"base_lr", lr},
                        {"scaling", std::to_string(static_cast<int>(o.scaling))},
                        {"reference_batch", std::to_string(o.reference_batch)},
                        {"seed", std::to_string(o.seed)},
                        {"nonfinite", std::to_string(static_cast<int>(o.nonfinite))},
                        {"accumulation", std::to_string(o.accumulation)},
                        {"parameter_layout", hex(s.layout_digest)},
                        {"optimizer_state_floats", std::to_string(s.optimizer_state_floats)},
                        {"train_rows", std::to_string(s.train_rows)},
                        {"train_digest", hex(s.train_digest)},
                        {"world_size", std::to_string(s.world_size)}};
  for (const auto& field : o.run_config) c.push_back(field);
  return c;
}

/// The digest a checkpoint stores of its settings list.
inline std::uint64_t settings_digest(const run_setting_list& settings) {
  std::uint64_t digest = 0;
  for (const auto& [k, v] : settings)
    for (const std::string* text : {&k, &v})
      for (unsigned char ch : *text) digest = mix64(digest ^ ch);
  return digest;
}

/// Refuses to resume from a checkpoint whose settings differ from `now`'s (the world size
/// aside), naming each that differs with both values.
inline void check_resume_settings(const run_setting_list& saved, const run_setting_list& now) {
  static constexpr std::string_view ignore[] = {"world_size"};
  const auto differing = config_differences(saved, now, ignore);
  if (differing.empty()) return;
  std::string list;
  for (const auto& name : differing) {
    std::string was = "(absent)", current = "(absent)";
    for (const auto& [k, v] : saved)
      if (k == name) was = v;
    for (const auto& [k, v] : now)
      if (k == name) current = v;
    list += (list.empty() ? "" : ", ") + name + " (checkpoint " + was + ", now " + current + ")";
  }
  throw_invalid("tutti::trainer::fit",
                "cannot resume: settings that change the result differ from the checkpoint's: " +
                    list + "; expected the options of the run that wrote it");
}

}  // namespace tutti::detail
