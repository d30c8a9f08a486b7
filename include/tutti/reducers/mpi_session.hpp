// SPDX-License-Identifier: Apache-2.0
/// @file reducers/mpi_session.hpp
/// @brief MPI's lifetime and errors for `tutti::mpi_allreduce`: `tutti::mpi_session`,
/// `tutti::mpi_error`, `TUTTI_MPI_CHECK` and `tutti::mpi_abort_on_exception`.
///
/// Included by reducers/mpi.hpp, which is what programs include. Needs an MPI implementation, as
/// that header does: include it only in translation units built with MPI's compile flags and
/// linked against it (`MPI::MPI_CXX`).
#pragma once

#include <tutti/error.hpp>

// tutti uses MPI's C interface; the deprecated C++ bindings would only add warnings and a
// library to link.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace tutti {

/// An MPI call returned an error code; the message names the call, MPI's error string and the
/// source location. `code()` is the code MPI returned.
class mpi_error : public error {
 public:
  /// An error for MPI's return code `code` with the message `what`.
  mpi_error(int code, const std::string& what) : error(what), m_code(code) {}
  /// The error code the MPI call returned.
  int code() const noexcept { return m_code; }

 private:
  int m_code;
};

namespace detail {

/// MPI's text for an error code (safe to call whether or not MPI is initialised).
inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<std::size_t>(std::max(length, 0)));
}

/// Throws `tutti::mpi_error` for the failed call `call` at `file`:`line`.
[[noreturn]] inline void throw_mpi(int code, const char* call, const char* file, int line) {
  throw mpi_error(code, std::string(call) + " failed: " + mpi_error_text(code) + " (error code " +
                            std::to_string(code) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace detail
}  // namespace tutti

/// Evaluates an MPI call; unless it returns MPI_SUCCESS, throws `tutti::mpi_error` with the
/// call's text, MPI's error string and file:line. Errors come back as codes only on a
/// communicator whose error handler is MPI_ERRORS_RETURN (as `tutti::mpi_allreduce`'s is).
#define TUTTI_MPI_CHECK(call)                                                 \
  do {                                                                        \
    const int tutti_mpi_code_ = (call);                                       \
    if (tutti_mpi_code_ != MPI_SUCCESS)                                       \
      ::tutti::detail::throw_mpi(tutti_mpi_code_, #call, __FILE__, __LINE__); \
  } while (0)

namespace tutti {

/// Initialises MPI for the lifetime of the object and finalises it at the end, unless MPI was
/// already initialised (then it does nothing, and the owner of that initialisation finalises).
/// Create one in `main` before any `tutti::mpi_allreduce`, and let it outlive them.
class mpi_session {
 public:
  /// Initialises MPI with at least `required` thread support (default MPI_THREAD_FUNNELED:
  /// only the thread that initialised MPI calls it, OpenMP threads never do). Throws
  /// `tutti::mpi_error` if the library offers less.
  explicit mpi_session(int required = MPI_THREAD_FUNNELED)
      : mpi_session(nullptr, nullptr, required) {}
  /// As above, letting MPI see (and strip its own options from) the program's arguments.
  mpi_session(int& argc, char**& argv, int required = MPI_THREAD_FUNNELED)
      : mpi_session(&argc, &argv, required) {}

  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;

  /// Finalises MPI if this session initialised it and nobody has finalised it yet.
  ~mpi_session() {
    if (!m_owner) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  /// True when this session initialised MPI (and will finalise it).
  bool owner() const noexcept { return m_owner; }
  /// The thread support MPI provides.
  int thread_level() const noexcept { return m_provided; }

 private:
  mpi_session(int* argc, char*** argv, int required) {
    int initialized = 0;
    TUTTI_MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized) {
      TUTTI_MPI_CHECK(MPI_Query_thread(&m_provided));
      return;
    }
    int finalized = 0;
    TUTTI_MPI_CHECK(MPI_Finalized(&finalized));
    if (finalized)
      throw mpi_error(MPI_ERR_OTHER,
                      "tutti::mpi_session(): MPI was already finalised; it cannot be "
                      "initialised twice in one process");
    TUTTI_MPI_CHECK(MPI_Init_thread(argc, argv, required, &m_provided));
    m_owner = true;
    if (m_provided < required) {
      MPI_Finalize();
      m_owner = false;
      throw mpi_error(MPI_ERR_OTHER, "tutti::mpi_session(): MPI provides thread level " +
                                         std::to_string(m_provided) + "; expected at least " +
                                         std::to_string(required));
    }
  }

  bool m_owner = false;
  int m_provided = MPI_THREAD_SINGLE;
};

/// Runs `f()` and returns its result. If `f` throws, prints `tutti: rank R: <what>` (R the rank
/// in MPI_COMM_WORLD) to stderr and calls `MPI_Abort(MPI_COMM_WORLD, 1)`, which ends every
/// process of the job, including ranks waiting in a collective for this one: an error on one
/// process never leaves the others hanging. Without an initialised MPI it rethrows instead.
template <class F>
requires std::invocable<F&>
decltype(auto) mpi_abort_on_exception(F&& f) {
  const auto abort_job = [](const char* what) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return;
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "tutti: rank %d: %s\n", rank, what);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    // MPI_Abort does not return; should an implementation return, the process still must end.
    std::_Exit(1);
  };
  try {
    return f();
  } catch (const std::exception& e) {
    abort_job(e.what());
    throw;
  } catch (...) {
    abort_job("an exception not derived from std::exception");
    throw;
  }
}

}  // namespace tutti
