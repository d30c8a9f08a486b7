// SPDX-License-Identifier: Apache-2.0
/// @file data/npy.hpp
/// @brief `tutti::data::write_npy` / `read_npy`: arrays in NumPy's .npy format (version 1.0,
/// little-endian, C order), the files `numpy.load` and `torch.from_numpy` open as they are.
///
/// A file is the magic "\x93NUMPY", the version bytes 1 0, the header length as a little-endian
/// uint16, then a Python dict literal such as `{'descr': '<f4', 'fortran_order': False,
/// 'shape': (3, 4), }` padded with spaces and ended by '\n' so that the values start at a
/// multiple of 64 bytes, then the values. The reader takes what the writer writes (and what
/// `numpy.save` writes for these dtypes): it refuses another magic, version, dtype or order,
/// and a file whose length is not exactly the header plus its shape's values, naming the file.
#pragma once

#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tutti::data {

static_assert(std::endian::native == std::endian::little,
              "tutti/data/npy.hpp writes and reads little-endian values as they lie in memory; "
              "a big-endian host needs a byte swap here");

/// The NumPy dtype string of `T` ("<f4", "<f8", "<i4", "<i8").
template <class T>
constexpr const char* npy_descr() {
  if constexpr (std::is_same_v<T, float>)
    return "<f4";
  else if constexpr (std::is_same_v<T, double>)
    return "<f8";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "<i4";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "<i8";
  else
    static_assert(sizeof(T) == 0, "npy_descr: T must be float, double, int32_t or int64_t");
}

/// An array read from a .npy file: its shape (empty for a scalar) and values in C order.
template <class T>
struct npy_array {
  std::vector<std::size_t> shape;
  std::vector<T> values;
};

}  // namespace tutti::data

