// SPDX-License-Identifier: Apache-2.0
// `tutti train --audit DIR`: each rank's hash-chained record of the samples it trained on.
#pragma once

#include "data.hpp"

#if TUTTI_HAS_SODIUM
#include <tutti/data/audit.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace tutti::cli::detail {

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
                                                                  : "shuffled_shards/" +
                                                                        choice_name(c.tail)}),
        m_n(st.train_rows),
        m_world(world),
        m_rank(rank),
        m_seed(c.seed),
        m_drop(!d.rank_local && c.tail == tail_policy::drop) {}
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

}  // namespace tutti::cli::detail
#endif
