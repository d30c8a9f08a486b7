// SPDX-License-Identifier: Apache-2.0
/// @file state_map.hpp
/// @brief Where each parameter row's optimizer state lives: `tutti::state_map`, the optional
/// optimizer capability that gives it (`tutti::optimizer_maps_state`), and the copy of a row's
/// state from one arena to another.
///
/// A model that continues from an earlier one (a warm start on a table that has grown) keeps the
/// optimizer's state of the rows it keeps: Adam's moments, row-wise Adagrad's accumulators. The
/// state arena is the optimizer's own; the map says, for each segment of the layout, in which
/// planes row r's state lies, so the state can move with its row.
#pragma once

#include <tutti/error.hpp>
#include <tutti/layout.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tutti {

/// One plane of a segment's optimizer state: row r of the segment holds `width` floats at
/// `offset + r * width` of the state arena.
struct state_plane {
  std::size_t offset = 0;
  std::size_t width = 0;
};

/// For each segment of a layout (in its order), the planes of its rows' state (none: the
/// segment keeps no state).
using state_map = std::vector<std::vector<state_plane>>;

/// Capability: `state_map(layout)` says where the state of each row lies in this optimizer's
/// state arena for `layout`; no two rows share a float of it. Without it the state of an
/// optimizer cannot follow its rows (a warm start then starts it from zero).
template <class O>
concept optimizer_maps_state = requires(const O& o, const parameter_layout& layout) {
  { o.state_map(layout) } -> std::convertible_to<state_map>;
};

/// The state map of `o` for `layout`, or nullopt when `o` does not give one.
template <class O>
std::optional<state_map> optimizer_state_map(const O& o, const parameter_layout& layout) {
  if constexpr (optimizer_maps_state<O>)
    return state_map(o.state_map(layout));
  else
    return std::nullopt;
}

/// `planes` copies of the arena's own layout, one after the other: the state of an optimizer
/// that keeps `planes` floats per parameter (Adam's two moments, SGD's momentum).
inline state_map arena_state_map(const parameter_layout& layout, std::size_t planes) {
  state_map map;
  for (const segment& s : layout.segments()) {
    std::vector<state_plane> per;
    for (std::size_t p = 0; p < planes; ++p) per.push_back({p * layout.total() + s.offset, s.cols});
    map.push_back(std::move(per));
  }
  return map;
}

/// Floats of state one row of segment `s` holds (its planes' widths added up).
inline std::size_t row_state_width(const state_map& map, std::size_t s) {
  std::size_t w = 0;
  for (const state_plane& p : map.at(s)) w += p.width;
  return w;
}

/// Copies the state of row `row` of segment `s` (every plane, in order) from `state` into `out`
/// (`row_state_width(map, s)` floats).
inline void gather_row_state(const state_map& map, std::size_t s, std::size_t row,
                             std::span<const float> state, std::span<float> out) {
  std::size_t at = 0;
  for (const state_plane& p : map.at(s)) {
    std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(p.offset + row * p.width), p.width,
                out.begin() + static_cast<std::ptrdiff_t>(at));
    at += p.width;
  }
}

/// The inverse of `gather_row_state`: writes `in` as the state of row `row` of segment `s`.
inline void scatter_row_state(const state_map& map, std::size_t s, std::size_t row,
                              std::span<const float> in, std::span<float> state) {
  std::size_t at = 0;
  for (const state_plane& p : map.at(s)) {
    std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(at), p.width,
                state.begin() + static_cast<std::ptrdiff_t>(p.offset + row * p.width));
    at += p.width;
  }
}

/// Checks that `map` has one entry per segment of `layout` and that its planes lie in a state
/// arena of `state_size` floats without overlapping (the padding between a layout's segments
/// may hold state of no row). Throws `tutti::invalid_argument` naming the first segment whose
/// state overlaps another's or leaves the arena.
inline void check_state_map(const state_map& map, const parameter_layout& layout,
                            std::size_t state_size) {
  constexpr const char* fn = "tutti::check_state_map";
  const auto& segs = layout.segments();
  TUTTI_EXPECTS(map.size() == segs.size(), fn,
                "the map has " + std::to_string(map.size()) + " entries for a layout of " +
                    std::to_string(segs.size()) + " segments; expected one per segment");
  // Each plane of a segment is one range of the arena: sorted, no range may start before the
  // one ahead of it ends.
  struct range {
    std::size_t begin, end, segment;
  };
  std::vector<range> ranges;
  for (std::size_t s = 0; s < segs.size(); ++s)
    for (const state_plane& p : map[s]) {
      const std::size_t end = p.offset + segs[s].rows * p.width;
      TUTTI_EXPECTS(end <= state_size, fn,
                    "segment '" + segs[s].name + "' has state up to " + std::to_string(end) +
                        "; expected within the arena's " + std::to_string(state_size));
      if (end > p.offset) ranges.push_back({p.offset, end, s});
    }
  std::sort(ranges.begin(), ranges.end(),
            [](const range& a, const range& b) { return a.begin < b.begin; });
  for (std::size_t k = 1; k < ranges.size(); ++k)
    TUTTI_EXPECTS(ranges[k].begin >= ranges[k - 1].end, fn,
                  "segment '" + segs[ranges[k].segment].name + "' shares state float " +
                      std::to_string(ranges[k].begin) + " with segment '" +
                      segs[ranges[k - 1].segment].name + "'; expected each float of state once");
}

}  // namespace tutti
