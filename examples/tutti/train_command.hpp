// SPDX-License-Identifier: Apache-2.0
// `tutti train`: options, run-time choice of policies, the epoch table and the JSON report.
#pragma once

#include "data_options.hpp"
#include "export.hpp"
#include "noise_report.hpp"
#include "progress.hpp"
#include "ranking_options.hpp"
#include "run_policies.hpp"
#include "trace.hpp"

#include <tutti/data/clean.hpp>
#include <tutti/tutti.hpp>

#if TUTTI_HAS_MPI
#include <tutti/reducers/mpi.hpp>
#endif
#if defined(TUTTI_HAS_CUDA)
#include <tutti/space/cuda.hpp>
#if TUTTI_HAS_NCCL
#include <tutti/reducers/nccl_ring.hpp>
#if TUTTI_HAS_MPI
#include <tutti/reducers/nccl_mpi.hpp>
#endif
#endif
#endif
// Sealed shards and the audit trail need libsodium; the build links it wherever its header is.
#if __has_include(<sodium.h>)
#define TUTTI_HAS_SODIUM 1
#include <tutti/data/audit.hpp>
#include <tutti/data/sealed.hpp>
#else
#define TUTTI_HAS_SODIUM 0
#endif
#include <tutti/plan/noise_model.hpp>
#include <tutti/plan/projection.hpp>
#include <tutti/plan/report.hpp>
#if TUTTI_HAS_BLAS
#include <tutti/models/neural_cf.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace tutti::cli {

/// Everything `tutti train` can be told.
struct train_config {
  std::string data;  // empty: the synthetic course data
  std::string user_col = "userId";
  std::string item_col = "movieId";
  std::string label_col = "rating";
  std::string timestamp_col;
  bool implicit = false;
  std::string ids = "auto";  // --ids: auto, integer or name
  std::int32_t learners = 4000;
  std::int32_t courses = 500;
  bool synthetic_ratings = false;
  std::uint64_t data_seed = 42;
  double test_fraction = 0.1;
  ranking_config ranking;                // --holdout, --negatives, --top-k, --target
  std::optional<quality_target> target;  // --target, parsed

  std::string model = "mf";
  int dim = 32;
  std::vector<std::size_t> layers = {64, 32, 16};  // ncf: widths of the MLP's dense layers
  // Tuned once on both defaults (synthetic implicit and InstEval ratings); see docs/training.md.
  float l2 = 0.03f;
  int ranks = 4;
  bool ranks_given = false;       // --ranks was on the command line
  std::string reducer = "local";  // local: ranks are threads; mpi: one rank per process
  std::size_t epochs = 8;
  std::size_t batch = 4096;
  double lr = 0.01;
  bool lr_given = false;  // --lr was on the command line (else the optimizer's default)
  std::string scaling = "none";
  std::size_t reference_batch = 4096;  // the defaults (lr 0.01, adam) were tuned at batch 4096
  std::size_t warmup_steps = 0;
  std::string schedule = "cosine";
  std::string optimizer = "adam";
  float momentum = 0.9f;
  float weight_decay = 0.f;
  std::string tail = "pad";
  std::uint64_t seed = 1;
  std::string json;
  std::string log;
  std::size_t log_every = 0;
  bool quiet = false;
  bool progress = false;           // the progress line even when stderr is not a terminal
  std::string trace;               // Chrome trace-event file of the step phases, or none
  std::size_t trace_first = 1;     // first traced global step, 1-based
  std::size_t trace_steps = 100;   // traced steps
  std::size_t trace_every = 1;     // every K-th step from the first
  std::string space = "host";      // host, or cuda in a build compiled by nvcc
  std::string nonfinite = "skip";  // skip, stop or off
  std::size_t replica_check_every = 0;
  bool rebroadcast = false;
  std::string sealed;      // a directory written by `tutti seal`
  std::string key_file;    // its master key or one shard's key
  std::string audit;       // a directory for the per-rank audit trail
  std::string report;      // a directory for the ledger's HTML page
  bool clean = false;      // set bad rows aside instead of stopping at the first
  std::string quarantine;  // file receiving the rejected rows verbatim (implies clean)
  std::optional<double> label_min, label_max;
  std::string duplicates = "keep_first";
  double max_rejected_share = 0.05;
  std::string link = "pcie4";  // the link of the printed projection
  double price = 1.0;          // money per device-hour in the projection
  std::string checkpoint_dir;  // where rank 0 writes checkpoints
  std::size_t checkpoint_every = 0;
  std::size_t checkpoint_keep = 3;
  std::string resume;             // continue from the newest valid checkpoint of this directory
  double timeout = 300;           // seconds a collective waits for the other ranks
  std::size_t accumulation = 1;   // micro-batches per step (gradient accumulation)
  std::size_t noise_every = 16;   // steps between gradient noise scale measurements; 0: off
  double noise_decay = 0.95;      // the noise scale's moving averages' weight on the past
  std::string compress = "none";  // none, or bf16: gradients travel as bfloat16
  std::string sparse_exchange = "off";  // off, auto, on, measured: embedding rows, not dense
  std::string shared_arena = "on";      // --reducer mpi: the arena in MPI shared memory
  bool overlap = false;                 // reduce buckets on a thread while backward runs
  double bucket_mb = 25;                // bucket size of the overlapped reduction, MiB
  double last_bucket_mb = 0.25;         // its last bucket (the arena's first values), MiB
  std::string comm_nice = "-10";        // the communication thread's nice value, or inherit
  std::string export_dir;               // --export: rank 0 writes the trained model here
};

/// The communication thread's nice value `--comm-nice` asks for (nullopt: inherit).
inline std::optional<int> opt_comm_nice(const train_config& c) {
  if (c.comm_nice == "inherit") return std::nullopt;
  return std::stoi(c.comm_nice);
}

/// `mib` MiB (`--bucket-mb`, `--last-bucket-mb`) in bytes.
inline std::size_t mib_bytes(double mib) {
  return static_cast<std::size_t>(std::llround(mib * 1048576.0));
}

