// SPDX-License-Identifier: Apache-2.0
/// @file test_sealed.cpp
/// @brief Tests of sealed shards: round trips, every kind of tampering, key files and key scoping.
#include <doctest/doctest.h>

#include "scratch_dir.hpp"
#include "skip.hpp"

#if __has_include(<sodium.h>)

#include <tutti/data/csv.hpp>
#include <tutti/data/sealed.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace test_sealed {

namespace {

namespace fs = std::filesystem;
using tutti::data::interactions;
using tutti::data::key_kind;
using tutti::data::sealed_error;
using tutti::data::secret_key;

struct scratch_dir : tutti_test::scratch_dir {
  scratch_dir() : tutti_test::scratch_dir("tutti-sealed") {}
};

/// A dataset with timestamps, repeated users and items, and labels that are not integers.
interactions sample_data(std::size_t rows = 1500) {
  std::string text = "userId,movieId,rating,timestamp\n";
  for (std::size_t i = 0; i < rows; ++i)
    text += std::to_string(1000 + (i * 7) % 211) + "," + std::to_string(5 + (i * 13) % 97) + "," +
            std::to_string(0.5 + double(i % 10) * 0.45) + "," + std::to_string(1600000000 + i) +
            "\n";
  return tutti::data::parse_csv(text, {.timestamp_col = "timestamp"}, "sample.csv");
}

std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<unsigned char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void write_json(const fs::path& p, const nlohmann::json& j) {
  std::ofstream out(p, std::ios::trunc);
  out << j.dump(2);
}

/// Rows [first, first + count) of `d`, keeping its index maps.
interactions slice(const interactions& d, std::size_t first, std::size_t count) {
  interactions out;
  out.user_ids = d.user_ids;
  out.item_ids = d.item_ids;
  out.implicit = d.implicit;
  auto cut = [&](const auto& v, auto& into) {
    into.assign(v.begin() + static_cast<std::ptrdiff_t>(first),
                v.begin() + static_cast<std::ptrdiff_t>(first + count));
  };
  cut(d.users, out.users);
  cut(d.items, out.items);
  cut(d.labels, out.labels);
  if (d.has_timestamps()) cut(d.timestamps, out.timestamps);
  return out;
}

void check_equal(const interactions& a, const interactions& b) {
  REQUIRE(a.size() == b.size());
  CHECK(a.users == b.users);
  CHECK(a.items == b.items);
  CHECK(std::memcmp(a.labels.data(), b.labels.data(), a.labels.size() * sizeof(float)) == 0);
  CHECK(a.timestamps == b.timestamps);
  CHECK(a.user_ids == b.user_ids);
  CHECK(a.item_ids == b.item_ids);
  CHECK(a.implicit == b.implicit);
  CHECK(tutti::data::same_names(a.user_names, b.user_names));
  CHECK(tutti::data::same_names(a.item_names, b.item_names));
  CHECK(a.digest() == b.digest());
}

/// The sealed_error `f` raises; fails the test when it raises none.
template <class F>
sealed_error sealed_failure(F&& f) {
  try {
    f();
  } catch (const sealed_error& e) {
    return e;
  }
  FAIL("expected a tutti::data::sealed_error");
  return sealed_error(-2, "", "");
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// Makes the manifest agree with shard `s`'s file as it now is, and signs it again with the
/// master key: what an attacker holding the master key could do, and the way to reach the
/// chunk-level checks behind the manifest's size and digest checks.
void resign(const fs::path& dir, std::uint32_t s, const secret_key& master) {
  nlohmann::json m = read_json(dir / "manifest.json");
  auto& e = m["shard_files"][s];
  auto bytes = read_bytes(dir / e["file"].get<std::string>());
  const std::uint64_t stride = m["chunk_size"].get<std::uint64_t>() + 17;
  const std::uint64_t body = bytes.size() > 36 ? bytes.size() - 36 : 0;
  e["ciphertext_bytes"] = bytes.size();
  e["chunks"] = (body + stride - 1) / stride;
  e["blake2b"] = tutti::detail::to_hex(tutti::detail::blake2b().update(bytes).finish());
  tutti::detail::sealed_sign_manifest(m, master);
  write_json(dir / "manifest.json", m);
}

constexpr std::size_t chunk = 256;  // small chunks: many of them per shard
constexpr std::size_t stride = chunk + 17;
constexpr std::size_t header = 36;

}  // namespace

TEST_CASE("sealed: round trip for 1 to 4 shards, shards are contiguous, ciphertext only") {
  const interactions data = sample_data();
  const secret_key master = secret_key::generate();
  for (std::uint32_t w = 1; w <= 4; ++w) {
    CAPTURE(w);
    scratch_dir dir;
    auto m = tutti::data::seal_shards(data, master, dir.path, {.shards = w, .chunk_size = chunk});
    REQUIRE(m.shards == w);
    REQUIRE(m.files.size() == w);
    CHECK(m.rows == data.size());
    CHECK(m.master_key_id == master.id());

    check_equal(tutti::data::open_sealed(dir.path, master), data);

    std::uint64_t next = 0;
    for (std::uint32_t s = 0; s < w; ++s) {
      const auto& f = m.files[s];
      CHECK(f.first_row == next);
      CHECK(f.rows + 1 >= data.size() / w);
      CHECK(f.rows <= data.size() / w + 1);
      CHECK(f.chunks == (f.ciphertext_bytes - header + stride - 1) / stride);
      CHECK(f.key_id == tutti::data::derive_shard_key(master, s).id());
      next += f.rows;
      const std::uint32_t one[] = {s};
      check_equal(tutti::data::open_sealed(dir.path, master, one),
                  slice(data, f.first_row, f.rows));

      // The user id map is in every shard; its bytes must not appear in the file.
      auto bytes = read_bytes(dir.path / f.file);
      CHECK(bytes.size() == f.ciphertext_bytes);
      const auto* ids = reinterpret_cast<const unsigned char*>(data.user_ids.data());
      CHECK(std::search(bytes.begin(), bytes.end(), ids, ids + 32) == bytes.end());
    }
    CHECK(next == data.size());
    // The read-only view of the manifest matches what sealing returned.
    auto again = tutti::data::read_manifest(dir.path);
    CHECK(again.files[w - 1].blake2b == m.files[w - 1].blake2b);
  }
}

TEST_CASE("sealed: an existing sealed directory is never overwritten") {
  const interactions data = sample_data(100);
  const secret_key master = secret_key::generate();
  scratch_dir dir;
  tutti::data::seal_shards(data, master, dir.path, {.shards = 2});
  CHECK_THROWS_AS(tutti::data::seal_shards(data, master, dir.path, {.shards = 2}), tutti::error);
  CHECK_THROWS_AS(
      tutti::data::seal_shards(data, tutti::data::derive_shard_key(master, 0), dir.path / "x"),
      tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::data::seal_shards(data, master, dir.path / "y", {.shards = 0}),
                  tutti::invalid_argument);
}

TEST_CASE("sealed: one flipped byte anywhere in a shard file names that shard") {
  const interactions data = sample_data();
  const secret_key master = secret_key::generate();
  scratch_dir dir;
  auto m = tutti::data::seal_shards(data, master, dir.path, {.shards = 3, .chunk_size = chunk});
  const auto file = dir.path / m.files[1].file;
  const auto clean = read_bytes(file);
  const auto clean_manifest = read_bytes(dir.path / "manifest.json");
  const std::size_t n = clean.size();
  REQUIRE(m.files[1].chunks >= 6);

  for (std::size_t pos : {std::size_t{0}, std::size_t{9}, std::size_t{20}, header + 3,
                          header + stride + 100, header + 4 * stride + 1, n / 2, n - 1}) {
    CAPTURE(pos);
    auto bytes = clean;
    bytes[pos] ^= 0x01;
    write_bytes(file, bytes);

    // Behind an untouched manifest: the file's digest gives it away.
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, master); });
    CHECK(e.shard() == 1);
    CHECK(contains(e.what(), "shard 1 (shard-001.tsb): "));
    CHECK(contains(e.what(), "modified"));

    // Behind a manifest re-signed to match: the authenticated encryption itself refuses.
    resign(dir.path, 1, master);
    e = sealed_failure([&] { tutti::data::open_sealed(dir.path, master); });
    CHECK(e.shard() == 1);
    CHECK(contains(e.what(), "shard 1 (shard-001.tsb): "));
    if (pos >= header) {
      const std::size_t c = (pos - header) / stride;
      CHECK(contains(e.what(), "authentication failed at chunk " + std::to_string(c) + " of"));
    }
    // The other shards still open.
    const std::uint32_t others[] = {0, 2};
    CHECK(tutti::data::open_sealed(dir.path, master, others).size() ==
          m.files[0].rows + m.files[2].rows);

    write_bytes(file, clean);
    write_bytes(dir.path / "manifest.json", clean_manifest);
  }
  check_equal(tutti::data::open_sealed(dir.path, master), data);
}

