// SPDX-License-Identifier: Apache-2.0
// How `tutti train` runs its ranks: the trainer's options from the command line, one rank's
// run, and the launch of this process's ranks on a space and a reducer.
#pragma once

#include "../dispatch.hpp"
#include "../export.hpp"
#include "../noise_report.hpp"
#include "../progress.hpp"
#include "../run_policies.hpp"
#include "../trace.hpp"
#include "audit.hpp"
#include "data.hpp"
#include "trained.hpp"

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

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tutti::cli {

/// The signal that asked `tutti train` to stop (SIGINT or SIGTERM), or 0. A handler may only
/// store to a lock-free atomic; the trainer polls it through `train_options::stop`.
inline std::atomic<bool> stop_requested{false};
inline std::atomic<int> stop_signal{0};

namespace detail {

struct run_output {
  fit_result result;
  data_stats stats;
  bool shared_arena = false;  // rank 0's gradient arena was the reducer's shared memory
  std::mutex mutex;
  trace_recorder* trace = nullptr;  // --trace: every rank's step phases
  // When the command started; rank 0's seconds building its trainer, and from the start to the
  // end of its first step.
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double init_seconds = 0, first_step_seconds = 0;
  std::optional<core_share> share;  // rank 0's, where its threads follow the machine
};

/// Whether this process's one host rank shares the cores with other work (`--share-cores`): one
/// rank, in the only process of the job on this machine, on the host.
inline bool shares_cores(const train_config& c) {
  return c.share_cores == "on" && c.space == space_choice::host && local_processes() == 1 &&
         (c.reducer == reducer_choice::mpi || c.ranks == 1);
}

/// --init-from: makes `model` start from the export's rows where the export knows the learner
/// or course, and from the usual initialisation (the trainer's seed) elsewhere; returns what the
/// trainer continues: the optimizer's steps and, where the export's optimizer is this run's, its
/// rows of state. Both go into each rank's own arenas once drawn (zeroed), with no arena beside
/// them, and depend only on the ids and the seed, so every rank and every process starts from
/// the same.
template <class Model>
continuation start_warm(const train_config& c, const loaded_data& d, Model& model) {
  if (!d.warm) return {};
  if constexpr (requires { model.after_initialize(std::function<void(std::span<float>)>{}); }) {
    const parameter_layout& layout = model.layout();
    model.after_initialize([&d, layout](std::span<float> params) {
      models::apply_warm_start(layout, params, d.warm_match, *d.warm);
    });
    if (!d.warm_state) return {};
    const state_map map =
        with_optimizer(c.optimizer, c.momentum, c.weight_decay,
                       [&](const auto& o) { return state_map(o.state_map(layout)); });
    continuation next{.steps = d.warm_steps};
    next.write_state = [&d, layout, map](std::span<float> state) {
      models::apply_warm_state(layout, map, state, d.warm_match, *d.warm);
    };
    return next;
  } else {
    tutti::detail::throw_invalid("tutti train", "--init-from with --model " + choice_name(c.model) +
                                                    ": an export holds a matrix factorisation; "
                                                    "expected --model mf");
  }
}

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
  for (auto w : c.layers) {
    if (!layers.empty()) layers += ',';
    layers += std::to_string(w);
  }
  std::vector<std::pair<std::string, std::string>> config = {
      {"model", choice_name(c.model)},
      {"dim", std::to_string(c.dim)},
      {"layers", c.model == model_choice::ncf ? layers : std::string("-")},
      {"l2", num(c.l2)},
      {"labels", d.all.implicit ? "implicit" : "ratings"},
      {"feedback", c.feedback == feedback_choice::implicit ? "implicit, repeats " + c.repeats
                                                           : choice_name(c.feedback)},
      {"optimizer", choice_name(c.optimizer)},
      {"momentum", num(c.momentum)},
      {"weight_decay", num(c.weight_decay)},
      {"schedule", choice_name(c.schedule)},
      {"warmup_steps", std::to_string(c.warmup_steps)},
      {"tail", choice_name(c.tail)},
      {"space", choice_name(c.space)}};
  // Gradients rounded to bfloat16 on the way change every step's sum. Recorded only when on, so
  // checkpoints of runs without it (written before it was recorded) still resume.
  if (c.compress != compress_choice::none) config.emplace_back("compress", choice_name(c.compress));
  // The list losses, recorded only where chosen, so checkpoints of the pointwise losses (written
  // before there was a choice) still resume.
  if (const loss_kind loss = loss_of(c, d.all.implicit); is_list_loss(loss))
    config.emplace_back("loss", to_string(loss));
  // Named in a refused resume, never compared (a renamed file with the same rows resumes).
  config.emplace_back("note.data", "'" + d.source + "'");
  return config;
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
  const bool with_digest = !c.audit.empty();  // the audit records it; the trainer hashes itself
  const data_stats stats =
      d.rank_local ? gather_stats(reducer, d, with_digest) : local_stats(d, with_digest);
  // The model's build (and a warm start's rows) counts with the trainer's.
  const auto init_start = std::chrono::steady_clock::now();
  auto model = make_model(space, static_cast<float>(stats.mean));
  const continuation continued = start_warm(c, d, model);
  using Model = decltype(model);
  train_options opt{.batch = c.batch,
                    .epochs = c.epochs,
                    .base_lr = c.lr,
                    .scaling = c.scaling,
                    .reference_batch = c.reference_batch,
                    .seed = c.seed,
                    .log_every = c.log_every,
                    .log = log};
  opt.nonfinite = c.nonfinite;
  opt.replica_check_every = c.replica_check_every;
  opt.rebroadcast_on_mismatch = c.rebroadcast;
  opt.checkpoint_dir = c.checkpoint_dir.empty() ? c.resume : c.checkpoint_dir;
  opt.checkpoint_every = c.checkpoint_every;
  opt.checkpoint_keep = c.checkpoint_keep;
  opt.run_config = run_config(c, d);
  opt.resume = leader.resume ? &*leader.resume : nullptr;
  opt.continues = continued;
  opt.stop = &stop_requested;
  opt.accumulation = c.accumulation;
  opt.negatives = negatives_of(c);
  opt.noise_scale_every = c.noise_every;
  opt.noise_scale_decay = c.noise_decay;
  opt.sparse_exchange = sparse_exchange_policy_named(c.sparse_exchange).value();
  opt.overlap_reduce = c.overlap;
  opt.compact_gradient = c.compact_gradient == "on";
  opt.rows_in_place = c.rows_in_place;
  opt.step_graphs = c.step_graphs == "on";
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
  // On the rank's own thread: the threads it starts with are the ones an idle machine gets.
  if (rank == 0 && shares_cores(c)) out.share.emplace();
  opt.on_step = [&bar, &out](const step_progress& p) {
    if (p.rank != 0) return;
    if (out.share) out.share->poll();
    if (out.first_step_seconds == 0)
      out.first_step_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - out.start).count();
    bar.update(p);
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
    // Where the test rows have no metric of their own (a log's held-out positives), the
    // ranking's HR@K stands in the test column.
    const bool ranked = e.eval.metric == metric_name::none && e.ranking;
    const std::string metric = ranked ? "hr@" + std::to_string(e.ranking->k) : e.eval.metric;
    std::printf("%6zu  %12.5f  %8s %-8.4f  %12.0f  %9.2f  %9s%s\n", e.epoch, e.train_loss,
                metric.c_str(), ranked ? e.ranking->hit_rate : e.eval.value, e.samples_per_second,
                e.seconds, detail::noise_cell(e.noise_scale).c_str(),
                detail::ranking_cells(e.ranking).c_str());
    std::fflush(stdout);
  };
  // The trainer holds the optimizer `--optimizer` names as its own type.
  auto fit_with = [&](auto sampler) {
    return with_optimizer(c.optimizer, c.momentum, c.weight_decay, [&](auto optimizer) {
      trainer<Model, decltype(sampler), Reducer, run_schedule, decltype(optimizer)> t(
          std::move(model), std::move(sampler), std::move(reducer),
          make_schedule(c.schedule, c.warmup_steps), std::move(optimizer), std::move(opt));
      if (rank == 0)
        out.init_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - init_start).count();
      if constexpr (requires { t.reducer().shared_arena(); })
        if (rank == 0) out.shared_arena = !t.reducer().shared_arena().empty();
      // Leave-one-out on implicit data holds out positives only, which have no AUC: the ranking
      // metrics are the evaluation.
      const bool ranks_only = d.lists && t.model().loss() != loss_kind::squared;
      const data::interactions no_rows;  // a reference to either side, never a copy of the test
      const data::interactions& test = ranks_only ? no_rows : d.parts.test;
      fit_result fitted = t.fit(d.parts.train, test);
      if (rank == 0 && !mostly_skipped(fitted)) write_export(c, d, t);
      return fitted;
    });
  };
  // Ranks holding their own shards visit only those; otherwise one permutation of the whole
  // training set is dealt to the ranks.
  fit_result r = d.rank_local ? fit_with(owned_shards{.rows = stats.rows})
                              : fit_with(shuffled_shards{.tail = c.tail});
