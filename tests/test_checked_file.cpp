// SPDX-License-Identifier: Apache-2.0
// write_file_replacing, the writer of every output file: the reader sees the old file or the
// whole new one, never a part; a failed write names the file and the system's reason, removes
// its temporary and leaves the target as it was.
#include "scratch_dir.hpp"
#include "skip.hpp"

#include <tutti/detail/checked_file.hpp>

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace test_checked_file {

namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The files of `dir` other than `keep`.
std::size_t others_in(const std::filesystem::path& dir, const std::filesystem::path& keep) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename() != keep.filename()) ++n;
  return n;
}

/// Lowers this process's file-size limit to `bytes` for the scope (a write past it fails with
/// EFBIG: SIGXFSZ is ignored meanwhile), then restores both.
struct file_size_limit {
  rlimit before{};
  void (*handler)(int) = nullptr;
  explicit file_size_limit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
    handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = before;
    lower.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lower) == 0);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, handler);
  }
};

}  // namespace

TEST_CASE("checked file: the target is replaced whole and no temporary is left beside it") {
  tutti_test::scratch_dir dir("tutti-checked");
  const std::filesystem::path target = dir / "report.json";
  tutti::detail::write_file_replacing(target, "first\n", "test");
  tutti::detail::write_file_replacing(target, {"second ", "in two parts\n"}, "test");
  CHECK(read_all(target) == "second in two parts\n");
  CHECK(others_in(dir.path, target) == 0);
}

TEST_CASE("checked file: a write that fails at a chosen byte leaves the old file as it was") {
  tutti_test::scratch_dir dir("tutti-checked");
  const std::filesystem::path target = dir / "report.json";
  tutti::detail::write_file_replacing(target, "the report of yesterday\n", "test");
  const std::string big(10000, 'x');
  std::string message;
  {
    file_size_limit limit(1000);  // the 1001st byte fails
    try {
      tutti::detail::write_file_replacing(target, big, "tutti train --json");
    } catch (const tutti::error& e) {
      message = e.what();
    }
  }
  CHECK(message.find("tutti train --json: cannot write '" + target.string() + "'") !=
        std::string::npos);
  CHECK(message.find("File too large") != std::string::npos);
  CHECK(read_all(target) == "the report of yesterday\n");
  CHECK(others_in(dir.path, target) == 0);
}

TEST_CASE("checked file: a device is written into and its failure is an error, not a loss") {
  struct stat st {};
  if (::stat("/dev/full", &st) != 0) TUTTI_TEST_SKIP("no /dev/full on this machine");
  CHECK_THROWS_WITH_AS(tutti::detail::write_file_replacing("/dev/full", "{}\n", "test"),
                       doctest::Contains("cannot write '/dev/full': No space left on device"),
                       tutti::error);
  REQUIRE(::stat("/dev/full", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));  // written into, never replaced by a regular file
  CHECK_NOTHROW(tutti::detail::write_file_replacing("/dev/null", "{}\n", "test"));
}

TEST_CASE("checked file: a symbolic link keeps pointing at the file it names, which is replaced") {
  tutti_test::scratch_dir dir("tutti-checked");
  const std::filesystem::path target = dir / "real.json", link = dir / "link.json";
  tutti::detail::write_file_replacing(target, "old\n", "test");
  std::filesystem::create_symlink(target, link);
  tutti::detail::write_file_replacing(link, "new\n", "test");
  CHECK(std::filesystem::is_symlink(link));
  CHECK(read_all(target) == "new\n");
}

TEST_CASE("checked file: a folder is refused by name") {
  tutti_test::scratch_dir dir("tutti-checked");
  CHECK_THROWS_WITH_AS(tutti::detail::write_file_replacing(dir.path, "{}\n", "test"),
                       doctest::Contains("it is a folder; expected the path of a file"),
                       tutti::error);
  CHECK_THROWS_WITH_AS(
      tutti::detail::write_file_replacing(dir.path / "missing" / "r.json", "{}\n", "test"),
      doctest::Contains("No such file or directory"), tutti::error);
}

}  // namespace test_checked_file
