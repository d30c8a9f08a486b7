// SPDX-License-Identifier: Apache-2.0
// The failure paths of the NCCL reducer without a GPU: tutti::detail::comm_group driven by a fake
// communicator that fails or stalls on a chosen rank.
#include <doctest/doctest.h>

#include <tutti/reducers/detail/comm_group.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace test_comm_group {

namespace {

using tutti::detail::comm_group;
using tutti::detail::comm_poll;
using tutti::detail::comm_state;
using namespace std::chrono_literals;

// What the fake communicators of one group share: how far each rank got, the fault to inject,
// and every abort, destroy and release in the order they happened.
struct fake_world {
  explicit fake_world(int w)
      : arrived(static_cast<std::size_t>(w), 0),
        aborts(static_cast<std::size_t>(w), 0),
        destroys(static_cast<std::size_t>(w), 0) {}

  std::mutex m;
  std::vector<std::uint64_t> arrived;  // collectives each rank enqueued
  int fail_rank = -1;                  // this rank's communicator fails from collective fail_at
  std::uint64_t fail_at = 0;
  int stall_rank = -1;  // once this rank enqueued collective stall_at, none from it completes
  std::uint64_t stall_at = 0;
  std::vector<int> aborts;
  std::vector<int> destroys;
  std::vector<std::string> events;

  void log(const std::string& e) {
    std::lock_guard lock(m);
    events.push_back(e);
  }
  void arrive(int rank) {
    std::lock_guard lock(m);
    ++arrived[static_cast<std::size_t>(rank)];
  }
  std::size_t index_of(const std::string& e) {
    std::lock_guard lock(m);
    return static_cast<std::size_t>(std::find(events.begin(), events.end(), e) - events.begin());
  }
};

struct fake_comm {
  fake_world* world;
  int rank;

  void abort() { count(world->aborts, "abort"); }
  void destroy() { count(world->destroys, "destroy"); }
  // A collective completes once every rank enqueued it, like a ring's.
  comm_poll poll() {
    std::lock_guard lock(world->m);
    const std::uint64_t mine = world->arrived[static_cast<std::size_t>(rank)];
    if (rank == world->fail_rank && mine >= world->fail_at)
      return {comm_state::failed, "injected communicator fault"};
    if (world->stall_rank >= 0 && mine >= world->stall_at &&
        world->arrived[static_cast<std::size_t>(world->stall_rank)] >= world->stall_at)
      return {comm_state::running, {}};
    for (std::uint64_t a : world->arrived)
      if (a < mine) return {comm_state::running, {}};
    return {comm_state::done, {}};
  }

 private:
  void count(std::vector<int>& calls, const char* what) {
    std::lock_guard lock(world->m);
    ++calls[static_cast<std::size_t>(rank)];
    world->events.push_back(std::string(what) + " " + std::to_string(rank));
  }
};
static_assert(tutti::detail::group_communicator<fake_comm>);

using fake_group = comm_group<fake_comm>;

// One rank's resources, as nccl_ring holds them: the communicator is attached on construction and
// released on destruction.
class fake_rank {
 public:
  fake_rank(fake_group& group, fake_world& world, int rank, std::chrono::milliseconds timeout)
      : m_group(group), m_world(world), m_rank(rank), m_timeout(timeout) {
    m_group.attach(rank, fake_comm{&world, rank});
  }
  fake_rank(const fake_rank&) = delete;
  fake_rank& operator=(const fake_rank&) = delete;
  ~fake_rank() {
    m_world.log("release " + std::to_string(m_rank));
    m_group.release(m_rank);
  }
  int rank() const { return m_rank; }
  void collective() {
    m_group.enter(m_rank, "collective");
    m_world.arrive(m_rank);
    m_group.wait(m_rank, "collective", m_timeout);
  }

 private:
  fake_group& m_group;
  fake_world& m_world;
  int m_rank;
  std::chrono::milliseconds m_timeout;
};

struct rank_exploded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Collective errors seen by the ranks, by rank.
struct seen_errors {
  std::mutex m;
  std::vector<int> failed_rank;
  std::vector<std::string> message;
  explicit seen_errors(int w)
      : failed_rank(static_cast<std::size_t>(w), -2), message(static_cast<std::size_t>(w)) {}
  void record(int rank, const tutti::collective_error& e) {
    std::lock_guard lock(m);
    failed_rank[static_cast<std::size_t>(rank)] = e.failed_rank();
    message[static_cast<std::size_t>(rank)] = e.what();
  }
};

template <class Work>
void run(fake_group& group, fake_world& world, std::chrono::milliseconds timeout, Work work) {
  tutti::detail::run_comm_group(
      group, [&](int rank) { return fake_rank(group, world, rank, timeout); }, work);
}

// Each communicator ended exactly once; on a failure path by an abort, never a destroy, and the
// group's abort came before any rank released its resources.
void check_failure_path_ends(fake_world& world, int w) {
  for (int k = 0; k < w; ++k) {
    INFO("rank " << k);
    CHECK(world.aborts[static_cast<std::size_t>(k)] == 1);
    CHECK(world.destroys[static_cast<std::size_t>(k)] == 0);
  }
  std::size_t first_abort = world.events.size(), first_release = world.events.size();
  for (std::size_t i = 0; i < world.events.size(); ++i) {
    if (world.events[i].rfind("abort ", 0) == 0) first_abort = std::min(first_abort, i);
    if (world.events[i].rfind("release ", 0) == 0) first_release = std::min(first_release, i);
  }
  INFO("events: " << [&] {
    std::string all;
    for (const auto& e : world.events) all += e + "; ";
    return all;
  }());
  CHECK(first_abort < world.events.size());
  CHECK(first_abort < first_release);
}

}  // namespace

