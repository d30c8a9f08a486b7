// SPDX-License-Identifier: Apache-2.0
/// @file test_export.cpp
/// @brief Tests of the .npy writer and reader, the matrix-factorisation export and its top-k:
/// round trips, damaged files refused by name, top-k against a brute-force ranking of the
/// model's own predictions, seen items left out and ties broken by source id; a warm start
/// from an export matched by source id.
#include <doctest/doctest.h>

#include <tutti/data/npy.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/models/mf_export.hpp>
#include <tutti/models/mf_recommend.hpp>
#include <tutti/models/mf_warm_start.hpp>
#include <tutti/optimizers/adam.hpp>
#include <tutti/optimizers/lamb.hpp>
#include <tutti/optimizers/lars.hpp>
#include <tutti/optimizers/lazy_adam.hpp>
#include <tutti/optimizers/row_sparse_sgd.hpp>
#include <tutti/optimizers/rowwise_adagrad.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/state_map.hpp>
#include <tutti/trainer/memory_forecast.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace test_export {

namespace {

namespace fs = std::filesystem;

/// A fresh directory under the system's temporary directory, removed with everything in it.
struct scratch_dir {
  fs::path path;
  scratch_dir() {
    static int count = 0;
    path = fs::temp_directory_path() /
           ("tutti-test-export-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

/// The message of the exception `f` throws ("" when it throws none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const tutti::error& e) {
    return e.what();
  }
  return "";
}

/// 12 interactions of 4 users and 6 items with scattered source ids.
tutti::data::interactions small_rows() {
  tutti::data::interactions d;
  d.users = {0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 0, 1};
  d.items = {1, 3, 1, 0, 5, 2, 3, 4, 5, 0, 5, 0};  // user 0 sees 1 twice, user 1 sees 0 twice
  d.labels.assign(d.users.size(), 1.f);
  d.user_ids = {501, 17, 9000000000LL, 3};
  d.item_ids = {40, 10, 30, 20, 60, 50};
  d.implicit = true;
  return d;
}

/// The export of a dim-3 logistic matrix factorisation of `rows`, initialised with seed 5.
tutti::models::mf_export small_export(const tutti::data::interactions& rows) {
  tutti::models::matrix_factorization<> model({.dim = 3, .loss = tutti::loss_kind::logistic},
                                              rows.n_users(), rows.n_items());
  std::vector<float> params(model.layout().total());
  model.initialize(params, 5);
  return tutti::models::make_mf_export(model.layout(), params, rows);
}

}  // namespace

TEST_CASE("npy: float, int64 and scalar arrays round trip with a 64-byte aligned header") {
  scratch_dir dir;
  const std::vector<float> f = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f};
  const std::vector<std::int64_t> ids = {-1, 0, 9000000000LL};
  const float g = 0.125f;
  tutti::data::write_npy<float>(dir.path / "f.npy", f, {2, 3});
  tutti::data::write_npy<std::int64_t>(dir.path / "i.npy", ids, {3});
  tutti::data::write_npy<float>(dir.path / "g.npy", std::span<const float>(&g, 1), {});
  const auto rf = tutti::data::read_npy<float>(dir.path / "f.npy");
  CHECK(rf.shape == std::vector<std::size_t>{2, 3});
  CHECK(rf.values == f);
  const auto ri = tutti::data::read_npy<std::int64_t>(dir.path / "i.npy");
  CHECK(ri.shape == std::vector<std::size_t>{3});
  CHECK(ri.values == ids);
  const auto rg = tutti::data::read_npy<float>(dir.path / "g.npy");
  CHECK(rg.shape.empty());
  CHECK(rg.values == std::vector<float>{g});

