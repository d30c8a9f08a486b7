// SPDX-License-Identifier: Apache-2.0
// `tutti train`: loads the data, runs the ranks, prints the epoch table, the outcome and the
// ledger, and writes the reports. Its parts are in train/: the settings (config.hpp), the command
// line (options.hpp), the data (data.hpp), the ranks (ranks.hpp) and the reports (report.hpp,
// json_report.hpp).
#include "command.hpp"
#include "output_paths.hpp"
#include "train/eval_lists.hpp"
#include "train/json_report.hpp"
#include "train/options.hpp"
#include "train/ranks.hpp"

#include <tutti/detail/number_format.hpp>

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

// The SIGINT/SIGTERM handler: a handler may only store to lock-free atomics.
extern "C" void tutti_train_on_signal(int sig) {
  tutti::cli::stop_signal.store(sig);
  tutti::cli::stop_requested.store(true);
}

namespace tutti::cli {
namespace {

/// Installs the SIGINT/SIGTERM handlers for the run: the first signal finishes the step in
/// progress, writes a checkpoint and exits; the default action is restored, so a second one
/// ends the process at once.
void install_stop_handlers() {
  static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);
  struct sigaction sa {};
  sa.sa_handler = tutti_train_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void check_batch(const train_config& c) {
  TUTTI_EXPECTS(c.batch >= static_cast<std::size_t>(c.ranks), "tutti train",
                "--batch " + std::to_string(c.batch) + " is smaller than --ranks " +
                    std::to_string(c.ranks) + "; expected at least one sample per rank and step");
}

/// The files the run reads: every --data file and the others it is given.
std::vector<named_path> data_inputs(const train_config& c) {
  std::vector<named_path> in{{"--data", c.file.path}};
  for (const std::string& p : c.file.more_paths) in.push_back({"--data", p});
  in.insert(in.end(), {{"--init-from", c.init_from},
                       {"--key-file", c.key_file},
                       {"--sealed", c.sealed},
                       {"--resume", c.resume}});
  return in;
}

/// Every output of the run checked against its inputs and the file system before any work.
void check_train_outputs(const train_config& c) {
  check_outputs("tutti train",
                {{"--json", c.json},
                 {"--log", c.log},
                 {"--trace", c.trace},
                 {"--quarantine", c.file.quarantine}},
                {{{"--export", c.export_dir}, export_file_names()},
                 {{"--report", c.report}, {"report.html"}},
                 {{"--lists-out", c.lists_out}, {"train.csv", "lists.csv", "README.txt"}},
                 {{"--checkpoint-dir", c.checkpoint_dir}, {}},
                 {{"--audit", c.audit}, {}}},
                data_inputs(c));
}

/// The checks of the command line that need no data.
void check_settings(const train_config& c, bool leader) {
  check_batch(c);
#if defined(TUTTI_CLI_CUDA)
  TUTTI_EXPECTS(c.space != space_choice::cuda || detail::visible_cuda_devices() > 0, "tutti train",
                "--space cuda: no CUDA device is visible; expected a GPU (or --space host)");
#endif
  if (leader) check_train_outputs(c);
  if (leader) check_export(c);
  TUTTI_EXPECTS(c.init_from.empty() || c.model == model_choice::mf, "tutti train",
                "--init-from with --model " + choice_name(c.model) +
                    ": an export holds a matrix factorisation; expected --model mf");
  if (is_list_loss(loss_of(c, true))) {
    TUTTI_EXPECTS(sampled_negatives_of(c) > 0, "tutti train",
                  "--loss " + choice_name(c.loss) +
                      " ranks each positive above its sampled negatives and there are none; "
                      "expected --sampled-negatives K (4 by default with --feedback implicit)");
    TUTTI_EXPECTS(c.model != model_choice::lr, "tutti train",
                  "--loss " + choice_name(c.loss) +
                      " with --model lr: a logistic regression scores rows one by one; expected "
                      "--model mf or ncf, or --loss logistic");
  }
  TUTTI_EXPECTS(c.compress == compress_choice::none || c.space == space_choice::host, "tutti train",
                "--compress " + choice_name(c.compress) +
                    " with --space cuda: compressed reduction runs on host ranks only for now; "
                    "expected --compress none or --space host");
  TUTTI_EXPECTS(c.trace.empty() || c.space == space_choice::host, "tutti train",
                "--trace with --space cuda: a device space's phases are GPU events resolved in "
                "batches and are not traced; expected --space host");
}

/// `--resume DIR`: the newest checkpoint there that reads back, said on rank 0.
checkpoint_state find_resume(const train_config& c, bool leader) {
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
  return std::move(found->state);
}

/// The lines above the epoch table: the data, the cleaning, the run and the table's header.
/// Where the optimizer is adam by default and a step touches few of the tables' rows, the
/// header's note: how many more values the dense step updates than a row-sparse one would, and
/// which optimizers take the row-sparse step. Empty otherwise.
std::string dense_default_note(const train_config& c, const detail::loaded_data& d) {
  if (c.optimizer_given || c.optimizer != optimizer_choice::adam || c.model == model_choice::lr)
    return {};
  const auto users = static_cast<double>(d.users);
  const auto items = static_cast<double>(d.items);
  const double lists = double(sampled_negatives_of(c) + 1);
  // At most a batch of learners and a batch of lists of courses in a step.
  const double touched = std::min(users, double(c.batch)) + std::min(items, c.batch * lists);
  const double share = touched / (users + items);
  if (share > 0.25) return {};
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "adam (the default) updates every row of the tables each step; a step touches "
                "at most %.0f of their %.0f rows (%.2g %%): --optimizer lazy-adam or "
                "rowwise-adagrad update only those (the same quality on the repository's data; "
                "docs/optimizers.md)",
                touched, users + items, 100 * share);
  return buf;
}

void print_header(const train_config& c, const detail::loaded_data& d) {
  const bool implicit = d.all.implicit;
  std::printf("tutti train: %s\n", d.source.c_str());
  if (d.cleaning) {
    std::printf("  cleaning: read %zu rows, used %zu, rejected %zu", d.cleaning->rows_read,
                d.cleaning->rows_used, d.cleaning->rows_rejected);
    for (const auto& [reason, n] : d.cleaning->rejected)
      if (n) std::printf("; %s %zu", reason.c_str(), n);
    std::printf("%s\n", c.file.quarantine.empty() ? "" : (" -> " + c.file.quarantine).c_str());
  }
  if (d.rank_local)
    std::printf(
        "  rows %llu in %d shards (this rank's shard: %zu), users %d, items %d, %s labels\n",
        static_cast<unsigned long long>(d.sealed_rows), c.ranks, d.rows, d.users, d.items,
        implicit ? "implicit 0/1" : "rating");
  else
    std::printf("  rows %zu (train %zu, test %zu), users %d, items %d, %s labels\n", d.rows,
                d.parts.train.size(), d.parts.test.size(), d.users, d.items,
                implicit ? "implicit 0/1" : "rating");
  if (d.files > 1)
    std::printf(
        "  %zu files read as one log: every training row of the last one's pairs, %zu of the "
        "%zu of other pairs (--replay-share %g)\n",
        d.files, d.replay.kept, d.replay.history, d.replay_share);
  if (d.positives)
    std::printf(
        "  a log of positives: %zu of %zu rows kept (%zu repeated pairs counted once, %zu "
        "labels not above 0 dropped)\n",
        d.positives->kept, d.positives->rows, d.positives->repeated, d.positives->not_positive);
  if (const models::warm_start_counts n = d.warm_match.counts(); d.warm)
    std::printf(
        "  starts from %s: %zu of %d learners and %zu of %d courses from the export (%zu and %zu "
        "new, initialised)\n",
        c.init_from.c_str(), n.users_reused, d.users, n.items_reused, d.items, n.users_new,
        n.items_new);
  if (d.warm && d.warm_state)
    std::printf("  the optimizer (%s) goes on from the export's state, after %llu steps\n",
                choice_name(c.optimizer).c_str(), static_cast<unsigned long long>(d.warm_steps));
  else if (d.warm)
    std::printf("  the optimizer (%s) starts afresh: %s\n", choice_name(c.optimizer).c_str(),
                d.warm_state_why.c_str());
  if (const std::size_t k = sampled_negatives_of(c); k > 0)
    std::printf(
        "  %zu negatives sampled per positive in each step (%s%s), not taken by its "
        "learner\n",
        k, choice_name(c.negatives_from).c_str(),
        c.negatives_from == negative_sampler::popularity
            ? (" count^" + std::to_string(c.negative_alpha).substr(0, 4)).c_str()
            : "");
  std::printf(
      "  model %s (%s loss), %d rank(s), global batch %zu, %s lr %g (%s scaling), %s schedule\n",
      choice_name(c.model).c_str(), to_string(loss_of(c, implicit)), c.ranks, c.batch,
      choice_name(c.optimizer).c_str(), c.lr, choice_name(c.scaling).c_str(),
      choice_name(c.schedule).c_str());
  if (const std::string note = dense_default_note(c, d); !note.empty())
    std::printf("  note: %s\n", note.c_str());
  std::printf("\n%6s  %12s  %17s  %12s  %9s  %9s\n", "epoch", "train loss", "test metric",
              "samples/s", "seconds", "B_noise");
  std::fflush(stdout);
}

/// Rank 0's line after a SIGINT or SIGTERM stopped every rank after global step `step`: where
/// the checkpoint is and how to continue. Returns the exit code (128 + the signal).
int report_interrupt(const train_config& c, bool leader, std::size_t step) {
  const int sig = stop_signal.load();
  if (leader) {
    const std::string dir = c.checkpoint_dir.empty() ? c.resume : c.checkpoint_dir;
    std::string where = "no checkpoint written (no --checkpoint-dir)";
    if (!dir.empty()) {
      const auto found = find_latest_checkpoint(dir);
      where = found && found->state.global_step == step
                  ? "checkpoint " + found->file.string() + "; continue with --resume " + dir
                  : "the checkpoint of step " + std::to_string(step) + " was not found in " + dir;
    }
    std::fprintf(stderr, "tutti train: %s after global step %zu; %s\n",
                 sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)", step,
                 where.c_str());
    std::fflush(stderr);
  }
  return 128 + (sig ? sig : SIGTERM);
}

