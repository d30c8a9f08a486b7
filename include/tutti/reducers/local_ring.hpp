// SPDX-License-Identifier: Apache-2.0
/// @file reducers/local_ring.hpp
/// @brief `tutti::local_ring`: W ranks as threads of one process over host memory.
#pragma once

#include <tutti/detail/barrier.hpp>
#include <tutti/detail/bf16.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace tutti {

/// Settings of a `tutti::local_group` (and of `tutti::run_local`).
struct local_options {
  /// How long a rank waits in a collective for the others before the group fails.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// OpenMP threads per rank thread; 0 splits the process's threads evenly between ranks.
  int threads_per_rank = 0;
};

class local_ring;

/// The shared state of W ranks running as threads of one process: the rendezvous and what each
/// rank posts for the collective in progress. Ranks reach it through `tutti::local_ring` handles.
/// Once aborted (by `abort`, a timeout or a rank that left early) it stays aborted.
class local_group {
 public:
  /// A group of `world_size` ranks. Throws `tutti::invalid_argument` unless world_size >= 1,
  /// timeout > 0 and threads_per_rank >= 0.
  explicit local_group(int world_size, local_options options = {})
      : m_world(checked_world(world_size)),
        m_options(checked_options(options)),
        m_rendezvous(world_size, options.timeout),
        m_posts(static_cast<std::size_t>(world_size)) {}

  local_group(const local_group&) = delete;
  local_group& operator=(const local_group&) = delete;

  /// Number of ranks.
  int world_size() const noexcept { return m_world; }
  /// The settings the group was made with.
  const local_options& options() const noexcept { return m_options; }
  /// Fails the group on behalf of `failed_rank` (-1 when unknown): every rank in or entering a
  /// collective throws `collective_error(failed_rank, "rank N failed: why")`.
  void abort(int failed_rank, const std::string& why) { m_rendezvous.abort(failed_rank, why); }
  /// True once the group has failed.
  bool aborted() const { return m_rendezvous.aborted(); }
  /// Declares that `rank` will join no further collective, so ranks waiting for it fail at once
  /// instead of at the timeout. `tutti::run_local` calls it when a rank's work returns.
  void depart(int rank) {
    TUTTI_EXPECTS(
        rank >= 0 && rank < m_world, "tutti::local_group::depart",
        "rank = " + std::to_string(rank) + "; expected 0 <= rank < " + std::to_string(m_world));
    m_rendezvous.depart(rank);
  }

 private:
  friend class local_ring;

  enum class op_code : int {
    all_reduce_mean,
    broadcast,
    all_reduce_sum,
    all_reduce_max,
    all_gather,
    all_reduce_sum_bf16
  };
  // What one rank contributes to the collective in progress; read by the others only between
  // the collective's first and last barrier.
  struct post {
    op_code op = op_code::all_reduce_mean;
    std::size_t element_size = 0;
    void* data = nullptr;
    std::size_t count = 0;
    std::size_t count2 = 0;
    int root = 0;
  };

  static int checked_world(int world_size) {
    TUTTI_EXPECTS(world_size >= 1, "tutti::local_group",
                  "world_size = " + std::to_string(world_size) + "; expected world_size >= 1");
    return world_size;
  }
  static local_options checked_options(const local_options& o) {
    TUTTI_EXPECTS(o.timeout.count() > 0, "tutti::local_group",
                  "timeout = " + std::to_string(o.timeout.count()) + " ms; expected > 0");
    TUTTI_EXPECTS(o.threads_per_rank >= 0, "tutti::local_group",
                  "threads_per_rank = " + std::to_string(o.threads_per_rank) +
                      "; expected >= 0 (0 = share the process's threads)");
    return o;
  }

  int m_world;
  local_options m_options;
  detail::rendezvous m_rendezvous;
  std::vector<post> m_posts;
};

/// One rank's handle on a `tutti::local_group` (models `gradient_reducer`): W ranks as threads
/// of one process over host memory. `all_reduce_mean` is a reduce-scatter and an all-gather
/// over W chunks, reading the other ranks' buffers directly and adding in rank order; every
/// collective is deterministic, so all ranks end bitwise identical. A failure on one rank
/// becomes a `tutti::collective_error` on every rank, never a hang. Cheap to copy; the group must
/// outlive it.
class local_ring {
 public:
  /// Only host-accessible memory can be read by the neighbouring threads.
  template <class Space>
  static constexpr bool accepts = Space::host_accessible;

  /// The handle of `rank` in `group`. Throws `tutti::invalid_argument` unless 0 <= rank < W.
  local_ring(local_group& group, int rank) : m_group(&group), m_rank(rank) {
    TUTTI_EXPECTS(rank >= 0 && rank < group.world_size(), "tutti::local_ring",
                  "rank = " + std::to_string(rank) +
                      "; expected 0 <= rank < world_size = " + std::to_string(group.world_size()));
  }

