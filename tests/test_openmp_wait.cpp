// SPDX-License-Identifier: Apache-2.0
// How a program's ranks use the cores decides libgomp's wait policy (tutti/openmp_wait.hpp).
#include <tutti/openmp_wait.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace test_openmp_wait {

namespace {

/// Sets (or unsets) an environment variable for one scope, then restores it.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~scoped_env() {
    if (m_old)
      ::setenv(m_name, m_old->c_str(), 1);
    else
      ::unsetenv(m_name);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* m_name;
  std::optional<std::string> m_old;
};

}  // namespace

TEST_CASE("the wait policy is active only for one rank alone on an idle machine") {
  scoped_env ompi("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr);
  scoped_env mpich("MPI_LOCALNRANKS", nullptr);
  scoped_env idle("TUTTI_OTHER_RUNNABLE", "0");
  CHECK(tutti::local_processes() == 1);
  CHECK(tutti::other_runnable_tasks() == 0);
  CHECK(tutti::wait_policy_for(1) == tutti::openmp_wait::active);
  CHECK(tutti::wait_policy_for(2) == tutti::openmp_wait::passive);
  SUBCASE("Open MPI's local size") {
    scoped_env two("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    CHECK(tutti::local_processes() == 2);
    CHECK(tutti::wait_policy_for(1) == tutti::openmp_wait::passive);
  }
  SUBCASE("MPICH's local size") {
    scoped_env three("MPI_LOCALNRANKS", "3");
    CHECK(tutti::local_processes() == 3);
    CHECK(tutti::wait_policy_for(1) == tutti::openmp_wait::passive);
  }
  SUBCASE("one MPI process on this machine") {
    scoped_env one("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
    CHECK(tutti::wait_policy_for(1) == tutti::openmp_wait::active);
  }
  SUBCASE("other work running on the machine") {
    scoped_env busy("TUTTI_OTHER_RUNNABLE", "1");
    CHECK(tutti::wait_policy_for(1) == tutti::openmp_wait::passive);
  }
  SUBCASE("the probe reads this machine's running tasks") {
    scoped_env probe("TUTTI_OTHER_RUNNABLE", nullptr);
    const int others = tutti::other_runnable_tasks();
#if defined(__linux__)
    CHECK(others >= 0);  // /proc/loadavg is there
#else
    CHECK(others >= -1);
#endif
  }
  SUBCASE("a value that is not a count is not a count") {
    scoped_env junk("OMPI_COMM_WORLD_LOCAL_SIZE", "many");
    CHECK(tutti::local_processes() == 1);
    scoped_env zero("MPI_LOCALNRANKS", "0");
    CHECK(tutti::local_processes() == 1);
  }
}

TEST_CASE("a wait policy the user set is kept") {
  scoped_env user("OMP_WAIT_POLICY", "passive");
  char name[] = "/nonexistent/should-not-run";
  char* argv[] = {name, nullptr};
  // Returns without re-executing: the variable is set.
  tutti::choose_openmp_wait(argv, tutti::openmp_wait::active);
  REQUIRE(std::getenv("OMP_WAIT_POLICY") != nullptr);
  CHECK(std::string(std::getenv("OMP_WAIT_POLICY")) == "passive");
}

}  // namespace test_openmp_wait
