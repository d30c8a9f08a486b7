// SPDX-License-Identifier: Apache-2.0
/// @file trainer/checkpointing.hpp
/// @brief The whole-model work of `fit`: the replica checks, the checkpoint settings, writing a
/// checkpoint and restoring one. Part of `tutti::trainer_core` (tutti/trainer.hpp declares these
/// members and includes this file).
#pragma once

#include <tutti/trainer.hpp>

namespace tutti {

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::replica_check(std::size_t epoch, std::size_t step,
                                                          std::size_t global_step,
                                                          fit_result& result) {
  const int world = m_reducer.world_size();
  const std::uint64_t mine[1] = {replica_checksum()};
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world));
  m_reducer.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
  ++result.replica_checks;
  replica_event event{epoch, step, global_step, {}};
  for (int r = 1; r < world; ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) event.ranks.push_back(r);
  if (event.ranks.empty()) return;
  if (!m_options.rebroadcast_on_mismatch)
    throw replica_mismatch_error(
        event, "tutti::trainer::fit(): parameter replicas diverged after epoch " +
                   std::to_string(epoch) + ", step " + std::to_string(step) + " (global step " +
                   std::to_string(global_step) + "): rank(s) " + detail::rank_list(event.ranks) +
                   " differ from rank 0; set rebroadcast_on_mismatch to repair from rank 0");
  m_reducer.broadcast(m_params.span(), 0);
  if (!m_state.empty()) m_reducer.broadcast(m_state.span(), 0);
  result.replica_events.push_back(std::move(event));
}

template <class Model, class Sampler, class Reducer>
detail::run_setting_list trainer_core<Model, Sampler, Reducer>::checkpoint_config(
    const data::interactions& train, std::uint64_t train_digest) const {
  std::uint64_t data = train_digest;
  std::uint64_t rows = train.size();
  if constexpr (rank_local_sampler<Sampler>) {
    // Each rank holds its own rows: the counts, not one rank's digest, describe the data.
    data = detail::mix64(static_cast<std::uint64_t>(m_reducer.world_size()));
    rows = 0;
    for (int r = 0; r < m_reducer.world_size(); ++r) {
      data = detail::mix64(data ^ m_sampler.rows_of(r));
      rows += m_sampler.rows_of(r);
    }
  }
  return detail::checkpoint_settings(
      m_options, {m_model.layout().digest(), m_state.size(), rows, data, m_reducer.world_size()});
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::restore(
    const checkpoint_state& ck, const std::vector<std::pair<std::string, std::string>>& now) {
  static constexpr const char* fn = "tutti::trainer::fit";
  detail::check_resume_settings(ck.config, now);
  TUTTI_EXPECTS(
      ck.parameters.size() == m_params.size() && ck.optimizer_state.size() == m_state.size(), fn,
      "the checkpoint holds " + std::to_string(ck.parameters.size()) + " parameters and " +
          std::to_string(ck.optimizer_state.size()) + " optimizer-state floats; this model has " +
          std::to_string(m_params.size()) + " and " + std::to_string(m_state.size()));
  if (ck.world_size != m_reducer.world_size() && ck.step_in_epoch > 0) {
    constexpr bool can_reshard = !rank_local_sampler<Sampler> && sampler_can_reshard<Sampler>;
    TUTTI_EXPECTS(can_reshard, fn,
                  "the checkpoint was written by " + std::to_string(ck.world_size) +
                      " ranks in the middle of an epoch; resuming on " +
                      std::to_string(m_reducer.world_size()) +
                      " needs a sampler that can deal the rest of the epoch anew (shard_from, "
                      "e.g. shuffled_shards); expected the same world size");
  }
  copy_from_host(m_space, std::span<const float>(ck.parameters), m_params.span());
  if (!m_state.empty())
    copy_from_host(m_space, std::span<const float>(ck.optimizer_state), m_state.span());
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::start_state() {
  const continuation& c = m_options.continues;
  if (const auto& from = c.optimizer_state) {
    TUTTI_EXPECTS(from->size() == m_state.size(), "tutti::trainer",
                  "train_options::continues holds " + std::to_string(from->size()) +
                      " optimizer-state floats; this optimizer keeps " +
                      std::to_string(m_state.size()) + " for this model");
    if (!m_state.empty()) copy_from_host(m_space, std::span<const float>(*from), m_state.span());
  } else if (c.write_state && !m_state.empty()) {
    if constexpr (space_type::host_accessible) {
      c.write_state(m_state.span());
    } else {
      std::vector<float> host = to_host_vector(m_space, std::span<const float>(m_state.span()));
      c.write_state(std::span<float>(host));
      copy_from_host(m_space, std::span<const float>(host), m_state.span());
    }
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::write_checkpoint_now(
    const std::vector<std::pair<std::string, std::string>>& config, std::size_t epoch,
    std::size_t step_in_epoch, std::size_t global_step, std::uint64_t before_resume, double visited,
    const char* note, fit_result& result) {
  double sums[3] = {0.0, 0.0, visited};
  m_space.copy_to_host(sums, m_sums.data(), 2 * sizeof(double));
  m_reducer.all_reduce_sum(std::span<double>(sums));
  if (m_reducer.rank() != 0) return;
  checkpoint_state st;
  st.config = config;
  st.config_digest = detail::settings_digest(config);
  st.world_size = m_reducer.world_size();
  st.seed = m_options.seed;
  st.epoch = epoch;
  st.step_in_epoch = step_in_epoch;
  st.global_step = global_step;
  st.samples_in_epoch = before_resume + static_cast<std::uint64_t>(std::llround(sums[2]));
  st.epoch_loss_sum = sums[0];
  st.epoch_weight_sum = sums[1];
  st.rng = {m_options.seed, epoch};  // every draw is a function of (seed, epoch, position)
  st.parameters = parameters_on_host();
  st.optimizer_state = to_host_vector(m_space, std::span<const float>(m_state.span()));
  st.note = note;
  result.last_checkpoint =
      write_checkpoint(m_options.checkpoint_dir, st, m_options.checkpoint_keep).string();
  ++result.checkpoints_written;
}

}  // namespace tutti