  /// This rank, in [0, world_size()).
  int rank() const noexcept { return m_rank; }
  /// Number of ranks in the group.
  int world_size() const noexcept { return m_group->m_world; }
  /// The group this handle belongs to.
  local_group& group() const noexcept { return *m_group; }
  /// Gradient bytes this rank handed to `all_reduce_mean` (and `all_reduce_sum_bf16`) so far.
  std::uint64_t bytes_reduced() const noexcept { return m_bytes; }

  /// Replaces `grads` on every rank by the element-wise mean over ranks. The span is cut into W
  /// chunks at `n·c/W`; rank r sums chunk r of every rank's buffer **in rank order**
  /// (((x₀ + x₁) + x₂) + …) and divides by W (the reduce-scatter), then every rank gets every
  /// finished chunk (the all-gather): up to 256 KiB, and at any size with W = 2, each rank writes
  /// its finished chunk straight into every buffer as it goes; otherwise each rank copies the
  /// others' chunks after a rendezvous. Each rank receives (W−1)/W of the span in each phase, as
  /// in NCCL's ring. Because every element is added in rank order whatever the span's length,
  /// an element's mean does not depend on which call carried it nor where in the span it sat:
  /// reducing a sub-span, or the same values packed differently, gives the same bits (the
  /// sparse exchange relies on it). Every rank must pass the same number of values, or all of
  /// them throw `tutti::mismatch_error`.
  template <class T>
  requires std::same_as<T, float> || std::same_as<T, double>
  void all_reduce_mean(std::span<T> grads) {
    static constexpr const char* name = "tutti::local_ring::all_reduce_mean";
    publish(name, {local_group::op_code::all_reduce_mean, sizeof(T), grads.data(), grads.size()});
    check_equal_counts(name);
    const std::size_t w = static_cast<std::size_t>(world_size());
    const std::size_t r = static_cast<std::size_t>(m_rank);
    const std::size_t n = grads.size();
    const auto& posts = m_group->m_posts;
    const auto buffer_of = [&posts](std::size_t k) {
      return static_cast<T*>(posts[k].data);
    };
    const auto chunk_begin = [n, w](std::size_t c) {
      return n * c / w;
    };
    const T divisor = T(w);
    // Writing the finished chunks straight into every buffer saves a rendezvous and a read per
    // element but concentrates the writes into other cores' caches: measured faster at W = 2
    // for every size and at any W up to 256 KiB, slower at W = 4 for 1-4 MiB.
    const bool write_out = w == 2 || grads.size_bytes() <= (std::size_t{256} << 10);
    // Only rank r reads or writes chunk r of any buffer in the first phase, so the writes cannot
    // race. Blocks keep each partial sum in the cache while it is finished and copied out; the
    // sums and the division run in vectors (detail/host_simd.hpp) with the scalar loops' bits.
    constexpr std::size_t block = 2048;
    T acc[block];
    for (std::size_t lo = chunk_begin(r), e = chunk_begin(r + 1); lo < e && w > 1; lo += block) {
      const std::size_t m = std::min(block, e - lo);
      std::memcpy(acc, buffer_of(0) + lo, m * sizeof(T));
      for (std::size_t k = 1; k < w; ++k) detail::add_into(acc, buffer_of(k) + lo, m);
      detail::divide_by(acc, divisor, m);
      for (std::size_t k = 0; k < w; ++k)
        if (write_out || k == r) std::memcpy(buffer_of(k) + lo, acc, m * sizeof(T));
    }
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
    if (!write_out) {
      // Chunk c is final in rank c's buffer, and nobody writes chunk c of another buffer now.
      for (std::size_t c = 0; c < w; ++c) {
        const std::size_t b = chunk_begin(c), e = chunk_begin(c + 1);
        if (c != r && e > b) std::memcpy(grads.data() + b, buffer_of(c) + b, (e - b) * sizeof(T));
      }
      // Keeps every buffer alive until the others have copied from it.
      m_group->m_rendezvous.arrive_and_wait(m_rank, name);
    }
    m_bytes += grads.size_bytes();
  }