TEST_CASE("comm_group: the normal path destroys each communicator once and aborts none") {
  for (int w : {1, 2, 4}) {
    INFO("W = " << w);
    fake_world world(w);
    fake_group group(w, "test_ring");
    run(group, world, 120s, [](fake_rank& r) {
      for (int i = 0; i < 5; ++i) r.collective();
    });
    CHECK_FALSE(group.aborted());
    for (int k = 0; k < w; ++k) {
      INFO("rank " << k);
      CHECK(world.destroys[static_cast<std::size_t>(k)] == 1);
      CHECK(world.aborts[static_cast<std::size_t>(k)] == 0);
      // Destroyed by its own rank's release, not later by the group.
      CHECK(world.index_of("release " + std::to_string(k)) <
            world.index_of("destroy " + std::to_string(k)));
    }
  }
}

TEST_CASE("comm_group: a rank that throws ends every rank at once, naming it") {
  for (int w : {2, 3, 4}) {
    for (int bad = 0; bad < w; ++bad) {
      INFO("W = " << w << ", failing rank " << bad);
      fake_world world(w);
      fake_group group(w, "test_ring");
      seen_errors seen(w);
      const auto start = std::chrono::steady_clock::now();
      // A timeout far beyond the bound below: only the abort can release the peers in time.
      CHECK_THROWS_WITH_AS(
          run(group, world, 120s,
              [&](fake_rank& r) {
                try {
                  for (int i = 0; i < 2; ++i) r.collective();
                  if (r.rank() == bad)
                    throw rank_exploded("rank " + std::to_string(bad) + " exploded");
                  for (int i = 0; i < 5; ++i) r.collective();
                } catch (const tutti::collective_error& e) {
                  seen.record(r.rank(), e);
                  throw;
                }
              }),
          ("rank " + std::to_string(bad) + " exploded").c_str(), rank_exploded);
      CHECK(std::chrono::steady_clock::now() - start < 30s);
      for (int k = 0; k < w; ++k) {
        if (k == bad) continue;
        INFO("rank " << k);
        CHECK(seen.failed_rank[static_cast<std::size_t>(k)] == bad);
        CHECK(seen.message[static_cast<std::size_t>(k)] ==
              "test_ring (rank " + std::to_string(k) + "): collective: rank " +
                  std::to_string(bad) + " failed: rank " + std::to_string(bad) + " exploded");
      }
      CHECK(group.failure().first == bad);
      check_failure_path_ends(world, w);
    }
  }
}

TEST_CASE("comm_group: a communicator that fails ends every rank at once, naming its rank") {
  const int w = 3;
  for (int bad = 0; bad < w; ++bad) {
    INFO("failing rank " << bad);
    fake_world world(w);
    world.fail_rank = bad;
    world.fail_at = 3;
    fake_group group(w, "test_ring");
    seen_errors seen(w);
    const auto start = std::chrono::steady_clock::now();
    try {
      run(group, world, 120s, [&](fake_rank& r) {
        try {
          for (int i = 0; i < 5; ++i) r.collective();
        } catch (const tutti::collective_error& e) {
          seen.record(r.rank(), e);
          throw;
        }
      });
      FAIL("run_comm_group returned normally");
    } catch (const tutti::collective_error& e) {
      // Whichever rank's error was recorded first, it names the failed one.
      CHECK(e.failed_rank() == bad);
    }
    CHECK(std::chrono::steady_clock::now() - start < 30s);
    for (int k = 0; k < w; ++k) {
      INFO("rank " << k);
      CHECK(seen.failed_rank[static_cast<std::size_t>(k)] == bad);
      CHECK(seen.message[static_cast<std::size_t>(k)] ==
            "test_ring (rank " + std::to_string(k) + "): collective: rank " + std::to_string(bad) +
                " failed: injected communicator fault");
    }
    check_failure_path_ends(world, w);
  }
}