TEST_CASE("sealed: truncated, dropped, swapped and appended chunks are refused") {
  const interactions data = sample_data();
  const secret_key master = secret_key::generate();
  scratch_dir dir;
  auto m = tutti::data::seal_shards(data, master, dir.path, {.shards = 2, .chunk_size = chunk});
  const auto file = dir.path / m.files[0].file;
  const auto clean = read_bytes(file);
  const auto clean_manifest = read_bytes(dir.path / "manifest.json");
  const std::size_t chunks = m.files[0].chunks;
  REQUIRE(chunks >= 5);
  auto restore = [&] {
    write_bytes(file, clean);
    write_bytes(dir.path / "manifest.json", clean_manifest);
  };
  auto chunk_at = [&](std::size_t c) {
    return clean.begin() + static_cast<std::ptrdiff_t>(header + c * stride);
  };
  auto expect = [&](const std::string& what, bool with_resign) {
    if (with_resign) resign(dir.path, 0, master);
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, master); });
    CHECK(e.shard() == 0);
    CHECK(contains(e.what(), "shard 0 (shard-000.tsb): "));
    CHECK_MESSAGE(contains(e.what(), what), std::string(e.what()));
    restore();
  };

  SUBCASE("truncated by a few bytes") {
    write_bytes(file, {clean.begin(), clean.end() - 5});
    expect("truncated", false);
    write_bytes(file, {clean.begin(), clean.end() - 5});
    expect("authentication failed at chunk " + std::to_string(chunks - 1), true);
  }
  SUBCASE("the last chunk dropped: no final tag") {
    write_bytes(file, {clean.begin(), chunk_at(chunks - 1)});
    expect("truncated", false);
    write_bytes(file, {clean.begin(), chunk_at(chunks - 1)});
    expect("without its final tag", true);
  }
  SUBCASE("cut inside the stream header") {
    write_bytes(file, {clean.begin(), clean.begin() + 20});
    expect("truncated", true);
  }
  SUBCASE("a middle chunk dropped") {
    std::vector<unsigned char> b(clean.begin(), chunk_at(2));
    b.insert(b.end(), chunk_at(3), clean.end());
    write_bytes(file, b);
    expect("authentication failed at chunk 2 of", true);
  }
  SUBCASE("two chunks swapped") {
    std::vector<unsigned char> b(clean.begin(), chunk_at(1));
    b.insert(b.end(), chunk_at(2), chunk_at(3));
    b.insert(b.end(), chunk_at(1), chunk_at(2));
    b.insert(b.end(), chunk_at(3), clean.end());
    REQUIRE(b.size() == clean.size());
    write_bytes(file, b);
    expect("authentication failed at chunk 1 of", true);
  }
  SUBCASE("a chunk repeated") {
    std::vector<unsigned char> b(clean.begin(), chunk_at(2));
    b.insert(b.end(), chunk_at(1), clean.end());
    write_bytes(file, b);
    expect("authentication failed at chunk 2 of", true);
  }
  SUBCASE("bytes appended") {
    auto b = clean;
    b.insert(b.end(), 40, 0x55);
    write_bytes(file, b);
    expect("the manifest's size", false);
  }
  SUBCASE("the shard files exchanged") {
    fs::rename(dir.path / m.files[1].file, dir.path / "tmp.tsb");
    fs::rename(file, dir.path / m.files[1].file);
    fs::rename(dir.path / "tmp.tsb", file);
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, master); });
    CHECK(e.shard() == 0);
    fs::rename(file, dir.path / "tmp.tsb");
    fs::rename(dir.path / m.files[1].file, file);
    fs::rename(dir.path / "tmp.tsb", dir.path / m.files[1].file);
    check_equal(tutti::data::open_sealed(dir.path, master), data);
  }
  SUBCASE("a missing shard file") {
    fs::remove(file);
    expect("missing", false);
  }
}

