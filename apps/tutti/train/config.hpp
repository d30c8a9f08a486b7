// SPDX-License-Identifier: Apache-2.0
// `tutti train`'s settings: everything it can be told, and the values derived from them.
#pragma once

#include "../data_options.hpp"
#include "../names.hpp"
#include "../ranking_options.hpp"

#include <tutti/trainer/options.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tutti::cli {

/// Everything `tutti train` can be told.
struct train_config {
  data_file_options file;  // --data and how to read it; no path: the synthetic course data
  std::int32_t learners = 4000;
  std::int32_t courses = 500;
  bool synthetic_ratings = false;
  std::uint64_t data_seed = 42;
  double replay_share = 1.0;  // several --data files: the share of the history's pairs kept
  double test_fraction = 0.1;
  // implicit: a platform's log, every row (or every row whose --label-col is above 0) one
  // positive, trained with sampled negatives; labels: the file's labels as they are.
  feedback_choice feedback = feedback_choice::labels;
  std::string repeats = "once";  // --feedback implicit: a repeated (learner, course) pair
  std::size_t sampled_negatives = 0;
  bool sampled_negatives_given = false;
  negative_sampler negatives_from = negative_sampler::uniform;
  float negative_alpha = 0.75f;
  loss_choice loss = loss_choice::automatic;  // auto: squared on ratings, logistic on 0/1 labels
  ranking_config ranking;                     // --holdout, --negatives, --top-k, --target
  std::optional<quality_target> target;       // --target, parsed

  model_choice model = model_choice::mf;
  int dim = 32;
  std::vector<std::size_t> layers = {64, 32, 16};  // ncf: widths of the MLP's dense layers
  // Tuned once on both defaults (synthetic implicit and InstEval ratings); see docs/training.md.
  float l2 = 0.03f;
  bool l2_given = false;     // --l2 was on the command line
  int ranks = 1;             // --space cuda without --ranks: one per visible GPU (run_train)
  bool ranks_given = false;  // --ranks was on the command line
  reducer_choice reducer = reducer_choice::local;  // local: threads; mpi: a rank per process
  std::size_t epochs = 8;
  bool epochs_given = false;  // --epochs was on the command line
  std::size_t batch = 4096;
  double lr = 0.01;
  bool lr_given = false;  // --lr was on the command line (else the optimizer's default)
  lr_scaling scaling = lr_scaling::none;
  std::size_t reference_batch = 4096;  // the defaults (lr 0.01, adam) were tuned at batch 4096
  std::size_t warmup_steps = 0;
  schedule_choice schedule = schedule_choice::cosine;
  optimizer_choice optimizer = optimizer_choice::adam;
  bool optimizer_given = false;  // --optimizer was on the command line (else adam, the default)
  float momentum = 0.9f;
  float weight_decay = 0.f;
  tail_policy tail = tail_policy::pad;
  std::uint64_t seed = 1;
  // The held-out rows' and the ranking lists' seed; unset: `seed`.
  std::optional<std::uint64_t> split_seed;
  std::uint64_t held_out_seed() const { return split_seed.value_or(seed); }
  std::string json;
  std::string log;
  std::size_t log_every = 0;
  bool quiet = false;
  bool progress = false;                    // the progress line even when stderr is not a terminal
  std::string trace;                        // Chrome trace-event file of the step phases, or none
  std::size_t trace_first = 1;              // first traced global step, 1-based
  std::size_t trace_steps = 100;            // traced steps
  std::size_t trace_every = 1;              // every K-th step from the first
  space_choice space = space_choice::host;  // cuda in a build compiled by nvcc
  nonfinite_policy nonfinite = nonfinite_policy::skip;
  std::size_t replica_check_every = 0;
  bool rebroadcast = false;
  std::string sealed;          // a directory written by `tutti seal`
  std::string key_file;        // its master key or one shard's key
  std::string audit;           // a directory for the per-rank audit trail
  std::string report;          // a directory for the ledger's HTML page
  std::string link = "pcie4";  // the link of the printed projection
  double price = 1.0;          // money per device-hour in the projection
  std::string checkpoint_dir;  // where rank 0 writes checkpoints
  std::size_t checkpoint_every = 0;
  std::size_t checkpoint_keep = 3;
  std::string resume;            // continue from the newest valid checkpoint of this directory
  double timeout = 300;          // seconds a collective waits for the other ranks
  std::size_t accumulation = 1;  // micro-batches per step (gradient accumulation)
  std::size_t noise_every = 16;  // steps between gradient noise scale measurements; 0: off
  double noise_decay = 0.95;     // the noise scale's moving averages' weight on the past
  compress_choice compress = compress_choice::none;  // bf16: gradients travel as bfloat16
  std::string sparse_exchange = "off";  // off, auto, on, measured: embedding rows, not dense
  std::string shared_arena = "on";      // --reducer mpi: the arena in MPI shared memory
  std::string compact_gradient = "on";  // row-sparse step of one host rank: gradient in slots
  bool overlap = false;                 // reduce buckets on a thread while backward runs
  bool rows_in_place = false;           // host: the step reads the split's rows, no copy
  double bucket_mb = 25;                // bucket size of the overlapped reduction, MiB
  double last_bucket_mb = 0.25;         // its last bucket (the arena's first values), MiB
  std::string comm_nice = "-10";        // the communication thread's nice value, or inherit
  std::string export_dir;               // --export: rank 0 writes the trained model here
  std::string init_from;                // --init-from: an export the known rows start from
  std::string lists_out;                // --lists-out: the training rows and ranking lists
  std::string share_cores = "on";  // one host rank: its threads follow the machine (core_share)
  std::string step_graphs = "on";  // --space cuda: the steady step replayed as a CUDA Graph
};