  /// Replaces `values` (bf16 bits, see detail/bf16.hpp) on every rank by the element-wise sum
  /// over ranks, for `tutti::compressed<local_ring, bf16>`. The span is cut into W chunks at
  /// `n·c/W`, as in `all_reduce_mean`; rank r adds chunk r of every rank's buffer in rank order in
  /// fp32 and rounds the total to bf16 once, then every rank copies the finished chunks of the
  /// others. Only bf16 is read across ranks; every rank ends bitwise identical. Sizes must agree
  /// (`tutti::mismatch_error` on every rank). Counts `values.size_bytes()` in `bytes_reduced()`.
  void all_reduce_sum_bf16(std::span<std::uint16_t> values) {
    static constexpr const char* name = "tutti::local_ring::all_reduce_sum_bf16";
    publish(name, {local_group::op_code::all_reduce_sum_bf16, sizeof(std::uint16_t), values.data(),
                   values.size()});
    check_equal_counts(name);
    const std::size_t w = static_cast<std::size_t>(world_size());
    const std::size_t r = static_cast<std::size_t>(m_rank);
    const std::size_t n = values.size();
    const auto& posts = m_group->m_posts;
    const auto buffer_of = [&posts](std::size_t k) {
      return static_cast<const std::uint16_t*>(posts[k].data);
    };
    const auto chunk_begin = [n, w](std::size_t c) {
      return n * c / w;
    };
    // Chunk r of every buffer is read by rank r alone, so the total may overwrite this rank's
    // own input in place. Blocks of fp32 partial sums keep every pass a simple stream that the
    // compiler vectorises.
    std::uint16_t* mine = values.data();
    constexpr std::size_t block = 1024;
    float acc[block];
    for (std::size_t b = chunk_begin(r), e = chunk_begin(r + 1); b < e; b += block) {
      const std::size_t m = std::min(block, e - b);
      const std::uint16_t* first = buffer_of(0) + b;
      for (std::size_t j = 0; j < m; ++j) acc[j] = detail::bf16_to_float(first[j]);
      for (std::size_t k = 1; k < w; ++k) {
        const std::uint16_t* in = buffer_of(k) + b;
        for (std::size_t j = 0; j < m; ++j) acc[j] += detail::bf16_to_float(in[j]);
      }
      for (std::size_t j = 0; j < m; ++j) mine[b + j] = detail::float_to_bf16(acc[j]);
    }
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
    // All-gather: chunk c is final in rank c's buffer; no rank reads chunk c of this one now.
    for (std::size_t c = 0; c < w; ++c) {
      const std::size_t b = chunk_begin(c), e = chunk_begin(c + 1);
      if (c != r && e > b) std::memcpy(mine + b, buffer_of(c) + b, (e - b) * sizeof(std::uint16_t));
    }
    // Keeps every buffer alive until the others have copied from it.
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
    m_bytes += values.size_bytes();
  }

  /// Copies `root`'s `values` into every other rank's `values`. All ranks must pass the same
  /// size and root (`tutti::mismatch_error` otherwise) and 0 <= root < W
  /// (`tutti::invalid_argument` otherwise), each on every rank.
  template <class T>
  requires std::same_as<T, float> || std::same_as<T, double>
  void broadcast(std::span<T> values, int root) {
    static constexpr const char* name = "tutti::local_ring::broadcast";
    local_group::post p{local_group::op_code::broadcast, sizeof(T), values.data(), values.size()};
    p.root = root;
    publish(name, p);
    check_equal_counts(name);
    const auto& posts = m_group->m_posts;
    for (int k = 1; k < world_size(); ++k)
      if (posts[static_cast<std::size_t>(k)].root != posts[0].root)
        fail<mismatch_error>(name, "rank " + std::to_string(k) + " passed root " +
                                       std::to_string(posts[static_cast<std::size_t>(k)].root) +
                                       " and rank 0 passed root " + std::to_string(posts[0].root) +
                                       "; expected the same root on every rank");
    if (root < 0 || root >= world_size())
      fail<invalid_argument>(
          name, "root = " + std::to_string(root) +
                    "; expected 0 <= root < world_size = " + std::to_string(world_size()));
    if (m_rank != root && !values.empty())
      std::memcpy(values.data(), posts[static_cast<std::size_t>(root)].data, values.size_bytes());
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
  }

  /// Replaces `values` on every rank by the element-wise sum over ranks, added in rank order so
  /// every rank gets the same bits. Sizes must agree (`tutti::mismatch_error` on every rank).
  void all_reduce_sum(std::span<double> values) {
    reduce_scalars("tutti::local_ring::all_reduce_sum", local_group::op_code::all_reduce_sum,
                   values, [](double acc, double v) { return acc + v; });
  }
  /// Replaces `values` on every rank by the element-wise maximum over ranks; a NaN on any rank
  /// wins, so a non-finite flag cannot be lost. Sizes must agree (`tutti::mismatch_error`).
  void all_reduce_max(std::span<double> values) {
    reduce_scalars("tutti::local_ring::all_reduce_max", local_group::op_code::all_reduce_max,
                   values,
                   [](double acc, double v) { return (v > acc || std::isnan(v)) ? v : acc; });
  }