TEST_CASE("sealed: edited or unsigned manifests and wrong keys are refused") {
  const interactions data = sample_data(600);
  const secret_key master = secret_key::generate();
  scratch_dir dir;
  tutti::data::seal_shards(data, master, dir.path, {.shards = 3, .chunk_size = chunk});
  const auto mpath = dir.path / "manifest.json";
  const auto clean = read_json(mpath);
  const secret_key shard1 = tutti::data::derive_shard_key(master, 1);

  SUBCASE("a shard's row count edited") {
    auto j = clean;
    j["shard_files"][1]["rows"] = j["shard_files"][1]["rows"].get<std::uint64_t>() - 1;
    write_json(mpath, j);
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, master); });
    CHECK(e.shard() == -1);
    CHECK(contains(e.what(), "manifest MAC does not verify"));
    // A shard-key holder cannot check the manifest MAC, but its entry MAC catches the edit.
    e = sealed_failure([&] { tutti::data::open_sealed(dir.path, shard1); });
    CHECK(e.shard() == 1);
    CHECK(contains(e.what(), "shard 1 (shard-001.tsb): manifest entry MAC does not verify"));
  }
  SUBCASE("the chunk size edited") {
    auto j = clean;
    j["chunk_size"] = 512;
    write_json(mpath, j);
    CHECK(contains(sealed_failure([&] { tutti::data::open_sealed(dir.path, master); }).what(),
                   "MAC does not verify"));
    CHECK(sealed_failure([&] { tutti::data::open_sealed(dir.path, shard1); }).shard() == 1);
  }
  SUBCASE("an informational field edited") {
    auto j = clean;
    j["split"] = "round-robin";
    write_json(mpath, j);
    CHECK(contains(sealed_failure([&] { tutti::data::open_sealed(dir.path, master); }).what(),
                   "manifest MAC does not verify"));
  }
  SUBCASE("the manifest MAC removed") {
    auto j = clean;
    j.erase("mac");
    write_json(mpath, j);
    CHECK(contains(sealed_failure([&] { tutti::data::open_sealed(dir.path, master); }).what(),
                   "carries no MAC"));
  }
  SUBCASE("an entry MAC removed") {
    auto j = clean;
    j["shard_files"][1].erase("mac");
    write_json(mpath, j);
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, shard1); });
    CHECK(e.shard() == 1);
    CHECK(contains(e.what(), "no MAC"));
  }
  SUBCASE("a file name pointing outside the directory") {
    auto j = clean;
    j["shard_files"][0]["file"] = "../shard-000.tsb";
    write_json(mpath, j);
    CHECK(contains(sealed_failure([&] { tutti::data::open_sealed(dir.path, master); }).what(),
                   "expected a file name"));
  }
  SUBCASE("the manifest missing or not JSON") {
    fs::remove(mpath);
    CHECK(contains(sealed_failure([&] { tutti::data::open_sealed(dir.path, master); }).what(),
                   "missing"));
    std::ofstream(mpath) << "{\"format\": ";
    CHECK(contains(sealed_failure([&] { tutti::data::open_sealed(dir.path, master); }).what(),
                   "not JSON"));
  }
  SUBCASE("another master key") {
    const secret_key other = secret_key::generate();
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, other); });
    CHECK(contains(e.what(), "wrong key"));
    // A shard key of another master: refused by its id, naming the shard.
    const secret_key other1 = tutti::data::derive_shard_key(other, 1);
    e = sealed_failure([&] { tutti::data::open_sealed(dir.path, other1); });
    CHECK(e.shard() == 1);
    CHECK(contains(e.what(), "shard 1 (shard-001.tsb): wrong key"));
  }
  SUBCASE("a wrong key behind a forged key id still fails in the cipher") {
    // Someone rewrites the manifest's key id to match their own key: the entry MAC (keyed by the
    // real shard key) and then the stream decryption refuse it.
    const secret_key other1 = tutti::data::derive_shard_key(secret_key::generate(), 1);
    auto j = clean;
    j["shard_files"][1]["key_id"] = other1.id();
    write_json(mpath, j);
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, other1); });
    CHECK(e.shard() == 1);
    CHECK(contains(e.what(), "MAC does not verify"));
  }
}

