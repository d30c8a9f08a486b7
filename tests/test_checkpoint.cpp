// SPDX-License-Identifier: Apache-2.0
/// @file test_checkpoint.cpp
/// @brief Tests of the checkpoint format, atomic writes with keep-last-K, finding the newest
/// valid checkpoint and naming the configuration fields that differ.
#include <doctest/doctest.h>

#include <tutti/checkpoint.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace test_checkpoint {

namespace {

namespace fs = std::filesystem;
using bytes_t = std::vector<unsigned char>;

/// A fresh directory under the system's temporary directory, removed with everything in it.
class scratch_dir {
 public:
  scratch_dir() {
    static std::atomic<unsigned> counter{0};
    std::random_device entropy;
    m_path =
        fs::temp_directory_path() / ("tutti-test-checkpoint-" + std::to_string(::getpid()) + "-" +
                                     std::to_string(counter++) + "-" + std::to_string(entropy()));
    fs::create_directories(m_path);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir() {
    std::error_code ignored;
    fs::remove_all(m_path, ignored);
  }
  const fs::path& path() const { return m_path; }

 private:
  fs::path m_path;
};

float from_bits(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}

/// A state in which every field holds something distinctive, the arrays the values that a
/// round trip through float registers or text would change.
tutti::checkpoint_state sample_state(std::uint64_t global_step = 1234) {
  tutti::checkpoint_state s;
  s.config_digest = 0x0123456789abcdefULL;
  s.config = {{"batch", "4096"}, {"lr", "0.05"}, {"model", "mf"}, {"empty", ""}};
  s.world_size = 4;
  s.seed = 0xfeedfacecafebeefULL;
  s.epoch = 2;
  s.step_in_epoch = 17;
  s.global_step = global_step;
  s.samples_in_epoch = 69632;
  s.consumed = {0, 5, std::numeric_limits<std::uint64_t>::max(), 42};
  s.epoch_loss_sum = std::bit_cast<double>(0x7ff0000000000badULL);  // NaN with a payload
  s.epoch_weight_sum = -0.0;
  s.rng = {1, 0x8000000000000000ULL, 3};
  s.parameters = {
      from_bits(0x7fa00001u),  // signalling NaN with a payload
      from_bits(0xffc12345u),  // negative quiet NaN with a payload
      -0.0f,
      from_bits(0x00000001u),  // smallest denormal
      from_bits(0x807fffffu),  // largest negative denormal
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::max(),
      1.0f,
      0.1f,
  };
  s.optimizer_state = {from_bits(0x7f800001u), 0.0f, -1.5e-42f, 3.25f};
  s.schedule = "warmup<cosine>(warmup=100, total=1000)";
  s.note = "periodic \xce\xbb\n\t";
  return s;
}

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  for (float f : v) out.push_back(std::bit_cast<std::uint32_t>(f));
  return out;
}

/// Every field equal, floating point compared bit by bit.
void check_same(const tutti::checkpoint_state& a, const tutti::checkpoint_state& b) {
  CHECK(a.config_digest == b.config_digest);
  CHECK(a.config == b.config);
  CHECK(a.world_size == b.world_size);
  CHECK(a.seed == b.seed);
  CHECK(a.epoch == b.epoch);
  CHECK(a.step_in_epoch == b.step_in_epoch);
  CHECK(a.global_step == b.global_step);
  CHECK(a.samples_in_epoch == b.samples_in_epoch);
  CHECK(a.consumed == b.consumed);
  CHECK(std::bit_cast<std::uint64_t>(a.epoch_loss_sum) ==
        std::bit_cast<std::uint64_t>(b.epoch_loss_sum));
  CHECK(std::bit_cast<std::uint64_t>(a.epoch_weight_sum) ==
        std::bit_cast<std::uint64_t>(b.epoch_weight_sum));
  CHECK(a.rng == b.rng);
  CHECK(bits_of(a.parameters) == bits_of(b.parameters));
  CHECK(bits_of(a.optimizer_state) == bits_of(b.optimizer_state));
  CHECK(a.schedule == b.schedule);
  CHECK(a.note == b.note);
}

std::uint64_t le64(const bytes_t& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{b.at(at + i)} << (8 * i);
  return v;
}

std::uint32_t le32(const bytes_t& b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{b.at(at + i)} << (8 * i);
  return v;
}

void put64(bytes_t& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.at(at + i) = static_cast<unsigned char>(v >> (8 * i));
}

void put32(bytes_t& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.at(at + i) = static_cast<unsigned char>(v >> (8 * i));
}

/// zlib's CRC-32 of everything before the trailing checksum, computed here independently.
std::uint32_t crc_of(const bytes_t& b) {
  return static_cast<std::uint32_t>(::crc32(0, b.data(), static_cast<uInt>(b.size() - 4)));
}

/// Rewrites the trailing checksum, so that a deliberately bad field gets past the CRC.
void reseal(bytes_t& b) {
  put32(b, b.size() - 4, crc_of(b));
}

/// The message of the checkpoint_error that decoding `b` raises ("" when it does not throw).
std::string decode_error(const bytes_t& b, const std::string& name = "test.tck") {
  try {
    (void)tutti::decode_checkpoint(b, name);
  } catch (const tutti::checkpoint_error& e) {
    CHECK(e.file() == name);
    return e.what();
  }
  return "";
}

bytes_t read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, const bytes_t& b) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    out.insert(entry.path().filename().string());
  return out;
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("checkpoint: the round trip is bitwise, NaN payloads, -0 and denormals included") {
  const tutti::checkpoint_state original = sample_state();
  const bytes_t bytes = tutti::encode_checkpoint(original);
  const tutti::checkpoint_state back = tutti::decode_checkpoint(bytes, "memory");
  check_same(original, back);
  CHECK(tutti::encode_checkpoint(back) == bytes);

  SUBCASE("through a file") {
    scratch_dir dir;
    const fs::path file = tutti::write_checkpoint(dir.path(), original);
    check_same(original, tutti::read_checkpoint(file));
    CHECK(read_bytes(file) == bytes);
  }
  SUBCASE("an empty state is the smallest file") {
    const tutti::checkpoint_state empty;
    const bytes_t small = tutti::encode_checkpoint(empty);
    CHECK(small.size() == tutti::checkpoint_format::min_size);
    check_same(empty, tutti::decode_checkpoint(small, "empty"));
  }
}