inline void add_train_options(CLI::App& app, train_config& c) {
  app.add_option("--data", c.data, "CSV/TSV file with a header line (default: synthetic courses)")
      ->check(CLI::ExistingFile);
  app.add_option("--user-col", c.user_col, "name of the user id column")->capture_default_str();
  app.add_option("--item-col", c.item_col, "name of the item id column")->capture_default_str();
  app.add_option("--label-col", c.label_col, "name of the label column")->capture_default_str();
  app.add_option("--timestamp-col", c.timestamp_col, "name of an optional timestamp column");
  app.add_flag("--implicit", c.implicit, "labels are implicit 0/1 feedback (logistic loss, AUC)");
  add_ids_option(app, c.ids);
  app.add_option("--learners", c.learners, "synthetic data: learners")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--courses", c.courses, "synthetic data: courses")
      ->check(CLI::Range(2, 10000000))
      ->capture_default_str();
  app.add_flag("--synthetic-ratings", c.synthetic_ratings,
               "synthetic data: 1-5 ratings instead of implicit 0/1");
  app.add_option("--data-seed", c.data_seed, "synthetic data: generator seed")
      ->capture_default_str();
  app.add_option("--test-fraction", c.test_fraction, "share of rows held out for evaluation")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  app.add_option("--holdout", c.ranking.holdout,
                 "test rows: random (--test-fraction of the pairs) or last (each learner's "
                 "latest positive, ranked among --negatives sampled courses: HR@K and NDCG@K)")
      ->check(CLI::IsMember({"random", "last"}))
      ->capture_default_str();
  app.add_option("--negatives", c.ranking.negatives,
                 "--holdout last: courses a learner never took, ranked against the held-out one")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  app.add_option("--top-k", c.ranking.top_k, "--holdout last: K of HR@K and NDCG@K")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->each([&c](const std::string&) { c.ranking.top_k_given = true; })
      ->capture_default_str();
  app.add_option("--target", c.ranking.target,
                 "stop after the first epoch reaching METRIC=VALUE (hr@10=0.6, ndcg@10=0.4, "
                 "auc=0.8, rmse=0.9) and report the time to it");
  app.add_option("--model", c.model, "model")
      ->check(CLI::IsMember({"mf", "lr", "ncf"}))
      ->capture_default_str();
  app.add_option("--dim", c.dim, "embedding dimension (mf)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--layers", c.layers,
                 "ncf: widths of the MLP's dense layers, e.g. 64,32,16 (the GMF branch has "
                 "--dim dimensions)")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{65536}))
      ->capture_default_str();
  app.add_option("--l2", c.l2, "L2 regularisation")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--ranks", c.ranks,
                 "data-parallel ranks (threads of this process; with --reducer mpi, the MPI "
                 "world size)")
      ->check(CLI::Range(1, 1024))
      ->each([&c](const std::string&) { c.ranks_given = true; })
      ->capture_default_str();
  app.add_option("--reducer", c.reducer,
                 "gradient reducer: local (ranks are threads of this process) or mpi (one rank "
                 "per process, started by mpirun)")
      ->check(CLI::IsMember({"local", "mpi"}))
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "passes over the training data")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  app.add_option("--batch", c.batch, "global batch (over all ranks)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--lr", c.lr, "base learning rate (default 0.1 for rowwise-adagrad)")
      ->check(CLI::PositiveNumber)
      ->each([&c](const std::string&) { c.lr_given = true; })
      ->capture_default_str();
  app.add_option("--scaling", c.scaling, "learning-rate scaling rule for the global batch")
      ->check(CLI::IsMember({"none", "linear", "sqrt"}))
      ->capture_default_str();
  app.add_option("--reference-batch", c.reference_batch, "batch the base rate was tuned for")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--warmup-steps", c.warmup_steps, "linear warmup steps")->capture_default_str();
  app.add_option("--schedule", c.schedule, "learning-rate schedule")
      ->check(CLI::IsMember({"constant", "step", "cosine", "poly"}))
      ->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "optimizer")
      ->check(CLI::IsMember(
          {"sgd", "adam", "lars", "lamb", "lazy-adam", "rowwise-adagrad", "row-sparse-sgd"}))
      ->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "optimizer weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tail", c.tail, "tail policy of the shard sampler")
      ->check(CLI::IsMember({"pad", "drop", "none"}))
      ->capture_default_str();
  app.add_option("--seed", c.seed, "initialisation, shuffling and split seed")
      ->capture_default_str();
  app.add_option("--json", c.json, "write a JSON report to this file");
  app.add_option("--log", c.log, "write per-rank JSON-lines step records to this file");
  app.add_option("--log-every", c.log_every, "steps between log records (0: once per epoch)")
      ->capture_default_str();
  app.add_flag("--quiet", c.quiet, "print only the final line (no progress line either)");
  app.add_flag("--progress", c.progress,
               "show the progress line (epoch, share done, samples/s, ETA) on stderr even when it "
               "is not a terminal, a line every 5 s; on a terminal it is on by default");
  app.add_option("--trace", c.trace,
                 "write the step phases of every rank (data, compute, guard, wait, reduce, "
                 "optimizer, other) to FILE as Chrome trace events (Perfetto, chrome://tracing); "
                 "host space");
  app.add_option("--trace-from", c.trace_first, "first traced global step (1-based)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--trace-steps", c.trace_steps, "how many steps the trace holds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--trace-every", c.trace_every, "trace every K-th step from --trace-from")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--space", c.space, "execution space: host, or cuda (GPU build)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  app.add_option("--nonfinite", c.nonfinite,
                 "a non-finite loss or gradient on any rank: skip the step, stop, or off")
      ->check(CLI::IsMember({"skip", "stop", "off"}))
      ->capture_default_str();
  app.add_option("--replica-check-every", c.replica_check_every,
                 "steps between cross-rank parameter checksums (0: only at the end)")
      ->capture_default_str();
  app.add_flag("--rebroadcast", c.rebroadcast,
               "on a replica mismatch, rebroadcast rank 0's parameters instead of stopping");
  app.add_option("--sealed", c.sealed, "train on shards sealed by `tutti seal` (needs --key-file)")
      ->check(CLI::ExistingDirectory)
      ->excludes("--data");
  app.add_option("--key-file", c.key_file,
                 "key of --sealed: the master key (every rank opens every shard), or each "
                 "rank's own shard key, where '{rank}' in the path stands for the rank "
                 "(e.g. keys/shard-{rank}.key)")
      ->check([](const std::string& path) -> std::string {
        if (path.find("{rank}") != std::string::npos) return {};
        return CLI::ExistingFile(path);
      });
  app.add_option("--audit", c.audit,
                 "write each rank's hash-chained audit trail to this directory");
  app.add_option("--report", c.report,
                 "write the ledger's HTML page (report.html) to this directory");
  app.add_flag("--clean", c.clean,
               "set malformed, out-of-range and duplicate rows aside (counted by reason) instead "
               "of stopping at the first");
  app.add_option(
      "--quarantine", c.quarantine,
      "write each rejected row, with its line and reason, to this file (implies --clean)");
  app.add_option("--label-min", c.label_min, "smallest valid label, e.g. 1 (implies --clean)");
  app.add_option("--label-max", c.label_max, "largest valid label, e.g. 5 (implies --clean)");
  app.add_option("--duplicates", c.duplicates,
                 "repeated (user, item) pairs: keep_first, keep_last or average")
      ->check(CLI::IsMember({"keep_first", "keep_last", "average"}))
      ->capture_default_str();
  app.add_option("--max-rejected-share", c.max_rejected_share,
                 "refuse to train when more than this share of rows is rejected")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--link", c.link, "link of the printed projection (see tutti plan --help)")
      ->capture_default_str();
  app.add_option("--price", c.price, "price per device-hour in the printed projection")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "write checkpoints to this directory (rank 0; atomic; see docs/checkpoints.md)");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "steps between checkpoints (0: only when stopped by SIGINT/SIGTERM)")
      ->capture_default_str();
  app.add_option("--checkpoint-keep", c.checkpoint_keep, "checkpoints kept (the newest)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  app.add_option("--accumulation", c.accumulation,
                 "gradient accumulation: compute each rank's batch as this many micro-batches, "
                 "reduced once per step")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--noise-scale-every", c.noise_every,
                 "steps between measurements of the gradient noise scale (the batch beyond which "
                 "larger batches buy little; needs 2+ ranks or --accumulation 2+); 0: off")
      ->capture_default_str();
  app.add_option("--noise-scale-decay", c.noise_decay,
                 "the noise scale's moving averages' weight on the past, per measurement: "
                 "closer to 1 averages over more measurements (a tighter estimate of a slower "
                 "moving scale)")
      ->check(CLI::Range(0.5, 0.99999))
      ->capture_default_str();
  app.add_option("--compress", c.compress,
                 "gradient compression: none, or bf16 (pre-divided, reduced as bfloat16 with fp32 "
                 "accumulation; host ranks with --reducer local or mpi)")
      ->check(CLI::IsMember({"none", "bf16"}))
      ->capture_default_str();
  app.add_option("--sparse-exchange", c.sparse_exchange,
                 "embedding gradients as touched rows instead of a dense allreduce: off, auto "
                 "(when fewer bytes), on (host space), or measured (as auto, each path's bytes "
                 "weighted by its cost per byte measured on the first steps)")
      ->check(CLI::IsMember({"off", "auto", "on", "measured"}))
      ->capture_default_str();
  app.add_option("--shared-arena", c.shared_arena,
                 "--reducer mpi: on (when all processes share this host, the gradient arena "
                 "lives in an MPI shared-memory window and is reduced in place) or off (every "
                 "reduction through MPI_Allreduce)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_flag("--overlap", c.overlap,
               "overlapped reduction: buckets of the gradient are reduced while backward "
               "computes the rest (host ranks: a communication thread per rank; --space cuda: "
               "nccl_ring's communication stream, more than one rank); not with "
               "--sparse-exchange");
  app.add_option("--bucket-mb", c.bucket_mb,
                 "bucket size of --overlap in MiB (PyTorch DDP's default is 25)")
      ->check(CLI::Range(1e-5, 1e5))
      ->capture_default_str();
  app.add_option("--last-bucket-mb", c.last_bucket_mb,
                 "--overlap: the last bucket (the values backward makes final last, all that is "
                 "left to reduce after it) at most this many MiB; 0: buckets of --bucket-mb "
                 "throughout")
      ->check(CLI::Range(0.0, 1e5))
      ->capture_default_str();
  app.add_option("--comm-nice", c.comm_nice,
                 "--overlap: nice value of the communication threads (-20 to 19, lower runs "
                 "first), or inherit; below the process's needs CAP_SYS_NICE or RLIMIT_NICE, "
                 "and a refusal is a warning")
      ->check(CLI::IsMember({"inherit"}) | CLI::Range(-20, 19))
      ->capture_default_str();
  app.add_option("--timeout", c.timeout,
                 "seconds a collective waits for the other ranks before the run ends, naming "
                 "the ranks that never arrived (local and mpi reducers)")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  app.add_option("--resume", c.resume,
                 "continue from the newest valid checkpoint in this directory (and keep "
                 "checkpointing there unless --checkpoint-dir says otherwise)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--export", c.export_dir,
                 "after training, write the model's factors, biases and source ids as .npy "
                 "files with model.json to this directory (new, empty, or a previous export; "
                 "--model mf; read by tutti recommend)");
}