TEST_CASE("sealed: a shard key opens its own shard and no other") {
  const interactions data = sample_data();
  const secret_key master = secret_key::generate();
  scratch_dir dir;
  auto m = tutti::data::seal_shards(data, master, dir.path, {.shards = 4, .chunk_size = chunk});
  tutti::data::write_key_file(dir.path / "k1", tutti::data::derive_shard_key(master, 1));
  const secret_key k1 = tutti::data::read_key_file(dir.path / "k1");
  CHECK(k1.kind() == key_kind::shard);
  CHECK(k1.shard() == 1);
  CHECK(k1.id() == m.files[1].key_id);
  CHECK(k1.id() != master.id());

  check_equal(tutti::data::open_sealed(dir.path, k1),
              slice(data, m.files[1].first_row, m.files[1].rows));
  for (std::uint32_t s : {0u, 2u, 3u}) {
    const std::uint32_t one[] = {s};
    auto e = sealed_failure([&] { tutti::data::open_sealed(dir.path, k1, one); });
    CHECK(e.shard() == s);
    CHECK(contains(e.what(), "shard " + std::to_string(s) + " (shard-00" + std::to_string(s) +
                                 ".tsb): the key file holds shard 1's key"));
  }
  // Asking for its own shard among others fails as a whole: no partial result.
  const std::uint32_t both[] = {1, 2};
  CHECK(sealed_failure([&] { tutti::data::open_sealed(dir.path, k1, both); }).shard() == 2);
  CHECK_THROWS_AS(tutti::data::derive_shard_key(k1, 2), tutti::invalid_argument);
  const std::uint32_t beyond[] = {4};
  CHECK_THROWS_AS(tutti::data::open_sealed(dir.path, master, beyond), tutti::invalid_argument);
}

