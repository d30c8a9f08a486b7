#pragma once
// A folder of the test's own under the system's temporary directory, made by mkdtemp so two
// tests run at once (ctest -j, a sanitizer build beside the plain one) never share one; removed
// with everything in it at the end of the scope.

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tutti_test {

struct scratch_dir {
  std::filesystem::path path;
  explicit scratch_dir(const std::string& prefix = "tutti-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  /// The path of `file` inside the folder.
  std::string operator/(const std::string& file) const { return (path / file).string(); }
};

}  // namespace tutti_test
