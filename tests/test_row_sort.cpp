// SPDX-License-Identifier: Apache-2.0
// The host's radix grouping of a batch by row gives what a stable sort gives (unique), for row
// counts that need one, two and three passes, with padding slots anywhere.
#include <tutti/models/detail/row_sort.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace test_row_sort {

TEST_CASE("radix_group_rows is the stable sort of the slots by row, padding last") {
  constexpr std::int32_t padding = std::numeric_limits<std::int32_t>::max();
  std::mt19937_64 rng(11);
  for (const std::int32_t n_rows : {1, 2, 500, 2048, 2049, (1 << 22) + 5, 100000000}) {
    for (const std::size_t n :
         {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{10000}}) {
      CAPTURE(n_rows);
      CAPTURE(n);
      std::vector<std::int32_t> ids(n);
      std::vector<float> weights(n);
      // Few distinct rows (long runs) half the time, the whole range otherwise; a tenth padding.
      const std::int32_t span = (n % 2 == 0) ? std::min(n_rows, 37) : n_rows;
      for (std::size_t i = 0; i < n; ++i) {
        ids[i] = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(span));
        weights[i] = rng() % 10 == 0 ? 0.f : 1.f;
        if (weights[i] == 0.f && rng() % 2 == 0) ids[i] = -5;  // padding ids are never read
      }
      std::vector<std::int32_t> want(n);
      std::iota(want.begin(), want.end(), 0);
      auto key = [&](std::int32_t s) {
        return weights[static_cast<std::size_t>(s)] != 0.f ? ids[static_cast<std::size_t>(s)]
                                                           : padding;
      };
      std::stable_sort(want.begin(), want.end(),
                       [&](std::int32_t a, std::int32_t b) { return key(a) < key(b); });
      std::vector<std::int32_t> keys(n), order(n), keys_tmp(n), order_tmp(n);
      std::vector<std::uint32_t> count;
      tutti::detail::radix_group_rows(ids.data(), weights.data(), n, n_rows, padding, keys.data(),
                                      order.data(), keys_tmp.data(), order_tmp.data(), count);
      CHECK(order == want);
      bool keys_match = true;
      for (std::size_t j = 0; j < n; ++j) keys_match = keys_match && keys[j] == key(want[j]);
      CHECK(keys_match);
    }
  }
}

}  // namespace test_row_sort
