// SPDX-License-Identifier: Apache-2.0
/// @file reducers/single_rank.hpp
/// @brief `tutti::single_rank`: the reducer of one device in one process.
///
/// It is also the smallest complete `tutti::gradient_reducer`: copy it to write your own.
#pragma once

#include <tutti/error.hpp>

#include <concepts>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace tutti {

/// Reducer of a world of one: rank 0 of 1, every collective leaves the data as it is.
/// It never touches the memory it is handed, so it works with every execution space.
/// It still counts the gradient bytes a real reducer would move, so the ledger can price N
/// devices from a single-device run.
class single_rank {
 public:
  /// Every space is accepted: the data is never dereferenced.
  template <class Space>
  static constexpr bool accepts = true;

  /// Always 0.
  int rank() const noexcept { return 0; }
  /// Always 1.
  int world_size() const noexcept { return 1; }

  /// The mean over one rank is the data itself; only the bytes are counted.
  template <class T>
  requires std::same_as<T, float> || std::same_as<T, double>
  void all_reduce_mean(std::span<T> grads) noexcept { m_bytes += grads.size_bytes(); }
  /// The sum over one rank of bf16 values (`tutti::compressed<single_rank, bf16>`) is the
  /// data itself; only the bytes are counted.
  void all_reduce_sum_bf16(std::span<std::uint16_t> values) noexcept {
    m_bytes += values.size_bytes();
  }
  /// Rank 0 already holds the root's data. Throws `tutti::invalid_argument` unless root == 0.
  template <class T>
  requires std::same_as<T, float> || std::same_as<T, double>
  void broadcast(std::span<T> /*values*/, int root) const {
    TUTTI_EXPECTS(root == 0, "tutti::single_rank::broadcast",
                  "root = " + std::to_string(root) + "; expected 0 in a world of one rank");
  }
  /// The sum over one rank is the data itself.
  void all_reduce_sum(std::span<double> /*values*/) const noexcept {}
  /// The maximum over one rank is the data itself.
  void all_reduce_max(std::span<double> /*values*/) const noexcept {}
  /// Copies `mine` into `all`. Throws `tutti::invalid_argument` unless the sizes are equal.
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) const {
    TUTTI_EXPECTS(all.size() == mine.size(), "tutti::single_rank::all_gather",
                  "all.size() = " + std::to_string(all.size()) +
                      "; expected mine.size() * 1 = " + std::to_string(mine.size()));
    if (!mine.empty()) std::memmove(all.data(), mine.data(), mine.size_bytes());
  }
  /// Gradient bytes handed to `all_reduce_mean` (and `all_reduce_sum_bf16`) so far.
  std::uint64_t bytes_reduced() const noexcept { return m_bytes; }

 private:
  std::uint64_t m_bytes = 0;
};

/// The former name of `single_rank`, kept so that code written against it still compiles.
using no_op_reducer [[deprecated("tutti::no_op_reducer is now tutti::single_rank")]] = single_rank;

}  // namespace tutti
