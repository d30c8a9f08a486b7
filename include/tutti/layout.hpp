// SPDX-License-Identifier: Apache-2.0
/// @file layout.hpp
/// @brief `tutti::parameter_layout`: a model's parameters as named segments of one flat arena.
#pragma once

#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace tutti {

/// What a segment holds; optimizers and reducers may treat kinds differently (LARS skips
/// biases, sparse exchange applies to embeddings).
enum class segment_kind : std::uint8_t {
  dense,      ///< a weight matrix or vector used whole every step
  embedding,  ///< a table of rows, few of which a batch touches
  bias,       ///< a bias vector or scalar
};

/// One named range of the flat parameter arena: `rows × cols` values starting at `offset`.
struct segment {
  std::string name;
  std::size_t offset = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
  segment_kind kind = segment_kind::dense;
  /// Number of values (rows × cols).
  std::size_t size() const noexcept { return rows * cols; }
};

/// Where a segment `parameter_layout::add` appended lives: its position among the segments and
/// its first value in the arena. It converts to no integer, so neither number can be taken for
/// the other: index an arena with `offset` (or `at(row, col)`), the layout with the handle.
struct segment_handle {
  std::size_t index = 0;   ///< position among the layout's segments
  std::size_t offset = 0;  ///< arena index of the segment's first value
  std::size_t rows = 0;    ///< rows of the segment
  std::size_t cols = 0;    ///< values per row
  /// Number of values (rows × cols).
  std::size_t size() const noexcept { return rows * cols; }
  /// The arena index of value (row, col): offset + row × cols + col.
  std::size_t at(std::size_t row, std::size_t col = 0) const noexcept {
    return offset + row * cols + col;
  }
};

/// The parameter layout of a model: an ordered list of named segments in one flat arena.
/// The trainer allocates parameter, gradient and optimizer-state arenas of `total()` values;
/// every model, checkpoint, checksum and optimizer therefore handles parameters alike.
/// Segment offsets are aligned to `alignment` values so each starts on a cache line.
class parameter_layout {
 public:
  /// Offsets are multiples of this many values (16 floats = 64 bytes).
  static constexpr std::size_t alignment = 16;

  /// Appends a segment and returns its handle: its `offset` in the arena (where its values
  /// start) and its `index` among the segments. Names must be unique and rows, cols non-zero.
  segment_handle add(std::string name, std::size_t rows, std::size_t cols, segment_kind kind) {
    TUTTI_EXPECTS(rows > 0 && cols > 0, "tutti::parameter_layout::add",
                  "segment '" + name + "' has shape " + std::to_string(rows) + "x" +
                      std::to_string(cols) + "; expected both extents >= 1");
    for (const auto& s : m_segments)
      TUTTI_EXPECTS(s.name != name, "tutti::parameter_layout::add",
                    "segment name '" + name + "' is already used; expected unique names");
    segment s{std::move(name), m_total, rows, cols, kind};
    const segment_handle h{m_segments.size(), m_total, rows, cols};
    m_total += (s.size() + alignment - 1) / alignment * alignment;
    m_segments.push_back(std::move(s));
    return h;
  }
  /// The segments in arena order.
  const std::vector<segment>& segments() const noexcept { return m_segments; }
  /// The segment at `index`.
  const segment& operator[](std::size_t index) const { return m_segments.at(index); }
  /// The segment `add` returned `h` for.
  const segment& operator[](const segment_handle& h) const { return m_segments.at(h.index); }
  /// The segment called `name`; throws `tutti::invalid_argument` when there is none.
  const segment& find(const std::string& name) const {
    for (const auto& s : m_segments)
      if (s.name == name) return s;
    detail::throw_invalid("tutti::parameter_layout::find", "no segment named '" + name + "'");
  }
  /// Arena length in values, padding included.
  std::size_t total() const noexcept { return m_total; }
  /// Number of parameters, padding excluded.
  std::size_t parameter_count() const noexcept {
    std::size_t n = 0;
    for (const auto& s : m_segments) n += s.size();
    return n;
  }
  /// A 64-bit digest of names, shapes and kinds: equal layouts, equal digests.
  std::uint64_t digest() const noexcept {
    std::uint64_t h = 0x7475747469ULL;
    for (const auto& s : m_segments) {
      for (char c : s.name) h = detail::mix64(h ^ static_cast<unsigned char>(c));
      h = detail::mix64(h ^ s.rows);
      h = detail::mix64(h ^ (s.cols << 8) ^ static_cast<std::uint64_t>(s.kind));
    }
    return h;
  }

 private:
  std::vector<segment> m_segments;
  std::size_t m_total = 0;
};

/// The rows of one layout segment that a step updates.
struct segment_rows {
  /// Every row: a dense segment (or a table the trainer treats whole).
  bool whole = true;
  /// When not `whole`: the rows, unique and ascending, in host memory.
  std::span<const std::int32_t> rows;
};

/// What a row-sparse step touched: one entry per segment of the layout, in layout order.
using row_selection = std::span<const segment_rows>;

/// The rows of one layout segment that a step updates, in the memory of the model's space (a
/// GPU's): their number is known there only, so a step never waits to read it.
struct segment_rows_on_space {
  /// Every row: a dense segment.
  bool whole = true;
  /// When not `whole`: `*count` rows, unique and ascending, at `rows` (both memory of the
  /// space), with `count` at most `capacity` (what a kernel over the rows is sized for).
  const std::int32_t* rows = nullptr;
  const std::int32_t* count = nullptr;
  std::size_t capacity = 0;
};

/// `row_selection` in the memory of the model's space: one entry per segment, in layout order.
using row_selection_on_space = std::span<const segment_rows_on_space>;

namespace detail {
/// The row id of a batch slot that names no row (a weight-0 slot, an unused place in a block of
/// rows): above every valid id, so padding sorts behind all real rows and the real rows keep
/// their sorted positions whether or not padding is present. The models' grouping of rows and
/// the trainer's exchange of rows between ranks both write and skip it.
inline constexpr std::int32_t padding_key = std::numeric_limits<std::int32_t>::max();
}  // namespace detail

}  // namespace tutti
