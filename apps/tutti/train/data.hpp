// SPDX-License-Identifier: Apache-2.0
// What `tutti train` trains on: the rows each rank loads (a file, sealed shards or the synthetic
// courses), their split, and the statistics the ranks agree on.
#pragma once

#include "../export.hpp"
#include "config.hpp"

#include <tutti/detail/spare_capacity.hpp>
#include <tutti/models/mf_export.hpp>
#include <tutti/models/mf_warm_start.hpp>
#include <tutti/tutti.hpp>
// Sealed shards and the audit trail need libsodium; the build links it wherever its header is.
#if __has_include(<sodium.h>)
#define TUTTI_HAS_SODIUM 1
#include <tutti/data/sealed.hpp>
#else
#define TUTTI_HAS_SODIUM 0
#endif

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tutti::cli::detail {

struct loaded_data {
  // Every row read (after the positives) and its flags; its rows and id dictionaries are
  // released once split (`parts` holds them), so the loaded log is not held twice while training.
  data::interactions all;
  std::size_t rows = 0;  // rows of `all` before the split released them
  // The index spaces of `all` (its learners and courses), kept when the split has taken its
  // dictionaries (each side of the split holds them).
  std::int32_t users = 0, items = 0;
  data::split_result parts;
  std::string source;
  std::string key_id;                             // of the key that opened sealed shards
  std::optional<data::cleaning_report> cleaning;  // when the rows were cleaned
  // Several --data files: how many, and what the replay of the earlier ones kept.
  std::size_t files = 1;
  std::unique_ptr<data::pair_set> newest;  // the last file's pairs, until the replay
  data::replay_counts replay;
  double replay_share = 1.0;
  // Sealed shards opened with shard keys: this holds only `shard`'s rows, and every rank
  // loads its own (see `load`).
  bool rank_local = false;
  int shard = -1;
  std::uint64_t sealed_rows = 0;           // rows of the whole sealed dataset (from its manifest)
  std::optional<checkpoint_state> resume;  // the checkpoint `--resume` continues from
  // --holdout last: the ranking lists of the held-out rows; else none.
  std::shared_ptr<const data::ranking_candidates> lists;
  // --feedback implicit: what reading the rows as positives kept and dropped.
  std::optional<data::positive_counts> positives;
  // --init-from: the export the known rows start from, and where each learner and course
  // stands in it.
  std::shared_ptr<const models::mf_export> warm;
  models::warm_start_match warm_match;
  // Whether the export's optimizer state goes on (its optimizer is this run's), the optimizer
  // steps the exported model took (0 where the state does not go on), and why it does not.
  bool warm_state = false;
  std::uint64_t warm_steps = 0;
  std::string warm_state_why;
  // Seconds spent reading the rows (parsing, ids, cleaning, positives) and splitting them (with
  // the ranking lists).
  double read_seconds = 0, split_seconds = 0;
};

/// Refuses implicit labels that are all one value trained without sampled negatives: the model
/// would learn to predict that value everywhere (its item biases learn popularity, nothing more).
inline void check_not_degenerate(const train_config& c, const loaded_data& d) {
  if (!d.all.implicit || !data::labels_all_equal(d.all) || sampled_negatives_of(c) > 0) return;
  tutti::detail::throw_invalid(
      "tutti train",
      "every one of the " + std::to_string(d.all.size()) + " labels of " + d.source + " is " +
          std::to_string(static_cast<int>(d.all.labels.front())) +
          ": trained as they are, a model learns to predict that everywhere (its course biases "
          "learn popularity, nothing more); expected --feedback implicit (every row a positive, "
          "negatives sampled in each step) or --sampled-negatives K");
}

/// Refuses a `--loss` the labels cannot be read by: squared needs ratings, the others 0/1 labels.
inline void check_loss(const train_config& c, const loaded_data& d) {
  if (c.loss == loss_choice::automatic) return;
  const bool squared = c.loss == loss_choice::squared;
  TUTTI_EXPECTS(squared != d.all.implicit, "tutti train",
                "--loss " + choice_name(c.loss) + " on " + d.source + ", whose labels are " +
                    (d.all.implicit ? "0/1" : "ratings") + "; expected " +
                    (d.all.implicit ? "--loss logistic, bpr or softmax"
                                    : "--loss squared, or --feedback implicit (a log of "
                                      "positives) or --implicit (0/1 labels)"));
}

/// `--key-file` for `rank`: '{rank}' in the path stands for the rank number.
inline std::string key_file_of(const std::string& pattern, int rank) {
  std::string path = pattern;
  for (auto at = path.find("{rank}"); at != std::string::npos; at = path.find("{rank}"))
    path.replace(at, 6, std::to_string(rank));
  return path;
}

/// --init-from: whether the export's optimizer state goes on. It does where the export carries it
/// and was trained with this run's optimizer (with the same momentum, for those that keep one);
/// otherwise the optimizer starts afresh, and `d.warm_state_why` says why.
inline void decide_warm_state(const train_config& c, const nlohmann::json& manifest,
                              loaded_data& d) {
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& o =
      manifest.contains("optimizer_state") ? manifest["optimizer_state"] : none;
  const std::string name = o.value("optimizer", std::string());
  const bool keeps_momentum = c.optimizer == optimizer_choice::sgd ||
                              c.optimizer == optimizer_choice::lars ||
                              c.optimizer == optimizer_choice::row_sparse_sgd;
  if (!d.warm->state)
    d.warm_state_why = name.empty() ? "the export carries no optimizer state"
                                    : "the export's " + name + " kept no state";
  else if (name != choice_name(c.optimizer))
    d.warm_state_why =
        "the export's state is " + name + "'s, this run's optimizer " + choice_name(c.optimizer);
  else if (keeps_momentum && o.value("momentum", 0.0f) != c.momentum)
    d.warm_state_why = "the export's " + name + " ran with another --momentum";
  d.warm_state = d.warm_state_why.empty();
  d.warm_steps = d.warm_state ? o.value("steps", std::uint64_t{0}) : 0;
}

/// --init-from: reads the export (checked: its files agree, its values are finite) and checks
/// that it can start this run (the same dimension, labels of the same kind, one id space for
/// every rank).
inline void load_warm_start(const train_config& c, loaded_data& d) {
  if (c.init_from.empty()) return;
  const std::string dir = c.init_from;
  TUTTI_EXPECTS(!d.rank_local, "tutti train",
                "--init-from with shard keys: each rank holds only its own learners; expected "
                "the master key or a data file");
  const nlohmann::json manifest = read_export_manifest(dir, "tutti train --init-from");
  auto e = std::make_shared<models::mf_export>(models::read_mf_export(dir));
  check_manifest_agrees(manifest, *e, dir, "tutti train --init-from");
  TUTTI_EXPECTS(e->dim == c.dim, "tutti train",
                "--init-from " + dir + " holds " + std::to_string(e->dim) +
                    " factors per row; expected --dim " + std::to_string(e->dim));
  const std::string labels = d.all.implicit ? "implicit" : "ratings";
  TUTTI_EXPECTS(manifest.value("labels", std::string()) == labels, "tutti train",
                "--init-from " + dir + " was trained on " +
                    manifest.value("labels", std::string("?")) + " labels and this data has " +
                    labels +
                    " ones; expected a model of the same "
                    "loss");
  d.warm_match = models::match_export(d.all.user_ids, d.all.item_ids, *e);
  d.warm = std::move(e);
  decide_warm_state(c, manifest, d);
}

/// Adds `more`'s counts to `into`'s.
inline void add_cleaning(data::cleaning_report& into, const data::cleaning_report& more) {
  into.rows_read += more.rows_read;
  into.rows_used += more.rows_used;
  into.rows_rejected += more.rows_rejected;
  into.duplicates_merged += more.duplicates_merged;
  for (const auto& [reason, n] : more.rejected) into.rejected[reason] += n;
}

/// Reads the --data files one after the other into `d.all` (learners and courses matched by id);
/// with several, the last file's pairs are kept for the replay after the split.
inline void load_files(const train_config& c, loaded_data& d) {
  const std::vector<std::string>& more = c.file.more_paths;
  TUTTI_EXPECTS(!more.empty() || c.replay_share == 1.0, "tutti train",
                "--replay-share keeps a share of the earlier files' rows; expected several "
                "--data files (the last one the newest)");
  TUTTI_EXPECTS(more.empty() || c.file.quarantine.empty(), "tutti train",
                "--quarantine with " + std::to_string(more.size() + 1) +
                    " --data files: each would write over the rows the one before set aside; "
                    "expected one --data file, or --clean without --quarantine");
  data_file_options f = c.file;
  if (c.feedback == feedback_choice::implicit && !f.label_col_given)
    f.label_col.clear();  // a log: no labels
  loaded_file file = load_data_file(f);
  d.all = std::move(file.rows);
  d.cleaning = std::move(file.cleaning);
  d.source = c.file.path;
  for (const std::string& path : more) {
    f.path = path;
    loaded_file next = load_data_file(f);
    if (&path == &more.back()) d.newest = std::make_unique<data::pair_set>(next.rows);
    data::append_rows(d.all, next.rows, path);
    if (d.cleaning) add_cleaning(*d.cleaning, *next.cleaning);
    d.source += " + " + path;
  }
  d.files = more.size() + 1;
}

/// Several --data files: the training side keeps every pair of the last file and a share of the
/// others (after the split and the ranking lists, which are then a full retrain's).
inline void replay(const train_config& c, loaded_data& d) {
  if (!d.newest) return;
  d.replay = data::replay_history(d.parts.train, *d.newest, c.replay_share, c.seed);
  d.replay_share = c.replay_share;
  d.newest.reset();
}

/// Loads what rank `rank` trains on. Every source but shard-keyed sealed data gives the whole
/// dataset (the same on every rank). With a shard key, rank r opens shard r only — with its
/// own key, never seeing another shard — and the directory must hold one shard per rank.
inline loaded_data load(const train_config& c, int rank) {
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const auto read_start = std::chrono::steady_clock::now();
  loaded_data d;
  if (!c.sealed.empty()) {
#if TUTTI_HAS_SODIUM
    TUTTI_EXPECTS(!c.key_file.empty(), "tutti train", "--sealed needs --key-file");
    const std::string key_path = key_file_of(c.key_file, rank);
    TUTTI_EXPECTS(std::filesystem::exists(key_path), "tutti train",
                  "--key-file: rank " + std::to_string(rank) + "'s key file '" + key_path +
                      "' does not exist; expected a key written by `tutti seal`");
    const data::secret_key key = data::read_key_file(key_path);
    if (key.kind() == data::key_kind::shard) {
      const data::sealed_manifest m = data::read_manifest(c.sealed);
      TUTTI_EXPECTS(m.shards == static_cast<std::uint32_t>(c.ranks), "tutti train",
                    "--sealed " + c.sealed + " holds " + std::to_string(m.shards) +
                        " shard(s) and --key-file gives shard keys, so each rank opens only its "
                        "own shard; expected --ranks " +
                        std::to_string(m.shards) + ", not " + std::to_string(c.ranks));
      TUTTI_EXPECTS(c.tail == tail_policy::pad, "tutti train",
                    "--tail drop with shard keys: ranks holding their own shards pad to the "
                    "longest shard; expected --tail pad");
      TUTTI_EXPECTS(key.shard() == static_cast<std::uint32_t>(rank), "tutti train",
                    "--key-file: rank " + std::to_string(rank) + " was given '" + key_path +
                        "', which holds shard " + std::to_string(key.shard()) + "'s key; rank " +
                        std::to_string(rank) + " opens shard " + std::to_string(rank) +
                        " and needs its key (one file per rank, e.g. --key-file "
                        "'keys/shard-{rank}.key')");
      d.all = data::open_sealed(c.sealed, key);
      d.rank_local = true;
      d.shard = rank;
      d.sealed_rows = m.rows;
      d.source = "sealed shard " + std::to_string(rank) + " of " + std::to_string(m.shards) +
                 " in " + c.sealed + " (one shard key per rank)";
    } else {
      d.all = data::open_sealed(c.sealed, key);
      d.sealed_rows = d.all.size();
      d.source = "sealed shards in " + c.sealed;
    }
    d.key_id = key.id();
#else
    tutti::detail::throw_invalid(
        "tutti train",
        "--sealed: this tutti was built without libsodium; expected a build "
        "that found it (Debian's libsodium-dev)");
#endif
  } else if (c.file.path.empty()) {
    data::synthetic_options o{.learners = c.learners,
                              .courses = c.courses,
                              .implicit = !c.synthetic_ratings,
                              .seed = c.data_seed};
    if (c.feedback == feedback_choice::implicit)
      o.negatives_per_positive = 0;  // as a platform logs them
    d.all = data::synthetic_courses(o);
    d.source = "synthetic courses (" + std::to_string(c.learners) + " learners, " +
               std::to_string(c.courses) + " courses, " +
               (c.synthetic_ratings ? "ratings" : "implicit") + ")";
  } else {
    load_files(c, d);
  }
  if (c.feedback == feedback_choice::implicit) {
    data::positive_counts counts;
    d.all = data::as_positives(
        std::move(d.all),
        {.repeats = c.repeats == "each" ? data::repeated_pairs::each : data::repeated_pairs::once},
        &counts);
    d.positives = counts;
    TUTTI_EXPECTS(d.all.size() > 0, "tutti train",
                  d.source + " holds no positive row (" + std::to_string(counts.rows) +
                      " rows, none with a label above 0); expected a log of what learners did");
  }
  check_not_degenerate(c, d);
  check_loss(c, d);
  load_warm_start(c, d);
  d.read_seconds = since(read_start);
  const auto split_start = std::chrono::steady_clock::now();
  detail::check_ranking(c.ranking, c.target, d.rank_local, d.all.implicit);
  d.rows = d.all.size();
  d.users = d.all.n_users();
  d.items = d.all.n_items();
  // The split takes the log's arrays (the training rows stay where they are); `d.all` keeps its
  // kind alone.
  if (c.ranking.holdout == "last") {
    d.parts = data::leave_one_out(std::move(d.all), {.seed = c.held_out_seed()});
    d.lists = detail::ranking_lists(c.ranking, d.parts, c.held_out_seed());
  } else {
    d.parts = data::split(std::move(d.all),
                          {.test_fraction = c.test_fraction, .seed = c.held_out_seed()});
  }
  replay(c, d);
  // The training rows' arrays still hold the log's length: the pages past their size go back to
  // the system (the rows stay where they are, no copy), so the held-out share does not stay
  // resident for the run.
  tutti::detail::release_spare_capacity(d.parts.train.users);
  tutti::detail::release_spare_capacity(d.parts.train.items);
  tutti::detail::release_spare_capacity(d.parts.train.labels);
  tutti::detail::release_spare_capacity(d.parts.train.timestamps);
  std::vector<std::int64_t>().swap(d.all.user_ids);
  std::vector<std::int64_t>().swap(d.all.item_ids);
  std::vector<std::int32_t>().swap(d.all.users);
  std::vector<std::int32_t>().swap(d.all.items);
  std::vector<float>().swap(d.all.labels);
  std::vector<std::int64_t>().swap(d.all.timestamps);
  // What the parser's buffers and the held-out arrays left free in the heaps goes back too.
  tutti::detail::return_free_heap_pages();
  d.split_seconds = since(split_start);
  return d;
}

/// RMSE of predicting the training mean for every test row: the bar a model must clear.
inline double global_mean_rmse(const data::interactions& train, const data::interactions& test) {
  std::vector<float> p(test.size(), static_cast<float>(mean_label(train)));
  return test.size() ? rmse(p, std::span<const float>(test.labels)) : 0.0;
}

/// What the ranks together train on. Each rank knows it directly when every rank holds the
/// whole dataset; ranks holding their own shards add their parts up (`gather_stats`).
struct data_stats {
  std::uint64_t train_rows = 0, test_rows = 0;
  double mean = 0;      // of the training labels
  double baseline = 0;  // RMSE of predicting `mean` on the test rows
  std::uint64_t train_digest = 0;
  std::vector<std::uint64_t> rows;  // training rows held by each rank (rank-local data)
};

/// The stats of data every rank holds whole. The training rows are hashed only `with_digest`
/// (the audit records it): the trainer hashes them itself, and a pass over 20 M rows is 0.08 s
/// of one thread before the first step.
inline data_stats local_stats(const loaded_data& d, bool with_digest) {
  return {.train_rows = d.parts.train.size(),
          .test_rows = d.parts.test.size(),
          .mean = mean_label(d.parts.train),
          .baseline = global_mean_rmse(d.parts.train, d.parts.test),
          .train_digest = with_digest ? d.parts.train.digest() : 0,
          .rows = {}};
}

/// The ranks' shards added up: sizes, the label mean, the baseline RMSE and, `with_digest` (as
/// `local_stats`), a digest of the training rows in rank order. Collective.
template <class Reducer>
data_stats gather_stats(Reducer& reducer, const loaded_data& d, bool with_digest) {
  const auto world = static_cast<std::size_t>(reducer.world_size());
  const auto& train = d.parts.train;
  const auto& test = d.parts.test;
  const std::uint64_t mine[2] = {train.size(), with_digest ? train.digest() : 0};
  std::vector<std::uint64_t> all(2 * world);
  reducer.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
  data_stats st;
  st.train_digest = tutti::detail::mix64(world);
  for (std::size_t r = 0; r < world; ++r) {
    st.rows.push_back(all[2 * r]);
    st.train_rows += all[2 * r];
    st.train_digest = tutti::detail::mix64(st.train_digest ^ all[2 * r + 1]);
  }
  if (!with_digest) st.train_digest = 0;
  double label_sum = 0;
  for (float y : train.labels) label_sum += y;
  double sums[2] = {label_sum, static_cast<double>(test.size())};
  reducer.all_reduce_sum(std::span<double>(sums));
  st.mean = st.train_rows ? sums[0] / double(st.train_rows) : 0.0;
  st.test_rows = static_cast<std::uint64_t>(sums[1]);
  double sq[1] = {0.0};
  for (float y : test.labels) sq[0] += (double(y) - st.mean) * (double(y) - st.mean);
  reducer.all_reduce_sum(std::span<double>(sq));
  st.baseline = st.test_rows ? std::sqrt(sq[0] / double(st.test_rows)) : 0.0;
  return st;
}

}  // namespace tutti::cli::detail
