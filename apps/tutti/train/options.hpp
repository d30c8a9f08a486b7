// SPDX-License-Identifier: Apache-2.0
// `tutti train`'s command line: the options, registered in groups by concern.
#pragma once

#include "config.hpp"

#include <CLI/CLI.hpp>

namespace tutti::cli {

/// Registers the data: `--data` and how to read it, the synthetic courses, and the held-out rows.
inline void add_train_data_options(CLI::App& app, train_config& c) {
  add_data_file_options(app, c.file,
                        "CSV/TSV file with a header line (default: synthetic courses); several "
                        "(--data day1.csv day2.csv, or --data repeated) are read one after the "
                        "other as one log, learners and courses matched by id",
                        true);
  app.add_option("--replay-share", c.replay_share,
                 "with several --data files: the share of the other (learner, course) pairs "
                 "trained on beside every pair of the last file (1: all the history)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  add_cleaning_options(app, c.file, "train");
  add_choice(app, "--feedback", c.feedback,
             "labels (train on the file's labels as they are) or implicit (a log of what "
             "learners did: every row one positive, or every row whose --label-col is above "
             "0; the label column is optional; trained with --sampled-negatives, evaluated "
             "by ranking)");
  app.add_option("--repeats", c.repeats,
                 "--feedback implicit: a (learner, course) pair logged more than once counts "
                 "once, or each time")
      ->check(CLI::IsMember({"once", "each"}))
      ->capture_default_str();
  app.add_option("--sampled-negatives", c.sampled_negatives,
                 "courses drawn in each step for every positive among those its learner did "
                 "not take, trained as 0 labels (default 4 with --feedback implicit, else 0)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1000}))
      ->each([&c](const std::string&) { c.sampled_negatives_given = true; });
  add_choice(app, "--negative-sampler", c.negatives_from,
             "the distribution --sampled-negatives are drawn from: uniform, or popularity "
             "(a course in proportion to its count^--negative-alpha)");
  app.add_option("--negative-alpha", c.negative_alpha,
                 "--negative-sampler popularity: the exponent of the counts (0 is uniform)")
      ->check(CLI::Range(0.0, 4.0))
      ->capture_default_str();
  add_choice(app, "--loss", c.loss,
             "what training minimises: auto (squared on ratings, logistic on 0/1 labels), "
             "squared, logistic (each row apart), bpr (each positive above each of its "
             "--sampled-negatives) or softmax (the positive's share among its negatives, "
             "corrected for --negative-sampler)");
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
  app.add_option("--eval", c.ranking.eval,
                 "--holdout last: sampled (--negatives courses per list) or full (every course "
                 "the learner did not take: HR@K is then Recall@K of the full ranking)")
      ->check(CLI::IsMember({"sampled", "full"}))
      ->capture_default_str();
  app.add_option("--top-k", c.ranking.top_k, "--holdout last: K of HR@K and NDCG@K")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->each([&c](const std::string&) { c.ranking.top_k_given = true; })
      ->capture_default_str();
  app.add_option("--target", c.ranking.target,
                 "stop after the first epoch reaching METRIC=VALUE (hr@10=0.6, ndcg@10=0.4, "
                 "auc=0.8, rmse=0.9) and report the time to it");
}

/// Registers sealed shards and the audit trail: `--sealed`, `--key-file`, `--audit`.
inline void add_train_sealed_options(CLI::App& app, train_config& c) {
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
}

/// Registers the model and its optimisation: `--model` to `--seed`.
inline void add_train_model_options(CLI::App& app, train_config& c) {
  add_choice(app, "--model", c.model, "model");
  app.add_option("--dim", c.dim, "embedding dimension (mf)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--layers", c.layers,
                 "ncf: widths of the MLP's dense layers, e.g. 64,32,16 (the GMF branch has "
                 "--dim dimensions)")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{65536}))
      ->capture_default_str();
  app.add_option("--l2", c.l2, "L2 regularisation (0.003 with --feedback implicit)")
      ->check(CLI::NonNegativeNumber)
      ->each([&c](const std::string&) { c.l2_given = true; })
      ->capture_default_str();
  app.add_option("--epochs", c.epochs,
                 "passes over the training data (20 with --feedback implicit)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->each([&c](const std::string&) { c.epochs_given = true; })
      ->capture_default_str();
  app.add_option("--batch", c.batch, "global batch (over all ranks)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--lr", c.lr,
                 "base learning rate (default 0.01; 0.1 for rowwise-adagrad; 0.03 for adam and "
                 "lazy-adam with --feedback implicit and --model mf)")
      ->check(CLI::PositiveNumber)
      ->each([&c](const std::string&) { c.lr_given = true; })
      ->capture_default_str();
  add_choice(app, "--scaling", c.scaling, "learning-rate scaling rule for the global batch");
  app.add_option("--reference-batch", c.reference_batch, "batch the base rate was tuned for")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--warmup-steps", c.warmup_steps, "linear warmup steps")->capture_default_str();
  add_choice(app, "--schedule", c.schedule, "learning-rate schedule");
  add_choice(app, "--optimizer", c.optimizer, "optimizer")->each([&c](const std::string&) {
    c.optimizer_given = true;
  });
  app.add_option("--momentum", c.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "optimizer weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add_choice(app, "--tail", c.tail, "tail policy of the shard sampler");
  app.add_option("--seed", c.seed, "initialisation, shuffling and split seed")
      ->capture_default_str();
  app.add_option("--split-seed", c.split_seed,
                 "seed of the held-out rows and the ranking lists (default: --seed), so runs of "
                 "other --seed are evaluated on the same rows and lists");
}

/// Registers the ranks and their reduction: `--ranks`, `--reducer`, `--space` and how gradients
/// travel.
inline void add_train_rank_options(CLI::App& app, train_config& c) {
  app.add_option("--ranks", c.ranks,
                 "data-parallel ranks (threads of this process: one rank uses every core, "
                 "several share them; default 1, or one per visible GPU with --space cuda; with "
                 "--reducer mpi, the MPI world size)")
      ->check(CLI::Range(1, 1024))
      ->each([&c](const std::string&) { c.ranks_given = true; })
      ->capture_default_str();
  add_choice(app, "--reducer", c.reducer,
             "gradient reducer: local (ranks are threads of this process) or mpi (one rank "
             "per process, started by mpirun)");
  add_choice(app, "--space", c.space, "execution space: host, or cuda (GPU build)");
  app.add_option("--share-cores", c.share_cores,
                 "one rank on the host: on (its OpenMP threads spin between regions and give a "
                 "core up to other work while it runs, looked at every 100 ms; see "
                 "docs/spaces.md) or off (the threads and wait libgomp starts with)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--step-graphs", c.step_graphs,
                 "--space cuda, one rank, a row-sparse optimizer: on (the steady step is recorded "
                 "once as a CUDA Graph and replayed, one launch a step; the same kernels, the same "
                 "parameters) or off (every kernel launched one by one)")
      ->check(CLI::IsMember({"on", "off"}))
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
  add_choice(app, "--compress", c.compress,
             "gradient compression: none, or bf16 (pre-divided, reduced as bfloat16 with fp32 "
             "accumulation; host ranks with --reducer local or mpi)");
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
  app.add_option("--compact-gradient", c.compact_gradient,
                 "row-sparse optimizers on one host rank: on (the gradient of the rows a step "
                 "touched in a buffer sized by the batch) or off (a gradient arena the size of "
                 "the tables; the same parameters, bit for bit)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_flag("--rows-in-place", c.rows_in_place,
               "host space: the step reads the training rows where the split holds them, no "
               "copy of one record a row (12 bytes a row less; the gather is a few percent "
               "slower; the same parameters, bit for bit)");
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
}

/// Registers what guards the run: the non-finite guard, replica checks and checkpoints.
inline void add_train_safety_options(CLI::App& app, train_config& c) {
  add_choice(app, "--nonfinite", c.nonfinite,
             "a non-finite loss or gradient on any rank: skip the step, stop, or off");
  app.add_option("--replica-check-every", c.replica_check_every,
                 "steps between cross-rank parameter checksums (0: only at the end)")
      ->capture_default_str();
  app.add_flag("--rebroadcast", c.rebroadcast,
               "on a replica mismatch, rebroadcast rank 0's parameters instead of stopping");
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "write checkpoints to this directory (rank 0; atomic; see docs/checkpoints.md)");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "steps between checkpoints (0: only when stopped by SIGINT/SIGTERM)")
      ->capture_default_str();
  app.add_option("--checkpoint-keep", c.checkpoint_keep, "checkpoints kept (the newest)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  app.add_option("--resume", c.resume,
                 "continue from the newest valid checkpoint in this directory (and keep "
                 "checkpointing there unless --checkpoint-dir says otherwise)")
      ->check(CLI::ExistingDirectory);
}

/// Registers what the run writes: the reports, the log, the trace and the export.
inline void add_train_output_options(CLI::App& app, train_config& c) {
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
  app.add_option("--report", c.report,
                 "write the ledger's HTML page (report.html) to this directory");
  app.add_option("--link", c.link, "link of the printed projection (see tutti plan --help)")
      ->capture_default_str();
  app.add_option("--price", c.price, "price per device-hour in the printed projection")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--lists-out", c.lists_out,
                 "--holdout last: write the training rows and the ranking lists to this "
                 "directory as CSV (train.csv, lists.csv), for a peer to rank the same lists");
  app.add_option("--init-from", c.init_from,
                 "start from a model written by --export: every learner and course it knows "
                 "(matched by source id) starts from its exported factors and bias, new ones "
                 "from the usual initialisation (--model mf, the export's --dim and labels)");
  app.add_option("--export", c.export_dir,
                 "after training, write the model's factors, biases and source ids as .npy "
                 "files with model.json to this directory (new, empty, or a previous export; "
                 "--model mf; read by tutti recommend)");
}

/// Registers every option of `tutti train` on `app`.
inline void add_train_options(CLI::App& app, train_config& c) {
  add_train_data_options(app, c);
  add_train_sealed_options(app, c);
  add_train_model_options(app, c);
  add_train_rank_options(app, c);
  add_train_safety_options(app, c);
  add_train_output_options(app, c);
}

}  // namespace tutti::cli
