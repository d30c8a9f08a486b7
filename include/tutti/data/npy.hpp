// SPDX-License-Identifier: Apache-2.0
/// @file data/npy.hpp
/// @brief `tutti::data::write_npy` / `read_npy` (and `write_npy_names` / `read_npy_names` for
/// byte strings): arrays in NumPy's .npy format (version 1.0,
/// little-endian, C order), the files `numpy.load` and `torch.from_numpy` open as they are.
///
/// A file is the magic "\x93NUMPY", the version bytes 1 0, the header length as a little-endian
/// uint16, then a Python dict literal such as `{'descr': '<f4', 'fortran_order': False,
/// 'shape': (3, 4), }` padded with spaces and ended by '\n' so that the values start at a
/// multiple of 64 bytes, then the values. The reader takes what the writer writes (and what
/// `numpy.save` writes for these dtypes): it refuses another magic, version, dtype or order,
/// and a file whose length is not exactly the header plus its shape's values, naming the file.
#pragma once

#include <tutti/data/id_names.hpp>
#include <tutti/detail/checked_file.hpp>
#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <algorithm>
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
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) npy_fail(path, "cannot open it: " + errno_text(errno));
  // In one read of the file's length (a character at a time, a 228 MB array took 0.4 s).
  const std::streamoff size = in.tellg();
  if (size < 0) npy_fail(path, "cannot tell its length: " + errno_text(errno));
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  if (size > 0 && !in.read(bytes.data(), size))
    npy_fail(path, "cannot read its " + std::to_string(size) + " bytes: " + errno_text(errno));
  return bytes;
}

/// Checks the magic and version of `bytes`; returns the header dict and sets `begin` to the
/// offset of the first value.
inline std::string_view npy_dict(const std::filesystem::path& path, const std::string& bytes,
                                 std::size_t& begin) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    npy_fail(path, "not a .npy file (no \\x93NUMPY magic)");
  const auto major = static_cast<unsigned char>(bytes[6]);
  if (major != 1 && major != 2)
    npy_fail(path, "format version " + std::to_string(major) + "." +
                       std::to_string(static_cast<unsigned char>(bytes[7])) +
                       "; expected 1.0 or 2.0");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) npy_fail(path, "truncated in its header");
  std::size_t len = 0;
  for (std::size_t k = 0; k < len_bytes; ++k)
    len |= std::size_t{static_cast<unsigned char>(bytes[8 + k])} << (8 * k);
  begin = 8 + len_bytes + len;
  if (bytes.size() < begin || len == 0 || bytes[begin - 1] != '\n')
    npy_fail(path, "truncated in its header (" + std::to_string(bytes.size()) +
                       " bytes; the header says " + std::to_string(begin) + ")");
  return std::string_view(bytes.data() + 8 + len_bytes, len);
}

/// The dtype text of `bytes`' header, quotes included ("'<f4'").
inline std::string npy_descr_of(const std::filesystem::path& path, const std::string& bytes) {
  std::size_t begin = 0;
  return npy_field(path, npy_dict(path, bytes, begin), "descr");
}

/// A .npy file read and checked: its bytes, where the values begin, shape and value count.
struct npy_file {
  std::string bytes;
  std::size_t begin = 0;
  std::vector<std::size_t> shape;
  std::size_t count = 0;
};

/// The first bytes of `path` through its header (the whole file when it is shorter), read from
/// `in`, which is left open; `length` is the file's length.
inline std::string npy_head(const std::filesystem::path& path, std::ifstream& in,
                            std::size_t& length) {
  in.open(path, std::ios::binary | std::ios::ate);
  if (!in) npy_fail(path, "cannot open it: " + errno_text(errno));
  const std::streamoff size = in.tellg();
  if (size < 0) npy_fail(path, "cannot tell its length: " + errno_text(errno));
  length = static_cast<std::size_t>(size);
  const auto read_to = [&](std::string& bytes, std::size_t n) {
    const std::size_t have = bytes.size();
    bytes.resize(n);
    in.seekg(static_cast<std::streamoff>(have));
    if (n > have && !in.read(bytes.data() + have, static_cast<std::streamsize>(n - have)))
      npy_fail(path, "cannot read its header: " + errno_text(errno));
  };
  std::string bytes;
  read_to(bytes, std::min<std::size_t>(length, 4096));
  // A header longer than that (format 2.0 allows 4 GB of it): the rest of it, as it says.
  if (bytes.size() >= 12 && bytes.compare(0, 6, "\x93NUMPY") == 0 && bytes[6] == 2) {
    std::size_t len = 0;
    for (std::size_t k = 0; k < 4; ++k)
      len |= std::size_t{static_cast<unsigned char>(bytes[8 + k])} << (8 * k);
    if (12 + len > bytes.size()) read_to(bytes, std::min(length, 12 + len));
  }
  return bytes;
}