/// Trains on `c.space`. The host space is compiled here; the CUDA space in cuda_parts.cu.
void train_on_space(const train_config& c, const detail::loaded_data& d, json_lines_log* log,
                    progress_line& bar, detail::run_output& out) {
  const loss_kind loss = loss_of(c, d.all.implicit);
  if (c.space == space_choice::cuda) {
#if defined(TUTTI_CLI_CUDA)
    detail::train_models_cuda(c, d, loss, log, bar, out);
#else
    tutti::detail::throw_invalid("tutti train",
                                 "--space cuda: this tutti was built without CUDA; expected "
                                 "--space host, or a build where nvcc was found");
#endif
  } else {
    detail::train_models<host_space>(c, d, loss, log, bar, out);
  }
}

/// `--trace FILE`: writes this process's trace; an MPI rank other than 0 writes FILE.<rank>.
void write_trace(const train_config& c, const trace_recorder& trace, int rank) {
  const std::string path = rank == 0 ? c.trace : c.trace + "." + std::to_string(rank);
  trace.write(path, rank);
  if (rank == 0 && !c.quiet)
    std::printf("trace: %s (%zu intervals; open in ui.perfetto.dev or chrome://tracing)\n",
                path.c_str(), trace.size());
}

/// Flushes the JSON-lines log and fails naming it when any record could not be written (a
/// full disk, a file-size limit, /dev/full).
void finish_log(const train_config& c, std::ofstream& log) {
  log.flush();
  const int err = errno;
  if (!log)
    throw error("tutti train --log: cannot write '" + c.log +
                "': " + tutti::detail::errno_text(err != 0 ? err : EIO));
}

