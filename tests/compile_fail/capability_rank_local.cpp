// SPDX-License-Identifier: Apache-2.0
/// @file capability_rank_local.cpp
/// @brief Must not compile: a sampler that says it is rank-local, with `rows_of` of no rank.
// expect-error: tutti::shard_sampler: `rank_local` is true and `rows_of` is not the capability
// expect-error: tutti::rank_local_sampler
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_rank_local : tutti_compile_checks::base_sampler {
  static constexpr bool rank_local = true;
  std::uint64_t rows_of() const { return 0; }
};

static_assert(tutti::check_shard_sampler<wrong_rank_local>());

int main() {
  return 0;
}