/// A log of positives learns to rank with less regularisation, more passes and larger steps than
/// ratings do: without --l2, --epochs or --lr, `--feedback implicit` trains with l2 0.003 for 20
/// epochs, and matrix factorisation with Adam (or lazy Adam) at lr 0.03 (the best of the settings
/// compared on the logs of docs/implicit.md: on InstEval read as a log, the full ranking's
/// Recall@20 0.837 at 0.01; neural CF ranked worse at 0.03 and keeps 0.01).
inline void apply_feedback_defaults(train_config& c) {
  if (c.feedback != feedback_choice::implicit) return;
  if (!c.l2_given) c.l2 = 0.003f;
  if (!c.epochs_given) c.epochs = 20;
  if (!c.lr_given && c.model == model_choice::mf &&
      (c.optimizer == optimizer_choice::adam || c.optimizer == optimizer_choice::lazy_adam))
    c.lr = 0.03;
}

/// Negatives sampled per positive when --sampled-negatives is not given: 4 for a log of
/// positives (`--feedback implicit`; the NCF paper's choice, and the best of 1, 2, 4 and 8 on
/// InstEval read as a log, docs/implicit.md), none otherwise.
inline std::size_t sampled_negatives_of(const train_config& c) {
  if (c.sampled_negatives_given) return c.sampled_negatives;
  return c.feedback == feedback_choice::implicit ? 4 : 0;
}

/// The loss `--loss` names for data of 0/1 labels (`implicit`) or ratings: `auto` is the
/// logistic loss on 0/1 labels and the squared loss on ratings.
inline loss_kind loss_of(const train_config& c, bool implicit) {
  switch (c.loss) {
    case loss_choice::bpr:
      return loss_kind::bpr;
    case loss_choice::softmax:
      return loss_kind::softmax;
    case loss_choice::logistic:
      return loss_kind::logistic;
    case loss_choice::squared:
      return loss_kind::squared;
    case loss_choice::automatic:
      break;
  }
  return implicit ? loss_kind::logistic : loss_kind::squared;
}

/// The trainer's negatives as `--sampled-negatives`, `--negative-sampler` and `--negative-alpha`
/// say.
inline negative_options negatives_of(const train_config& c) {
  return {.per_positive = static_cast<std::uint32_t>(sampled_negatives_of(c)),
          .sampler = c.negatives_from,
          .alpha = c.negative_alpha};
}

/// The communication thread's nice value `--comm-nice` asks for (nullopt: inherit).
inline std::optional<int> opt_comm_nice(const train_config& c) {
  if (c.comm_nice == "inherit") return std::nullopt;
  return std::stoi(c.comm_nice);
}

/// `mib` MiB (`--bucket-mb`, `--last-bucket-mb`) in bytes.
inline std::size_t mib_bytes(double mib) {
  return static_cast<std::size_t>(std::llround(mib * 1048576.0));
}

/// The base learning rate of `optimizer` when --lr is not given: 0.01 (tuned with Adam at batch
/// 4,096), 0.1 for row-wise Adagrad, whose steps shrink as its accumulators grow (the best of
/// 0.01 to 1 over the synthetic data and InstEval; docs/optimizers.md).
inline double default_lr(optimizer_choice optimizer) {
  return optimizer == optimizer_choice::rowwise_adagrad ? 0.1 : 0.01;
}

/// How long a collective waits for the other ranks (`--timeout`, seconds).
inline std::chrono::milliseconds timeout_of(const train_config& c) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(c.timeout * 1000)));
}

}  // namespace tutti::cli
