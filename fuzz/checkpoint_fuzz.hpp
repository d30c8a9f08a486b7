// SPDX-License-Identifier: Apache-2.0
/// @file fuzz/checkpoint_fuzz.hpp
/// @brief The checkpoint reader's fuzz property, shared by the libFuzzer target
/// (fuzz/checkpoint_fuzz.cpp) and the unit suite's replay (tests/test_checkpoint.cpp).
///
/// The input is a checkpoint file whose length field and trailing CRC-32 are set to match the
/// bytes before the reader sees them, so the fuzzer explores the parser rather than the
/// checksum. The reader must either throw `tutti::checkpoint_error` (no other exception, no
/// crash, no huge allocation) or return a state that encodes back to exactly those bytes.
#pragma once

#include <tutti/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace tutti_fuzz {

/// The file the reader is given for fuzz input `data`: length and CRC made consistent.
inline std::vector<unsigned char> checkpoint_file(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> file(data, data + size);
  if (file.size() >= 20) {
    const std::uint64_t n = file.size();
    for (int i = 0; i < 8; ++i)
      file[12 + static_cast<std::size_t>(i)] = static_cast<unsigned char>(n >> (8 * i));
  }
  if (file.size() >= 4) {
    const std::uint32_t crc = tutti::detail::checkpoint_crc32({file.data(), file.size() - 4});
    for (int i = 0; i < 4; ++i)
      file[file.size() - 4 + static_cast<std::size_t>(i)] =
          static_cast<unsigned char>(crc >> (8 * i));
  }
  return file;
}

/// Empty when the property holds for `data`; otherwise what broke.
inline std::string checkpoint_check(const std::uint8_t* data, std::size_t size) {
  const std::vector<unsigned char> file = checkpoint_file(data, size);
  try {
    const tutti::checkpoint_state state = tutti::decode_checkpoint(file, "fuzz-input");
    if (tutti::encode_checkpoint(state) != file)
      return "a decoded checkpoint does not encode back to the same bytes";
  } catch (const tutti::checkpoint_error&) {
  } catch (const std::exception& e) {
    return std::string("an exception other than checkpoint_error: ") + e.what();
  }
  return {};
}

}  // namespace tutti_fuzz
