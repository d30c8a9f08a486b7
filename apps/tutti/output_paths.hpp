// SPDX-License-Identifier: Apache-2.0
// Every output of a command checked before the work starts: it is none of the command's inputs
// (compared by device and inode, after following links), and the folder that receives it exists
// and can be written. A report, a log or an export can then neither destroy the data, the key or
// the model it was made from, nor be found unwritable only after the training.
#pragma once

#include <tutti/detail/errno_text.hpp>
#include <tutti/error.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tutti::cli {

/// One path a command reads or writes, and the option that named it (e.g. "--json").
struct named_path {
  std::string option;
  std::string path;
};

/// A folder the command writes into, and the names of the files it writes there.
struct output_folder {
  named_path folder;
  std::vector<std::string> files;
};

namespace detail {

/// The file's identity (device, inode), following links; none when it does not exist.
inline std::optional<std::pair<dev_t, ino_t>> identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::pair{st.st_dev, st.st_ino};
}

/// An input file and its identity, taken once.
struct input_file {
  named_path path;
  std::pair<dev_t, ino_t> id;
};

/// The inputs' existing files: each file named, and the regular files directly inside each
/// folder named (a sealed folder's shards and keys, a checkpoint folder's checkpoints).
inline std::vector<input_file> input_files(const std::vector<named_path>& inputs) {
  std::vector<named_path> files;
  for (const auto& in : inputs) {
    if (in.path.empty()) continue;
    std::error_code ec;
    if (!std::filesystem::is_directory(in.path, ec)) {
      files.push_back(in);
      continue;
    }
    for (const auto& e : std::filesystem::directory_iterator(in.path, ec))
      if (e.is_regular_file(ec)) files.push_back({in.option, e.path().string()});
  }
  std::vector<input_file> known;
  for (auto& f : files)
    if (const auto id = identity_of(f.path)) known.push_back({std::move(f), *id});
  return known;
}

/// Refuses `out` when it is one of `inputs`' files.
inline void refuse_over_input(const char* fn, const named_path& out,
                              const std::vector<input_file>& inputs) {
  const auto id = identity_of(out.path);
  if (!id) return;
  for (const auto& [in, in_id] : inputs)
    TUTTI_EXPECTS(in_id != *id, fn,
                  out.option + " '" + out.path + "' is the file read as " + in.option + " ('" +
                      in.path + "'): writing it would destroy that input; expected another path");
}

/// The nearest folder at or above `p` that exists ("." for a bare file name).
inline std::filesystem::path existing_folder(std::filesystem::path p) {
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  return p.empty() ? std::filesystem::path(".") : p;
}

/// Refuses `out`, a file, when it is a folder or when the folder that would receive it is
/// missing or cannot be written.
inline void check_file_writable(const char* fn, const named_path& out) {
  std::error_code ec;
  const std::filesystem::path p = out.path;
  TUTTI_EXPECTS(!std::filesystem::is_directory(p, ec), fn,
                out.option + " '" + out.path + "' is a folder; expected the path of a file");
  if (std::filesystem::exists(p, ec) && !std::filesystem::is_regular_file(p, ec)) {
    TUTTI_EXPECTS(
        ::access(p.c_str(), W_OK) == 0, fn,
        out.option + " '" + out.path + "' cannot be written: " + tutti::detail::errno_text(errno));
    return;  // a device, pipe or terminal is written into as it is
  }
  const std::filesystem::path parent = p.parent_path().empty() ? "." : p.parent_path();
  TUTTI_EXPECTS(std::filesystem::is_directory(parent, ec), fn,
                out.option + " '" + out.path + "': its folder '" + parent.string() +
                    "' does not exist; expected an existing folder");
  TUTTI_EXPECTS(::access(parent.c_str(), W_OK | X_OK) == 0, fn,
                out.option + " '" + out.path + "': its folder '" + parent.string() +
                    "' cannot be written: " + tutti::detail::errno_text(errno));
}

/// Refuses `out`, a folder the command creates or writes into, when it is a file or when the
/// folder that would receive it cannot be written.
inline void check_folder_writable(const char* fn, const named_path& out) {
  std::error_code ec;
  const std::filesystem::path p = out.path;
  if (std::filesystem::exists(p, ec))
    TUTTI_EXPECTS(std::filesystem::is_directory(p, ec), fn,
                  out.option + " '" + out.path + "' is a file; expected a folder");
  const std::filesystem::path at = existing_folder(p);
  TUTTI_EXPECTS(::access(at.c_str(), W_OK | X_OK) == 0, fn,
                out.option + " '" + out.path + "': the folder '" + at.string() +
                    "' cannot be written: " + tutti::detail::errno_text(errno));
}

}  // namespace detail

/// Checks, before any work, every output of a command against its inputs and the file system:
/// `files` are files it writes, `folders` folders it writes files into (with their names),
/// `inputs` the files and folders it reads. Empty paths are left out. Throws
/// `tutti::invalid_argument` (exit status 2) naming the option, the path and the reason.
inline void check_outputs(const char* fn, const std::vector<named_path>& files,
                          const std::vector<output_folder>& folders,
                          const std::vector<named_path>& inputs) {
  const std::vector<detail::input_file> read = detail::input_files(inputs);
  for (const auto& f : files) {
    if (f.path.empty()) continue;
    detail::check_file_writable(fn, f);
    detail::refuse_over_input(fn, f, read);
  }
  for (const auto& d : folders) {
    if (d.folder.path.empty()) continue;
    detail::check_folder_writable(fn, d.folder);
    for (const auto& name : d.files)
      detail::refuse_over_input(
          fn, {d.folder.option, (std::filesystem::path(d.folder.path) / name).string()}, read);
  }
}

}  // namespace tutti::cli