TEST_CASE("sealed: key files are private, exclusive and checked") {
  scratch_dir dir;
  const secret_key master = secret_key::generate();
  const auto path = dir.path / "master.key";
  tutti::data::write_key_file(path, master);
  struct ::stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const secret_key back = tutti::data::read_key_file(path);
  CHECK(back.kind() == key_kind::master);
  CHECK(std::memcmp(back.data(), master.data(), secret_key::size) == 0);
  // An existing key file is never overwritten.
  CHECK_THROWS_AS(tutti::data::write_key_file(path, secret_key::generate()), tutti::error);
  CHECK(tutti::data::read_key_file(path).id() == master.id());

  for (unsigned mode : {0640u, 0604u, 0620u, 0644u, 0700u | 0007u}) {
    CAPTURE(mode);
    fs::permissions(path, static_cast<fs::perms>(mode));
    try {
      tutti::data::read_key_file(path);
      FAIL("a key file with group or other access was accepted");
    } catch (const tutti::data::key_file_error& e) {
      CHECK(contains(e.what(), "accessible by group or others"));
      CHECK(contains(e.what(), "chmod 600"));
    }
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  CHECK_NOTHROW(tutti::data::read_key_file(path));

  // Damage: a digit of the key changed no longer matches the recorded id; garbage is not a key.
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto at = text.find("\nkey ") + 5;
  text[at] = text[at] == '0' ? '1' : '0';
  const auto damaged = dir.path / "damaged.key";
  { std::ofstream(damaged) << text; }
  fs::permissions(damaged, fs::perms::owner_read | fs::perms::owner_write);
  CHECK_THROWS_WITH_AS(tutti::data::read_key_file(damaged), doctest::Contains("recorded id"),
                       tutti::data::key_file_error);
  const auto garbage = dir.path / "garbage.key";
  { std::ofstream(garbage) << "hello\n"; }
  fs::permissions(garbage, fs::perms::owner_read | fs::perms::owner_write);
  CHECK_THROWS_WITH_AS(tutti::data::read_key_file(garbage),
                       doctest::Contains("not a tutti key file"), tutti::data::key_file_error);
  CHECK_THROWS_AS(tutti::data::read_key_file(dir.path / "absent.key"), tutti::data::key_file_error);

  // Moving a key leaves nothing behind in the source.
  secret_key moved = secret_key::generate();
  secret_key into = std::move(moved);
  CHECK(moved.data() == nullptr);  // NOLINT(bugprone-use-after-move): that is the point
  CHECK(into.data() != nullptr);
}

TEST_CASE("sealed: a key file that is a named pipe is refused at once, not waited on") {
  scratch_dir dir;
  const auto pipe = dir.path / "pipe.key";
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  // Opened without O_NONBLOCK this would wait for a writer for ever.
  CHECK_THROWS_WITH_AS(tutti::data::read_key_file(pipe), doctest::Contains("not a regular file"),
                       tutti::data::key_file_error);
}

TEST_CASE("sealed: a key file owned by another user is refused, naming the owner") {
  if (::geteuid() != 0)
    TUTTI_TEST_SKIP("giving a file to another user needs root (CI runs as root)");
  scratch_dir dir;
  const auto path = dir.path / "theirs.key";
  tutti::data::write_key_file(path, secret_key::generate());
  REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);  // nobody, mode 0600 kept
  CHECK_THROWS_WITH_AS(tutti::data::read_key_file(path),
                       doctest::Contains("is owned by user 65534, not by this process's user 0"),
                       tutti::data::key_file_error);
  REQUIRE(::chown(path.c_str(), 0, 0) == 0);
  CHECK_NOTHROW(tutti::data::read_key_file(path));
}