/// The signal that asked `tutti train` to stop (SIGINT or SIGTERM), or 0. A handler may only
/// store to a lock-free atomic; the trainer polls it through `train_options::stop`.
inline std::atomic<bool> stop_requested{false};
inline std::atomic<int> stop_signal{0};

extern "C" inline void tutti_train_on_signal(int sig) {
  stop_signal.store(sig);
  stop_requested.store(true);
}

/// Installs the SIGINT/SIGTERM handlers for the run: the first signal finishes the step in
/// progress, writes a checkpoint and exits; the default action is restored, so a second one
/// ends the process at once.
inline void install_stop_handlers() {
  static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);
  struct sigaction sa {};
  sa.sa_handler = tutti_train_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

namespace detail {

struct loaded_data {
  data::interactions all;
  data::split_result parts;
  std::string source;
  std::string key_id;                             // of the key that opened sealed shards
  std::optional<data::cleaning_report> cleaning;  // when the rows were cleaned
  // Sealed shards opened with shard keys: this holds only `shard`'s rows, and every rank
  // loads its own (see `load`).
  bool rank_local = false;
  int shard = -1;
  std::uint64_t sealed_rows = 0;           // rows of the whole sealed dataset (from its manifest)
  std::optional<checkpoint_state> resume;  // the checkpoint `--resume` continues from
  // --holdout last: the ranking lists of the held-out rows; else none.
  std::shared_ptr<const data::ranking_candidates> lists;
};

/// `--key-file` for `rank`: '{rank}' in the path stands for the rank number.
inline std::string key_file_of(const std::string& pattern, int rank) {
  std::string path = pattern;
  for (auto at = path.find("{rank}"); at != std::string::npos; at = path.find("{rank}"))
    path.replace(at, 6, std::to_string(rank));
  return path;
}

/// The data file and how to read it, as every command that reads one takes them.
inline data_file_options data_file_of(const train_config& c) {
  return {.path = c.data,
          .user_col = c.user_col,
          .item_col = c.item_col,
          .label_col = c.label_col,
          .timestamp_col = c.timestamp_col,
          .implicit = c.implicit,
          .ids = c.ids,
          .clean = c.clean,
          .quarantine = c.quarantine,
          .label_min = c.label_min,
          .label_max = c.label_max,
          .duplicates = c.duplicates,
          .max_rejected_share = c.max_rejected_share};
}

/// Loads what rank `rank` trains on. Every source but shard-keyed sealed data gives the whole
/// dataset (the same on every rank). With a shard key, rank r opens shard r only — with its
/// own key, never seeing another shard — and the directory must hold one shard per rank.
inline loaded_data load(const train_config& c, int rank) {
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
      TUTTI_EXPECTS(c.tail == "pad", "tutti train",
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
  } else if (c.data.empty()) {
    d.all = data::synthetic_courses({.learners = c.learners,
                                     .courses = c.courses,
                                     .implicit = !c.synthetic_ratings,
                                     .seed = c.data_seed});
    d.source = "synthetic courses (" + std::to_string(c.learners) + " learners, " +
               std::to_string(c.courses) + " courses, " +
               (c.synthetic_ratings ? "ratings" : "implicit") + ")";
  } else {
    loaded_file file = load_data_file(data_file_of(c));
    d.all = std::move(file.rows);
    d.cleaning = std::move(file.cleaning);
    d.source = c.data;
  }
  detail::check_ranking(c.ranking, c.target, d.rank_local, d.all.implicit);
  if (c.ranking.holdout == "last") {
    d.parts = data::leave_one_out(d.all, {.seed = c.seed});
    d.lists = detail::ranking_lists(c.ranking, d.parts, c.seed);
  } else {
    d.parts = data::split(d.all, {.test_fraction = c.test_fraction, .seed = c.seed});
  }
  return d;
}

inline double mean_label(const data::interactions& d) {
  double s = 0;
  for (float y : d.labels) s += y;
  return d.size() ? s / double(d.size()) : 0.0;
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

inline data_stats local_stats(const loaded_data& d) {
  return {.train_rows = d.parts.train.size(),
          .test_rows = d.parts.test.size(),
          .mean = mean_label(d.parts.train),
          .baseline = global_mean_rmse(d.parts.train, d.parts.test),
          .train_digest = d.parts.train.digest(),
          .rows = {}};
}

/// The ranks' shards added up: sizes, the label mean, the baseline RMSE and a digest of the
/// training rows in rank order. Collective.
template <class Reducer>
data_stats gather_stats(Reducer& reducer, const loaded_data& d) {
  const auto world = static_cast<std::size_t>(reducer.world_size());
  const auto& train = d.parts.train;
  const auto& test = d.parts.test;
  const std::uint64_t mine[2] = {train.size(), train.digest()};
  std::vector<std::uint64_t> all(2 * world);
  reducer.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
  data_stats st;
  st.train_digest = tutti::detail::mix64(world);
  for (std::size_t r = 0; r < world; ++r) {
    st.rows.push_back(all[2 * r]);
    st.train_rows += all[2 * r];
    st.train_digest = tutti::detail::mix64(st.train_digest ^ all[2 * r + 1]);
  }
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

struct run_output {
  fit_result result;
  data_stats stats;
  bool shared_arena = false;  // rank 0's gradient arena was the reducer's shared memory
  std::mutex mutex;
  trace_recorder* trace = nullptr;  // --trace: every rank's step phases
};

#if TUTTI_HAS_SODIUM
/// One rank's audit trail: the real samples of each step, one record per epoch.
class rank_audit {
 public:
  rank_audit(const train_config& c, const loaded_data& d, const data_stats& st, int rank, int world)
      : m_log(c.audit, data::audit_header{.rank = rank,
                                          .world_size = world,
                                          .train_rows = st.train_rows,
                                          .seed = c.seed,
                                          .dataset_digest = st.train_digest,
                                          .shard = d.rank_local ? d.shard : -1,
                                          .key_id = d.key_id,
                                          .sampler = d.rank_local ? "owned_shards/pad"
                                                                  : "shuffled_shards/" + c.tail}),
        m_n(st.train_rows),
        m_world(world),
        m_rank(rank),
        m_seed(c.seed),
        m_drop(!d.rank_local && c.tail == "drop") {}
  void batch(const step_progress& p, std::span<const std::uint64_t> ids,
             std::span<const float> weights) {
    if (p.step == 0) m_ids.clear();
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (weights[i] > 0) m_ids.push_back(ids[i]);
    m_last_step = p.step;
  }
  void end_epoch(std::size_t epoch) {
    m_log.record(epoch, 0, m_last_step, m_ids);
    std::vector<std::uint64_t> sat_out;
    if (m_drop && m_rank == 0) {
      // With the drop tail the last n mod W samples of the permutation sit out the epoch;
      // rank 0 names them so the verifier can still prove every sample is accounted for.
      std::vector<bool> used(m_n, false);
      for (int r = 0; r < m_world; ++r)
        for (auto i : shuffled_shards{.tail = tail_policy::drop}
                          .shard(m_n, m_world, r, m_seed, epoch)
                          .indices)
          used[i] = true;
      for (std::uint64_t i = 0; i < m_n; ++i)
        if (!used[i]) sat_out.push_back(i);
    }
    m_log.end_epoch(epoch, sat_out);
  }
  void finish() { m_log.finish(); }

 private:
  data::audit_log m_log;
  std::vector<std::uint64_t> m_ids;
  std::uint64_t m_last_step = 0;
  std::size_t m_n;
  int m_world;
  int m_rank;
  std::uint64_t m_seed;
  bool m_drop;
};
#endif

/// The settings of `tutti train` that change the result beyond the trainer's own options: the
/// checkpoint records them and a resume compares them (the trainer adds batch, lr, seed, data).
inline std::vector<std::pair<std::string, std::string>> run_config(const train_config& c,
                                                                   const loaded_data& d) {
  const auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  std::string layers;
  for (auto w : c.layers) layers += (layers.empty() ? "" : ",") + std::to_string(w);
  return {{"model", c.model},
          {"dim", std::to_string(c.dim)},
          {"layers", c.model == "ncf" ? layers : std::string("-")},
          {"l2", num(c.l2)},
          {"labels", d.all.implicit ? "implicit" : "ratings"},
          {"optimizer", c.optimizer},
          {"momentum", num(c.momentum)},
          {"weight_decay", num(c.weight_decay)},
          {"schedule", c.schedule},
          {"warmup_steps", std::to_string(c.warmup_steps)},
          {"tail", c.tail},
          {"space", c.space}};
}

inline nonfinite_policy parse_nonfinite(const std::string& name) {
  if (name == "stop") return nonfinite_policy::stop;
  if (name == "off") return nonfinite_policy::off;
  return nonfinite_policy::skip;
}

/// One rank's run. `leader` is the data this process loaded for its first rank; a rank that
/// holds its own shard (shard keys) and is not that rank loads its own here. `make_model(space,
/// mean)` builds the model with the training labels' mean as its initial bias.
template <class Space, class MakeModel, class Reducer>
void train_rank(const train_config& c, const loaded_data& leader, MakeModel make_model,
                const Space& space, Reducer reducer, json_lines_log* log, progress_line& bar,
                run_output& out) {
  const int rank = reducer.rank();
  std::optional<loaded_data> own;
  if (leader.rank_local && leader.shard != rank) own.emplace(load(c, rank));
  const loaded_data& d = own ? *own : leader;
  const data_stats stats = d.rank_local ? gather_stats(reducer, d) : local_stats(d);
  auto model = make_model(space, static_cast<float>(stats.mean));
  using Model = decltype(model);
  train_options opt{.batch = c.batch,
                    .epochs = c.epochs,
                    .base_lr = c.lr,
                    .scaling = parse_lr_scaling(c.scaling),
                    .reference_batch = c.reference_batch,
                    .seed = c.seed,
                    .log_every = c.log_every,
                    .log = log};
  opt.nonfinite = parse_nonfinite(c.nonfinite);
  opt.replica_check_every = c.replica_check_every;
  opt.rebroadcast_on_mismatch = c.rebroadcast;
  opt.checkpoint_dir = c.checkpoint_dir.empty() ? c.resume : c.checkpoint_dir;
  opt.checkpoint_every = c.checkpoint_every;
  opt.checkpoint_keep = c.checkpoint_keep;
  opt.run_config = run_config(c, d);
  opt.resume = leader.resume ? &*leader.resume : nullptr;
  opt.stop = &stop_requested;
  opt.accumulation = c.accumulation;
  opt.noise_scale_every = c.noise_every;
  opt.noise_scale_decay = c.noise_decay;
  opt.sparse_exchange = sparse_exchange_policy_named(c.sparse_exchange).value();
  opt.overlap_reduce = c.overlap;
  opt.bucket_bytes = mib_bytes(c.bucket_mb);
  opt.comm_thread_nice = opt_comm_nice(c);
  opt.last_bucket_bytes = mib_bytes(c.last_bucket_mb);
  opt.ranking = d.lists;
  opt.ranking_k = c.ranking.top_k;
  opt.target = c.target;
  opt.on_warning = [](const std::string& w) {
    std::fprintf(stderr, "tutti train: warning: %s\n", w.c_str());
    std::fflush(stderr);
  };
  const bool quiet = c.quiet;
#if TUTTI_HAS_SODIUM
  std::optional<rank_audit> audit;
  if (!c.audit.empty()) {
    audit.emplace(c, d, stats, rank, reducer.world_size());
    opt.on_batch = [&audit](const step_progress& p, std::span<const std::uint64_t> ids,
                            std::span<const float> w) {
      audit->batch(p, ids, w);
    };
  }
#else
  TUTTI_EXPECTS(c.audit.empty(), "tutti train",
                "--audit: this tutti was built without libsodium; expected a build that found it");
#endif
  opt.on_step = [&bar](const step_progress& p) {
    if (p.rank == 0) bar.update(p);
  };
  if (out.trace)
    opt.on_phase = [trace = out.trace](const phase_event& e) {
      trace->add(e);
    };
  opt.on_epoch = [&](int r, const epoch_record& e) {
#if TUTTI_HAS_SODIUM
    if (audit) audit->end_epoch(e.epoch - 1);
#endif
    if (r != 0 || quiet) return;
    bar.clear();
    std::printf("%6zu  %12.5f  %8s %-8.4f  %12.0f  %9.2f  %9s%s\n", e.epoch, e.train_loss,
                e.eval.metric, e.eval.value, e.samples_per_second, e.seconds,
                detail::noise_cell(e.noise_scale).c_str(),
                detail::ranking_cells(e.ranking).c_str());
    std::fflush(stdout);
  };
  auto fit_with = [&](auto sampler) {
    trainer<Model, decltype(sampler), Reducer, run_schedule, run_optimizer> t(
        std::move(model), std::move(sampler), std::move(reducer),
        make_schedule(c.schedule, c.warmup_steps),
        make_optimizer(c.optimizer, c.momentum, c.weight_decay), std::move(opt));
    if constexpr (requires { t.reducer().shared_arena(); })
      if (rank == 0) out.shared_arena = !t.reducer().shared_arena().empty();
    // Leave-one-out on implicit data holds out positives only, which have no AUC: the ranking
    // metrics are the evaluation.
    const bool ranks_only = d.lists && t.model().loss() == loss_kind::logistic;
    fit_result fitted = t.fit(d.parts.train, ranks_only ? data::interactions{} : d.parts.test);
    if (rank == 0) write_export(c, d, t);
    return fitted;
  };
  // Ranks holding their own shards visit only those; otherwise one permutation of the whole
  // training set is dealt to the ranks.
  const tail_policy tail = c.tail == "drop"   ? tail_policy::drop
                           : c.tail == "none" ? tail_policy::none
                                              : tail_policy::pad;
  fit_result r = d.rank_local ? fit_with(owned_shards{.rows = stats.rows})
                              : fit_with(shuffled_shards{.tail = tail});
#if TUTTI_HAS_SODIUM
  if (audit) audit->finish();
#endif
  if (rank == 0) {
    std::lock_guard lock(out.mutex);
    out.result = std::move(r);
    out.stats = stats;
  }
}

inline std::chrono::milliseconds timeout_of(const train_config& c) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(c.timeout * 1000)));
}