TEST_CASE("comm_group: a rank that never starts a collective ends every rank by the timeout") {
  const int w = 3, late = 1;
  fake_world world(w);
  fake_group group(w, "test_ring");
  seen_errors seen(w);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(
      run(group, world, 200ms,
          [&](fake_rank& r) {
            r.collective();
            if (r.rank() == late) {
              // Stuck until the others gave up (at most 120 s, so a bug cannot hang).
              while (!group.aborted() && std::chrono::steady_clock::now() - start < 120s)
                std::this_thread::sleep_for(1ms);
            }
            try {
              r.collective();
            } catch (const tutti::collective_error& e) {
              seen.record(r.rank(), e);
              throw;
            }
          }),
      tutti::collective_error);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 200ms);
  CHECK(took < 30s);
  const std::string reason = "ranks 1 did not start collective 2 within 200 ms (rank ";
  for (int k = 0; k < w; ++k) {
    INFO("rank " << k << ": " << seen.message[static_cast<std::size_t>(k)]);
    CHECK(seen.failed_rank[static_cast<std::size_t>(k)] == late);
    CHECK(seen.message[static_cast<std::size_t>(k)].find("test_ring (rank " + std::to_string(k) +
                                                         "): collective: " + reason) == 0);
  }
  check_failure_path_ends(world, w);
}

TEST_CASE("comm_group: a communicator that stalls ends every rank by the timeout, named") {
  const int w = 3;
  fake_world world(w);
  world.stall_rank = 2;
  world.stall_at = 2;
  fake_group group(w, "test_ring");
  seen_errors seen(w);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(run(group, world, 200ms,
                      [&](fake_rank& r) {
                        try {
                          for (int i = 0; i < 5; ++i) r.collective();
                        } catch (const tutti::collective_error& e) {
                          seen.record(r.rank(), e);
                          throw;
                        }
                      }),
                  tutti::collective_error);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 200ms);
  CHECK(took < 30s);
  // Every rank started the collective, so none is at fault that the group can see; the rank that
  // gave up is named.
  const auto [failed, message] = group.failure();
  CHECK(failed == -1);
  CHECK(message.find(" saw no completion within 200 ms; a peer failed or stalled") !=
        std::string::npos);
  CHECK(message.rfind("rank ", 0) == 0);
  for (int k = 0; k < w; ++k) {
    INFO("rank " << k);
    CHECK(seen.failed_rank[static_cast<std::size_t>(k)] == -1);
    CHECK(seen.message[static_cast<std::size_t>(k)] ==
          "test_ring (rank " + std::to_string(k) + "): collective: " + message);
  }
  check_failure_path_ends(world, w);
}

TEST_CASE("comm_group: a rank that fails before attaching releases the attached ones") {
  const int w = 3, bad = 2;
  fake_world world(w);
  fake_group group(w, "test_ring");
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(tutti::detail::run_comm_group(
                           group,
                           [&](int rank) {
                             if (rank == bad) throw rank_exploded("no device");
                             return fake_rank(group, world, rank, 120s);
                           },
                           [](fake_rank& r) { r.collective(); }),
                       "no device", rank_exploded);
  CHECK(std::chrono::steady_clock::now() - start < 30s);
  for (int k = 0; k < w; ++k) {
    INFO("rank " << k);
    CHECK(world.aborts[static_cast<std::size_t>(k)] == (k == bad ? 0 : 1));
    CHECK(world.destroys[static_cast<std::size_t>(k)] == 0);
  }
}

TEST_CASE("comm_group: ownership when attaching late, releasing twice, or never releasing") {
  fake_world world(3);
  {
    fake_group group(3);
    group.attach(0, fake_comm{&world, 0});
    group.attach(2, fake_comm{&world, 2});
    group.release(0);
    group.release(0);  // already destroyed: nothing left to do
    group.abort(1, "disk full");
    CHECK(group.failure() == std::pair<int, std::string>{1, "rank 1 failed: disk full"});
    group.abort(0, "later");  // the first reason stays
    CHECK(group.failure().second == "rank 1 failed: disk full");
    group.attach(1, fake_comm{&world, 1});  // after the abort: aborted at once
    group.release(1);
    group.release(2);
    CHECK_THROWS_WITH_AS(group.enter(2, "all_gather"),
                         "tutti::detail::comm_group (rank 2): all_gather: rank 1 failed: disk full",
                         tutti::collective_error);
  }
  CHECK(world.destroys == std::vector<int>{1, 0, 0});
  CHECK(world.aborts == std::vector<int>{0, 1, 1});
  {
    fake_world unreleased(2);
    {
      fake_group group(2);
      group.attach(0, fake_comm{&unreleased, 0});
      group.attach(1, fake_comm{&unreleased, 1});
      group.release(1);
    }
    // The group owns what no rank released.
    CHECK(unreleased.destroys == std::vector<int>{1, 1});
    CHECK(unreleased.aborts == std::vector<int>{0, 0});
  }
}

}  // namespace test_comm_group
