// SPDX-License-Identifier: Apache-2.0
/// @file data/detail/csv_chunked.hpp
/// @brief The reader of a file with integer ids: its rows cut into chunks of whole lines, the
/// chunks of a window read by all threads at once, their ids then given dense indices in order
/// of first appearance (the users' and the items' at once). The result, and the error of a
/// malformed file (line, column, message), are those of the one-pass reader `csv_parse_rows`.
#pragma once

#include <tutti/data/csv_options.hpp>
#include <tutti/data/detail/csv_text.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/detail/thread_range.hpp>
#include <tutti/error.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace tutti::detail {

/// Threads the reader may use: OpenMP's, or one where the loader is built without it (the
/// pragmas below are then ignored and the chunks read in turn, to the same result).
inline int csv_threads() {
#if defined(_OPENMP)
  return std::max(1, omp_get_max_threads());
#else
  return 1;
#endif
}

/// Bytes of text a chunk of the reader holds (whole lines, so a little more).
inline constexpr std::size_t csv_chunk_bytes = std::size_t{1} << 22;

/// Dense indices of integer ids in order of first appearance. While every id is a non-negative
/// integer below `limit` (a platform's counters), a table indexed by the id: one memory access
/// per row, which a loop can prefetch. From the first id that is not, a hash map
/// (`dense_id_map`), holding the ids seen so far under the same indices.
///
/// The table and the list of ids grow where they are: their room is reserved up front (`limit`
/// indices, `expected` ids: address space, at most 1.5 times the file's size a column, that the
/// system backs only where it is written), so no growth copies them into fresh memory. Doubling
/// did: 20 M rows of 8.65 M learners wrote 102 MB of table and 165 MB of ids for 63 and 69 MB
/// kept, every page of it new to the process. Where the system refuses the room (a strict
/// overcommit policy), they grow by doubling as before.
class first_seen_ids {
 public:
  first_seen_ids(std::size_t limit, std::size_t expected) : m_limit(limit) {
    try {
      m_table.reserve(limit);
      m_ids.reserve(std::min(limit, expected));
    } catch (const std::bad_alloc&) {
      m_table = {};
      m_ids = {};
    }
  }

  /// Dense index of `id`, adding it when new.
  std::int32_t operator()(std::int64_t id) {
    if (!m_hashed) {
      if (id >= 0 && static_cast<std::uint64_t>(id) < m_table.size()) return at(id);
      if (id >= 0 && static_cast<std::uint64_t>(id) < m_limit) {
        m_table.resize(std::min<std::size_t>(
                           m_limit, std::max(2 * m_table.size(), static_cast<std::size_t>(id) + 1)),
                       -1);
        return at(id);
      }
      to_hash();
    }
    return m_hash(id);
  }
  /// Asks for the cache line `id`'s index is in, for a lookup a few rows later.
  void prefetch(std::int64_t id) const {
    if (!m_hashed && id >= 0 && static_cast<std::uint64_t>(id) < m_table.size())
      prefetch_bytes(m_table.data() + id, sizeof(std::int32_t));
  }
  /// Number of distinct ids seen.
  std::size_t size() const noexcept { return m_hashed ? m_hash.size() : m_ids.size(); }
  /// Dense index -> source id; leaves the map empty.
  std::vector<std::int64_t> release() {
    m_table = {};
    return m_hashed ? m_hash.release() : std::move(m_ids);
  }

 private:
  std::int32_t at(std::int64_t id) {
    std::int32_t& d = m_table[static_cast<std::size_t>(id)];
    if (d < 0) {
      d = static_cast<std::int32_t>(m_ids.size());
      m_ids.push_back(id);
    }
    return d;
  }
  void to_hash() {
    for (std::int64_t id : m_ids) m_hash(id);  // in order: the same dense indices
    m_ids = {};
    m_table = {};
    m_hashed = true;
  }
  std::size_t m_limit;
  bool m_hashed = false;
  std::vector<std::int32_t> m_table;
  std::vector<std::int64_t> m_ids;
  dense_id_map m_hash;
};

/// One chunk of a file's rows as the source spells them, read by one thread.
struct csv_chunk {
  std::size_t begin = 0, end = 0;    ///< byte range of whole lines in the text
  std::vector<std::int64_t> ids[2];  ///< source user ids, source item ids
  std::vector<float> labels;
  std::vector<std::int64_t> times;  ///< empty when the layout has no timestamp
  bool tail = false;             ///< reached the file's blank end: no row follows this chunk's rows
  bool failed = false;           ///< stopped at a malformed line: the one after its rows
  std::size_t fault_column = 0;  ///< the failed line's 1-based column
  std::string fault_message;
  std::exception_ptr thrown;  ///< anything else that stopped it (memory)
};

