// SPDX-License-Identifier: Apache-2.0
/// @file trainer/epoch.hpp
/// @brief An epoch of `fit`: its shard and slots, each step's slots, the epoch's record and the
/// run's totals, the non-finite records, and the quality target. Part of `tutti::trainer_core`
/// (tutti/trainer.hpp declares these members and includes this file).
#pragma once

#include <tutti/trainer.hpp>

namespace tutti {

template <class Model, class Sampler, class Reducer>
auto trainer_core<Model, Sampler, Reducer>::begin_epoch(const run_plan& p, step_buffers& buf,
                                                        std::size_t epoch,
                                                        const checkpoint_state* resumed,
                                                        std::size_t global_step) -> epoch_plan {
  const int world = m_reducer.world_size();
  epoch_plan e;
  e.epoch = epoch;
  e.resumed = resumed;
  e.first_step = resumed ? static_cast<std::size_t>(resumed->step_in_epoch) : 0;
  e.start_pos =
      resumed && resumed->world_size != world ? std::min(p.n, e.first_step * m_options.batch) : 0;
  // Steps are counted from the first step of the shard: the epoch's first, or the resumed
  // step when its positions were dealt anew.
  e.step_base = e.start_pos > 0 ? e.first_step : 0;
  e.epoch_first_step = global_step - e.first_step;
  if (outline_only()) {
    e.sh = epoch_outline(p.n, epoch, e.start_pos);
  } else if (epoch == 0 && e.start_pos == 0 && p.first_shard) {
    e.sh = std::move(*p.first_shard);  // plan_run's
    p.first_shard.reset();
  } else {
    e.sh = epoch_shard(p.n, m_reducer.rank(), epoch, e.start_pos);
  }
  check_shard(p, e);
  e.epoch_slots = e.sh.longest();
  e.real = p.real_counts;
  if (!p.split.even() && (epoch > 0 || e.start_pos > 0)) e.real = gather_real_slots(e.sh, p.split);
  TUTTI_EXPECTS(e.start_pos > 0 || e.real == p.real_counts, "tutti::trainer::fit",
                "the sampler's ranks hold other counts of real slots in epoch " +
                    std::to_string(epoch) +
                    " than in epoch 0; expected the same in every "
                    "epoch, so every epoch takes the same steps");
  const std::size_t local_batch = p.split.largest();
  e.last_step = e.start_pos == 0 ? p.steps_per_epoch
                : p.split.even() ? e.first_step + (e.epoch_slots + local_batch - 1) / local_batch
                                 : e.first_step + p.split.steps_to_cover(e.real);
  load_shard(buf, p, e);
  if (m_options.negatives.per_positive > 0) {  // read by the gather from the space's memory
    const std::uint64_t key = detail::negative_epoch_key(m_options.seed, epoch);
    copy_from_host(m_space, std::span<const std::uint64_t>(&key, 1), buf.epoch_key.span());
  }
  e.before_resume = resumed ? resumed->samples_in_epoch : 0;
  if (resumed && m_reducer.rank() == 0) {
    // The epoch's loss so far travels with rank 0 into the epoch's sums.
    const double sums[2] = {resumed->epoch_loss_sum, resumed->epoch_weight_sum};
    copy_from_host(m_space, std::span<const double>(sums), m_sums.span());
  }
  e.local_weight = e.sh.weight_sum(slot(p, e, m_reducer.rank(), e.first_step), e.sh.size());
  return e;
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::check_shard(const run_plan& p,
                                                        const epoch_plan& e) const {
  const shard& sh = e.sh;
  if (e.start_pos == 0)
    TUTTI_EXPECTS(sh.size() <= p.slots && sh.longest() == p.slots, "tutti::trainer::fit",
                  "the sampler returned a shard of " + std::to_string(sh.size()) +
                      " slots whose prefix spans " + std::to_string(sh.longest()) + " in epoch " +
                      std::to_string(e.epoch) + "; expected at most " + std::to_string(p.slots) +
                      " slots and a prefix over " + std::to_string(p.slots) + " in every epoch");
  TUTTI_EXPECTS(sh.indices.size() == sh.size() || (sh.indices.empty() && outline_only()),
                "tutti::trainer::fit",
                "the sampler returned " + std::to_string(sh.indices.size()) + " positions and " +
                    std::to_string(sh.size()) + " weights in epoch " + std::to_string(e.epoch) +
                    "; expected one of each per slot");
  TUTTI_EXPECTS(!sh.weights.empty() || sh.real_slots <= sh.slot_count, "tutti::trainer::fit",
                "the sampler's shard gives no weights and " + std::to_string(sh.real_slots) +
                    " real slots of " + std::to_string(sh.slot_count) + " in epoch " +
                    std::to_string(e.epoch) + "; expected at most one real slot per slot");
  if (sh.real_prefix.empty()) {
    const int rank = m_reducer.rank();
    TUTTI_EXPECTS(sh.rank_real.size() == static_cast<std::size_t>(m_reducer.world_size()) &&
                      sh.size() <= sh.longest_slots &&
                      std::ranges::all_of(sh.rank_real,
                                          [&](std::uint64_t r) { return r <= sh.longest_slots; }),
                  "tutti::trainer::fit",
                  "the sampler's shard has no real_prefix and rank_real lists " +
                      std::to_string(sh.rank_real.size()) + " ranks over " +
                      std::to_string(sh.longest_slots) + " slots (" + std::to_string(sh.size()) +
                      " here); expected one count per rank of " +
                      std::to_string(m_reducer.world_size()) + ", none past the longest shard");
    // The per-rank form holds only where this rank's real slots lead, as many as it says.
    const std::uint64_t leading = detail::leading_real_slots(sh);
    TUTTI_EXPECTS(leading == sh.rank_real[static_cast<std::size_t>(rank)], "tutti::trainer::fit",
                  "rank " + std::to_string(rank) +
                      (leading == detail::misplaced
                           ? "'s sampler put a real sample after a padded slot"
                           : "'s shard leads with " + std::to_string(leading) + " real slots") +
                      " in epoch " + std::to_string(e.epoch) + " and its rank_real says " +
                      std::to_string(sh.rank_real[static_cast<std::size_t>(rank)]) +
                      "; expected its real slots first, as many as rank_real counts");
  } else {
    TUTTI_EXPECTS(sh.size() < sh.real_prefix.size(), "tutti::trainer::fit",
                  "the sampler's real_prefix has " + std::to_string(sh.real_prefix.size()) +
                      " entries for " + std::to_string(sh.size()) +
                      " slots; expected at least slots + 1");
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::load_shard(step_buffers& buf, const run_plan& p,
                                                       const epoch_plan& e) {
  const shard& sh = e.sh;
  buf.slot_at = buf.slots.data();
  buf.weight_at = buf.slot_weights.data();
  if (shard_by_step()) {
    buf.weight_at = nullptr;  // an outline: its real slots lead (`shard::real_slots`)
  } else if constexpr (shard_in_place()) {
    buf.slot_at = sh.indices.data();
    buf.weight_at = sh.weights.empty() ? nullptr : sh.weights.data();  // else sh.real_slots
  } else if (shard_on_space()) {
    if constexpr (sampler_fills_on_space<Sampler, space_type>)
      m_sampler.fill_on_space(m_space, p.n, m_reducer.world_size(), m_reducer.rank(),
                              m_options.seed, e.epoch, e.start_pos, buf.slots.data(),
                              buf.slot_weights.data());
  } else if (sh.first == 0) {
    copy_from_host(m_space, std::span<const std::uint64_t>(sh.indices),
                   buf.slots.span().first(sh.size()));
  } else {
    // Rank-local rows: training-set positions become positions in this rank's rows.
    std::vector<std::uint64_t> local(sh.indices);
    for (auto& i : local) i -= sh.first;
    copy_from_host(m_space, std::span<const std::uint64_t>(local),
                   buf.slots.span().first(sh.size()));
  }
  if (!shard_on_space() && !shard_in_place() && !shard_by_step()) {
    if (!sh.weights.empty()) {
      copy_from_host(m_space, std::span<const float>(sh.weights),
                     buf.slot_weights.span().first(sh.size()));
    } else {  // real slots first, then padding
      const std::size_t real = std::min(sh.real_slots, sh.size());
      fill(m_space, buf.slot_weights.span().first(real), 1.f);
      fill(m_space, buf.slot_weights.span().subspan(real, sh.size() - real), 0.f);
    }
  }
  m_guard.begin_epoch();
  fill(m_space, m_step_loss.span(), 0.f);
  fill(m_space, m_sums.span(), 0.0);
}

template <class Model, class Sampler, class Reducer>
std::size_t trainer_core<Model, Sampler, Reducer>::slot(const run_plan& p, const epoch_plan& e,
                                                        int rank, std::size_t s) {
  return p.split.first(static_cast<std::size_t>(rank), s - e.step_base);
}

template <class Model, class Sampler, class Reducer>
auto trainer_core<Model, Sampler, Reducer>::slots_of(const run_plan& p, const epoch_plan& e,
                                                     std::size_t step) const -> step_slots {
  const int rank = m_reducer.rank();
  step_slots s;
  s.step = step;
  s.slot_begin = slot(p, e, rank, step);
  s.slot_end = std::min(e.epoch_slots, slot(p, e, rank, step + 1));
  s.begin = std::min(e.sh.size(), s.slot_begin);
  s.end = std::min(e.sh.size(), s.slot_end);
  s.count = s.end - s.begin;
  s.global_real = p.split.even() ? e.sh.global_real(s.slot_begin, s.slot_end)
                                 : p.split.global_real(e.real, step - e.step_base);
  s.weight = e.sh.weight_sum(s.begin, s.end);
  return s;
}

template <class Model, class Sampler, class Reducer>
epoch_record trainer_core<Model, Sampler, Reducer>::end_epoch(const run_plan& p,
                                                              const epoch_plan& e, ledger& book,
                                                              double step_seconds,
                                                              clock::time_point epoch_start,
                                                              const data::interactions& test,
                                                              rank_means& run, fit_result& result) {
  const detail::epoch_skips skips = m_guard.skips();
  const step_account& totals = book.epoch_totals();
  const detail::epoch_ranks ranks = detail::gather_epoch_ranks(
      m_reducer, e.local_weight, totals, book.epoch_steps(), skips.mine.size());
  for (std::size_t r = 0; r < run.step.size(); ++r) {
    run.step[r] += ranks.step_mean[r];
    run.work[r] += ranks.work_mean[r];
    run.wait[r] += ranks.wait_mean[r];
  }
  if (skips.count > 0) {
    auto records = gather_nonfinite(skips.mine, ranks.bad_counts, p, e);
    if (m_options.nonfinite == nonfinite_policy::stop) {
      // Only a device space gets here: its steps after the first bad one were skipped too.
      std::erase_if(records, [&](const nonfinite_record& r) { return r.step != skips.first; });
      throw nonfinite_error(std::move(records));
    }
    for (auto& r : records) result.nonfinite.push_back(std::move(r));
  }
  double applied[2] = {0.0, 0.0};
  m_space.copy_to_host(applied, m_sums.data(), sizeof applied);
  double sums[3] = {applied[0], applied[1], e.local_weight};
  m_reducer.all_reduce_sum(std::span<double>(sums));
  sums[2] += double(e.before_resume);

  epoch_record rec;
  rec.epoch = e.epoch + 1;
  rec.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  rec.samples_per_rank = ranks.samples;
  rec.samples_before_resume = e.before_resume;
  rec.weighted_samples = sums[2];
  rec.steps = e.last_step - e.first_step;
  rec.skipped_steps = skips.count;
  rec.step_seconds = step_seconds;
  rec.ranks = make_rank_table(ranks.step_mean, ranks.work_mean, ranks.wait_mean,
                              m_options.slow_rank_threshold);
  if (m_options.evaluate_each_epoch || m_options.target || e.epoch + 1 == m_options.epochs) {
    rec.eval = evaluate(test);
    if (m_options.ranking) rec.ranking = evaluate_option_ranking();
  }
  rec.seconds = seconds_since(epoch_start);
  rec.samples_per_second = rec.seconds > 0 ? rec.weighted_samples / rec.seconds : 0.0;
  rec.phases = phase_seconds::of(totals);
  rec.noise_scale = m_noise.estimate();
  result.phases += rec.phases;
  result.skipped_steps += skips.count;
  if (m_options.on_epoch) m_options.on_epoch(m_reducer.rank(), rec);
  return rec;
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::finish_result(const run_plan& p, ledger& book,
                                                          rank_means& run, fit_result& result) {
  result.steps = p.total_steps;
  result.noise_scale = m_noise.estimate();
  result.noise_scale_why = noise_scale_why(p.total_steps);
  result.eval = result.epochs.back().eval;
  result.ranking = result.epochs.back().ranking;
  result.ledger = book.summarize(m_reducer.world_size());
  if (result.ledger.steps > 0) result.bytes_reduced_per_step = result.ledger.bytes_reduced_per_step;
  result.bytes_saved_per_step = static_cast<std::int64_t>(result.dense_bytes_per_step) -
                                static_cast<std::int64_t>(result.bytes_reduced_per_step);
  result.row_segments =
      m_exchange.traffic([this](std::size_t floats) { return dense_wire_bytes(floats); });
  for (row_segment_traffic& t : result.row_segments) {
    t.name = m_model.layout()[t.segment].name;
    t.ids_gathered = m_rows.on();
  }
  const double epochs = double(result.epochs.back().epoch);  // fewer when a target stopped it
  for (std::size_t r = 0; r < run.step.size(); ++r) {
    run.step[r] /= epochs;
    run.work[r] /= epochs;
    run.wait[r] /= epochs;
  }
  result.ledger.ranks =
      make_rank_table(run.step, run.work, run.wait, m_options.slow_rank_threshold);
  result.parameters_checksum = replica_checksum();
  result.replayed_steps = m_replay.replays();
  result.step_graph_refused = m_replay.refused();
}

template <class Model, class Sampler, class Reducer>
ranking_result trainer_core<Model, Sampler, Reducer>::evaluate_option_ranking() {
  if (ranks_lists() && !m_ranking_lists) m_ranking_lists.emplace(m_space, *m_options.ranking);
  return detail::evaluate_ranking_across_ranks(
      m_model, std::span<const float>(m_params.span()), m_reducer,
      m_ranking_lists ? &*m_ranking_lists : nullptr, m_options.ranking_k);
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::reached_target(fit_result& result,
                                                           clock::time_point fit_start) const {
  if (!m_options.target) return false;
  const quality_target& t = *m_options.target;
  const epoch_record& rec = result.epochs.back();
  using m = quality_target::measure;
  double v = 0;
  bool reached = false;
  if (t.metric == m::rmse || t.metric == m::auc) {
    const char* want = t.metric == m::rmse ? metric_name::rmse : metric_name::auc;
    TUTTI_EXPECTS(rec.eval.metric == want, "tutti::trainer::fit",
                  std::string("the target is the test ") + want +
                      ", but there is no test split to evaluate; expected a non-empty test split");
    v = rec.eval.value;
    reached = t.metric == m::rmse ? v <= t.value : v >= t.value;
  } else {
    v = t.metric == m::hit_rate ? rec.ranking->hit_rate : rec.ranking->ndcg;
    reached = v >= t.value;
  }
  if (!reached) return false;
  result.target = {true, rec.epoch, seconds_since(fit_start), v};
  return true;
}

template <class Model, class Sampler, class Reducer>
std::vector<nonfinite_record> trainer_core<Model, Sampler, Reducer>::make_records(
    std::vector<std::pair<int, std::size_t>> at, const run_plan& p, const epoch_plan& e) const {
  std::map<int, shard> others;
  const auto shard_of = [&](int r) -> const shard& {
    if (r == m_reducer.rank() && e.sh.indices.size() == e.sh.size()) return e.sh;
    auto it = others.find(r);
    if (it == others.end())
      it = others.emplace(r, epoch_shard(rows_of(r, p.n), r, e.epoch, e.start_pos)).first;
    return it->second;
  };
  return detail::nonfinite_records(std::move(at), shard_of, p.split, e.step_base, e.epoch,
                                   e.epoch_first_step);
}

template <class Model, class Sampler, class Reducer>
std::vector<nonfinite_record> trainer_core<Model, Sampler, Reducer>::gather_nonfinite(
    const std::vector<std::uint64_t>& mine, const std::vector<std::uint64_t>& counts,
    const run_plan& p, const epoch_plan& e) {
  return make_records(detail::gather_bad_steps(m_reducer, mine, counts), p, e);
}

template <class Model, class Sampler, class Reducer>
std::vector<std::uint64_t> trainer_core<Model, Sampler, Reducer>::gather_real_slots(
    const shard& sh, const detail::batch_split& split) {
  if (split.even()) return {};
  const std::uint64_t mine = detail::leading_real_slots(sh);
  std::vector<std::uint64_t> all(split.world);
  m_reducer.all_gather(std::span<const std::uint64_t>(&mine, 1), std::span<std::uint64_t>(all));
  const auto bad = std::find(all.begin(), all.end(), detail::misplaced);
  TUTTI_EXPECTS(bad == all.end(), "tutti::trainer::fit",
                "rank " + std::to_string(bad - all.begin()) +
                    "'s sampler put a real sample after a padded slot; a global batch that is "
                    "not a multiple of the world size needs each rank's real slots first and "
                    "its padding last");
  return all;
}

template <class Model, class Sampler, class Reducer>
shard trainer_core<Model, Sampler, Reducer>::epoch_shard(std::size_t n, int rank, std::size_t epoch,
                                                         std::size_t start_pos) const {
  const int world = m_reducer.world_size();
  if constexpr (sampler_can_reshard<Sampler>) {
    if (start_pos > 0)
      return m_sampler.shard_from(n, world, rank, m_options.seed, epoch, start_pos);
  }
  return m_sampler.shard(n, world, rank, m_options.seed, epoch);
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::shard_on_space() const {
  if constexpr (!space_type::host_accessible && sampler_fills_on_space<Sampler, space_type>)
    return !m_options.on_batch;
  else
    return false;
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::shard_by_step() const {
  if constexpr (space_type::host_accessible && !rank_local_sampler<Sampler> &&
                sampler_fills_slots<Sampler>)
    return !m_options.on_batch;
  else
    return false;
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::outline_only() const {
  return shard_on_space() || shard_by_step();
}

template <class Model, class Sampler, class Reducer>
shard trainer_core<Model, Sampler, Reducer>::epoch_outline(std::size_t n, std::size_t epoch,
                                                           std::size_t start_pos) const {
  if constexpr (sampler_fills_on_space<Sampler, space_type> || sampler_fills_slots<Sampler>)
    return m_sampler.outline_from(n, m_reducer.world_size(), m_reducer.rank(), m_options.seed,
                                  epoch, start_pos);
  else  // not reached: `outline_only()` holds only for a sampler with one of the two
    return epoch_shard(n, m_reducer.rank(), epoch, start_pos);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::deal_step_slots(const step_context& c) {
  if constexpr (space_type::host_accessible && sampler_fills_slots<Sampler>) {
    const epoch_plan& e = c.epoch;
    m_sampler.fill_slots(c.plan.n, m_reducer.world_size(), m_reducer.rank(), m_options.seed,
                         e.epoch, e.start_pos, c.slots.begin, c.slots.count, c.buf.slots.data());
  } else {
    (void)c;
  }
}

template <class Model, class Sampler, class Reducer>
std::size_t trainer_core<Model, Sampler, Reducer>::rows_of(int rank, std::size_t n) const {
  if constexpr (rank_local_sampler<Sampler>)
    return static_cast<std::size_t>(m_sampler.rows_of(rank));
  else
    return n;
}

}  // namespace tutti