/// Rank 0's report of a finished run: the outcome, the ledger, its page and the JSON report.
void report_run(const train_config& c, const detail::loaded_data& d, const detail::run_output& out,
                double seconds) {
  const fit_result& r = out.result;
  const detail::baseline_score baseline = detail::baseline_of(c, d, out.stats);
  detail::print_outcome(c, r, baseline, seconds);
  if (!c.quiet)
    std::printf(
        "setup: read %.2f s, split %.2f s, trainer built %.2f s, fit prepared %.2f s (rows for "
        "the step, negatives' tables); first step done %.2f s after the start\n",
        d.read_seconds, d.split_seconds, out.init_seconds, r.prepare_seconds,
        out.first_step_seconds);
  if (!c.quiet && out.share && out.share->changes() > 0)
    std::printf(
        "cores shared: %zu of %zu steps on fewer than %d threads (fewest %d; other work ran "
        "beside the run; the threads changed %zu time%s)\n",
        out.share->steps_below(), out.share->steps(), out.share->most(), out.share->fewest(),
        out.share->changes(), out.share->changes() == 1 ? "" : "s");
  if (!c.quiet) {
    using tutti::detail::bytes_text;
    const memory_accounts& m = r.memory;
    std::printf(
        "memory (rank 0): parameters %s, gradients %s, optimizer state %s, rows %s, step "
        "buffers %s, shard %s; peak resident %s (the process)\n",
        bytes_text(double(m.parameters)).c_str(), bytes_text(double(m.gradients)).c_str(),
        bytes_text(double(m.optimizer_state)).c_str(), bytes_text(double(m.rows)).c_str(),
        bytes_text(double(m.step_buffers)).c_str(), bytes_text(double(m.shard)).c_str(),
        bytes_text(double(detail::peak_resident_bytes())).c_str());
  }
  const projection proj =
      detail::project_run(c, r, out.stats, projected_exchange_of(c.sparse_exchange));
  const std::optional<projection> rows_proj = detail::project_rows(c, r, out.stats);
  if (!c.quiet) detail::print_ledger(r, proj, rows_proj, c.link);
  if (!c.report.empty()) {
    const std::string path = detail::write_ledger_page(c, d, r, proj);
    if (!c.quiet) std::printf("\nledger page: %s\n", path.c_str());
  }
  if (!c.json.empty())
    detail::write_json_report(c, {.data = d,
                                  .stats = out.stats,
                                  .result = r,
                                  .shared_arena = out.shared_arena,
                                  .proj = proj,
                                  .rows_proj = rows_proj ? &*rows_proj : nullptr,
                                  .baseline = baseline,
                                  .seconds = seconds,
                                  .init_seconds = out.init_seconds,
                                  .first_step_seconds = out.first_step_seconds,
                                  .share = out.share ? &*out.share : nullptr});
}