TEST_CASE("checkpoint: the byte layout is the one docs/checkpoints.md describes") {
  const tutti::checkpoint_state s = sample_state();
  const bytes_t b = tutti::encode_checkpoint(s);
  CHECK(std::string(b.begin(), b.begin() + 8) == "TUTTICK1");
  CHECK(le32(b, 8) == 1);
  CHECK(le64(b, 12) == b.size());
  CHECK(le64(b, 20) == s.config_digest);
  CHECK(le32(b, 28) == 4);
  CHECK(le64(b, 32) == s.seed);
  CHECK(le64(b, 40) == s.epoch);
  CHECK(le64(b, 48) == s.step_in_epoch);
  CHECK(le64(b, 56) == s.global_step);
  CHECK(le64(b, 64) == s.samples_in_epoch);
  CHECK(le64(b, 72) == std::bit_cast<std::uint64_t>(s.epoch_loss_sum));
  CHECK(le64(b, 80) == std::bit_cast<std::uint64_t>(s.epoch_weight_sum));
  CHECK(le64(b, 88) == s.schedule.size());
  CHECK(std::string(b.begin() + 96, b.begin() + 96 + static_cast<long>(s.schedule.size())) ==
        s.schedule);
  // The arrays come last: the optimizer state's values end right before the checksum.
  const std::size_t opt_end = b.size() - 4;
  const std::size_t opt_begin = opt_end - 4 * s.optimizer_state.size();
  CHECK(le64(b, opt_begin - 8) == s.optimizer_state.size());
  for (std::size_t i = 0; i < s.optimizer_state.size(); ++i)
    CHECK(le32(b, opt_begin + 4 * i) == std::bit_cast<std::uint32_t>(s.optimizer_state[i]));
  CHECK(le32(b, b.size() - 4) == crc_of(b));
}