/// Runs the ranks of this process on `Space`; `make_model(space, mean)` builds one rank's model.
template <class Space, class MakeModel>
void run_ranks(const train_config& c, const loaded_data& d, MakeModel make_model,
               json_lines_log* log, progress_line& bar, run_output& out) {
  if constexpr (std::is_same_v<Space, host_space>) {
    // With --compress bf16 the reducer is wrapped: gradients travel as bfloat16.
    auto train_with = [&](auto reducer) {
      if (c.compress == "bf16")
        train_rank(c, d, make_model, host_space{},
                   compressed<decltype(reducer)>(std::move(reducer)), log, bar, out);
      else
        train_rank(c, d, make_model, host_space{}, std::move(reducer), log, bar, out);
    };
#if TUTTI_HAS_MPI
    if (c.reducer == "mpi") {
      // This process is one rank of MPI_COMM_WORLD.
      train_with(mpi_reducer{MPI_COMM_WORLD,
                             {.timeout = timeout_of(c), .shared_arena = c.shared_arena == "on"}});
      return;
    }
#endif
    if (c.ranks == 1) {
      train_with(no_op_reducer{});
    } else {
      run_local(c.ranks, [&](local_ring ring) { train_with(ring); }, {.timeout = timeout_of(c)});
    }
  }
#if defined(TUTTI_HAS_CUDA)
  if constexpr (std::is_same_v<Space, cuda_space>) {
    TUTTI_EXPECTS(cuda_device_count() > 0, "tutti train",
                  "--space cuda: no CUDA device is visible; expected a GPU (or --space host)");
#if TUTTI_HAS_NCCL && TUTTI_HAS_MPI
    if (c.reducer == "mpi") {
      // One process per GPU; NCCL bootstrapped over MPI.
      nccl_ring ring = make_nccl_ring_mpi(MPI_COMM_WORLD, {.timeout = timeout_of(c)});
      const cuda_space space = ring.space();
      train_rank(c, d, make_model, space, ring, log, bar, out);
      return;
    }
#endif
    if (c.ranks == 1) {
      train_rank(c, d, make_model, cuda_space{}, no_op_reducer{}, log, bar, out);
    } else {
#if TUTTI_HAS_NCCL
      run_nccl(c.ranks,
               [&](nccl_ring& ring) {
                 const cuda_space space = ring.space();
                 train_rank(c, d, make_model, space, ring, log, bar, out);
               },
               {.timeout = timeout_of(c)});
#else
      tutti::detail::throw_invalid("tutti train",
                                   "--space cuda --ranks " + std::to_string(c.ranks) +
                                       ": this tutti was built without NCCL; expected --ranks 1");
#endif
    }
  }
#endif
}