#if TUTTI_HAS_SODIUM
  if (audit) audit->finish();
#endif
  if (rank == 0) {
    std::lock_guard lock(out.mutex);
    out.result = std::move(r);
    out.stats = stats;
  }
}

/// Runs the ranks of this process on `Space`; `make_model(space, mean)` builds one rank's model.
template <class Space, class MakeModel>
void run_ranks(const train_config& c, const loaded_data& d, MakeModel make_model,
               json_lines_log* log, progress_line& bar, run_output& out) {
  if constexpr (std::is_same_v<Space, host_space>) {
    // With --compress bf16 the reducer is wrapped: gradients travel as bfloat16.
    auto train_with = [&](auto reducer) {
      if (c.compress == compress_choice::bf16)
        train_rank(c, d, make_model, host_space{},
                   compressed<decltype(reducer)>(std::move(reducer)), log, bar, out);
      else
        train_rank(c, d, make_model, host_space{}, std::move(reducer), log, bar, out);
    };
#if TUTTI_HAS_MPI
    if (c.reducer == reducer_choice::mpi) {
      // This process is one rank of MPI_COMM_WORLD.
      train_with(mpi_allreduce{MPI_COMM_WORLD,
                               {.timeout = timeout_of(c), .shared_arena = c.shared_arena == "on"}});
      return;
    }
#endif
    tutti::run_host_ranks(c.ranks, train_with, {.timeout = timeout_of(c)});
  }
#if defined(TUTTI_HAS_CUDA)
  if constexpr (std::is_same_v<Space, cuda_space>) {
    TUTTI_EXPECTS(cuda_device_count() > 0, "tutti train",
                  "--space cuda: no CUDA device is visible; expected a GPU (or --space host)");
#if TUTTI_HAS_NCCL && TUTTI_HAS_MPI
    if (c.reducer == reducer_choice::mpi) {
      // One process per GPU; NCCL bootstrapped over MPI.
      nccl_ring ring = make_nccl_ring_mpi(MPI_COMM_WORLD, {.timeout = timeout_of(c)});
      const cuda_space space = ring.space();
      train_rank(c, d, make_model, space, ring, log, bar, out);
      return;
    }
#endif
    if (c.ranks == 1) {
      train_rank(c, d, make_model, cuda_space{}, single_rank{}, log, bar, out);
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

/// The model `--model` names, as the shared dispatch takes it (ncf's GMF branch has `--dim`).
inline model_settings model_of(const train_config& c) {
  return {.name = c.model,
          .dim = c.dim,
          .gmf_dim = static_cast<std::size_t>(c.dim),
          .layers = c.layers,
          .l2 = c.l2};
}

/// Trains the model `c.model` on `Space` with this process's ranks.
template <class Space>
void train_models(const train_config& c, const loaded_data& d, loss_kind loss,
                  json_lines_log* log_ptr, progress_line& bar, run_output& out) {
  with_model<Space>(model_of(c), d.users, d.items, loss, "tutti train",
                    [&](auto make) { run_ranks<Space>(c, d, make, log_ptr, bar, out); });
}

#if defined(TUTTI_CLI_CUDA)
// The CUDA part of the program, in a translation unit of its own compiled by nvcc
// (cuda_parts.cu), so that the rest is compiled by the host compiler with its vector kernels.
void train_models_cuda(const train_config& c, const loaded_data& d, loss_kind loss,
                       json_lines_log* log_ptr, progress_line& bar, run_output& out);
int visible_cuda_devices();
#endif

}  // namespace detail
}  // namespace tutti::cli
