// SPDX-License-Identifier: Apache-2.0
/// @file sodium.cpp
/// @brief tutti::sodium: seals a small dataset into two encrypted shards, opens it again with the
/// key, then checks that a flipped byte in a shard is refused.
#include <tutti/data/sealed.hpp>
#include <tutti/data/synthetic.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

int main() {
  const fs::path dir = fs::temp_directory_path() / "tutti-consumer-sodium";
  fs::remove_all(dir);
  int failures = 0;
  try {
    const auto data = tutti::data::synthetic_courses({.learners = 50, .courses = 20, .seed = 2});
    const auto key = tutti::data::secret_key::generate();
    const auto manifest = tutti::data::seal_shards(data, key, dir, {.shards = 2});
    const auto back = tutti::data::open_sealed(dir, key);
    const bool same = back.size() == data.size() && back.users == data.users &&
                      back.items == data.items && back.labels == data.labels;
    std::printf("consumer (sodium): sealed %zu rows into %zu shards, opened %zu: %s\n", data.size(),
                static_cast<std::size_t>(manifest.shards), back.size(),
                same ? "identical" : "DIFFERENT");
    failures += same ? 0 : 1;

    // One flipped byte in a shard must be refused, never read as data.
    const fs::path shard = dir / manifest.files.front().file;
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-20, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-20, std::ios::end);
    c = static_cast<char>(c ^ 0x01);
    f.write(&c, 1);
    f.close();
    try {
      (void)tutti::data::open_sealed(dir, key);
      std::printf("consumer (sodium): FAILED: a tampered shard was opened\n");
      ++failures;
    } catch (const tutti::error& e) {
      std::printf("consumer (sodium): the tampered shard is refused: %s\n", e.what());
    }
  } catch (const std::exception& e) {
    std::printf("consumer (sodium): %s\n", e.what());
    ++failures;
  }
  fs::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
