// SPDX-License-Identifier: Apache-2.0
/// @file memory_accounts.hpp
/// @brief Memory in the books: the bytes a rank's trainer holds, by account (what
/// `tutti::fit_result::memory` reports after a fit), and the forecast of a run's peak made from
/// the same accounts before it starts (trainer/memory_forecast.hpp computes the trainer's part).
#pragma once

#include <algorithm>
#include <cstdint>

namespace tutti {

/// Bytes one rank's trainer holds for a fit, by what holds them: the arenas in the model's space,
/// the training rows and the step's buffers there, and the epoch's shard on the host.
struct memory_accounts {
  std::uint64_t parameters = 0;       ///< the parameter arena
  std::uint64_t gradients = 0;        ///< the gradient arena (0 where the reducer lends it)
  std::uint64_t optimizer_state = 0;  ///< the optimizer's state arena
  std::uint64_t rows = 0;             ///< the training rows as the step reads them
  /// The epoch's slots and their weights, the batch's rows, the negatives' tables.
  std::uint64_t step_buffers = 0;
  std::uint64_t shard = 0;  ///< the largest epoch's shard (positions, any weights, real counts)
  /// Every account's bytes.
  std::uint64_t total() const noexcept {
    return parameters + gradients + optimizer_state + rows + step_buffers + shard;
  }
  friend bool operator==(const memory_accounts&, const memory_accounts&) = default;
};

/// A process's resident bytes forecast before it trains: the trainer's accounts, what the
/// program holds beside them, and the two moments the peak can fall on (the rows being loaded
/// and split, or the step's buffers being built while everything else is held).
struct memory_forecast {
  memory_accounts trainer;     ///< as `fit_result::memory` will report them
  std::uint64_t data = 0;      ///< the rows and id dictionaries the program holds beside them
  std::uint64_t building = 0;  ///< held only while the step's buffers are built
  std::uint64_t loading = 0;   ///< the loading's own peak: the rows read, their copies, the split
  std::uint64_t process = 0;   ///< the program's resident bytes before it reads any data
  /// The resident bytes while the step's buffers are built (everything held at once).
  std::uint64_t training_peak() const noexcept {
    return process + trainer.total() + data + building;
  }
  /// The forecast peak: the larger of the two moments.
  std::uint64_t peak() const noexcept { return std::max(training_peak(), process + loading); }
};

}  // namespace tutti
