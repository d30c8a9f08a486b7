// SPDX-License-Identifier: Apache-2.0
/// @file layout.hpp
/// @brief `tutti::parameter_layout`: a model's parameters as named segments of one flat arena.
#pragma once

#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <cstddef>
#include <cstdint>
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

/// The parameter layout of a model: an ordered list of named segments in one flat arena.
/// The trainer allocates parameter, gradient and optimizer-state arenas of `total()` values;
/// every model, checkpoint, checksum and optimizer therefore handles parameters alike.
/// Segment offsets are aligned to `alignment` values so each starts on a cache line.
class parameter_layout {
 public:
  /// Offsets are multiples of this many values (16 floats = 64 bytes).
  static constexpr std::size_t alignment = 16;

  /// Appends a segment and returns its index. Names must be unique and rows, cols non-zero.
  std::size_t add(std::string name, std::size_t rows, std::size_t cols, segment_kind kind) {
    TUTTI_EXPECTS(rows > 0 && cols > 0, "tutti::parameter_layout::add",
                  "segment '" + name + "' has shape " + std::to_string(rows) + "x" +
                      std::to_string(cols) + "; expected both extents >= 1");
    for (const auto& s : m_segments)
      TUTTI_EXPECTS(s.name != name, "tutti::parameter_layout::add",
                    "segment name '" + name + "' is already used; expected unique names");
    segment s{std::move(name), m_total, rows, cols, kind};
    m_total += (s.size() + alignment - 1) / alignment * alignment;
    m_segments.push_back(std::move(s));
    return m_segments.size() - 1;
  }
  /// The segments in arena order.
  const std::vector<segment>& segments() const noexcept { return m_segments; }
  /// The segment at `index`.
  const segment& operator[](std::size_t index) const { return m_segments.at(index); }
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

}  // namespace tutti