namespace tutti::detail {

/// Number of values of an array of this shape (1 for a scalar).
inline std::size_t npy_count(std::span<const std::size_t> shape) {
  std::size_t n = 1;
  for (std::size_t e : shape) n *= e;
  return n;
}

/// Python's repr of a shape tuple: "()", "(5,)", "(3, 4)".
inline std::string npy_shape_text(std::span<const std::size_t> shape) {
  std::string s = "(";
  for (std::size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

/// The header up to and including the '\n', padded so that the values start at a multiple of
/// 64 bytes.
inline std::string npy_header(const char* descr, std::span<const std::size_t> shape) {
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': " + npy_shape_text(shape) + ", }";
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  return out + dict;
}

[[noreturn]] inline void npy_fail(const std::filesystem::path& path, const std::string& what) {
  throw error("tutti::data::read_npy(): '" + path.string() + "': " + what);
}

/// The value of `key` in the header dict: the text after "'key':" up to the next top-level
/// ',' or '}' (a tuple's commas are inside its parentheses).
inline std::string npy_field(const std::filesystem::path& path, std::string_view dict,
                             std::string_view key) {
  const std::string quoted = "'" + std::string(key) + "':";
  const std::size_t at = dict.find(quoted);
  if (at == std::string_view::npos) npy_fail(path, "the header has no '" + std::string(key) + "'");
  std::size_t b = at + quoted.size();
  while (b < dict.size() && dict[b] == ' ') ++b;
  std::size_t e = b;
  for (int depth = 0; e < dict.size(); ++e) {
    const char ch = dict[e];
    if (depth == 0 && (ch == ',' || ch == '}')) break;
    depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
  }
  while (e > b && dict[e - 1] == ' ') --e;
  return std::string(dict.substr(b, e - b));
}

/// The shape tuple's extents ("(3, 4)", "(5,)", "()").
inline std::vector<std::size_t> npy_parse_shape(const std::filesystem::path& path,
                                                const std::string& text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    npy_fail(path, "the header's shape is '" + text + "'; expected a tuple such as (3, 4)");
  std::vector<std::size_t> shape;
  std::size_t k = 1;
  while (k + 1 < text.size()) {
    while (k + 1 < text.size() && (text[k] == ' ' || text[k] == ',')) ++k;
    if (k + 1 >= text.size()) break;
    std::size_t v = 0, digits = 0;
    for (; text[k] >= '0' && text[k] <= '9' && digits < 19; ++k, ++digits)
      v = v * 10 + static_cast<std::size_t>(text[k] - '0');
    if (digits == 0 || (text[k] != ',' && text[k] != ')' && text[k] != ' '))
      npy_fail(path, "the header's shape is '" + text + "'; expected non-negative extents");
    shape.push_back(v);
  }
  return shape;
}

/// The whole file as bytes.
inline std::string npy_slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) npy_fail(path, "cannot open it: " + errno_text(errno));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace tutti::detail

namespace tutti::data {

/// Writes `values` as an array of shape `shape` (C order; empty shape: a scalar) to `path`.
/// Throws `tutti::invalid_argument` when the value count does not match the shape and
/// `tutti::error` naming the file when it cannot be written.
template <class T>
void write_npy(const std::filesystem::path& path, std::span<const T> values,
               std::vector<std::size_t> shape) {
  TUTTI_EXPECTS(values.size() == detail::npy_count(shape), "tutti::data::write_npy",
                "'" + path.string() + "': " + std::to_string(values.size()) +
                    " values for the shape " + detail::npy_shape_text(shape) + "; expected " +
                    std::to_string(detail::npy_count(shape)));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string header = detail::npy_header(npy_descr<T>(), shape);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size_bytes()));
  out.close();
  if (!out)
    throw error("tutti::data::write_npy(): cannot write '" + path.string() +
                "': " + detail::errno_text(errno));
}

/// Reads a .npy file of dtype `T` (C order, version 1.0 or 2.0). Throws `tutti::error` naming
/// the file when it cannot be read, is not a .npy file, holds another dtype or a Fortran-order
/// array, or is longer or shorter than its header says.
template <class T>
npy_array<T> read_npy(const std::filesystem::path& path) {
  const std::string bytes = detail::npy_slurp(path);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    detail::npy_fail(path, "not a .npy file (no \\x93NUMPY magic)");
  const auto major = static_cast<unsigned char>(bytes[6]);
  if (major != 1 && major != 2)
    detail::npy_fail(path, "format version " + std::to_string(major) + "." +
                               std::to_string(static_cast<unsigned char>(bytes[7])) +
                               "; expected 1.0 or 2.0");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) detail::npy_fail(path, "truncated in its header");
  std::size_t len = 0;
  for (std::size_t k = 0; k < len_bytes; ++k)
    len |= std::size_t{static_cast<unsigned char>(bytes[8 + k])} << (8 * k);
  const std::size_t begin = 8 + len_bytes + len;
  if (bytes.size() < begin || len == 0 || bytes[begin - 1] != '\n')
    detail::npy_fail(path, "truncated in its header (" + std::to_string(bytes.size()) +
                               " bytes; the header says " + std::to_string(begin) + ")");
  const std::string_view dict(bytes.data() + 8 + len_bytes, len);
  const std::string descr = detail::npy_field(path, dict, "descr");
  if (descr != std::string("'") + npy_descr<T>() + "'")
    detail::npy_fail(path, "dtype " + descr + "; expected '" + npy_descr<T>() + "'");
  if (detail::npy_field(path, dict, "fortran_order") != "False")
    detail::npy_fail(path, "a Fortran-order array; expected C order (fortran_order False)");
  npy_array<T> a;
  a.shape = detail::npy_parse_shape(path, detail::npy_field(path, dict, "shape"));
  const std::size_t held = (bytes.size() - begin) / sizeof(T);
  std::size_t n = 1;
  for (std::size_t e : a.shape) {
    if (e != 0 && n > held / e + 1)  // more values than the file holds, or an overflow
      detail::npy_fail(path, "the shape " + detail::npy_shape_text(a.shape) + " needs more than " +
                                 std::to_string(held) + " values (truncated)");
    n *= e;
  }
  if (bytes.size() - begin != n * sizeof(T))
    detail::npy_fail(path, std::to_string(bytes.size() - begin) + " bytes of values; the shape " +
                               detail::npy_shape_text(a.shape) + " needs " +
                               std::to_string(n * sizeof(T)) +
                               (bytes.size() - begin < n * sizeof(T) ? " (truncated)" : ""));
  a.values.resize(n);
  if (n) std::memcpy(a.values.data(), bytes.data() + begin, n * sizeof(T));
  return a;
}

}  // namespace tutti::data
