// SPDX-License-Identifier: Apache-2.0
/// @file capability_shard_from.cpp
/// @brief Must not compile: a sampler whose `shard_from` lacks the start position.
// expect-error: tutti::shard_sampler: `shard_from` is not the capability
// expect-error: tutti::sampler_can_reshard
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_shard_from : tutti_compile_checks::base_sampler {
  tutti::shard shard_from(std::size_t /*n*/, int /*world_size*/, int /*rank*/,
                          std::uint64_t /*seed*/, std::uint64_t /*epoch*/) const {
    return {};
  }
};

static_assert(tutti::check_shard_sampler<wrong_shard_from>());

int main() {
  return 0;
}
