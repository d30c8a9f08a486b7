// SPDX-License-Identifier: Apache-2.0
/// @file layout_handle_as_offset.cpp
/// @brief Must not compile: a segment's handle taken for an arena offset. Were `add` to return a
/// bare index, the second segment's values would be read at index 1 of the arena, inside the
/// first segment, and the model would train to a wrong answer without a word.
// expect-error: segment_handle
#include <tutti/layout.hpp>

#include <cstddef>

int main() {
  tutti::parameter_layout layout;
  layout.add("w", 4, 1, tutti::segment_kind::dense);
  const std::size_t bias = layout.add("b", 1, 1, tutti::segment_kind::bias);  // not an offset
  return static_cast<int>(bias);
}