/// Trains with `c.ranks` ranks and reports. `rank` is this process's rank: 0 unless it is one
/// process of an MPI run, where only rank 0 prints the table and writes the JSON report, and
/// every process appends its ranks' records to the log (`append_log`).
int train_and_report(const train_config& c, int rank, bool append_log) {
  const auto start = std::chrono::steady_clock::now();
  const bool leader = rank == 0;
  check_settings(c, leader);
  detail::loaded_data d = detail::load(c, rank);
  if (!c.resume.empty()) d.resume = find_resume(c, leader);
  install_stop_handlers();
  if (!c.quiet && leader) print_header(c, d);
  if (!c.lists_out.empty() && leader) detail::write_eval_lists(c.lists_out, d);

  std::optional<std::ofstream> log_file;
  std::optional<json_lines_log> log;
  if (!c.log.empty()) {
    log_file.emplace(c.log, append_log ? std::ios::app : std::ios::out);
    if (!*log_file) throw error("tutti train: cannot write the log file '" + c.log + "'");
    log.emplace(*log_file);
  }
  progress_line bar(c.progress, c.quiet, c.batch);
  detail::run_output out;
  out.start = start;
  std::optional<trace_recorder> trace;
  if (!c.trace.empty()) {
    trace.emplace(c.trace_first - 1, c.trace_steps, c.trace_every);
    out.trace = &*trace;
  }
  try {
    train_on_space(c, d, log ? &*log : nullptr, bar, out);
  } catch (const interrupted_error& e) {
    // Every rank stopped after the same step; rank 0 wrote the checkpoint.
    bar.clear();
    return report_interrupt(c, leader, e.global_step());
  }
  bar.clear();
  if (log_file) finish_log(c, *log_file);
  if (trace) write_trace(c, *trace, rank);
  if (!leader) return 0;
  report_run(c, d, out,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  detail::check_trained(c, out.result);
  return 0;
}

#if TUTTI_HAS_MPI
#if defined(_OPENMP)
/// Like run_local: the processes on one host share its cores instead of each taking all.
void share_host_cores(int rank) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
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

/// `tutti train --reducer mpi`: this process is one rank of MPI_COMM_WORLD. Usage errors, the
/// same on every process, end every process with exit code 2 and one line from rank 0; any
/// later error ends the whole job through MPI_Abort with a line naming the rank.
int run_train_mpi(train_config c) {
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
    share_host_cores(rank);
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

/// Runs `tutti train`; returns the process exit code.
int run_train(train_config& c) {
  if (!c.lr_given) c.lr = default_lr(c.optimizer);
#if defined(TUTTI_CLI_CUDA)
  // One rank per visible GPU unless told otherwise; on the host one rank, its threads on every
  // core (several ranks on one host share its cores and only show the bandwidth tax).
  if (!c.ranks_given && c.space == space_choice::cuda)
    c.ranks = std::max(1, detail::visible_cuda_devices());
#endif
  apply_feedback_defaults(c);
  c.target = detail::parse_target(c.ranking);
  if (c.reducer == reducer_choice::mpi) {
#if TUTTI_HAS_MPI
    return run_train_mpi(c);
#else
    tutti::detail::throw_invalid(
        "tutti train",
        "--reducer mpi: this tutti was built without MPI; expected --reducer "
        "local, or a build that found MPI (e.g. Debian's libopenmpi-dev)");
#endif
  }
  return train_and_report(c, 0, false);
}

/// Active waits for one host rank alone in its process and on its machine, whose threads then
/// follow the machine as the run goes (`--share-cores`, tutti::core_share); passive whenever
/// ranks share the cores (threads of this process, or MPI processes on this machine) or the step
/// runs on a GPU. With `--share-cores off`, one rank spins only where the machine looks idle at
/// the start.
openmp_wait train_wait_policy(const train_config& c) {
  if (c.space != space_choice::host) return openmp_wait::passive;
  if (detail::shares_cores(c)) return openmp_wait::spin_then_sleep;
  return wait_policy_for(c.reducer == reducer_choice::mpi ? 1 : c.ranks);
}

CLI::App* add_train_command(CLI::App& app, train_config& c) {
  CLI::App* train = app.add_subcommand("train", "train the course recommender");
  add_train_options(*train, c);
  return train;
}

}  // namespace

std::unique_ptr<command> make_train_command(CLI::App& app) {
  return make_configured<train_config>(app, add_train_command, run_train, train_wait_policy);
}

}  // namespace tutti::cli