  const std::string bytes = slurp(dir.path / "f.npy");
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK((bytes.size() - f.size() * sizeof(float)) % 64 == 0);
  CHECK(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") == 10);
  CHECK(slurp(dir.path / "i.npy").find("'shape': (3,), }") != std::string::npos);
  CHECK(slurp(dir.path / "g.npy").find("'shape': (), }") != std::string::npos);
}

TEST_CASE("npy: reads the layout numpy.save writes (header padded to 128 bytes)") {
  scratch_dir dir;
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  dict.append(128 - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(dict.size());
  bytes += '\0';
  bytes += dict;
  const float values[6] = {0, 1, 2, 3, 4, 5};
  bytes.append(reinterpret_cast<const char*>(values), sizeof values);
  spit(dir.path / "np.npy", bytes);
  const auto a = tutti::data::read_npy<float>(dir.path / "np.npy");
  CHECK(a.shape == std::vector<std::size_t>{2, 3});
  CHECK(a.values == std::vector<float>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("npy: a tampered, truncated or mistyped file is refused with its name") {
  scratch_dir dir;
  const fs::path p = dir.path / "user_factors.npy";
  const std::vector<float> v(12, 1.f);
  tutti::data::write_npy<float>(p, v, {3, 4});
  const std::string good = slurp(p);
  const auto read = [&] {
    tutti::data::read_npy<float>(p);
  };
  const std::string name = p.string();

  SUBCASE("magic") {
    std::string b = good;
    b[1] = 'X';
    spit(p, b);
    CHECK(error_of(read).find(name) != std::string::npos);
    CHECK(error_of(read).find("magic") != std::string::npos);
  }
  SUBCASE("truncated values") {
    spit(p, good.substr(0, good.size() - 4));
    CHECK(error_of(read).find(name) != std::string::npos);
    CHECK(error_of(read).find("truncated") != std::string::npos);
  }
  SUBCASE("truncated header") {
    spit(p, good.substr(0, 40));
    CHECK(error_of(read).find(name) != std::string::npos);
    CHECK(error_of(read).find("header") != std::string::npos);
  }
  SUBCASE("trailing bytes") {
    spit(p, good + "xxxx");
    CHECK(error_of(read).find(name) != std::string::npos);
  }
  SUBCASE("a shape changed in the header") {
    std::string b = good;
    b.replace(b.find("(3, 4)"), 6, "(9, 4)");
    spit(p, b);
    CHECK(error_of(read).find(name) != std::string::npos);
    CHECK(error_of(read).find("(9, 4)") != std::string::npos);
  }
  SUBCASE("another dtype") {
    const std::string msg = error_of([&] { tutti::data::read_npy<std::int64_t>(p); });
    CHECK(msg.find(name) != std::string::npos);
    CHECK(msg.find("'<f4'") != std::string::npos);
  }
  SUBCASE("missing") {
    fs::remove(p);
    CHECK(error_of(read).find(name) != std::string::npos);
  }
}

TEST_CASE("export: a matrix factorisation's arena as arrays with source ids and seen items") {
  const auto rows = small_rows();
  tutti::models::matrix_factorization<> model({.dim = 5, .loss = tutti::loss_kind::logistic}, 4, 6);
  std::vector<float> params(model.layout().total());
  model.initialize(params, 11);
  params[model.layout().find("global_bias").offset] = 0.25f;
  const auto e = tutti::models::make_mf_export(model.layout(), params, rows);
  CHECK(e.dim == 5);
  CHECK(e.global_bias == 0.25f);
  CHECK(e.user_ids == rows.user_ids);
  CHECK(e.item_ids == rows.item_ids);
  const auto& item_table = model.layout().find("item_embedding");
  CHECK(std::equal(e.item_factors.begin(), e.item_factors.end(),
                   params.begin() + static_cast<std::ptrdiff_t>(item_table.offset)));
  CHECK(e.seen_offsets == std::vector<std::int64_t>{0, 3, 5, 9, 10});
  CHECK(e.seen_items == std::vector<std::int64_t>{1, 3, 5, 0, 5, 2, 3, 4, 5, 0});

  scratch_dir dir;
  tutti::models::write_mf_export(dir.path, e);
  const auto r = tutti::models::read_mf_export(dir.path);
  CHECK(r.user_factors == e.user_factors);
  CHECK(r.item_factors == e.item_factors);
  CHECK(r.user_bias == e.user_bias);
  CHECK(r.item_bias == e.item_bias);
  CHECK(r.global_bias == e.global_bias);
  CHECK(r.user_ids == e.user_ids);
  CHECK(r.seen_offsets == e.seen_offsets);
  CHECK(r.seen_items == e.seen_items);

  // The header and the arena's tables where they lie write the same files, byte for byte.
  scratch_dir in_place;
  const auto header = tutti::models::make_mf_export_header(model.layout(), rows);
  CHECK(header.user_factors.empty());
  tutti::models::write_mf_export(in_place.path, header,
                                 tutti::models::mf_tables_of(model.layout(), params));
  for (const char* f : tutti::models::mf_export_files) {
    CAPTURE(f);
    const std::string bytes = slurp(in_place.path / f);
    CHECK(!bytes.empty());
    CHECK(bytes == slurp(dir.path / f));
  }
  // A table of another size is refused, naming its file.
  auto short_tables = tutti::models::mf_tables_of(model.layout(), params);
  short_tables.item_bias = short_tables.item_bias.first(5);
  CHECK_THROWS_WITH_AS(tutti::models::write_mf_export(in_place.path, header, short_tables),
                       doctest::Contains("item_bias.npy"), tutti::invalid_argument);

  // A file that disagrees with the others is named.
  tutti::data::write_npy<float>(dir.path / "item_bias.npy", std::vector<float>(5, 0.f), {5});
  std::string msg = error_of([&] { tutti::models::read_mf_export(dir.path); });
  CHECK(msg.find("item_bias.npy") != std::string::npos);
  CHECK(msg.find("(6,)") != std::string::npos);
  tutti::data::write_npy<float>(dir.path / "item_bias.npy", e.item_bias, {6});
  tutti::data::write_npy<std::int64_t>(dir.path / "seen_items.npy",
                                       std::vector<std::int64_t>(10, 6), {10});
  msg = error_of([&] { tutti::models::read_mf_export(dir.path); });
  CHECK(msg.find("seen_items.npy") != std::string::npos);
  fs::remove(dir.path / "user_ids.npy");
  msg = error_of([&] { tutti::models::read_mf_export(dir.path); });
  CHECK(msg.find("user_ids.npy") != std::string::npos);
}

TEST_CASE("export: a non-finite factor or bias is refused, naming the file and the entry") {
  const auto e = small_export(small_rows());
  scratch_dir dir;
  tutti::models::write_mf_export(dir.path, e);
  CHECK(tutti::models::read_mf_export(dir.path).item_factors == e.item_factors);

  auto factors = e.item_factors;
  factors[2 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();  // item 2, column 1
  tutti::data::write_npy<float>(dir.path / "item_factors.npy", factors, {6, 3});
  std::string msg = error_of([&] { tutti::models::read_mf_export(dir.path); });
  CHECK(msg.find("item_factors.npy': row 2, column 1 is NaN; expected finite values") !=
        std::string::npos);
  tutti::data::write_npy<float>(dir.path / "item_factors.npy", e.item_factors, {6, 3});
  auto bias = e.user_bias;
  bias[3] = -std::numeric_limits<float>::infinity();
  tutti::data::write_npy<float>(dir.path / "user_bias.npy", bias, {4});
  msg = error_of([&] { tutti::models::read_mf_export(dir.path); });
  CHECK(msg.find("user_bias.npy': value 3 is infinite") != std::string::npos);
}

TEST_CASE("export: top_k equals a brute-force ranking of the model's predictions, seen excluded") {
  const auto rows = small_rows();
  tutti::models::matrix_factorization<> model({.dim = 7, .loss = tutti::loss_kind::logistic}, 4, 6);
  std::vector<float> params(model.layout().total());
  model.initialize(params, 3);
  for (std::size_t k = 0; k < 4; ++k)
    params[model.layout().find("user_bias").offset + k] = 0.1f * k;
  for (std::size_t k = 0; k < 6; ++k)
    params[model.layout().find("item_bias").offset + k] = -0.05f * k;
  const auto e = tutti::models::make_mf_export(model.layout(), params, rows);
  for (std::int32_t u = 0; u < 4; ++u) {
    std::vector<std::int32_t> users(6, u), items(6);
    for (std::int32_t i = 0; i < 6; ++i) items[static_cast<std::size_t>(i)] = i;
    std::vector<float> scores(6);
    model.predict(params, users, items, scores);
    const auto seen = e.seen(u);
    std::vector<std::int32_t> ref;
    for (std::int32_t i = 0; i < 6; ++i)
      if (std::find(seen.begin(), seen.end(), i) == seen.end()) ref.push_back(i);
    std::sort(ref.begin(), ref.end(), [&](std::int32_t a, std::int32_t b) {
      const float sa = scores[static_cast<std::size_t>(a)],
                  sb = scores[static_cast<std::size_t>(b)];
      return sa != sb ? sa > sb
                      : rows.item_ids[static_cast<std::size_t>(a)] <
                            rows.item_ids[static_cast<std::size_t>(b)];
    });
    for (std::size_t k : {std::size_t{1}, std::size_t{2}, std::size_t{10}}) {
      const auto top = tutti::models::top_k(e, u, k);
      REQUIRE(top.size() == std::min(k, ref.size()));
      for (std::size_t n = 0; n < top.size(); ++n) {
        CHECK(top[n].item == ref[n]);
        CHECK(top[n].score == scores[static_cast<std::size_t>(ref[n])]);
        CHECK(std::find(seen.begin(), seen.end(), top[n].item) == seen.end());
      }
    }
  }
}

TEST_CASE("export: equal scores are listed in ascending source item id") {
  tutti::models::mf_export e;
  e.dim = 2;
  e.user_factors = {1.f, 1.f};
  e.item_factors.assign(5 * 2, 0.5f);
  e.user_bias = {0.f};
  e.item_bias.assign(5, 0.f);
  e.user_ids = {7};
  e.item_ids = {40, 10, 30, 20, 50};
  e.seen_offsets = {0, 1};
  e.seen_items = {3};  // item id 20
  const auto top = tutti::models::top_k(e, 0, 3);
  REQUIRE(top.size() == 3);
  CHECK(e.item_ids[static_cast<std::size_t>(top[0].item)] == 10);
  CHECK(e.item_ids[static_cast<std::size_t>(top[1].item)] == 30);
  CHECK(e.item_ids[static_cast<std::size_t>(top[2].item)] == 40);
  const tutti::models::id_index index(e.item_ids);
  CHECK(index.find(30) == 2);
  CHECK_FALSE(index.find(31).has_value());
}

TEST_CASE("npy: names as NumPy byte strings round trip, padding stripped") {
  scratch_dir dir;
  tutti::data::id_names names;
  for (const char* n : {"u1", "cs101", "", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "naïve, \"q\""})
    names.push_back(n);
  tutti::data::write_npy_names(dir.path / "n.npy", names);
  const std::string bytes = slurp(dir.path / "n.npy");
  CHECK(bytes.find("'descr': '|S36'") != std::string::npos);  // the longest name's bytes
  CHECK(bytes.find("'shape': (5,)") != std::string::npos);
  CHECK(tutti::data::read_npy_names(dir.path / "n.npy") == names);
  // Another dtype is refused with the file's name.
  tutti::data::write_npy<std::int64_t>(dir.path / "i.npy", std::vector<std::int64_t>{1, 2}, {2});
  const std::string msg = error_of([&] { tutti::data::read_npy_names(dir.path / "i.npy"); });
  CHECK(msg.find("i.npy': dtype '<i8'; expected byte strings") != std::string::npos);
}

TEST_CASE("export: ids that are names are written with their codes and read back by name") {
  auto rows = small_rows();
  tutti::data::id_names users, items;
  for (const char* n : {"ann", "bob", "cid", "dee"}) users.push_back(n);
  for (const char* n : {"c-40", "c-10", "c-30", "c-20", "c-60", "c-50"}) items.push_back(n);
  for (std::size_t k = 0; k < users.size(); ++k)
    rows.user_ids[k] = tutti::data::name_code(users[k]);
  for (std::size_t k = 0; k < items.size(); ++k)
    rows.item_ids[k] = tutti::data::name_code(items[k]);
  rows.user_names = std::make_shared<const tutti::data::id_names>(users);
  rows.item_names = std::make_shared<const tutti::data::id_names>(items);
  const auto e = small_export(rows);
  scratch_dir dir;
  tutti::models::write_mf_export(dir.path, e);
  const auto r = tutti::models::read_mf_export(dir.path);
  REQUIRE(r.user_names);
  REQUIRE(r.item_names);
  CHECK(*r.user_names == users);
  CHECK(*r.item_names == items);
  CHECK(r.user_text(2) == "cid");
  CHECK(r.item_text(4) == "c-60");
  // The same lists as before the round trip, found by name.
  const tutti::models::id_index index(r.user_ids);
  CHECK(index.find("bob", r.user_names.get()) == 1);
  CHECK_FALSE(index.find("bo", r.user_names.get()).has_value());
  CHECK_FALSE(index.find("17", nullptr).has_value());
  const auto before = tutti::models::top_k(e, 1, 3), after = tutti::models::top_k(r, 1, 3);
  REQUIRE(before.size() == after.size());
  for (std::size_t k = 0; k < before.size(); ++k) {
    CHECK(before[k].item == after[k].item);
    CHECK(before[k].score == after[k].score);
  }
  // Names from another export: each must be the name of its id.
  tutti::data::id_names other = users;
  other.push_back("x");
  tutti::data::id_names swapped;
  for (const char* n : {"bob", "ann", "cid", "dee"}) swapped.push_back(n);
  tutti::data::write_npy_names(dir.path / "user_names.npy", swapped);
  const std::string msg = error_of([&] { tutti::models::read_mf_export(dir.path); });
  CHECK(msg.find("user_names.npy': name 0 is not the name of its id") != std::string::npos);
  tutti::data::write_npy_names(dir.path / "user_names.npy", other);
  CHECK(error_of([&] {
          tutti::models::read_mf_export(dir.path);
        }).find("5 names; expected one per id (4)") != std::string::npos);
}

TEST_CASE("warm start: known rows from the export by source id, new rows as initialised") {
  // Yesterday: 4 learners, 6 courses (small_rows). Today: learners 17 and 3 again, a new one
  // (id 77), in another order; courses 10 and 60 again and a new one (id 99).
  const auto rows = small_rows();
  tutti::models::matrix_factorization<> old_model({.dim = 3}, 4, 6);
  std::vector<float> old_params(old_model.layout().total());
  old_model.initialize(old_params, 21);
  old_params[old_model.layout().find("global_bias").offset] = 3.5f;
  const auto e = tutti::models::make_mf_export(old_model.layout(), old_params, rows);

  tutti::models::matrix_factorization<> model({.dim = 3, .global_bias_init = 1.f}, 3, 3);
  const std::vector<std::int64_t> users = {77, 3, 17}, items = {99, 60, 10};
  std::vector<float> fresh(model.layout().total());
  model.initialize(fresh, 5);
  std::vector<float> warm = fresh;
  const auto match = tutti::models::match_export(users, items, e);
  const auto counts = tutti::models::apply_warm_start(model.layout(), warm, match, e);
  CHECK(counts.users_reused == 2);
  CHECK(counts.users_new == 1);
  CHECK(counts.items_reused == 2);
  CHECK(counts.items_new == 1);
  const auto n = match.counts();
  CHECK((n.users_reused == 2 && n.users_new == 1 && n.items_reused == 2 && n.items_new == 1));

  const auto& layout = model.layout();
  const auto row = [&](const std::vector<float>& p, const char* table, std::size_t r) {
    const auto& s = layout.find(table);
    return std::vector<float>(p.begin() + static_cast<std::ptrdiff_t>(s.offset + r * s.cols),
                              p.begin() + static_cast<std::ptrdiff_t>(s.offset + (r + 1) * s.cols));
  };
  const auto old_row = [&](const std::vector<float>& t, std::size_t r) {
    return std::vector<float>(t.begin() + static_cast<std::ptrdiff_t>(3 * r),
                              t.begin() + static_cast<std::ptrdiff_t>(3 * (r + 1)));
  };
  // Learner 3 was yesterday's dense 3, learner 17 dense 1; course 60 dense 4, course 10 dense 1.
  CHECK(row(warm, "user_embedding", 1) == old_row(e.user_factors, 3));
  CHECK(row(warm, "user_embedding", 2) == old_row(e.user_factors, 1));
  CHECK(row(warm, "item_embedding", 1) == old_row(e.item_factors, 4));
  CHECK(row(warm, "item_embedding", 2) == old_row(e.item_factors, 1));
  CHECK(row(warm, "user_bias", 2) == std::vector<float>{e.user_bias[1]});
  CHECK(row(warm, "item_bias", 1) == std::vector<float>{e.item_bias[4]});
  CHECK(row(warm, "global_bias", 0) == std::vector<float>{3.5f});
  // The new learner and course keep the fresh initialisation.
  CHECK(row(warm, "user_embedding", 0) == row(fresh, "user_embedding", 0));
  CHECK(row(warm, "item_embedding", 0) == row(fresh, "item_embedding", 0));

  // The model starts from the warm arena, whatever the seed; null draws again.
  model.start_from(std::make_shared<const std::vector<float>>(warm));
  std::vector<float> started(layout.total());
  model.initialize(started, 123);
  CHECK(started == warm);
  model.start_from(nullptr);
  model.initialize(started, 5);
  CHECK(started == fresh);
  // Or draws, then puts the export's rows in place: the same arena, with no second one.
  model.after_initialize(
      [&](std::span<float> p) { tutti::models::apply_warm_start(layout, p, match, e); });
  std::fill(started.begin(), started.end(), 0.f);
  model.initialize(started, 5);
  CHECK(started == warm);
  model.after_initialize(nullptr);

  // Another dimension, or ids that do not match the tables, are refused.
  tutti::models::matrix_factorization<> wide({.dim = 4}, 3, 3);
  std::vector<float> w(wide.layout().total());
  CHECK_THROWS_WITH_AS(tutti::models::apply_warm_start(wide.layout(), w, match, e),
                       doctest::Contains("the model has 4 factors per row, the export 3"),
                       tutti::invalid_argument);
  CHECK_THROWS_AS(
      tutti::models::apply_warm_start(
          layout, warm, tutti::models::match_export(std::vector<std::int64_t>{1}, items, e), e),
      tutti::invalid_argument);
}

namespace {

/// The state floats that differ between `a` and `b`.
std::set<std::size_t> changed(const std::vector<float>& a, const std::vector<float>& b) {
  std::set<std::size_t> out;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) out.insert(i);
  return out;
}

/// The state floats `map` gives row `row` of segment `s`.
void add_row_state(const tutti::state_map& map, std::size_t s, std::size_t row,
                   std::set<std::size_t>& into) {
  for (const tutti::state_plane& p : map[s])
    for (std::size_t k = 0; k < p.width; ++k) into.insert(p.offset + row * p.width + k);
}

/// One step of `o` from a zero state with a gradient on row 2 of the learners' table and row 1
/// of the courses' biases only: the state floats it changes, and those its map gives the two rows.
template <class O>
void check_map_follows_step(const O& o) {
  tutti::models::matrix_factorization<> model({.dim = 3}, 4, 6);
  const auto& layout = model.layout();
  std::vector<float> params(layout.total());
  model.initialize(params, 3);
  const std::size_t n = tutti::detail::optimizer_state_floats(o, layout);
  const tutti::state_map map = o.state_map(layout);
  tutti::check_state_map(map, layout, n);
  std::vector<float> grads(layout.total(), 0.f), state(n, 0.f);
  const auto& pu = layout.find("user_embedding");
  for (std::size_t c = 0; c < pu.cols; ++c) grads[pu.offset + 2 * pu.cols + c] = 0.5f + float(c);
  grads[layout.find("item_bias").offset + 1] = -0.25f;
  const std::vector<float> before = state;
  if constexpr (tutti::optimizer_steps_by_layout<O, tutti::host_space>)
    o.step(tutti::host_space{}, layout, params, grads, state, 0.01f, 1);
  else
    o.step(tutti::host_space{}, std::span<float>(params), grads, state, 0.01f, 1);
  std::set<std::size_t> mapped;
  const auto index = [&](const char* name) {
    return static_cast<std::size_t>(&layout.find(name) - layout.segments().data());
  };
  add_row_state(map, index("user_embedding"), 2, mapped);
  add_row_state(map, index("item_bias"), 1, mapped);
  CHECK(!mapped.empty());
  CHECK(changed(before, state) == mapped);
}

}  // namespace

TEST_CASE("state map: each optimizer's map gives exactly the state a row's gradient moves") {
  check_map_follows_step(tutti::adam{});
  check_map_follows_step(tutti::lazy_adam{});
  check_map_follows_step(tutti::lamb{});
  check_map_follows_step(tutti::lars{.momentum = 0.9f});
  check_map_follows_step(tutti::sgd{.momentum = 0.9f});
  check_map_follows_step(tutti::row_sparse_sgd{.momentum = 0.9f});
  check_map_follows_step(tutti::rowwise_adagrad{});
  // Without momentum SGD keeps no state, and its map gives none.
  tutti::models::matrix_factorization<> model({.dim = 3}, 4, 6);
  for (const auto& planes : tutti::sgd{}.state_map(model.layout())) CHECK(planes.empty());
  // A map whose rows overlap, or leave the arena, is refused.
  tutti::state_map bad = tutti::adam{}.state_map(model.layout());
  bad[1][0].offset = bad[0][0].offset;
  CHECK_THROWS_WITH_AS(tutti::check_state_map(bad, model.layout(), 2 * model.layout().total()),
                       doctest::Contains("shares state float"), tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(tutti::check_state_map(tutti::adam{}.state_map(model.layout()),
                                              model.layout(), model.layout().total()),
                       doctest::Contains("expected within the arena"), tutti::invalid_argument);
}

TEST_CASE("warm start: the optimizer's state goes with its rows through an export") {
  const auto rows = small_rows();
  tutti::models::matrix_factorization<> old_model({.dim = 3}, 4, 6);
  const auto& old_layout = old_model.layout();
  std::vector<float> old_params(old_layout.total());
  old_model.initialize(old_params, 21);
  const tutti::rowwise_adagrad adagrad;
  const tutti::adam adam;
  // Adam's state, every float distinct.
  std::vector<float> old_state(tutti::detail::optimizer_state_floats(adam, old_layout));
  for (std::size_t i = 0; i < old_state.size(); ++i) old_state[i] = 1.f + float(i);
  auto e = tutti::models::make_mf_export(old_layout, old_params, rows);
  e.state = tutti::models::make_mf_state(old_layout, adam.state_map(old_layout), old_state);
  CHECK(e.state->user_width == 2 * (3 + 1));  // two moments of three factors and a bias
  CHECK(e.state->global.size() == 2);

  scratch_dir dir;
  tutti::models::write_mf_export(dir.path, e);
  const auto r = tutti::models::read_mf_export(dir.path);
  REQUIRE(r.state);
  CHECK(r.state->user == e.state->user);
  CHECK(r.state->item == e.state->item);
  CHECK(r.state->global == e.state->global);
  CHECK(r.state->item_width == e.state->item_width);

  // Today: learners 77 (new), 3 and 17; courses 99 (new), 60 and 10.
  tutti::models::matrix_factorization<> model({.dim = 3}, 3, 3);
  const auto& layout = model.layout();
  const std::vector<std::int64_t> users = {77, 3, 17}, items = {99, 60, 10};
  const auto match = tutti::models::match_export(users, items, r);
  std::vector<float> state(tutti::detail::optimizer_state_floats(adam, layout), 0.f);
  const tutti::state_map map = adam.state_map(layout), old_map = adam.state_map(old_layout);
  tutti::models::apply_warm_state(layout, map, state, match, r);
  const auto row_state = [](const tutti::state_map& m, const tutti::parameter_layout& l,
                            const std::vector<float>& st, const char* seg, std::size_t row) {
    const auto s = static_cast<std::size_t>(&l.find(seg) - l.segments().data());
    std::vector<float> out(tutti::row_state_width(m, s));
    tutti::gather_row_state(m, s, row, st, out);
    return out;
  };
  // Learner 3 was dense 3 yesterday, 17 dense 1; course 60 dense 4, course 10 dense 1.
  CHECK(row_state(map, layout, state, "user_embedding", 1) ==
        row_state(old_map, old_layout, old_state, "user_embedding", 3));
  CHECK(row_state(map, layout, state, "user_bias", 2) ==
        row_state(old_map, old_layout, old_state, "user_bias", 1));
  CHECK(row_state(map, layout, state, "item_embedding", 1) ==
        row_state(old_map, old_layout, old_state, "item_embedding", 4));
  CHECK(row_state(map, layout, state, "item_bias", 2) ==
        row_state(old_map, old_layout, old_state, "item_bias", 1));
  CHECK(row_state(map, layout, state, "global_bias", 0) ==
        row_state(old_map, old_layout, old_state, "global_bias", 0));
  // The new learner and course start with a fresh (zero) state.
  CHECK(row_state(map, layout, state, "user_embedding", 0) == std::vector<float>(6, 0.f));
  CHECK(row_state(map, layout, state, "item_bias", 0) == std::vector<float>(2, 0.f));

  // Another optimizer's rows are refused; so is an export without state.
  std::vector<float> other(tutti::detail::optimizer_state_floats(adagrad, layout), 0.f);
  CHECK_THROWS_WITH_AS(
      tutti::models::apply_warm_state(layout, adagrad.state_map(layout), other, match, r),
      doctest::Contains("the export keeps 8 floats of state per user row; this optimizer keeps 2"),
      tutti::invalid_argument);
  auto stateless = r;
  stateless.state.reset();
  CHECK_THROWS_AS(tutti::models::apply_warm_state(layout, map, state, match, stateless),
                  tutti::invalid_argument);
  // A state file missing beside the others, or of other rows, is named.
  fs::remove(dir.path / "item_state.npy");
  CHECK(error_of([&] { tutti::models::read_mf_export(dir.path); }).find("item_state.npy") !=
        std::string::npos);
  tutti::data::write_npy<float>(dir.path / "item_state.npy", std::vector<float>(8 * 5, 0.f),
                                {5, 8});
  const std::string msg = error_of([&] { tutti::models::read_mf_export(dir.path); });
  CHECK(msg.find("item_state.npy") != std::string::npos);
  CHECK(msg.find("(5, 8)") != std::string::npos);
  // Written without state, an export's earlier state files go.
  e.state.reset();
  tutti::models::write_mf_export(dir.path, e);
  CHECK_FALSE(fs::exists(dir.path / "user_state.npy"));
  CHECK_FALSE(tutti::models::read_mf_export(dir.path).state);
}

}  // namespace test_export