TEST_CASE("checkpoint: every single-byte change anywhere in the file is rejected") {
  tutti::checkpoint_state s = sample_state();
  s.parameters.resize(3);  // small, so every byte can be tried with several changes
  const bytes_t good = tutti::encode_checkpoint(s);
  REQUIRE(good.size() < 400);
  std::size_t tried = 0, rejected = 0;
  std::vector<std::size_t> accepted_at;
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (unsigned char mask : {0x01, 0x10, 0x80, 0xff}) {
      bytes_t bad = good;
      bad[i] ^= mask;
      ++tried;
      if (!decode_error(bad).empty())
        ++rejected;
      else
        accepted_at.push_back(i);
    }
  }
  CHECK(accepted_at.empty());
  CHECK(rejected == tried);
  CHECK(tried == 4 * good.size());
}

TEST_CASE("checkpoint: every truncation is rejected as truncated, and so is trailing data") {
  const bytes_t good = tutti::encode_checkpoint(sample_state());
  std::vector<std::size_t> not_reported;
  for (std::size_t len = 0; len < good.size(); ++len) {
    const bytes_t cut(good.begin(), good.begin() + static_cast<long>(len));
    if (!contains(decode_error(cut), "truncated")) not_reported.push_back(len);
  }
  CHECK(not_reported.empty());

  bytes_t longer = good;
  longer.push_back(0);
  CHECK(contains(decode_error(longer), "trailing data"));

  SUBCASE("read_checkpoint reports a truncated file without reading past its header") {
    scratch_dir dir;
    const fs::path file = dir.path() / "ckpt-000000000001.tck";
    write_bytes(file, bytes_t(good.begin(), good.begin() + 100));
    try {
      (void)tutti::read_checkpoint(file);
      FAIL("a truncated file was read");
    } catch (const tutti::checkpoint_error& e) {
      CHECK(e.file() == file.string());
      CHECK(contains(e.what(), "truncated: 100 of the " + std::to_string(good.size())));
    }
  }
}

TEST_CASE("checkpoint: a wrong magic or another version says so and names the file") {
  const bytes_t good = tutti::encode_checkpoint(sample_state());

  bytes_t other = good;
  other[5] = 'X';
  const std::string magic = decode_error(other, "run/ckpt-000000001234.tck");
  CHECK(contains(magic, "run/ckpt-000000001234.tck: "));
  CHECK(contains(magic, "not a tutti checkpoint: bad magic \"TUTTIXK1\""));

  const bytes_t text = {'h', 'e', 'l', 'l', 'o', '\n'};
  CHECK(contains(decode_error(text), "bad magic \"hello\\x0a\""));

  bytes_t future = good;
  put32(future, 8, 2);
  reseal(future);  // the version is checked before the checksum, but a real v2 would be sealed
  const std::string newer = decode_error(future, "future.tck");
  CHECK(contains(newer, "future.tck: "));
  CHECK(contains(newer, "format version 2 is newer than this build of tutti reads (version 1)"));

  bytes_t zero = good;
  put32(zero, 8, 0);
  CHECK(contains(decode_error(zero), "unknown format version 0"));

  SUBCASE("through read_checkpoint, the message names the path") {
    scratch_dir dir;
    const fs::path file = dir.path() / "ckpt-000000001234.tck";
    write_bytes(file, future);
    try {
      (void)tutti::read_checkpoint(file);
      FAIL("a version-2 file was read");
    } catch (const tutti::checkpoint_error& e) {
      CHECK(e.file() == file.string());
      CHECK(contains(e.what(), file.string() + ": format version 2"));
    }
  }
}

