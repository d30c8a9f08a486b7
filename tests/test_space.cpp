// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include "spaces.hpp"

#include <tutti/layout.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

namespace test_space {

namespace {
struct square_fn {
  float* out;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { out[i] = float(i) * float(i); }
};
struct read_fn {
  const float* in;
  TUTTI_HOST_DEVICE double operator()(std::size_t i) const { return in[i]; }
};
}  // namespace

TEST_CASE_TEMPLATE("buffer and kernels round-trip through a space", Space, TUTTI_TEST_SPACES) {
  Space space{};
  tutti::buffer<float, Space> b(1000, space);
  tutti::parallel_for(space, b.size(), square_fn{b.data()});
  auto host = tutti::to_host_vector(space, b.span());
  for (std::size_t i = 0; i < host.size(); ++i) CHECK(host[i] == float(i) * float(i));
  double sum = tutti::transform_reduce(space, b.size(), read_fn{b.data()}, 0.0, std::plus<>{});
  CHECK(sum == doctest::Approx(999.0 * 1000.0 * 1999.0 / 6.0));
  tutti::fill(space, b.span(), 2.5f);
  tutti::scale(space, b.span(), 2.0f);
  host = tutti::to_host_vector(space, b.span());
  CHECK(std::all_of(host.begin(), host.end(), [](float v) { return v == 5.0f; }));

  tutti::buffer<float, Space> moved = std::move(b);
  CHECK(b.empty());
  CHECK(moved.size() == 1000);
  std::vector<float> wrong(3);
  CHECK_THROWS_AS(
      tutti::copy_to_host(space, std::span<const float>(moved.span()), std::span<float>(wrong)),
      tutti::invalid_argument);
}

TEST_CASE_TEMPLATE("fill writes every element, in blocks and tails, with the value's bits", Space,
                   TUTTI_TEST_SPACES) {
  // The host fills in blocks, with memset when the value's bytes are all zero: -0.f is not.
  Space space{};
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{4095}, std::size_t{4096}, 3 * tutti::detail::host_block + 5}) {
    CAPTURE(n);
    tutti::buffer<float, Space> b(n, space);
    for (const float value : {0.f, -0.f, 2.5f}) {
      tutti::fill(space, b.span(), 7.f);
      tutti::fill(space, b.span(), value);
      const auto host = tutti::to_host_vector(space, b.span());
      CHECK(std::all_of(host.begin(), host.end(),
                        [&](float v) { return std::memcmp(&v, &value, sizeof v) == 0; }));
    }
    tutti::buffer<double, Space> d(n, space);
    tutti::fill(space, d.span(), -1.0);
    const auto dh = tutti::to_host_vector(space, d.span());
    CHECK(std::all_of(dh.begin(), dh.end(), [](double v) { return v == -1.0; }));
  }
}

TEST_CASE("parameter_layout aligns segments and rejects bad shapes") {
  tutti::parameter_layout l;
  l.add("a", 3, 5, tutti::segment_kind::embedding);
  l.add("b", 1, 1, tutti::segment_kind::bias);
  CHECK(l[0].offset == 0);
  CHECK(l[1].offset == 16);
  CHECK(l.total() == 32);
  CHECK(l.parameter_count() == 16);
  CHECK(l.find("b").size() == 1);
  CHECK_THROWS_AS(l.add("a", 1, 1, tutti::segment_kind::bias), tutti::invalid_argument);
  CHECK_THROWS_AS(l.add("c", 0, 1, tutti::segment_kind::bias), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(l.find("zzz"), doctest::Contains("no segment named 'zzz'"),
                       tutti::invalid_argument);
  tutti::parameter_layout l2;
  l2.add("a", 3, 5, tutti::segment_kind::embedding);
  CHECK(l2.digest() != l.digest());
}

TEST_CASE("parameter_layout::add's handle gives the segment's offset, not its index") {
  // A weight vector of 4 and a bias: the bias is segment 1 but starts at arena index 16.
  tutti::parameter_layout l;
  const tutti::segment_handle w = l.add("w", 4, 1, tutti::segment_kind::dense);
  const tutti::segment_handle b = l.add("b", 1, 1, tutti::segment_kind::bias);
  const tutti::segment_handle e = l.add("e", 10, 3, tutti::segment_kind::embedding);
  CHECK(w.index == 0);
  CHECK(w.offset == 0);
  CHECK(b.index == 1);
  CHECK(b.offset == 16);
  CHECK(b.offset != b.index);
  CHECK(&l[b] == &l.segments()[1]);
  CHECK(l[e].offset == e.offset);
  CHECK(e.size() == 30);
  CHECK(e.at(2, 1) == e.offset + 2 * 3 + 1);
  CHECK(e.at(9, 2) == e.offset + e.size() - 1);
  // Every value of every segment has its own arena index.
  std::vector<int> owner(l.total(), -1);
  for (const auto& h : {w, b, e})
    for (std::size_t r = 0; r < h.rows; ++r)
      for (std::size_t c = 0; c < h.cols; ++c) {
        CHECK(owner[h.at(r, c)] == -1);
        owner[h.at(r, c)] = static_cast<int>(h.index);
      }
}

TEST_CASE("host buffers from 8 MiB on are whole 2 MiB pages, smaller ones 64-byte aligned") {
  const tutti::host_space host;
  // The largest small one and the smallest large one, both written end to end and read back.
  for (const std::size_t bytes : {tutti::host_space::huge_from - 4, tutti::host_space::huge_from,
                                  tutti::host_space::huge_from + 12345 * 4}) {
    tutti::buffer<float, tutti::host_space> b(bytes / sizeof(float), host);
    const auto at = reinterpret_cast<std::uintptr_t>(b.data());
    const std::size_t want =
        bytes >= tutti::host_space::huge_from ? tutti::host_space::huge_page : std::size_t{64};
    CHECK(at % want == 0);
    for (std::size_t i = 0; i < b.size(); ++i) b.data()[i] = static_cast<float>(i % 1024);
    bool same = true;
    for (std::size_t i = 0; i < b.size(); ++i)
      same = same && b.data()[i] == static_cast<float>(i % 1024);
    CHECK(same);
  }
}

}  // namespace test_space