TEST_CASE("sealed: ids that are names travel with every shard, checked against their codes") {
  std::string text = "user,course,done\n";
  for (int r = 0; r < 300; ++r)
    text += "learner-" + std::to_string(r % 37) + ",\"course, " + std::to_string(r % 11) + "\"," +
            std::to_string(r % 2) + "\n";
  const interactions data = tutti::data::parse_csv(
      text, {.user_col = "user", .item_col = "course", .label_col = "done", .implicit = true},
      "named.csv");
  REQUIRE(data.user_names);
  REQUIRE(data.item_names);
  const secret_key master = secret_key::generate();
  scratch_dir dir;
  auto m = tutti::data::seal_shards(data, master, dir.path, {.shards = 3, .chunk_size = chunk});
  check_equal(tutti::data::open_sealed(dir.path, master), data);
  // One shard alone carries every name: the index space is the whole dataset's.
  const std::uint32_t one[] = {2};
  const interactions part = tutti::data::open_sealed(dir.path, master, one);
  REQUIRE(part.user_names);
  CHECK(*part.user_names == *data.user_names);
  CHECK(part.item_text(0) == "course, 0");
  // A name that does not match its code (a block built inconsistently) is refused.
  const auto plain = tutti::detail::sealed_encode_rows(data, 0, 1, 0, data.size(), data.digest());
  auto edited = plain;
  const std::string_view needle = "learner-36";
  auto at = std::search(edited.begin(), edited.end(), needle.begin(), needle.end());
  REQUIRE(at != edited.end());
  *(at + 9) = '5';  // learner-35 under learner-36's code
  CHECK(contains(sealed_failure([&] { tutti::detail::sealed_decode_rows(edited, 0, "f"); }).what(),
                 "user names are cut or do not match their ids"));
  edited = plain;
  edited.resize(edited.size() - 1);
  CHECK_THROWS_AS(tutti::detail::sealed_decode_rows(edited, 0, "f"), sealed_error);
  CHECK(m.rows == data.size());
}

TEST_CASE("sealed: the decoder and decryptor refuse arbitrary bytes without crashing") {
  const interactions data = sample_data(40);
  const secret_key master = secret_key::generate();
  const secret_key k = tutti::detail::sealed_stream_key(tutti::data::derive_shard_key(master, 0));
  auto plain = tutti::detail::sealed_encode_rows(data, 0, 1, 0, data.size(), data.digest());
  std::uint64_t chunks = 0;
  auto sealed = tutti::detail::sealed_encrypt(plain, k.data(), 0, 1, 64, chunks);
  // The clean inputs pass.
  CHECK(tutti::detail::sealed_decrypt(sealed, k.data(), 0, 1, 64, "f") == plain);
  check_equal(tutti::detail::sealed_decode_rows(plain, 0, "f").rows, data);
  // Bound to the shard id and count: the same bytes do not open as another shard.
  CHECK_THROWS_AS(tutti::detail::sealed_decrypt(sealed, k.data(), 1, 1, 64, "f"), sealed_error);
  CHECK_THROWS_AS(tutti::detail::sealed_decrypt(sealed, k.data(), 0, 2, 64, "f"), sealed_error);

  tutti::detail::splitmix rng(7);
  int refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    auto p = plain;
    auto c = sealed;
    const int edits = 1 + static_cast<int>(rng.below(4));
    for (int i = 0; i < edits; ++i) {
      p[rng.below(p.size())] = static_cast<unsigned char>(rng.next());
      c[rng.below(c.size())] ^= static_cast<unsigned char>(1 + rng.below(255));
    }
    if (trial % 3 == 0) p.resize(rng.below(p.size()));
    try {
      tutti::detail::sealed_decode_rows(p, 0, "f");
    } catch (const sealed_error&) {
      ++refused;
    }
    CHECK_THROWS_AS(tutti::detail::sealed_decrypt(c, k.data(), 0, 1, 64, "f"), sealed_error);
  }
  // Most random edits of the row block break its structure; some (a label's low bits) do not,
  // which is why the block is authenticated before it is parsed.
  CHECK(refused > 100);
}

}  // namespace test_sealed
#else

TEST_CASE("sealed shards: their tests need libsodium") {
  TUTTI_TEST_SKIP("no <sodium.h> in this build: sealed shards are compiled out");
}

#endif  // __has_include(<sodium.h>)
