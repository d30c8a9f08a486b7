// SPDX-License-Identifier: Apache-2.0
/// @file reducers/mpi.hpp
/// @brief `tutti::mpi_allreduce`: one rank per process, on one or many hosts, reduced with MPI.
///
/// Needs an MPI implementation (Open MPI is what tutti is tested with): include it only in
/// translation units built with MPI's compile flags and linked against it (`MPI::MPI_CXX`).
///
/// This header declares every member of the class; MPI's session, errors and abort helper are
/// in reducers/mpi_session.hpp, and the shared-memory arena's long members are defined in
/// reducers/mpi_shared_arena.hpp. Both come with this header.
#pragma once

#include <tutti/detail/bf16.hpp>
#include <tutti/error.hpp>
// <mpi.h>, mpi_error, TUTTI_MPI_CHECK, mpi_session and mpi_abort_on_exception.
#include <tutti/reducers/mpi_session.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tutti {

/// Settings of a `tutti::mpi_allreduce`.
struct mpi_options {
  /// Check that every rank passes the same number of values on every `all_reduce_mean`, not
  /// only on the first (costs one small extra all-reduce per call).
  bool check_every_reduce = false;
  /// Most elements handed to one MPI call; larger spans are reduced in pieces, because MPI
  /// counts are `int`. In (0, INT_MAX].
  std::size_t max_elements_per_call = static_cast<std::size_t>(INT_MAX);
  /// Gradient reductions (`all_reduce_mean`, `all_reduce_sum_bf16`) go to MPI in pieces of at
  /// most this many bytes; 0 sends each span whole. Open MPI 4.1's allreduce on this project's
  /// 2-core hosts ran 3 to 5× faster on 1 MiB pieces than on one 4 to 64 MiB message
  /// (docs/reducers.md#mpi_allreduce); the results are the same element for element.
  std::size_t piece_bytes = std::size_t{1} << 20;
  /// How long one collective may wait for the other ranks before this rank gives up with a
  /// `tutti::collective_error` naming the ranks that never arrived (a stalled or crashed rank);
  /// zero waits forever. Waiting polls the request, as MPI_Wait itself does.
  std::chrono::milliseconds timeout{0};
  /// `shared_arena` hands the trainer its gradient arena in an MPI-3 shared-memory window per
  /// host, which `all_reduce_mean` then reduces in place, each rank reading and writing its host's
  /// arenas directly and MPI adding the hosts' sums (docs/reducers.md#shared-arena). Off, or on
  /// hosts with different numbers of ranks or one rank each, the arena stays the trainer's own
  /// and goes through MPI_Allreduce.
  bool shared_arena = true;
  /// For tests on one machine: treat the ranks as spread over this many hosts of consecutive
  /// ranks (each a shared-memory group), so that the shared arena's reduction across hosts runs
  /// where only one host exists. 0 (the default): the real hosts (MPI_COMM_TYPE_SHARED). Every
  /// emulated host must really share memory, so use it on one machine only.
  int emulated_hosts = 0;
};

namespace detail {

template <class T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else {
    static_assert(std::is_same_v<T, std::uint64_t>, "tutti::mpi_allreduce: unsupported type");
    return MPI_UINT64_T;
  }
}

// Element-wise maximum in which a NaN wins, like local_ring's, so a non-finite flag raised on
// one rank cannot be lost (MPI_MAX leaves the handling of NaN unspecified).
inline void nan_winning_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const double* a = static_cast<const double*>(in);
  double* b = static_cast<double*>(inout);
  for (int i = 0; i < *len; ++i)
    if (a[i] > b[i] || std::isnan(a[i])) b[i] = a[i];
}

// Element-wise sum of two bf16 arrays (MPI_UINT16_T bits), added in fp32 and rounded to bf16 once
// per application: what travels between ranks stays bf16.
inline void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const std::uint16_t* a = static_cast<const std::uint16_t*>(in);
  std::uint16_t* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16_add(a[i], b[i]);
}

}  // namespace detail

