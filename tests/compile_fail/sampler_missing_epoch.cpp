// SPDX-License-Identifier: Apache-2.0
/// @file sampler_missing_epoch.cpp
/// @brief Must not compile: a sampler whose `shard` ignores the epoch would hand every epoch the
/// same order, so the concept insists on the epoch argument.
// expect-error: tutti::shard_sampler: missing `tutti::shard shard\(std::size_t n,
// expect-error: std::uint64_t epoch\) const`
// expect-error: \(see docs/concepts\.md#shard-sampler\)
#include <tutti/concepts.hpp>

#include <cstddef>
#include <cstdint>

/// Takes everything but the epoch.
struct sampler_without_epoch {
  tutti::shard shard(std::size_t n, int world_size, int rank, std::uint64_t /*seed*/) const {
    const auto world = static_cast<std::size_t>(world_size);
    const std::size_t slots = n / world;
    tutti::shard s;
    for (std::size_t j = 0; j < slots; ++j) {
      s.indices.push_back(j * world + static_cast<std::size_t>(rank));
      s.weights.push_back(1.0f);
    }
    for (std::size_t j = 0; j <= slots; ++j) s.real_prefix.push_back(j * world);
    return s;
  }
};

static_assert(tutti::check_shard_sampler<sampler_without_epoch>());

int main() {
  return 0;
}