/// Trains the model `c.model` on `Space` with `c.ranks` ranks (the model dispatch of `tutti
/// train`).
template <class Space>
void train_models(const train_config& c, const loaded_data& d, loss_kind loss,
                  json_lines_log* log_ptr, progress_line& bar, run_output& out) {
  const std::int32_t users = d.all.n_users(), items = d.all.n_items();
  if (c.model == "mf") {
    using model_t = models::matrix_factorization<Space>;
    auto make = [&](const Space& space, float mean) {
      return model_t({.dim = c.dim,
                      .l2 = c.l2,
                      .loss = loss,
                      .global_bias_init = loss == loss_kind::squared ? mean : 0.f},
                     users, items, space);
    };
    run_ranks<Space>(c, d, make, log_ptr, bar, out);
  } else if (c.model == "ncf") {
#if TUTTI_HAS_BLAS
    using model_t = models::neural_cf<Space>;
    auto make = [&](const Space& space, float mean) {
      return model_t({.gmf_dim = static_cast<std::size_t>(c.dim),
                      .layers = c.layers,
                      .l2 = c.l2,
                      .loss = loss,
                      .output_bias_init = loss == loss_kind::squared ? mean : 0.f},
                     users, items, space);
    };
    run_ranks<Space>(c, d, make, log_ptr, bar, out);
#else
    tutti::detail::throw_invalid("tutti train",
                                 "--model ncf: this tutti was built without a CBLAS; expected a "
                                 "build that found one (Debian's libopenblas-dev)");
#endif
  } else {
    using model_t = models::logistic_regression<Space>;
    auto make = [&](const Space& space, float) {
      return model_t({.l2 = c.l2, .loss = loss}, users, items, space);
    };
    run_ranks<Space>(c, d, make, log_ptr, bar, out);
  }
}

#if defined(TUTTI_CLI_CUDA)
// The CUDA part of the program, in a translation unit of its own compiled by nvcc
// (cuda_parts.cu), so that the rest is compiled by the host compiler with its vector kernels.
void train_models_cuda(const train_config& c, const loaded_data& d, loss_kind loss,
                       json_lines_log* log_ptr, progress_line& bar, run_output& out);
int visible_cuda_devices();
#endif

inline nlohmann::json to_json(const eval_result& e) {
  return {{"metric", e.metric}, {"value", e.value}};
}

inline nlohmann::json to_json(const account_summary& a) {
  return {{"mean", a.mean}, {"p50", a.p50}, {"p95", a.p95}, {"total", a.total}};
}

/// The measured step the projection starts from: rank 0's mean accounts. Guard, wait and
/// other time scale with the work of a device, so they count as compute.
inline measured_step to_measured_step(const fit_result& r, std::size_t train_rows) {
  const ledger_summary& l = r.ledger;
  measured_step m;
  m.data_s = l.data.mean;
  m.compute_s = l.compute.mean + l.guard.mean + l.wait.mean + l.other.mean;
  m.optimizer_s = l.optimizer.mean;
  m.reduce_total_s = l.reduce_total.mean;
  m.reduce_exposed_s = l.reduce_exposed.mean;
  m.bytes_reduced = double(l.bytes_reduced_per_step);
  m.global_batch = double(r.global_batch);
  m.samples_per_epoch = double(train_rows);
  m.world_size = r.world_size;
  return m;
}