  /// Concatenates every rank's `mine` into `all` in rank order on every rank. All ranks must
  /// pass the same mine.size() (`tutti::mismatch_error`) and all.size() == mine.size() * W
  /// (`tutti::invalid_argument`), each raised on every rank. `mine` may be this rank's own block
  /// of `all` (gathering in place) but must not overlap `all` otherwise.
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    static constexpr const char* name = "tutti::local_ring::all_gather";
    local_group::post p{local_group::op_code::all_gather, sizeof(std::uint64_t),
                        const_cast<std::uint64_t*>(mine.data()), mine.size()};
    p.count2 = all.size();
    publish(name, p);
    check_equal_counts(name);
    const auto& posts = m_group->m_posts;
    const std::size_t m = mine.size();
    const std::size_t w = static_cast<std::size_t>(world_size());
    for (std::size_t k = 0; k < w; ++k)
      if (posts[k].count2 != m * w)
        fail<invalid_argument>(
            name, "rank " + std::to_string(k) +
                      " passed all.size() = " + std::to_string(posts[k].count2) +
                      "; expected mine.size() * world_size = " + std::to_string(m * w));
    // A rank may gather in place, `mine` being its own block of `all`; others read that block
    // meanwhile, so it must not be written, even with the same bytes.
    for (std::size_t k = 0; k < w; ++k) {
      std::uint64_t* dst = all.data() + k * m;
      if (m > 0 && dst != posts[k].data) std::memcpy(dst, posts[k].data, m * sizeof(std::uint64_t));
    }
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
  }

 private:
  static const char* op_name(local_group::op_code op) {
    switch (op) {
      case local_group::op_code::all_reduce_mean:
        return "all_reduce_mean";
      case local_group::op_code::broadcast:
        return "broadcast";
      case local_group::op_code::all_reduce_sum:
        return "all_reduce_sum";
      case local_group::op_code::all_reduce_max:
        return "all_reduce_max";
      case local_group::op_code::all_gather:
        return "all_gather";
      case local_group::op_code::all_reduce_sum_bf16:
        return "all_reduce_sum_bf16";
    }
    return "?";
  }

  // Posts this rank's arguments and waits for everyone's, then checks that all ranks entered
  // the same collective with the same element type.
  void publish(const char* name, const local_group::post& p) {
    m_group->m_posts[static_cast<std::size_t>(m_rank)] = p;
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
    const auto& posts = m_group->m_posts;
    for (std::size_t k = 1; k < posts.size(); ++k) {
      if (posts[k].op != posts[0].op)
        fail<mismatch_error>(name, "rank " + std::to_string(k) + " called " + op_name(posts[k].op) +
                                       " while rank 0 called " + op_name(posts[0].op) +
                                       "; expected every rank to call the same collectives in "
                                       "the same order");
      if (posts[k].element_size != posts[0].element_size)
        fail<mismatch_error>(
            name, "rank " + std::to_string(k) + " passed " + std::to_string(posts[k].element_size) +
                      "-byte values and rank 0 passed " + std::to_string(posts[0].element_size) +
                      "-byte values; expected the same type on every rank");
    }
  }

  void check_equal_counts(const char* name) {
    const auto& posts = m_group->m_posts;
    for (std::size_t k = 1; k < posts.size(); ++k)
      if (posts[k].count != posts[0].count)
        fail<mismatch_error>(name, "rank " + std::to_string(k) + " passed " +
                                       std::to_string(posts[k].count) + " values and rank 0 " +
                                       std::to_string(posts[0].count) +
                                       "; expected the same size on every rank");
  }

  // Every rank evaluates the same check on the same posts, so all of them fail together. The
  // extra barrier keeps a fast rank from posting its next collective while a slow one is still
  // reading the posts of this one.
  template <class E>
  [[noreturn]] void fail(const char* name, const std::string& what) {
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
    throw E(std::string(name) + "(): " + what);
  }

  template <class Op>
  void reduce_scalars(const char* name, local_group::op_code op, std::span<double> values,
                      Op combine) {
    publish(name, {op, sizeof(double), values.data(), values.size()});
    check_equal_counts(name);
    const auto& posts = m_group->m_posts;
    std::vector<double> acc(values.size());
    for (std::size_t i = 0; i < acc.size(); ++i) {
      double a = static_cast<const double*>(posts[0].data)[i];
      for (std::size_t k = 1; k < posts.size(); ++k)
        a = combine(a, static_cast<const double*>(posts[k].data)[i]);
      acc[i] = a;
    }
    // Others read this rank's values until they pass this barrier; only then overwrite them.
    m_group->m_rendezvous.arrive_and_wait(m_rank, name);
    std::copy(acc.begin(), acc.end(), values.begin());
  }

  local_group* m_group;
  int m_rank;
  std::uint64_t m_bytes = 0;
};

}  // namespace tutti