TEST_CASE("checkpoint: a corrupt length field throws instead of allocating or overrunning") {
  // All strings and lists empty except three parameters, so the offsets are fixed:
  // 88 schedule, 96 note, 104 config, 112 consumed, 120 rng, 128 parameters (3 values),
  // 148 optimizer state, 156 checksum.
  tutti::checkpoint_state s;
  s.parameters = {1.0f, 2.0f, 3.0f};
  const bytes_t good = tutti::encode_checkpoint(s);
  REQUIRE(good.size() == 160);
  REQUIRE(le64(good, 128) == 3);

  struct patch {
    std::size_t offset;
    std::uint64_t value;
    const char* field;
  };
  const patch patches[] = {
      {128, (std::uint64_t{1} << 62) + 1, "parameters"},  // 4 bytes each: the byte count wraps to 4
      {128, std::numeric_limits<std::uint64_t>::max(), "parameters"},
      {128, std::uint64_t{1} << 40, "parameters"},
      {128, 6, "parameters"},       // 24 bytes, 20 left
      {128, 4, "optimizer_state"},  // fits, but leaves the next count 4 bytes
      {128, 2, "optimizer_state"},  // fits, but the next count is read from float bits
      {88, std::uint64_t{1} << 50, "schedule"},
      {104, (std::uint64_t{1} << 60) + 1, "config"},    // 16 bytes each: wraps to 16
      {112, (std::uint64_t{1} << 61) + 1, "consumed"},  // 8 bytes each: wraps to 8
      {148, std::numeric_limits<std::uint64_t>::max() / 4 + 1, "optimizer_state"},
  };
  for (const patch& p : patches) {
    CAPTURE(p.offset);
    CAPTURE(p.value);
    bytes_t bad = good;
    put64(bad, p.offset, p.value);
    reseal(bad);
    std::string message;
    CHECK_NOTHROW(message = decode_error(bad));  // neither bad_alloc nor length_error
    CHECK(contains(message, "inconsistent length"));
    CHECK(contains(message, p.field));
  }

  SUBCASE("a shorter array leaves bytes before the checksum") {
    tutti::checkpoint_state zeros;
    zeros.parameters = {0.0f, 0.0f, 0.0f};
    bytes_t bad = tutti::encode_checkpoint(zeros);
    put64(bad, 128, 1);  // the optimizer-state count is then read from two zero floats
    reseal(bad);
    CHECK(contains(decode_error(bad), "inconsistent length: 8 bytes between the last field"));
  }
  SUBCASE("a header announcing more bytes than the file has is truncation, before any parsing") {
    bytes_t bad = good;
    put64(bad, 12, std::uint64_t{1} << 60);
    CHECK(contains(decode_error(bad), "truncated: 160 of the"));
  }
}

TEST_CASE("checkpoint: a world size below 1 is refused on both sides") {
  tutti::checkpoint_state s = sample_state();
  s.world_size = 0;
  CHECK_THROWS_AS((void)tutti::encode_checkpoint(s), tutti::invalid_argument);
  scratch_dir dir;
  CHECK_THROWS_AS((void)tutti::write_checkpoint(dir.path(), s), tutti::invalid_argument);
  CHECK(names_in(dir.path()).empty());

  bytes_t b = tutti::encode_checkpoint(sample_state());
  put32(b, 28, 0xffffffffu);  // -1
  reseal(b);
  CHECK(contains(decode_error(b), "world_size is -1; expected >= 1"));
}

TEST_CASE("checkpoint: write_checkpoint names files by step and keeps only the newest K") {
  scratch_dir dir;
  for (std::uint64_t step = 1; step <= 7; ++step) {
    const fs::path file = tutti::write_checkpoint(dir.path(), sample_state(step * 10), 3);
    CHECK(file == dir.path() / ("ckpt-0000000000" + std::to_string(step * 10) + ".tck"));
  }
  CHECK(names_in(dir.path()) == std::set<std::string>{"ckpt-000000000050.tck",
                                                      "ckpt-000000000060.tck",
                                                      "ckpt-000000000070.tck"});
  for (std::uint64_t step : {50, 60, 70})
    CHECK(tutti::read_checkpoint(dir.path() / ("ckpt-0000000000" + std::to_string(step) + ".tck"))
              .global_step == step);

  // The file just written stays even when it is older than the others.
  tutti::write_checkpoint(dir.path(), sample_state(5), 3);
  CHECK(names_in(dir.path()) == std::set<std::string>{"ckpt-000000000005.tck",
                                                      "ckpt-000000000060.tck",
                                                      "ckpt-000000000070.tck"});
  // Writing the same step again replaces the file.
  tutti::checkpoint_state again = sample_state(70);
  again.note = "SIGTERM";
  tutti::write_checkpoint(dir.path(), again, 3);
  CHECK(tutti::read_checkpoint(dir.path() / "ckpt-000000000070.tck").note == "SIGTERM");
  CHECK(names_in(dir.path()).size() == 3);

  tutti::write_checkpoint(dir.path(), sample_state(1000000000000ULL), 1);  // 13 digits
  CHECK(names_in(dir.path()) == std::set<std::string>{"ckpt-1000000000000.tck"});

  CHECK_THROWS_AS((void)tutti::write_checkpoint(dir.path(), sample_state(), 0),
                  tutti::invalid_argument);

  SUBCASE("a missing directory is created") {
    const fs::path nested = dir.path() / "a" / "b";
    const fs::path file = tutti::write_checkpoint(nested, sample_state(3));
    CHECK(file == nested / "ckpt-000000000003.tck");
    CHECK(names_in(nested) == std::set<std::string>{"ckpt-000000000003.tck"});
  }
}

