// SPDX-License-Identifier: Apache-2.0
#pragma once
// Random damage to a text, for the loaders' fuzz-like tests: one to three edits, each a byte
// replaced by one of an alphabet, one to eight bytes erased, or a byte of the alphabet inserted.

#include <tutti/detail/random.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tutti_test {

/// `text` with 1-3 edits at offsets `from` and after (the bytes before stay as they are).
inline std::string corrupt_text(std::string text, std::string_view alphabet, std::size_t from,
                                tutti::detail::splitmix& rng) {
  for (std::uint64_t k = 0, n = 1 + rng.below(3); k < n; ++k) {
    const std::size_t at = from + rng.below(text.size() - from);
    switch (rng.below(3)) {
      case 0:
        text[at] = alphabet[rng.below(alphabet.size())];
        break;
      case 1:
        text.erase(at, 1 + rng.below(8));
        break;
      default:
        text.insert(at, 1, alphabet[rng.below(alphabet.size())]);
    }
  }
  return text;
}

}  // namespace tutti_test