/// The ledger as `tutti train` prints it: the step by account, the bandwidth, the projection.
inline void print_ledger(const fit_result& r, const projection& p, const std::string& link) {
  const ledger_summary& l = r.ledger;
  std::printf("\nledger (rank 0, milliseconds per step: mean / p50 / p95)\n");
  const std::pair<const char*, const account_summary*> rows[] = {
      {"data", &l.data},           {"compute", &l.compute},     {"guard", &l.guard},
      {"wait", &l.wait},           {"reduce", &l.reduce_total}, {"  exposed", &l.reduce_exposed},
      {"optimizer", &l.optimizer}, {"other", &l.other},         {"step", &l.step}};
  for (const auto& [name, a] : rows)
    std::printf("  %-10s %9.3f %9.3f %9.3f\n", name, 1e3 * a->mean, 1e3 * a->p50, 1e3 * a->p95);
  std::printf(
      "  reduced %.2f MB per step; algbw %.2f GB/s, busbw %.2f GB/s (busbw = algbw x "
      "2(n-1)/n, n = %d)\n",
      double(l.bytes_reduced_per_step) / 1e6, l.algbw / 1e9, l.busbw / 1e9, r.world_size);
  const auto slow = l.ranks.slow_ranks();
  if (!slow.empty()) {
    std::printf("  slow ranks (>= %.0f%% above the median work time):", 100 * l.ranks.threshold);
    for (int s : slow) std::printf(" %d", s);
    std::printf("\n");
  }
  std::printf(
      "\nprojection to devices of this kind on %s (per-device batch kept; see tutti plan)\n",
      link.c_str());
  std::printf("%8s %12s %14s %9s %11s", "devices", "step ms", "samples/s", "speedup", "efficiency");
  std::printf(p.b_noise ? " %12s %10s %10s\n" : "\n", "global batch", "samples x", "to-loss x");
  for (const auto& row : p.rows) {
    std::printf("%8d %12.3f %14.0f %9.2f %10.0f%%", row.devices, 1e3 * row.step_s,
                row.samples_per_s, row.speedup, 100 * row.efficiency);
    if (p.b_noise)
      std::printf(" %12.0f %10.3f %10.2f\n", row.global_batch, row.samples_factor,
                  row.loss_speedup);
    else
      std::printf("\n");
  }
  if (p.b_noise)
    std::printf(
        "(at the measured B_noise ~ %.0f: samples x = the samples the same loss takes at N's "
        "global batch; to-loss x = one device's time to it over N's; tutti plan --from says "
        "where more devices stop paying)\n",
        *p.b_noise);
}

inline nlohmann::json to_json(const phase_seconds& p) {
  return {
      {"data", p.data}, {"compute", p.compute}, {"reduce", p.reduce}, {"optimizer", p.optimizer}};
}

}  // namespace detail

namespace detail {

inline void check_batch(const train_config& c) {
  TUTTI_EXPECTS(c.batch >= static_cast<std::size_t>(c.ranks), "tutti train",
                "--batch " + std::to_string(c.batch) + " is smaller than --ranks " +
                    std::to_string(c.ranks) + "; expected at least one sample per rank and step");
}

/// Trains with `c.ranks` ranks and reports. `rank` is this process's rank: 0 unless it is one
/// process of an MPI run, where only rank 0 prints the table and writes the JSON report, and
/// every process appends its ranks' records to the log (`append_log`).
inline int train_and_report(const train_config& c, int rank, bool append_log) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  check_batch(c);
#if defined(TUTTI_CLI_CUDA)
  TUTTI_EXPECTS(c.space != "cuda" || detail::visible_cuda_devices() > 0, "tutti train",
                "--space cuda: no CUDA device is visible; expected a GPU (or --space host)");
#endif
  const bool leader = rank == 0;
  if (leader) check_export(c);
  TUTTI_EXPECTS(c.compress == "none" || c.space == "host", "tutti train",
                "--compress " + c.compress +
                    " with --space cuda: compressed reduction runs on host ranks only for now; "
                    "expected --compress none or --space host");
  detail::loaded_data d = detail::load(c, rank);
  if (!c.resume.empty()) {
    auto found = find_latest_checkpoint(c.resume);
    if (leader && !c.quiet)
      for (const auto& why : found ? found->skipped : std::vector<std::string>{})
        std::fprintf(stderr, "tutti train: skipping a checkpoint that does not read back: %s\n",
                     why.c_str());
    TUTTI_EXPECTS(found.has_value(), "tutti train",
                  "--resume " + c.resume +
                      ": no valid checkpoint (ckpt-*.tck) in the directory; expected one written "
                      "by --checkpoint-dir");
    if (leader && !c.quiet)
      std::printf(
          "tutti train: resuming from %s (epoch %llu, step %llu, global step %llu, "
          "written by %d rank(s))\n",
          found->file.string().c_str(), static_cast<unsigned long long>(found->state.epoch + 1),
          static_cast<unsigned long long>(found->state.step_in_epoch),
          static_cast<unsigned long long>(found->state.global_step), found->state.world_size);
    d.resume = std::move(found->state);
  }
  install_stop_handlers();
  const bool implicit = d.all.implicit;
  const loss_kind loss = implicit ? loss_kind::logistic : loss_kind::squared;

  if (!c.quiet && leader) {
    std::printf("tutti train: %s\n", d.source.c_str());
    if (d.cleaning) {
      std::printf("  cleaning: read %zu rows, used %zu, rejected %zu", d.cleaning->rows_read,
                  d.cleaning->rows_used, d.cleaning->rows_rejected);
      for (const auto& [reason, n] : d.cleaning->rejected)
        if (n) std::printf("; %s %zu", reason.c_str(), n);
      std::printf("%s\n", c.quarantine.empty() ? "" : (" -> " + c.quarantine).c_str());
    }
    if (d.rank_local)
      std::printf(
          "  rows %llu in %d shards (this rank's shard: %zu), users %d, items %d, %s labels\n",
          static_cast<unsigned long long>(d.sealed_rows), c.ranks, d.all.size(), d.all.n_users(),
          d.all.n_items(), implicit ? "implicit 0/1" : "rating");
    else
      std::printf("  rows %zu (train %zu, test %zu), users %d, items %d, %s labels\n", d.all.size(),
                  d.parts.train.size(), d.parts.test.size(), d.all.n_users(), d.all.n_items(),
                  implicit ? "implicit 0/1" : "rating");
    std::printf("  model %s, %d rank(s), global batch %zu, %s lr %g (%s scaling), %s schedule\n",
                c.model.c_str(), c.ranks, c.batch, c.optimizer.c_str(), c.lr, c.scaling.c_str(),
                c.schedule.c_str());
    std::printf("\n%6s  %12s  %17s  %12s  %9s  %9s\n", "epoch", "train loss", "test metric",
                "samples/s", "seconds", "B_noise");
    std::fflush(stdout);
  }

  std::optional<std::ofstream> log_file;
  std::optional<json_lines_log> log;
  if (!c.log.empty()) {
    log_file.emplace(c.log, append_log ? std::ios::app : std::ios::out);
    if (!*log_file) throw error("tutti train: cannot write the log file '" + c.log + "'");
    log.emplace(*log_file);
  }
  json_lines_log* log_ptr = log ? &*log : nullptr;