/// Reads `path`, checking that its dtype is `descr` (quoted, as in the header), its order C,
/// and its length exactly the header plus its shape's values of `item_bytes` each. With
/// `values_from`, only the header is read into `bytes` and the stream is left open for the
/// values (at `begin`); without, the whole file is.
inline npy_file npy_read_file(const std::filesystem::path& path, const std::string& descr,
                              std::size_t item_bytes, std::ifstream* values_from = nullptr) {
  npy_file f;
  std::size_t length = 0;
  if (values_from) {
    f.bytes = npy_head(path, *values_from, length);
  } else {
    f.bytes = npy_slurp(path);
    length = f.bytes.size();
  }
  const std::string_view dict = npy_dict(path, f.bytes, f.begin);
  const std::string got = npy_field(path, dict, "descr");
  if (got != descr) npy_fail(path, "dtype " + got + "; expected " + descr);
  if (npy_field(path, dict, "fortran_order") != "False")
    npy_fail(path, "a Fortran-order array; expected C order (fortran_order False)");
  f.shape = npy_parse_shape(path, npy_field(path, dict, "shape"));
  const std::size_t held = (length - f.begin) / item_bytes;
  std::size_t n = 1;
  for (std::size_t e : f.shape) {
    if (e != 0 && n > held / e + 1)  // more values than the file holds, or an overflow
      npy_fail(path, "the shape " + npy_shape_text(f.shape) + " needs more than " +
                         std::to_string(held) + " values (truncated)");
    n *= e;
  }
  const std::size_t have = length - f.begin;
  if (have != n * item_bytes)
    npy_fail(path, std::to_string(have) + " bytes of values; the shape " + npy_shape_text(f.shape) +
                       " needs " + std::to_string(n * item_bytes) +
                       (have < n * item_bytes ? " (truncated)" : ""));
  f.count = n;
  return f;
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
  const std::string header = detail::npy_header(npy_descr<T>(), shape);
  detail::write_file_replacing(
      path, {header, {reinterpret_cast<const char*>(values.data()), values.size_bytes()}},
      "tutti::data::write_npy()");
}

/// Reads a .npy file of dtype `T` (C order, version 1.0 or 2.0). Throws `tutti::error` naming
/// the file when it cannot be read, is not a .npy file, holds another dtype or a Fortran-order
/// array, or is longer or shorter than its header says.
template <class T>
npy_array<T> read_npy(const std::filesystem::path& path) {
  std::ifstream in;  // the values are read from it into the array, never held twice
  const detail::npy_file f =
      detail::npy_read_file(path, std::string("'") + npy_descr<T>() + "'", sizeof(T), &in);
  npy_array<T> a;
  a.shape = f.shape;
  a.values.resize(f.count);
  in.clear();
  in.seekg(static_cast<std::streamoff>(f.begin));
  if (f.count && !in.read(reinterpret_cast<char*>(a.values.data()),
                          static_cast<std::streamsize>(f.count * sizeof(T))))
    detail::npy_fail(path, "cannot read its " + std::to_string(f.count * sizeof(T)) +
                               " bytes of values: " + detail::errno_text(errno));
  return a;
}

/// Writes `names` as a 1-d array of NumPy byte strings (dtype `|S<w>`, w the longest name's
/// bytes, at least 1; shorter names padded with NUL bytes, which NumPy strips): `numpy.load`
/// opens it as is, `np.char.decode(a, "utf-8")` gives Python strings. Throws `tutti::error`
/// naming the file when it cannot be written, `tutti::invalid_argument` for a name holding a
/// NUL byte.
inline void write_npy_names(const std::filesystem::path& path, const id_names& names) {
  std::size_t w = 1;
  for (std::size_t i = 0; i < names.size(); ++i) {
    TUTTI_EXPECTS(
        names[i].find('\0') == std::string_view::npos, "tutti::data::write_npy_names",
        "'" + path.string() + "': name " + std::to_string(i) + " holds a NUL byte; expected text");
    w = std::max(w, names[i].size());
  }
  std::string body(names.size() * w, '\0');
  for (std::size_t i = 0; i < names.size(); ++i)
    std::memcpy(body.data() + i * w, names[i].data(), names[i].size());
  const std::vector<std::size_t> shape{names.size()};
  const std::string header = detail::npy_header(("|S" + std::to_string(w)).c_str(), shape);
  detail::write_file_replacing(path, {header, body}, "tutti::data::write_npy()");
}

/// Reads a 1-d array of NumPy byte strings (`|S<w>`, as `write_npy_names` or NumPy write it),
/// each without its trailing NUL padding. Throws `tutti::error` naming the file as `read_npy`.
inline id_names read_npy_names(const std::filesystem::path& path) {
  const std::string bytes = detail::npy_slurp(path);
  const std::string descr = detail::npy_descr_of(path, bytes);
  std::size_t w = 0;
  const bool ok = descr.size() > 4 && descr.compare(0, 3, "'|S") == 0 && descr.back() == '\'' &&
                  descr.size() < 14;
  for (std::size_t k = 3; ok && k + 1 < descr.size(); ++k) {
    if (descr[k] < '0' || descr[k] > '9')
      w = 0, k = descr.size();
    else
      w = w * 10 + static_cast<std::size_t>(descr[k] - '0');
  }
  if (!ok || w == 0) detail::npy_fail(path, "dtype " + descr + "; expected byte strings ('|S<n>')");
  const detail::npy_file f = detail::npy_read_file(path, descr, w);
  if (f.shape.size() != 1)
    detail::npy_fail(path, "shape " + detail::npy_shape_text(f.shape) + "; expected one axis");
  id_names names;
  names.reserve(f.count, f.count * w);
  for (std::size_t i = 0; i < f.count; ++i) {
    std::string_view n(f.bytes.data() + f.begin + i * w, w);
    while (!n.empty() && n.back() == '\0') n.remove_suffix(1);
    names.push_back(n);
  }
  return names;
}

}  // namespace tutti::data