/// Chunks of whole lines of about `bytes` bytes each, covering `text` from `pos`.
inline std::vector<csv_chunk> csv_cut_chunks(std::string_view text, std::size_t pos,
                                             std::size_t bytes) {
  std::vector<csv_chunk> out;
  while (pos < text.size()) {
    std::size_t end = std::min(text.size(), pos + std::max<std::size_t>(bytes, 1));
    if (end < text.size()) {
      const std::size_t nl = text.find('\n', end - 1);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    csv_chunk& c = out.emplace_back();
    c.begin = pos;
    c.end = end;
    pos = end;
  }
  return out;
}

/// Reads chunk `c`'s lines as `csv_parse_rows` reads them, stopping at the first malformed line
/// or at the file's blank end.
inline void csv_read_chunk(std::string_view text, const csv_layout& lay,
                           const data::csv_options& opt, csv_chunk& c) {
  csv_scratch sc;
  csv_row row;
  std::size_t pos = c.begin;
  while (pos < c.end) {
    std::size_t next = 0;
    const std::string_view line = csv_next_line(text, pos, next);
    if (csv_all_blank(line)) {
      if (csv_all_blank(text.substr(next))) {
        c.tail = true;
        return;
      }
      c.failed = true;
      c.fault_message = csv_blank_line_message(lay);
      return;
    }
    pos = next;
    if (auto st = csv_parse_row(line, lay, opt.implicit, sc, row); !st) {
      c.failed = true;
      c.fault_column = csv_fault_column(st, lay);
      c.fault_message = csv_fault_message(st, lay, opt, sc.fields);
      return;
    }
    c.ids[0].push_back(row.user);
    c.ids[1].push_back(row.item);
    c.labels.push_back(static_cast<float>(row.label));
    if (lay.with_time()) c.times.push_back(row.time);
  }
}

/// Gives the ids of column `col` (0 users, 1 items) of `chunks` their dense indices, appended to
/// `out` (which holds the earlier rows'). Frees each chunk's ids once given.
inline void csv_map_chunk_ids(std::vector<csv_chunk>& chunks, int col, first_seen_ids& map,
                              std::vector<std::int32_t>& out, const std::string& source) {
  constexpr auto most = static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
  constexpr std::size_t ahead = 16;
  for (csv_chunk& c : chunks) {
    const std::vector<std::int64_t>& ids = c.ids[col];
    const std::size_t n = ids.size();
    for (std::size_t j = 0; j < n; ++j) {
      if (j + ahead < n) map.prefetch(ids[j + ahead]);
      if (map.size() == most)
        throw data_error(source, out.size() + 2, 0,
                         "more than 2^31-1 distinct users or items; expected fewer");
      out.push_back(map(ids[j]));
    }
    c.ids[col] = {};
  }
}

/// `csv_read_chunk`, anything it throws kept in the chunk (for the thread that reads the chunks
/// in order).
inline void csv_read_chunk_caught(std::string_view text, const csv_layout& lay,
                                  const data::csv_options& opt, csv_chunk& c) {
  try {
    csv_read_chunk(text, lay, opt, c);
  } catch (...) {
    c.thrown = std::current_exception();
  }
}

/// Sizes the arrays of chunks [first, first + n) for `per_byte` rows a byte of their text, on the
/// calling thread. The threads that read the chunks then fill memory of the calling thread's
/// heap, which goes back to the system once the parse frees it: memory a reading thread
/// allocates stays in that thread's heap, free but resident, for the rest of the run.
inline void csv_reserve_chunks(std::vector<csv_chunk>& chunks, std::size_t first, std::size_t n,
                               double per_byte, const csv_layout& lay) {
  for (std::size_t k = first; k < first + n; ++k) {
    csv_chunk& c = chunks[k];
    const auto rows =
        static_cast<std::size_t>(static_cast<double>(c.end - c.begin) * per_byte) + 16;
    for (auto& ids : c.ids) ids.reserve(rows);
    c.labels.reserve(rows);
    if (lay.with_time()) c.times.reserve(rows);
  }
}

/// Rows a byte of the text, read from chunks [first, first + n) (`fallback` when they are
/// empty), a twentieth more to spare.
inline double csv_rows_per_byte(const std::vector<csv_chunk>& chunks, std::size_t first,
                                std::size_t n, double fallback) {
  std::size_t rows = 0, bytes = 0;
  for (std::size_t k = first; k < first + n; ++k) {
    rows += chunks[k].labels.size();
    bytes += chunks[k].end - chunks[k].begin;
  }
  return rows && bytes ? 1.05 * static_cast<double>(rows) / static_cast<double>(bytes) : fallback;
}

/// Reads chunks [first, first + n) of `chunks`, all threads.
inline void csv_read_chunks(std::string_view text, const csv_layout& lay,
                            const data::csv_options& opt, std::vector<csv_chunk>& chunks,
                            std::size_t first, std::size_t n) {
#pragma omp parallel for schedule(dynamic, 1)
  for (std::ptrdiff_t k = 0; k < static_cast<std::ptrdiff_t>(n); ++k)
    csv_read_chunk_caught(text, lay, opt, chunks[first + static_cast<std::size_t>(k)]);
}

/// The read chunks [first, first + n) of `chunks` in file order, up to the one that ended the
/// file (`ended` set); the first that failed is raised as the data error of its line (the rows
/// before it: `rows_before` and the window's earlier chunks').
inline std::vector<csv_chunk> csv_take_read_chunks(std::vector<csv_chunk>& chunks,
                                                   std::size_t first, std::size_t n,
                                                   std::size_t rows_before,
                                                   const std::string& source, bool& ended) {
  std::vector<csv_chunk> read;
  std::size_t in_read = 0;
  for (std::size_t k = first; k < first + n; ++k) {
    csv_chunk& c = chunks[k];
    if (c.thrown) std::rethrow_exception(c.thrown);
    if (c.failed)
      throw data_error(source, rows_before + in_read + c.labels.size() + 2, c.fault_column,
                       c.fault_message);
    in_read += c.labels.size();
    read.push_back(std::move(c));
    if (read.back().tail) {
      ended = true;
      break;
    }
  }
  return read;
}

/// The rows of `text` from offset `pos` (the line after the header) as `lay` reads them, for
/// integer ids: the same rows, indices and errors as `csv_parse_rows`, read by all threads.
/// `chunk_bytes` sets the chunks' size (tests make it small to cut lines everywhere).
inline data::interactions csv_parse_rows_chunked(std::string_view text, std::size_t pos,
                                                 const csv_layout& lay,
                                                 const data::csv_options& opt,
                                                 const std::string& source,
                                                 std::size_t chunk_bytes = csv_chunk_bytes) {
  std::vector<csv_chunk> chunks = csv_cut_chunks(text, pos, chunk_bytes);
  // A table of at most one index per 8 bytes of text (half the text's size) before the ids
  // go to a hash map.
  const std::size_t limit = std::max<std::size_t>(std::size_t{1} << 20, text.size() / 8);
  const std::size_t estimate = (text.size() - pos) / (lay.header_len + 1) + 1;
  first_seen_ids maps[2] = {first_seen_ids(limit, estimate), first_seen_ids(limit, estimate)};
  std::vector<std::int32_t> dense[2];
  data::interactions out;
  for (auto& d : dense) d.reserve(estimate);
  out.labels.reserve(estimate);
  if (lay.with_time()) out.timestamps.reserve(estimate);
  // Windows of chunks: while one window's ids get their indices (one thread a column, in file
  // order), the other threads read the next window's chunks; the raw ids in memory are two
  // windows'.
  const std::size_t window = 4 * static_cast<std::size_t>(csv_threads());
  // Rows a byte: first as many as the header's length suggests, then as the first window read.
  double per_byte = 1.0 / static_cast<double>(lay.header_len + 1);
  csv_reserve_chunks(chunks, 0, std::min(window, chunks.size()), per_byte, lay);
  csv_read_chunks(text, lay, opt, chunks, 0, std::min(window, chunks.size()));
  per_byte = csv_rows_per_byte(chunks, 0, std::min(window, chunks.size()), per_byte);
  bool ended = false;
  for (std::size_t w = 0; w < chunks.size() && !ended; w += window) {
    std::vector<csv_chunk> read = csv_take_read_chunks(
        chunks, w, std::min(window, chunks.size() - w), dense[0].size(), source, ended);
    for (csv_chunk& c : read) {
      out.labels.insert(out.labels.end(), c.labels.begin(), c.labels.end());
      out.timestamps.insert(out.timestamps.end(), c.times.begin(), c.times.end());
      c.labels = {};
      c.times = {};
    }
    const std::size_t next = ended ? chunks.size() : std::min(chunks.size(), w + window);
    const std::size_t next_n = std::min(window, chunks.size() - next);
    csv_reserve_chunks(chunks, next, next_n, per_byte, lay);
    std::exception_ptr thrown[2];
    std::atomic<std::size_t> taken{0};
#pragma omp parallel num_threads(csv_threads())
    {
      const auto [t, threads] = this_thread_place();
      for (int col = 0; col < 2; ++col) {
        if (t != (threads > 1 ? static_cast<std::size_t>(col) : 0)) continue;
        try {
          csv_map_chunk_ids(read, col, maps[col], dense[col], source);
        } catch (...) {
          thrown[col] = std::current_exception();
        }
      }
      for (std::size_t k; (k = taken.fetch_add(1)) < next_n;)
        csv_read_chunk_caught(text, lay, opt, chunks[next + k]);
    }
    for (const auto& t : thrown)
      if (t) std::rethrow_exception(t);
  }
  out.users = std::move(dense[0]);
  out.items = std::move(dense[1]);
  out.user_ids = maps[0].release();
  out.item_ids = maps[1].release();
  out.implicit = opt.implicit;
  return out;
}

}  // namespace tutti::detail