  progress_line bar(c.progress, c.quiet, c.batch);
  detail::run_output out;
  TUTTI_EXPECTS(c.trace.empty() || c.space == "host", "tutti train",
                "--trace with --space cuda: a device space's phases are GPU events resolved in "
                "batches and are not traced; expected --space host");
  std::optional<trace_recorder> trace;
  if (!c.trace.empty()) {
    trace.emplace(c.trace_first - 1, c.trace_steps, c.trace_every);
    out.trace = &*trace;
  }
  const std::int32_t users = d.all.n_users(), items = d.all.n_items();
  try {
    if (c.space == "cuda") {
#if defined(TUTTI_CLI_CUDA)
      detail::train_models_cuda(c, d, loss, log_ptr, bar, out);
#else
      tutti::detail::throw_invalid("tutti train",
                                   "--space cuda: this tutti was built without CUDA; expected "
                                   "--space host, or a build where nvcc was found");
#endif
    } else {
      detail::train_models<host_space>(c, d, loss, log_ptr, bar, out);
    }
  } catch (const interrupted_error& e) {
    // Every rank stopped after the same step; rank 0 wrote the checkpoint.
    bar.clear();
    const int sig = stop_signal.load();
    if (leader) {
      const std::string dir = c.checkpoint_dir.empty() ? c.resume : c.checkpoint_dir;
      std::string where = "no checkpoint written (no --checkpoint-dir)";
      if (!dir.empty()) {
        const auto found = find_latest_checkpoint(dir);
        where = found && found->state.global_step == e.global_step()
                    ? "checkpoint " + found->file.string() + "; continue with --resume " + dir
                    : "the checkpoint of step " + std::to_string(e.global_step()) +
                          " was not found in " + dir;
      }
      std::fprintf(stderr, "tutti train: %s after global step %zu; %s\n",
                   sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)", e.global_step(),
                   where.c_str());
      std::fflush(stderr);
    }
    return 128 + (sig ? sig : SIGTERM);
  }
  bar.clear();
  if (trace) {
    // One file per process: an MPI rank other than 0 writes FILE.<rank>.
    const std::string path = rank == 0 ? c.trace : c.trace + "." + std::to_string(rank);
    trace->write(path, rank);
    if (leader && !c.quiet)
      std::printf("trace: %s (%zu intervals; open in ui.perfetto.dev or chrome://tracing)\n",
                  path.c_str(), trace->size());
  }
  if (!leader) return 0;
  const fit_result& r = out.result;
  const bool shared_arena = out.shared_arena;
  const detail::data_stats& stats = out.stats;
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  const double baseline = implicit ? 0.5 : stats.baseline;
  const char* baseline_name = implicit ? "random scores" : "global mean";
  // A model scoring at random ranks the held-out course among N + 1 with chance K / (N + 1).
  const double random_hr = std::min(1.0, double(c.ranking.top_k) / double(c.ranking.negatives + 1));
  if (c.quiet) {
    if (r.eval.metric != metric_name::none || !r.ranking)
      std::printf("%s %.5f (%s: %.5f), ", r.eval.metric, r.eval.value, baseline_name, baseline);
    if (r.ranking)
      std::printf("hr@%zu %.5f ndcg@%zu %.5f (random: hr %.5f), ", r.ranking->k,
                  r.ranking->hit_rate, r.ranking->k, r.ranking->ndcg, random_hr);
    std::printf("final train loss %.6f, %.1f s\n", r.epochs.back().train_loss, seconds);
  } else {
    if (r.eval.metric != metric_name::none || !r.ranking)
      std::printf("\ntest %s %.5f  (%s: %.5f)\n", r.eval.metric, r.eval.value, baseline_name,
                  baseline);
    if (r.ranking)
      std::printf(
          "\ntest hr@%zu %.5f  ndcg@%zu %.5f  over %zu learners, %zu sampled courses each "
          "(random scores: hr %.5f)\n",
          r.ranking->k, r.ranking->hit_rate, r.ranking->k, r.ranking->ndcg, r.ranking->lists,
          c.ranking.negatives, random_hr);
    if (c.target)
      std::printf("%s\n",
                  detail::target_sentence(c.ranking, *c.target, r.target, r.epochs.size()).c_str());
    std::printf("%s\n", detail::noise_sentence(r, c.batch).c_str());
    std::printf(
        "time per phase on rank 0: data %.2fs  compute %.2fs  reduce %.2fs  optimizer %.2fs"
        "  (total %.1f s)\n",
        r.phases.data, r.phases.compute, r.phases.reduce, r.phases.optimizer, seconds);
  }
  projection proj =
      project(detail::to_measured_step(r, stats.train_rows), {.devices = {1, 2, 4, 8},
                                                              .intra = find_link(c.link),
                                                              .inter = find_link(c.link),
                                                              .price_per_device_hour = c.price});
  if (r.noise_scale.known()) apply_noise_scale(proj, r.noise_scale.b_simple, 0.2);
  if (!c.quiet) detail::print_ledger(r, proj, c.link);
  if (!c.report.empty()) {
    double measured = 0;
    report_input page{.title = "tutti train: " + d.source,
                      .proj = proj,
                      .notes = {"measured on " + std::to_string(r.world_size) + " rank(s), " +
                                c.space + " space; projection on " + c.link},
                      .global_batch = double(c.batch)};
    for (const auto& e : r.epochs) {
      measured += e.samples_per_second;
      if (e.noise_scale.known())
        page.noise_scale.emplace_back(double(e.epoch), e.noise_scale.b_simple);
      else if (e.noise_scale.bounded())
        page.noise_scale_at_least.emplace_back(double(e.epoch), e.noise_scale.b_simple_at_least);
    }
    page.measured = {{r.world_size, measured / double(r.epochs.size())}};
    const std::string path = write_report(c.report, page);
    if (!c.quiet) std::printf("\nledger page: %s\n", path.c_str());
  }

  if (!c.json.empty()) {
    nlohmann::json j;
    j["dataset"] = {
        {"source", d.source},
        {"rows_read", d.cleaning ? d.cleaning->rows_read : stats.train_rows + stats.test_rows},
        {"rows_used", stats.train_rows + stats.test_rows},
        {"rows_rejected", d.cleaning ? d.cleaning->rows_rejected : 0},
        {"rejected", d.cleaning ? nlohmann::json(d.cleaning->rejected) : nlohmann::json::object()},
        {"train_rows", stats.train_rows},
        {"test_rows", stats.test_rows},
        {"rank_local_shards", d.rank_local},
        {"users", users},
        {"items", items},
        {"implicit", implicit}};
    j["model"] = c.model;
    j["world_size"] = r.world_size;
    j["shared_arena"] = shared_arena;
    j["global_batch"] = r.global_batch;
    j["lr"] = r.lr;
    j["optimizer"] = c.optimizer;
    j["schedule"] = c.schedule;
    j["seed"] = c.seed;
    nlohmann::json epochs = nlohmann::json::array();
    for (const auto& e : r.epochs)
      epochs.push_back({{"epoch", e.epoch},
                        {"train_loss", e.train_loss},
                        {"samples_per_rank", e.samples_per_rank},
                        {"samples_before_resume", e.samples_before_resume},
                        {"weighted_samples", e.weighted_samples},
                        {"steps", e.steps},
                        {"test", detail::to_json(e.eval)},
                        {"seconds", e.seconds},
                        {"step_seconds", e.step_seconds},
                        {"samples_per_second", e.samples_per_second},
                        {"noise_scale", detail::to_json(e.noise_scale)},
                        {"phases_rank0", detail::to_json(e.phases)}});
    for (std::size_t i = 0; i < r.epochs.size(); ++i)
      if (r.epochs[i].ranking) epochs[i]["ranking"] = detail::to_json(*r.epochs[i].ranking);
    j["epochs"] = epochs;
    j["noise_scale"] = detail::to_json(r.noise_scale, r.noise_scale_why);
    j["eval"] = detail::to_json(r.eval);
    j["eval"]["baseline"] = {{"name", baseline_name}, {"value", baseline}};
    j["holdout"] = c.ranking.holdout;
    if (r.ranking) {
      j["ranking"] = detail::to_json(*r.ranking);
      j["ranking"]["negatives"] = c.ranking.negatives;
      j["ranking"]["random_hit_rate"] = random_hr;
    }
    if (c.target) j["target"] = detail::to_json(*c.target, r.target);
    j["phases_rank0"] = detail::to_json(r.phases);
    {
      const ledger_summary& l = r.ledger;
      nlohmann::json led;
      led["steps"] = l.steps;
      led["bytes_reduced_per_step"] = l.bytes_reduced_per_step;
      led["dense_bytes_per_step"] = r.dense_bytes_per_step;
      led["bytes_saved_per_step"] = r.bytes_saved_per_step;
      led["sparse_steps"] = r.sparse_steps;
      if (c.sparse_exchange == "measured") led["sparse_row_cost_ratio"] = r.sparse_row_cost_ratio;
      led["overlap"] = c.overlap;
      if (c.overlap) {
        led["bucket_bytes"] = mib_bytes(c.bucket_mb);
        led["last_bucket_bytes"] = mib_bytes(c.last_bucket_mb);
        led["comm_thread_nice"] =
            r.comm_thread_nice ? nlohmann::json(*r.comm_thread_nice) : nlohmann::json(nullptr);
      }
      led["param_count"] = r.param_count;
      led["optimizer_state_floats"] = r.optimizer_state_floats;
      led["reduce_exposed_seconds"] = l.reduce_exposed.total;
      led["algbw_bytes_per_s"] = l.algbw;
      led["busbw_bytes_per_s"] = l.busbw;
      led["accounts"] = {{"data", detail::to_json(l.data)},
                         {"compute", detail::to_json(l.compute)},
                         {"guard", detail::to_json(l.guard)},
                         {"wait", detail::to_json(l.wait)},
                         {"reduce_total", detail::to_json(l.reduce_total)},
                         {"reduce_exposed", detail::to_json(l.reduce_exposed)},
                         {"optimizer", detail::to_json(l.optimizer)},
                         {"other", detail::to_json(l.other)},
                         {"step", detail::to_json(l.step)}};
      led["slow_ranks"] = l.ranks.slow_ranks();
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& row : proj.rows)
        rows.push_back({{"devices", row.devices},
                        {"step_s", row.step_s},
                        {"samples_per_s", row.samples_per_s},
                        {"speedup", row.speedup},
                        {"efficiency", row.efficiency},
                        {"cost_per_epoch", row.cost_per_epoch}});
      led["projection"] = {{"link", c.link}, {"rows", rows}};
      j["ledger"] = led;
      j["skipped_steps"] = r.skipped_steps;
      j["space"] = c.space;
    }
    {
      char sum[17];
      std::snprintf(sum, sizeof sum, "%016llx",
                    static_cast<unsigned long long>(r.parameters_checksum));
      j["parameters_checksum"] = sum;
      j["resumed_from_step"] = r.resumed_from_step;
      j["checkpoints_written"] = r.checkpoints_written;
      j["last_checkpoint"] = r.last_checkpoint;
    }
    j["seconds"] = seconds;
    // What `tutti plan --from` needs to model ranks that share a host: threads and CPU time.