/// One rank per process (models `gradient_reducer`): collectives over an MPI communicator, on
/// one host or many. The reducer works on its own duplicate of the communicator it is given, so
/// its traffic cannot match the user's messages, and sets MPI_ERRORS_RETURN on it, so an MPI
/// failure becomes a `tutti::mpi_error`. Pair it with `tutti::mpi_abort_on_exception` so that an
/// error on one process ends all of them. Move-only: it owns the duplicate.
///
/// Constructing and destroying a reducer are collective over the communicator; all calls must
/// come from the thread that initialised MPI.
class mpi_allreduce {
 public:
  /// MPI reads and writes host memory.
  template <class Space>
  static constexpr bool accepts = Space::host_accessible;

  /// A reducer over a duplicate of `comm`. Throws `tutti::invalid_argument` unless MPI is
  /// initialised (see `tutti::mpi_session`) and `opt` is valid, `tutti::mpi_error` if MPI fails.
  explicit mpi_allreduce(MPI_Comm comm = MPI_COMM_WORLD, mpi_options opt = {}) : m_options(opt) {
    static constexpr const char* name = "tutti::mpi_allreduce";
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    TUTTI_EXPECTS(initialized && !finalized, name,
                  "MPI is not initialised (or already finalised); expected a live "
                  "tutti::mpi_session (or MPI_Init) first");
    TUTTI_EXPECTS(opt.max_elements_per_call > 0 &&
                      opt.max_elements_per_call <= static_cast<std::size_t>(INT_MAX),
                  name,
                  "max_elements_per_call = " + std::to_string(opt.max_elements_per_call) +
                      "; expected 1 ... INT_MAX");
    TUTTI_EXPECTS(comm != MPI_COMM_NULL, name, "comm is MPI_COMM_NULL; expected a communicator");
    TUTTI_EXPECTS(opt.timeout.count() >= 0, name,
                  "timeout = " + std::to_string(opt.timeout.count()) +
                      " ms; expected >= 0 (0: wait forever)");
    TUTTI_EXPECTS(opt.emulated_hosts >= 0, name,
                  "emulated_hosts = " + std::to_string(opt.emulated_hosts) +
                      "; expected >= 0 (0: the real hosts)");
    TUTTI_MPI_CHECK(MPI_Comm_dup(comm, &m_comm));
    try {
      TUTTI_MPI_CHECK(MPI_Comm_dup(comm, &m_side));
      TUTTI_MPI_CHECK(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN));
      TUTTI_MPI_CHECK(MPI_Comm_set_errhandler(m_side, MPI_ERRORS_RETURN));
      TUTTI_MPI_CHECK(MPI_Comm_rank(m_comm, &m_rank));
      TUTTI_MPI_CHECK(MPI_Comm_size(m_comm, &m_world));
      TUTTI_MPI_CHECK(MPI_Op_create(&detail::nan_winning_max, 1, &m_max));
      TUTTI_MPI_CHECK(MPI_Op_create(&detail::bf16_sum, 1, &m_bf16_sum));
    } catch (...) {
      release();
      throw;
    }
  }

  mpi_allreduce(const mpi_allreduce&) = delete;
  mpi_allreduce& operator=(const mpi_allreduce&) = delete;
  /// Takes over `other`'s communicator; `other` is left empty (only destruction is allowed).
  mpi_allreduce(mpi_allreduce&& other) noexcept
      : m_comm(std::exchange(other.m_comm, MPI_COMM_NULL)),
        m_side(std::exchange(other.m_side, MPI_COMM_NULL)),
        m_max(std::exchange(other.m_max, MPI_OP_NULL)),
        m_bf16_sum(std::exchange(other.m_bf16_sum, MPI_OP_NULL)),
        m_node(std::exchange(other.m_node, MPI_COMM_NULL)),
        m_cross(std::exchange(other.m_cross, MPI_COMM_NULL)),
        m_win(std::exchange(other.m_win, MPI_WIN_NULL)),
        m_arenas(std::move(other.m_arenas)),
        m_arena_size(std::exchange(other.m_arena_size, 0)),
        m_local(other.m_local),
        m_hosts(other.m_hosts),
        m_failed(other.m_failed),
        m_rank(other.m_rank),
        m_world(other.m_world),
        m_options(other.m_options),
        m_bytes(other.m_bytes),
        m_reduce_size_checked(other.m_reduce_size_checked),
        m_bf16_size_checked(other.m_bf16_size_checked),
        m_seq(other.m_seq),
        m_epoch(other.m_epoch),
        m_step(other.m_step) {}
  /// Frees this reducer's communicator and takes over `other`'s.
  mpi_allreduce& operator=(mpi_allreduce&& other) noexcept {
    if (this != &other) {
      release();
      m_comm = std::exchange(other.m_comm, MPI_COMM_NULL);
      m_side = std::exchange(other.m_side, MPI_COMM_NULL);
      m_max = std::exchange(other.m_max, MPI_OP_NULL);
      m_bf16_sum = std::exchange(other.m_bf16_sum, MPI_OP_NULL);
      m_node = std::exchange(other.m_node, MPI_COMM_NULL);
      m_cross = std::exchange(other.m_cross, MPI_COMM_NULL);
      m_win = std::exchange(other.m_win, MPI_WIN_NULL);
      m_arenas = std::move(other.m_arenas);
      m_arena_size = std::exchange(other.m_arena_size, 0);
      m_local = other.m_local;
      m_hosts = other.m_hosts;
      m_failed = other.m_failed;
      m_rank = other.m_rank;
      m_world = other.m_world;
      m_options = other.m_options;
      m_bytes = other.m_bytes;
      m_reduce_size_checked = other.m_reduce_size_checked;
      m_bf16_size_checked = other.m_bf16_size_checked;
      m_seq = other.m_seq;
      m_epoch = other.m_epoch;
      m_step = other.m_step;
    }
    return *this;
  }
  /// Frees the shared arena's window and the duplicated communicators (skipped once MPI is
  /// finalised). Freeing the window is collective and waits for every rank; after a failed
  /// collective, or when the reducer is destroyed by an exception unwinding the stack, the
  /// window is left to MPI_Finalize (or the end of the process) instead, so that an error on one
  /// rank can still reach `tutti::mpi_abort_on_exception` rather than wait here for the others.
  ~mpi_allreduce() { release(); }

  /// This process's rank in the communicator, in [0, world_size()).
  int rank() const noexcept { return m_rank; }
  /// Number of processes in the communicator.
  int world_size() const noexcept { return m_world; }
  /// True when MPI allows this reducer's calls from a thread other than the one that
  /// initialised it (thread level MPI_THREAD_SERIALIZED or more), as the trainer's overlapped
  /// reduction needs.
  bool callable_from_another_thread() const {
    int provided = MPI_THREAD_SINGLE;
    TUTTI_MPI_CHECK(MPI_Query_thread(&provided));
    return provided >= MPI_THREAD_SERIALIZED;
  }
  /// The reducer's own (duplicated) communicator, for the user's extra collectives.
  MPI_Comm communicator() const noexcept { return m_comm; }
  /// The settings the reducer was made with.
  const mpi_options& options() const noexcept { return m_options; }
  /// Gradient bytes this rank handed to `all_reduce_mean` (and `all_reduce_sum_bf16`) so far.
  std::uint64_t bytes_reduced() const noexcept { return m_bytes; }
  /// Where the caller is (the trainer sets it before each step), for the timeout's message.
  void set_position(std::size_t epoch, std::size_t step) noexcept {
    m_epoch = epoch;
    m_step = step;
  }

  /// A gradient arena of `count` floats that every rank of this host can read and write: this
  /// rank's part of an MPI-3 shared-memory window (MPI_Win_allocate_shared over the ranks of
  /// the host). `all_reduce_mean` of a span inside it, at the same offset on every rank, reduces
  /// in place without MPI's copies within a host (see `all_reduce_mean`). Collective; every rank
  /// must pass the same count and have the same `shared_arena` setting (`tutti::mismatch_error`
  /// otherwise). Returns an empty span, and the caller keeps its own memory, when
  /// `options().shared_arena` is off, when count is 0, or when the hosts hold different numbers
  /// of ranks or one rank each. The memory lives as long as the reducer (moving the reducer
  /// keeps it); contents start at zero. One arena per reducer (`tutti::invalid_argument` for a
  /// second).
  std::span<float> shared_gradient_arena(std::size_t count);

  /// The shared arena this rank got from `shared_gradient_arena` (empty if none).
  std::span<float> shared_arena() const noexcept {
    if (m_arenas.empty()) return {};
    return {m_arenas[static_cast<std::size_t>(m_local)], m_arena_size};
  }

  /// Replaces `grads` on every rank by the element-wise mean over ranks: an in-place
  /// MPI_Allreduce with MPI_SUM, then one pass dividing by the world size. Every rank must pass
  /// the same number of values; that is checked on the first call (and on every call with
  /// `check_every_reduce`), and a difference throws `tutti::mismatch_error` on every rank.
  ///
  /// A float span inside this rank's shared arena (`shared_gradient_arena`) is reduced in place
  /// instead: one small all-reduce checks that every rank passes the same offset and size (a
  /// difference throws `tutti::mismatch_error` on every rank); the rank of local number l on a
  /// host of L ranks adds chunk l (elements [n·l/L, n·(l+1)/L)) of the host's arenas in local
  /// order; with several hosts an in-place MPI_Allreduce among the ranks of local number l adds
  /// the hosts' sums; the total divided by W goes into every arena of the host, and a barrier of
  /// the host's ranks ends the call. With W = 2 on one host the bits are those of
  /// MPI_Allreduce's path (one addition, one division).
  template <class T>
  requires std::same_as<T, float> || std::same_as<T, double>
  void all_reduce_mean(std::span<T> grads) {
    if constexpr (std::is_same_v<T, float>) {
      if (const auto offset = arena_offset(grads)) {
        shared_mean(grads, *offset);
        return;
      }
    }
    if (!m_reduce_size_checked || m_options.check_every_reduce) {
      agree("tutti::mpi_allreduce::all_reduce_mean", op_code::all_reduce_mean, sizeof(T),
            grads.size());
      m_reduce_size_checked = true;
    }
    reduce_pieces(grads.data(), grads.size(), detail::mpi_datatype<T>(), MPI_SUM,
                  "all_reduce_mean");
    if (m_world > 1) {
      const T divisor = static_cast<T>(m_world);
      for (T& g : grads) g /= divisor;
    }
    m_bytes += grads.size_bytes();
  }

  /// Replaces `values` (bf16 bits, see detail/bf16.hpp) on every rank by the element-wise sum
  /// over ranks, for `tutti::compressed<mpi_allreduce, bf16>`: an in-place MPI_Allreduce of
  /// MPI_UINT16_T with a user operation that adds two bf16 values in fp32 and rounds once, so
  /// every hop carries bf16. The order of the additions is MPI's (with W = 2 it is the one sum).
  /// Sizes are checked as in `all_reduce_mean`: on the first call, or on every call with
  /// `check_every_reduce`. Counts `values.size_bytes()` in `bytes_reduced()`.
  void all_reduce_sum_bf16(std::span<std::uint16_t> values) {
    if (!m_bf16_size_checked || m_options.check_every_reduce) {
      agree("tutti::mpi_allreduce::all_reduce_sum_bf16", op_code::all_reduce_sum_bf16,
            sizeof(std::uint16_t), values.size());
      m_bf16_size_checked = true;
    }
    reduce_pieces(values.data(), values.size(), MPI_UINT16_T, m_bf16_sum, "all_reduce_sum_bf16");
    m_bytes += values.size_bytes();
  }

  /// Copies `root`'s `values` into every other rank's `values`. All ranks must pass the same
  /// size and root (`tutti::mismatch_error` otherwise) and 0 <= root < W
  /// (`tutti::invalid_argument` otherwise), each raised on every rank.
  template <class T>
  requires std::same_as<T, float> || std::same_as<T, double>
  void broadcast(std::span<T> values, int root) {
    static constexpr const char* name = "tutti::mpi_allreduce::broadcast";
    agree(name, op_code::broadcast, sizeof(T), values.size(), 0, root);
    TUTTI_EXPECTS(root >= 0 && root < m_world, name,
                  "root = " + std::to_string(root) +
                      "; expected 0 <= root < world_size = " + std::to_string(m_world));
    for_each_piece(values.size(), [&](std::size_t offset, int count) {
      MPI_Request req = MPI_REQUEST_NULL;
      TUTTI_MPI_CHECK(
          MPI_Ibcast(values.data() + offset, count, detail::mpi_datatype<T>(), root, m_comm, &req));
      complete(req, "broadcast");
    });
  }

  /// Replaces `values` on every rank by the element-wise sum over ranks (MPI_SUM). Sizes must
  /// agree (`tutti::mismatch_error` on every rank).
  void all_reduce_sum(std::span<double> values) {
    agree("tutti::mpi_allreduce::all_reduce_sum", op_code::all_reduce_sum, sizeof(double),
          values.size());
    for_each_piece(values.size(), [&](std::size_t offset, int count) {
      MPI_Request req = MPI_REQUEST_NULL;
      TUTTI_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values.data() + offset, count, MPI_DOUBLE,
                                     MPI_SUM, m_comm, &req));
      complete(req, "all_reduce_sum");
    });
  }

  /// Replaces `values` on every rank by the element-wise maximum over ranks; a NaN on any rank
  /// wins, so a non-finite flag cannot be lost. Sizes must agree (`tutti::mismatch_error`).
  void all_reduce_max(std::span<double> values) {
    agree("tutti::mpi_allreduce::all_reduce_max", op_code::all_reduce_max, sizeof(double),
          values.size());
    for_each_piece(values.size(), [&](std::size_t offset, int count) {
      MPI_Request req = MPI_REQUEST_NULL;
      TUTTI_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values.data() + offset, count, MPI_DOUBLE, m_max,
                                     m_comm, &req));
      complete(req, "all_reduce_max");
    });
  }

  /// Concatenates every rank's `mine` into `all` in rank order on every rank. All ranks must
  /// pass the same mine.size() (`tutti::mismatch_error`) and all.size() == mine.size() * W
  /// (`tutti::invalid_argument`), each raised on every rank. `mine` may be this rank's own block
  /// of `all` (gathering in place) but must not overlap `all` otherwise.
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    static constexpr const char* name = "tutti::mpi_allreduce::all_gather";
    agree(name, op_code::all_gather, sizeof(std::uint64_t), mine.size(), all.size());
    const std::size_t m = mine.size();
    TUTTI_EXPECTS(all.size() == m * static_cast<std::size_t>(m_world), name,
                  "all.size() = " + std::to_string(all.size()) +
                      "; expected mine.size() * world_size = " +
                      std::to_string(m * static_cast<std::size_t>(m_world)));
    if (m == 0) return;
    const bool in_place = mine.data() == all.data() + static_cast<std::size_t>(m_rank) * m;
    if (m <= m_options.max_elements_per_call) {
      const int count = static_cast<int>(m);
      MPI_Request req = MPI_REQUEST_NULL;
      TUTTI_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : mine.data(), count, MPI_UINT64_T,
                                     all.data(), count, MPI_UINT64_T, m_comm, &req));
      complete(req, "all_gather");
      return;
    }
    // Piece [offset, offset + count) of every rank's block: a block type whose extent is a whole
    // rank's block puts rank k's piece at all + k * m + offset.
    for_each_piece(m, [&](std::size_t offset, int count) {
      MPI_Datatype piece = MPI_DATATYPE_NULL, strided = MPI_DATATYPE_NULL;
      TUTTI_MPI_CHECK(MPI_Type_contiguous(count, MPI_UINT64_T, &piece));
      const int made = MPI_Type_create_resized(
          piece, 0, static_cast<MPI_Aint>(m * sizeof(std::uint64_t)), &strided);
      MPI_Type_free(&piece);
      TUTTI_MPI_CHECK(made);
      int code = MPI_Type_commit(&strided);
      MPI_Request req = MPI_REQUEST_NULL;
      if (code == MPI_SUCCESS)
        code = MPI_Iallgather(in_place ? MPI_IN_PLACE : mine.data() + offset, count, MPI_UINT64_T,
                              all.data() + offset, 1, strided, m_comm, &req);
      if (code != MPI_SUCCESS) {
        MPI_Type_free(&strided);
        detail::throw_mpi(code, "MPI_Iallgather (strided piece)", __FILE__, __LINE__);
      }
      try {
        complete(req, "all_gather");
      } catch (...) {
        MPI_Type_free(&strided);
        throw;
      }
      MPI_Type_free(&strided);
    });
  }

 private:
  enum class op_code : long long {
    all_reduce_mean = 1,
    broadcast,
    all_reduce_sum,
    all_reduce_max,
    all_gather,
    all_reduce_sum_bf16,
    shared_gradient_arena
  };

  static const char* op_name(long long op) {
    switch (static_cast<op_code>(op)) {
      case op_code::all_reduce_mean:
        return "all_reduce_mean";
      case op_code::broadcast:
        return "broadcast";
      case op_code::all_reduce_sum:
        return "all_reduce_sum";
      case op_code::all_reduce_max:
        return "all_reduce_max";
      case op_code::all_gather:
        return "all_gather";
      case op_code::all_reduce_sum_bf16:
        return "all_reduce_sum_bf16";
      case op_code::shared_gradient_arena:
        return "shared_gradient_arena";
    }
    return "an unknown collective";
  }

  // One small all-reduce tells every rank the minimum and maximum over ranks of what each
  // passed (collective, element size, counts, root); any difference throws the same
  // `tutti::mismatch_error` on every rank, before the real collective could truncate or hang.
  void agree(const char* name, op_code op, std::size_t element_size, std::size_t count,
             std::size_t count2 = 0, int root = 0, std::size_t arena_offset = 0) {
    static constexpr int fields = 6;
    static constexpr const char* field_names[fields] = {
        "collectives",    "element sizes", "sizes",
        "sizes of `all`", "roots",         "offsets in the shared arena"};
    const long long mine[fields] = {
        static_cast<long long>(op),    static_cast<long long>(element_size),
        static_cast<long long>(count), static_cast<long long>(count2),
        static_cast<long long>(root),  static_cast<long long>(arena_offset)};
    long long both[2 * fields];
    for (int i = 0; i < fields; ++i) {
      both[i] = mine[i];            // max
      both[fields + i] = -mine[i];  // -min
    }
    MPI_Request req = MPI_REQUEST_NULL;
    TUTTI_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, both, 2 * fields, MPI_LONG_LONG, MPI_MAX, m_comm, &req));
    complete(req, op_name(static_cast<long long>(op)));
    for (int i = 0; i < fields; ++i) {
      const long long hi = both[i], lo = -both[fields + i];
      if (hi == lo) continue;
      if (i == 0)
        throw mismatch_error(std::string(name) + "(): ranks called different collectives (" +
                             op_name(lo) + " and " + op_name(hi) +
                             "); expected every rank to call the same collectives in the same "
                             "order");
      // shared_gradient_arena puts its ranks' shared_arena settings in the offset's place.
      const bool setting = i == fields - 1 && op == op_code::shared_gradient_arena;
      throw mismatch_error(std::string(name) + "(): ranks passed different " +
                           (setting ? "mpi_options::shared_arena settings" : field_names[i]) +
                           " (from " + std::to_string(lo) + " to " + std::to_string(hi) +
                           "); expected the same on every rank");
    }
  }

  // Waits for `req`, the request of collective `op`: forever without a timeout; otherwise it
  // polls (as MPI_Wait does) until the deadline and then finds out who never arrived.
  void complete(MPI_Request& req, const char* op) {
    ++m_seq;
    if (m_options.timeout.count() == 0) {
      TUTTI_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + m_options.timeout;
    for (unsigned spin = 1;; ++spin) {
      int done = 0;
      TUTTI_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (spin % 256 == 0 && std::chrono::steady_clock::now() > deadline) timed_out(op);
    }
  }

  // The deadline passed in collective number m_seq. Every rank that gives up tells the others
  // which collective it waits in (on the side communicator, so it cannot match the pending
  // collective) and listens for theirs for a grace period; a rank never heard from did not
  // reach the collective: it is stalled, crashed or still computing.
  [[noreturn]] void timed_out(const char* op) {
    static constexpr int tag = 0x7775;
    m_failed = true;  // the shared arena's window cannot be freed collectively any more
    const std::uint64_t mine = m_seq;
    std::vector<MPI_Request> sends;
    for (int r = 0; r < m_world; ++r) {
      if (r == m_rank) continue;
      sends.emplace_back(MPI_REQUEST_NULL);
      MPI_Isend(&mine, 1, MPI_UINT64_T, r, tag, m_side, &sends.back());
    }
    std::vector<char> heard(static_cast<std::size_t>(m_world), 0);
    heard[static_cast<std::size_t>(m_rank)] = 1;
    int count = 1;
    const auto grace =
        std::chrono::steady_clock::now() +
        std::min<std::chrono::milliseconds>(m_options.timeout / 2, std::chrono::milliseconds(2000));
    while (count < m_world && std::chrono::steady_clock::now() < grace) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, tag, m_side, &flag, &status) != MPI_SUCCESS) break;
      if (!flag) continue;
      std::uint64_t theirs = 0;
      MPI_Recv(&theirs, 1, MPI_UINT64_T, status.MPI_SOURCE, tag, m_side, MPI_STATUS_IGNORE);
      if (theirs == mine && !heard[static_cast<std::size_t>(status.MPI_SOURCE)]) {
        heard[static_cast<std::size_t>(status.MPI_SOURCE)] = 1;
        ++count;
      }
    }
    std::string missing, waiting;
    int first_missing = -1;
    for (int r = 0; r < m_world; ++r) {
      std::string& list = heard[static_cast<std::size_t>(r)] ? waiting : missing;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
      if (!heard[static_cast<std::size_t>(r)] && first_missing < 0) first_missing = r;
    }
    throw collective_error(first_missing,
                           "tutti::mpi_allreduce::" + std::string(op) + "(): rank " +
                               std::to_string(m_rank) + " waited " +
                               std::to_string(m_options.timeout.count()) + " ms in collective #" +
                               std::to_string(m_seq) + " (epoch " + std::to_string(m_epoch + 1) +
                               ", step " + std::to_string(m_step + 1) + "); rank(s) " +
                               (missing.empty() ? std::string("none") : missing) +
                               " did not reach it (stalled, crashed or still computing); rank(s) " +
                               waiting + " were waiting in it");
  }

  // The offset of `grads` in this rank's shared arena, when it lies inside it.
  std::optional<std::size_t> arena_offset(std::span<const float> grads) const;

  // all_reduce_mean of [offset, offset + n) of every rank's shared arena; see all_reduce_mean.
  void shared_mean(std::span<float> grads, std::size_t offset);

  // An in-place allreduce of a gradient span in pieces of `piece_bytes`: blocking calls when
  // there is no timeout (Open MPI's tuned collectives), else non-blocking ones polled to the
  // deadline.
  template <class T>
  void reduce_pieces(T* data, std::size_t n, MPI_Datatype type, MPI_Op op, const char* name,
                     MPI_Comm comm = MPI_COMM_NULL) {
    if (comm == MPI_COMM_NULL) comm = m_comm;
    std::size_t piece = m_options.max_elements_per_call;
    if (m_options.piece_bytes > 0)
      piece = std::min(piece, std::max<std::size_t>(1, m_options.piece_bytes / sizeof(T)));
    for (std::size_t offset = 0; offset < n;) {
      const int count = static_cast<int>(std::min(n - offset, piece));
      if (m_options.timeout.count() == 0) {
        ++m_seq;
        TUTTI_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + offset, count, type, op, comm));
      } else {
        MPI_Request req = MPI_REQUEST_NULL;
        TUTTI_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + offset, count, type, op, comm, &req));
        complete(req, name);
      }
      offset += static_cast<std::size_t>(count);
    }
  }

  template <class F>
  void for_each_piece(std::size_t n, F&& f) const {
    for (std::size_t offset = 0; offset < n;) {
      const std::size_t count = std::min(n - offset, m_options.max_elements_per_call);
      f(offset, static_cast<int>(count));
      offset += count;
    }
  }

  void release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (m_win != MPI_WIN_NULL && !m_failed && std::uncaught_exceptions() == 0) {
        MPI_Win_unlock_all(m_win);
        MPI_Win_free(&m_win);
      }
      if (m_cross != MPI_COMM_NULL) MPI_Comm_free(&m_cross);
      if (m_node != MPI_COMM_NULL) MPI_Comm_free(&m_node);
      if (m_max != MPI_OP_NULL) MPI_Op_free(&m_max);
      if (m_bf16_sum != MPI_OP_NULL) MPI_Op_free(&m_bf16_sum);
      if (m_side != MPI_COMM_NULL) MPI_Comm_free(&m_side);
      if (m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
    }
    m_win = MPI_WIN_NULL;
    m_cross = MPI_COMM_NULL;
    m_node = MPI_COMM_NULL;
    m_arenas.clear();
    m_arena_size = 0;
    m_max = MPI_OP_NULL;
    m_bf16_sum = MPI_OP_NULL;
    m_side = MPI_COMM_NULL;
    m_comm = MPI_COMM_NULL;
  }

  MPI_Comm m_comm = MPI_COMM_NULL;
  MPI_Comm m_side = MPI_COMM_NULL;  // the timeout's who-is-here messages
  MPI_Op m_max = MPI_OP_NULL;
  MPI_Op m_bf16_sum = MPI_OP_NULL;   // bf16 + bf16 in fp32, for all_reduce_sum_bf16
  MPI_Comm m_node = MPI_COMM_NULL;   // the shared arena's ranks on this host
  MPI_Comm m_cross = MPI_COMM_NULL;  // the ranks of this local number on every host (hosts > 1)
  MPI_Win m_win = MPI_WIN_NULL;      // the shared arena's window over m_node
  std::vector<float*> m_arenas;      // the arena of every rank of this host, by local rank
  std::size_t m_arena_size = 0;      // floats per rank's arena
  int m_local = 0;                   // this rank's number on its host
  int m_hosts = 1;                   // hosts, each with the same number of ranks
  bool m_failed = false;             // a collective timed out: the window is left, not freed
  int m_rank = 0;
  int m_world = 1;
  mpi_options m_options;
  std::uint64_t m_bytes = 0;
  bool m_reduce_size_checked = false;
  bool m_bf16_size_checked = false;
  std::uint64_t m_seq = 0;  // collectives completed or in progress
  std::size_t m_epoch = 0, m_step = 0;
};

/// The former name of `mpi_allreduce`, kept so that code written against it still compiles.
using mpi_reducer [[deprecated("tutti::mpi_reducer is now tutti::mpi_allreduce")]] = mpi_allreduce;

}  // namespace tutti

// The shared arena's members, defined out of line so that the class above reads as the
// reducer's table of contents.
#include <tutti/reducers/mpi_shared_arena.hpp>