TEST_CASE("checkpoint: a temporary file left by a crash mid-write is ignored, then cleaned up") {
  scratch_dir dir;
  const fs::path valid = tutti::write_checkpoint(dir.path(), sample_state(3));
  // What a writer killed before its rename leaves: a temporary name and half the bytes.
  const bytes_t next = tutti::encode_checkpoint(sample_state(4));
  const fs::path temp = dir.path() / (std::string(tutti::detail::checkpoint_temp_prefix) +
                                      "000000000004.tck.99999.0");
  write_bytes(temp, bytes_t(next.begin(), next.begin() + static_cast<long>(next.size() / 2)));

  const auto found = tutti::find_latest_checkpoint(dir.path());
  REQUIRE(found.has_value());
  CHECK(found->file == valid);
  CHECK(found->state.global_step == 3);
  CHECK(found->skipped.empty());

  // The next write removes the leftover.
  tutti::write_checkpoint(dir.path(), sample_state(5));
  CHECK(names_in(dir.path()) ==
        std::set<std::string>{"ckpt-000000000003.tck", "ckpt-000000000005.tck"});
}

TEST_CASE("checkpoint: a writer killed at any moment leaves only whole checkpoints") {
  // A child process writes checkpoints of a 4 MB arena in a loop and is killed with SIGKILL after
  // a different delay each time; whatever it left, every file named ckpt-*.tck must read back.
  std::size_t kills = 0, with_leftover = 0, valid_files = 0;
  for (int delay_ms : {0, 1, 2, 3, 5, 8, 13, 21, 34, 55}) {
    CAPTURE(delay_ms);
    scratch_dir dir;
    tutti::checkpoint_state big = sample_state(0);
    big.parameters.assign(std::size_t{1} << 20, 0.5f);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        for (std::uint64_t step = 1; step <= 10000; ++step) {
          big.global_step = step;
          big.parameters[step % big.parameters.size()] = static_cast<float>(step);
          tutti::write_checkpoint(dir.path(), big, 2);
        }
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
    kills += WIFSIGNALED(status) ? 1 : 0;

    std::uint64_t newest = 0;
    for (const std::string& name : names_in(dir.path())) {
      if (name.starts_with(tutti::detail::checkpoint_temp_prefix)) {
        ++with_leftover;
        continue;
      }
      CAPTURE(name);
      REQUIRE(name.starts_with("ckpt-"));
      const tutti::checkpoint_state back = tutti::read_checkpoint(dir.path() / name);
      CHECK(back.parameters[back.global_step % back.parameters.size()] ==
            static_cast<float>(back.global_step));
      newest = std::max(newest, back.global_step);
      ++valid_files;
    }
    const auto found = tutti::find_latest_checkpoint(dir.path());
    CHECK(found.has_value() == (newest > 0));
    if (found) {
      CHECK(found->state.global_step == newest);
      CHECK(found->skipped.empty());
    }
  }
  MESSAGE("killed " << kills << " writers; " << with_leftover << " left a temporary file; "
                    << valid_files << " whole checkpoints found");
}