#if defined(_OPENMP)
    j["omp_threads"] = omp_get_max_threads();
#endif
    {
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      j["cpu_seconds"] = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                         1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    }
    std::ofstream f(c.json);
    if (!f) throw error("tutti train: cannot write the JSON report '" + c.json + "'");
    f << j.dump(2) << '\n';
  }
  return 0;
}

#if TUTTI_HAS_MPI
/// `tutti train --reducer mpi`: this process is one rank of MPI_COMM_WORLD. Usage errors, the
/// same on every process, end every process with exit code 2 and one line from rank 0; any
/// later error ends the whole job through MPI_Abort with a line naming the rank.
inline int run_train_mpi(train_config c) {
  // --overlap reduces on a communication thread: MPI must allow calls from it.
  mpi_session session(c.overlap ? MPI_THREAD_SERIALIZED : MPI_THREAD_FUNNELED);
  int world = 1, rank = 0;
  TUTTI_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  TUTTI_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  try {
    TUTTI_EXPECTS(!c.ranks_given || c.ranks == world, "tutti train",
                  "--ranks " + std::to_string(c.ranks) +
                      " with --reducer mpi, but mpirun started " + std::to_string(world) +
                      " process(es); expected --ranks to be left out or equal to the number of "
                      "processes");
    c.ranks = world;
    check_batch(c);
  } catch (const invalid_argument& e) {
    // Every process sees the same usage error; rank 0 says it once, and nobody exits before
    // that line is out (mpiexec ends the job at the first non-zero exit).
    if (rank == 0) {
      std::fprintf(stderr, "tutti: error: %s\n", e.what());
      std::fflush(stderr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return 2;
  }
  return mpi_abort_on_exception([&] {
#if defined(_OPENMP)
    // Like run_local: the processes on one host share its cores instead of each taking all.
    if (std::getenv("OMP_NUM_THREADS") == nullptr) {
      MPI_Comm host = MPI_COMM_NULL;
      TUTTI_MPI_CHECK(
          MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host));
      int on_host = 1;
      const int size_code = MPI_Comm_size(host, &on_host);
      MPI_Comm_free(&host);
      TUTTI_MPI_CHECK(size_code);
      omp_set_num_threads(std::max(1, omp_get_max_threads() / on_host));
    }
#endif
    if (!c.log.empty()) {
      // Rank 0 starts the log afresh; then every process appends its records to it.
      if (rank == 0) {
        std::ofstream fresh(c.log, std::ios::trunc);
        if (!fresh) throw error("tutti train: cannot write the log file '" + c.log + "'");
      }
      TUTTI_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    }
    return train_and_report(c, rank, true);
  });
}
#endif

}  // namespace detail

/// The base learning rate of `optimizer` when --lr is not given: 0.01 (tuned with Adam at batch
/// 4,096), 0.1 for row-wise Adagrad, whose steps shrink as its accumulators grow (the best of
/// 0.01 to 1 over the synthetic data and InstEval; docs/optimizers.md).
inline double default_lr(const std::string& optimizer) {
  return optimizer == "rowwise-adagrad" ? 0.1 : 0.01;
}

/// Runs `tutti train`; returns the process exit code.
inline int run_train(train_config c) {
  if (!c.lr_given) c.lr = default_lr(c.optimizer);
  c.target = detail::parse_target(c.ranking);
  if (c.reducer == "mpi") {
#if TUTTI_HAS_MPI
    return detail::run_train_mpi(c);
#else
    tutti::detail::throw_invalid(
        "tutti train",
        "--reducer mpi: this tutti was built without MPI; expected --reducer "
        "local, or a build that found MPI (e.g. Debian's libopenmpi-dev)");
#endif
  }
  return detail::train_and_report(c, 0, false);
}

}  // namespace tutti::cli
