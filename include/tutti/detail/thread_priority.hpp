// SPDX-License-Identifier: Apache-2.0
/// @file detail/thread_priority.hpp
/// @brief The calling thread's scheduling priority (its Linux nice value), for the overlapped
/// reduction's communication thread.
///
/// On Linux, `setpriority(PRIO_PROCESS, tid, nice)` applies to one thread only. Raising a
/// thread's nice (a lower priority) is always allowed; lowering it below the current value needs
/// CAP_SYS_NICE or an RLIMIT_NICE that permits it (setrlimit(2)), so the outcome is reported,
/// never assumed. Elsewhere the request is refused as unsupported.
#pragma once

#include <tutti/detail/errno_text.hpp>

#include <cerrno>
#include <string>

#if defined(__linux__)
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace tutti::detail {

/// What became of a request for the calling thread's nice value.
struct nice_outcome {
  bool applied = false;  ///< the thread now runs at `nice`
  int nice = 0;          ///< the thread's nice value after the request (read back)
  std::string why;       ///< when not applied: the system's reason
};

/// The calling thread's nice value (0 where it cannot be read).
inline int this_thread_nice() {
#if defined(__linux__)
  errno = 0;
  const int value = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  return errno == 0 ? value : 0;
#else
  return 0;
#endif
}

/// Sets the calling thread's nice value to `nice` (-20 … 19) and reads it back.
inline nice_outcome set_this_thread_nice(int nice) {
  nice_outcome out;
#if defined(__linux__)
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice) != 0) {
    const int err = errno;
    out.why = "setpriority(" + std::to_string(nice) + "): " + errno_text(err);
    if (err == EACCES || err == EPERM)
      out.why += " (a nice value below the current one needs CAP_SYS_NICE or RLIMIT_NICE " +
                 std::to_string(20 - nice) + " or more)";
  }
  out.nice = this_thread_nice();
  out.applied = out.why.empty() && out.nice == nice;
  if (out.why.empty() && !out.applied)
    out.why = "setpriority(" + std::to_string(nice) + ") left the thread at nice " +
              std::to_string(out.nice);
#else
  (void)nice;
  out.why = "thread priorities are set on Linux only";
#endif
  return out;
}

}  // namespace tutti::detail
