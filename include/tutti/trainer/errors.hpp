// SPDX-License-Identifier: Apache-2.0
/// @file trainer/errors.hpp
/// @brief What `trainer::fit` raises: a non-finite step under the stop policy, diverged
/// replicas, and a requested stop.
#pragma once

#include <tutti/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tutti {

/// A step whose loss or gradient was not finite on one rank.
struct nonfinite_record {
  int rank = 0;                           ///< the rank whose loss or gradient was not finite
  std::size_t epoch = 0;                  ///< 0-based epoch
  std::size_t step = 0;                   ///< 0-based step within the epoch
  std::size_t global_step = 0;            ///< 0-based step over the trainer's life
  std::vector<std::uint64_t> sample_ids;  ///< training-set rows of that rank's batch, in order
};

/// Training stopped (`nonfinite_policy::stop`) because a step's loss or gradient was not finite
/// on some rank; raised on every rank with the same records.
class nonfinite_error : public error {
 public:
  /// An error listing `records` (at least one).
  explicit nonfinite_error(std::vector<nonfinite_record> records)
      : error(describe(records)), m_records(std::move(records)) {}
  /// The offending ranks' records, ordered by step then rank.
  const std::vector<nonfinite_record>& records() const noexcept { return m_records; }

 private:
  static std::string describe(const std::vector<nonfinite_record>& records) {
    std::string s = "tutti::trainer::fit(): non-finite loss or gradient";
    for (const auto& r : records) {
      s += "; rank " + std::to_string(r.rank) + ", epoch " + std::to_string(r.epoch) + ", step " +
           std::to_string(r.step) + " (global step " + std::to_string(r.global_step) + "), samples";
      const std::size_t shown = std::min<std::size_t>(r.sample_ids.size(), 16);
      for (std::size_t i = 0; i < shown; ++i)
        s += (i ? ", " : " ") + std::to_string(r.sample_ids[i]);
      if (shown < r.sample_ids.size())
        s += " and " + std::to_string(r.sample_ids.size() - shown) + " more";
    }
    return s + "; stopped on every rank (nonfinite_policy::stop)";
  }
  std::vector<nonfinite_record> m_records;
};

/// A replica check that found ranks whose parameters differ from rank 0's.
struct replica_event {
  std::size_t epoch = 0;        ///< 0-based epoch of the check
  std::size_t step = 0;         ///< 0-based step (within the epoch) after which it ran
  std::size_t global_step = 0;  ///< 0-based step over the trainer's life
  std::vector<int> ranks;       ///< ranks whose checksum differs from rank 0's, ascending
};

/// Parameter replicas diverged: some ranks' checksum differs from rank 0's. Raised on every rank.
class replica_mismatch_error : public mismatch_error {
 public:
  /// An error for `event`, whose message is `what`.
  replica_mismatch_error(replica_event event, const std::string& what)
      : mismatch_error(what), m_event(std::move(event)) {}
  /// Where the check ran and which ranks differ.
  const replica_event& event() const noexcept { return m_event; }
  /// The ranks whose parameters differ from rank 0's.
  const std::vector<int>& ranks() const noexcept { return m_event.ranks; }

 private:
  replica_event m_event;
};

/// `fit` was stopped on request (`train_options::stop`): every rank finished the same step, and
/// rank 0 wrote a checkpoint when a checkpoint directory was set. Thrown on every rank.
class interrupted_error : public error {
 public:
  interrupted_error(std::size_t global_step, std::string checkpoint, const std::string& what)
      : error(what), m_global_step(global_step), m_checkpoint(std::move(checkpoint)) {}
  /// Steps applied when the run stopped.
  std::size_t global_step() const noexcept { return m_global_step; }
  /// The checkpoint written at the stop (rank 0; empty elsewhere or without a directory).
  const std::string& checkpoint() const noexcept { return m_checkpoint; }

 private:
  std::size_t m_global_step;
  std::string m_checkpoint;
};

}  // namespace tutti
