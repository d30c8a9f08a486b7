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

/// What the trainer does with a run setting: every rank must hold the same value (`agree`), a
/// checkpoint records it and a resume compares it (`record`), or both.
enum class setting_use : unsigned { agree = 1, record = 2, both = 3 };

/// One setting of a run, as text.
struct run_setting {
  std::string name;
  std::string value;
  setting_use use = setting_use::both;
};

/// What a run trains, beyond its options: the shapes and the training data.
struct run_shape {
  std::uint64_t layout_digest = 0;  ///< `parameter_layout::digest()`
  std::size_t optimizer_state_floats = 0;
  std::uint64_t train_rows = 0;    ///< rows over all ranks
  std::uint64_t train_digest = 0;  ///< the data's digest (or, rank-local, of the counts)
  int world_size = 1;
};

/// The negatives a run samples, as text ("none", or "K uniform" / "K popularity^alpha").
inline std::string negatives_text(const negative_options& n) {
  if (n.per_positive == 0) return "none";
  std::string t = std::to_string(n.per_positive) + " " + to_string(n.sampler);
  if (n.sampler == negative_sampler::popularity) {
    char a[32];
    std::snprintf(a, sizeof a, "^%.9g", double(n.alpha));
    t += a;
  }
  return t + " draws " + std::to_string(n.max_draws);
}

/// The one list of the settings that define a run: the options and shapes that change the
/// result (recorded by a checkpoint, in this order), the caller's `run_config`, and the options
/// that change which collectives run or when (which every rank must share, and a resume may
/// change). The agreement digest, the checkpoint's list and the resume check all derive from it.
inline std::vector<run_setting> run_settings(const train_options& o, const run_shape& s) {
  constexpr setting_use agree = setting_use::agree, record = setting_use::record,
                        both = setting_use::both;
  const auto hex = [](std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  const auto num = [](auto v) {
    return std::to_string(v);
  };
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.17g", o.base_lr);
  std::vector<run_setting> list = {
      {"batch", num(o.batch), both},
      {"epochs", num(o.epochs), both},
      {"base_lr", lr, both},
      {"scaling", num(static_cast<int>(o.scaling)), both},
      {"reference_batch", num(o.reference_batch), both},
      {"seed", num(o.seed), record},  // agreed on by itself, to be named in the error
      {"nonfinite", num(static_cast<int>(o.nonfinite)), both},
      {"accumulation", num(o.accumulation), both},
      {"parameter_layout", hex(s.layout_digest), record},
      {"optimizer_state_floats", num(s.optimizer_state_floats), record},
      {"train_rows", num(s.train_rows), record},
      {"train_digest", hex(s.train_digest), record},
      {"world_size", num(s.world_size), record}};
  // Only a run that samples negatives records them: the record of one that does not is the
  // record checkpoints written before sampled negatives existed compare against.
  if (o.negatives.per_positive > 0)
    list.insert(list.begin() + 8, run_setting{"negatives", negatives_text(o.negatives), both});
  // Recorded only for a continued run: checkpoints of fresh runs (written before continuations
  // existed) still resume.
  if (o.continues.steps > 0) list.push_back({"continued_steps", num(o.continues.steps), both});
  for (const auto& [name, value] : o.run_config) list.push_back({name, value, record});
  list.push_back({"replica_check_every", num(o.replica_check_every), agree});
  list.push_back({"rebroadcast_on_mismatch", num(int(o.rebroadcast_on_mismatch)), agree});
  list.push_back({"measure_wait", num(int(o.measure_wait)), agree});
  list.push_back({"checkpoint_every", num(o.checkpoint_every), agree});
  list.push_back({"resume_step", o.resume ? num(o.resume->global_step + 1) : "0", agree});
  list.push_back({"sparse_exchange", num(static_cast<int>(o.sparse_exchange)), agree});
  if (o.sparse_exchange == sparse_exchange_policy::measured)
    list.push_back({"sparse_trial_steps", num(o.sparse_trial_steps), agree});
  list.push_back({"overlap_reduce", num(int(o.overlap_reduce)), agree});
  list.push_back({"stop_poll_every", num(o.stop_poll_every), agree});
  if (o.overlap_reduce) {
    list.push_back({"bucket_bytes", num(o.bucket_bytes), agree});
    list.push_back({"last_bucket_bytes", num(o.last_bucket_bytes), agree});
  }
  return list;
}

/// A digest of the options every rank must share (the `agree` settings): they change which
/// collectives run, or what they compute.
inline std::uint64_t options_digest(const train_options& o) {
  std::uint64_t h = 0;
  for (const auto& setting : run_settings(o, {}))
    if (static_cast<unsigned>(setting.use) & static_cast<unsigned>(setting_use::agree))
      for (const std::string* text : {&setting.name, &setting.value}) {
        for (unsigned char ch : *text) h = mix64(h ^ ch);
        h = mix64(h ^ 0x1f);  // a separator: ("ab", "c") and ("a", "bc") differ
      }
  return h;
}

/// What a checkpoint records of a run's settings, and compares when resuming (the `record`
/// settings, in the list's order).
inline run_setting_list checkpoint_settings(const train_options& o, const run_shape& s) {
  run_setting_list c;
  for (auto& setting : run_settings(o, s))
    if (static_cast<unsigned>(setting.use) & static_cast<unsigned>(setting_use::record))
      c.emplace_back(std::move(setting.name), std::move(setting.value));
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

/// True for a caller's setting kept with a checkpoint to be named in messages, never compared:
/// its name starts with "note." (the CLI's "note.data" names the data file).
inline bool is_note_setting(std::string_view name) {
  return name.starts_with("note.");
}

/// The value of `name` in `list`, or "(absent)".
inline std::string setting_value(const run_setting_list& list, std::string_view name) {
  for (const auto& [k, v] : list)
    if (k == name) return v;
  return "(absent)";
}

/// Refuses to resume from a checkpoint whose settings differ from `now`'s (the world size and
/// the notes aside), naming each that differs with both values; where the training rows differ,
/// naming the data of each run from their "note.data" settings when they have them.
inline void check_resume_settings(const run_setting_list& saved, const run_setting_list& now) {
  static constexpr std::string_view ignore[] = {"world_size"};
  const auto compared = [](const run_setting_list& list) {
    run_setting_list out;
    for (const auto& entry : list)
      if (!is_note_setting(entry.first)) out.push_back(entry);
    return out;
  };
  const auto differing = config_differences(compared(saved), compared(now), ignore);
  if (differing.empty()) return;
  std::string list;
  bool rows_differ = false;
  for (const auto& name : differing) {
    list += (list.empty() ? "" : ", ") + name + " (checkpoint " + setting_value(saved, name) +
            ", now " + setting_value(now, name) + ")";
    rows_differ = rows_differ || name == "train_rows" || name == "train_digest";
  }
  std::string rows;
  if (rows_differ)
    rows = "; the training rows are not those the checkpoint was trained on (" +
           setting_value(saved, "note.data") + ", now " + setting_value(now, "note.data") +
           "): another data file, a changed one, or another split";
  throw_invalid("tutti::trainer::fit",
                "cannot resume: settings that change the result differ from the checkpoint's: " +
                    list + rows + "; expected the options and data of the run that wrote it");
}

}  // namespace tutti::detail