TEST_CASE("checkpoint: find_latest_checkpoint skips invalid newer files and says why") {
  scratch_dir dir;
  CHECK_FALSE(tutti::find_latest_checkpoint(dir.path()).has_value());
  CHECK_FALSE(tutti::find_latest_checkpoint(dir.path() / "missing").has_value());

  fs::path files[4];
  for (std::uint64_t step = 1; step <= 3; ++step)
    files[step] = tutti::write_checkpoint(dir.path(), sample_state(step), 3);
  write_bytes(dir.path() / "notes.txt", {'x'});
  write_bytes(dir.path() / "ckpt-latest.tck", {'x'});  // not a step name: not considered

  auto found = tutti::find_latest_checkpoint(dir.path());
  REQUIRE(found.has_value());
  CHECK(found->file == files[3]);
  check_same(found->state, sample_state(3));
  CHECK(found->skipped.empty());

  // Corrupt the newest in the middle of its parameters.
  bytes_t b = read_bytes(files[3]);
  b[b.size() - 30] ^= 0x40;
  write_bytes(files[3], b);
  found = tutti::find_latest_checkpoint(dir.path());
  REQUIRE(found.has_value());
  CHECK(found->file == files[2]);
  CHECK(found->state.global_step == 2);
  REQUIRE(found->skipped.size() == 1);
  CHECK(contains(found->skipped[0], files[3].string() + ": checksum mismatch"));

  // Truncate the next one too: both are skipped, newest first.
  b = read_bytes(files[2]);
  b.resize(b.size() / 3);
  write_bytes(files[2], b);
  found = tutti::find_latest_checkpoint(dir.path());
  REQUIRE(found.has_value());
  CHECK(found->file == files[1]);
  REQUIRE(found->skipped.size() == 2);
  CHECK(contains(found->skipped[0], files[3].string() + ": checksum mismatch"));
  CHECK(contains(found->skipped[1], files[2].string() + ": truncated"));

  // A valid file under another step's name is not taken for that step.
  fs::copy_file(files[1], dir.path() / "ckpt-000000000009.tck");
  found = tutti::find_latest_checkpoint(dir.path());
  REQUIRE(found.has_value());
  CHECK(found->file == files[1]);
  REQUIRE(found->skipped.size() == 3);
  CHECK(contains(found->skipped[0],
                 "ckpt-000000000009.tck: holds global_step 1 but its name says 9"));

  // None valid: nothing found.
  b = read_bytes(files[1]);
  put32(b, 8, 7);
  write_bytes(files[1], b);
  CHECK_FALSE(tutti::find_latest_checkpoint(dir.path()).has_value());
}

TEST_CASE("checkpoint: read_checkpoint names a file it cannot open") {
  scratch_dir dir;
  const fs::path missing = dir.path() / "ckpt-000000000001.tck";
  try {
    (void)tutti::read_checkpoint(missing);
    FAIL("a missing file was read");
  } catch (const tutti::checkpoint_error& e) {
    CHECK(e.file() == missing.string());
    CHECK(contains(e.what(), missing.string() + ": cannot open"));
  }
  CHECK_THROWS_AS((void)tutti::read_checkpoint(dir.path()), tutti::checkpoint_error);
}

TEST_CASE("checkpoint: config_differences names exactly the differing fields") {
  using config = std::vector<std::pair<std::string, std::string>>;
  const config saved = {{"batch", "4096"}, {"lr", "0.05"}, {"world_size", "2"}, {"model", "mf"}};
  const config same_reordered = {
      {"model", "mf"}, {"world_size", "2"}, {"lr", "0.05"}, {"batch", "4096"}};
  CHECK(tutti::config_differences(saved, saved).empty());
  CHECK(tutti::config_differences(saved, same_reordered).empty());

  const config now = {{"batch", "4096"}, {"lr", "0.1"}, {"world_size", "4"}, {"epochs", "3"}};
  CHECK(tutti::config_differences(saved, now) ==
        std::vector<std::string>{"lr", "world_size", "model", "epochs"});

  const std::string_view ignore[] = {"world_size"};
  CHECK(tutti::config_differences(saved, now, ignore) ==
        std::vector<std::string>{"lr", "model", "epochs"});

  const std::string_view ignore_all[] = {"lr", "world_size", "model", "epochs"};
  CHECK(tutti::config_differences(saved, now, ignore_all).empty());

  // An empty value is a value: present-but-empty differs from absent.
  CHECK(tutti::config_differences({{"tag", ""}}, {}) == std::vector<std::string>{"tag"});
  CHECK(tutti::config_differences({}, {{"tag", ""}}) == std::vector<std::string>{"tag"});
}

}  // namespace test_checkpoint
