// SPDX-License-Identifier: Apache-2.0
// `tutti train --export DIR`: the trained matrix factorisation as .npy files with the data's
// source ids, plus model.json describing them (docs/data.md#from-an-export-file-to-a-learners-
// top-10). `tutti recommend` and examples/python/load_export.py read it.
//
// DIR may be new, empty, or hold a previous export (a model.json with "format": "tutti-export",
// or only the files of one that stopped part way), which is replaced; anything else is refused
// before training starts, so a run never ends by failing to save its result or by mixing its files
// with someone else's.
#pragma once

#include "json_output.hpp"
#include "names.hpp"

#include <tutti/error.hpp>
#include <tutti/models/mf_export.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/state_map.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace tutti::cli {

/// The "format" of model.json, and its version (bumped when a file's meaning changes).
inline constexpr const char* export_format = "tutti-export";
inline constexpr int export_format_version = 1;

/// The names of the files an export writes: its .npy files, those of the ids' names, and
/// model.json.
inline std::vector<std::string> export_file_names() {
  std::vector<std::string> names(std::begin(models::mf_export_files),
                                 std::end(models::mf_export_files));
  names.insert(names.end(), std::begin(models::mf_export_name_files),
               std::end(models::mf_export_name_files));
  names.insert(names.end(), std::begin(models::mf_export_state_files),
               std::end(models::mf_export_state_files));
  names.push_back("model.json");
  return names;
}

namespace detail {

/// True when `dir` holds a model.json written by `tutti train --export`.
inline bool holds_export(const std::filesystem::path& dir) {
  std::ifstream in(dir / "model.json");
  if (!in) return false;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.value("format", std::string()) == export_format;
}

/// True when every entry of `dir` is a file an export writes (its .npy files, model.json, or a
/// temporary of one of them): what an export that stopped part way (a full disk) leaves, which
/// the next export replaces.
inline bool holds_only_export_files(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string base = name.substr(0, name.find(".tmp-"));
    const auto names = export_file_names();
    if (std::find(names.begin(), names.end(), base) == names.end() || !e.is_regular_file(ec))
      return false;
  }
  return !ec;
}

/// model.json of `dir`, checked to be an export this program reads.
inline nlohmann::json read_export_manifest(const std::filesystem::path& dir, const char* fn) {
  const std::filesystem::path path = dir / "model.json";
  std::ifstream in(path);
  if (!in)
    throw error(std::string(fn) + ": cannot open '" + path.string() +
                "'; expected a directory written by tutti train --export");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || j.value("format", std::string()) != export_format)
    throw error(std::string(fn) + ": '" + path.string() + "' is not a tutti export's model.json");
  if (j.value("format_version", 0) != export_format_version || j.value("model", "") != "mf")
    throw error(std::string(fn) + ": '" + path.string() + "' holds format version " +
                std::to_string(j.value("format_version", 0)) + " of model '" +
                j.value("model", std::string()) + "'; expected version " +
                std::to_string(export_format_version) + " of model 'mf'");
  return j;
}

/// Refuses an export whose files disagree with its model.json (a file copied from another
/// export, say), naming the file and both shapes.
inline void check_manifest_agrees(const nlohmann::json& manifest, const models::mf_export& e,
                                  const std::string& dir, const char* fn) {
  const std::string json_path = (std::filesystem::path(dir) / "model.json").string();
  const nlohmann::json* files =
      manifest.contains("files") && manifest["files"].is_object() ? &manifest["files"] : nullptr;
  for (const models::mf_export_array& a : models::mf_export_arrays(e)) {
    const nlohmann::json shape = a.shape;
    const bool listed = files != nullptr && files->contains(a.name) &&
                        (*files)[a.name].is_object() && (*files)[a.name].contains("shape");
    if (listed && (*files)[a.name]["shape"] == shape) continue;
    throw error(std::string(fn) + ": '" + (std::filesystem::path(dir) / a.name).string() +
                ".npy' has shape " + shape.dump() + ", but '" + json_path + "' " +
                (listed ? "gives " + (*files)[a.name]["shape"].dump() : std::string("lists none")) +
                "; expected the files of one export (export the model again)");
  }
}

}  // namespace detail

/// Checks `--export` before training: the model is `mf`, and the directory is new, empty or a
/// previous export (created when missing). That it is a folder that can be written was checked
/// with the other outputs (check_outputs). Throws `tutti::invalid_argument` (exit status 2).
/// @tparam Config `tutti train`'s configuration (`train_config`)
template <class Config>
void check_export(const Config& c) {
  if (c.export_dir.empty()) return;
  TUTTI_EXPECTS(c.model == model_choice::mf, "tutti train",
                "--export with --model " + choice_name(c.model) +
                    ": the export holds a matrix factorisation's factors and biases; expected "
                    "--model mf");
  const std::filesystem::path dir = c.export_dir;
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) {
    TUTTI_EXPECTS(std::filesystem::is_empty(dir, ec) || detail::holds_export(dir) ||
                      detail::holds_only_export_files(dir),
                  "tutti train",
                  "--export " + c.export_dir +
                      " is not empty and holds no previous export (model.json); expected a new "
                      "or empty directory, or one written by --export, which is replaced");
  }
  std::filesystem::create_directories(dir, ec);
  TUTTI_EXPECTS(!ec, "tutti train",
                "--export " + dir.string() + ": cannot create the folder: " + ec.message());
}

namespace detail {

/// model.json: what each file holds, how to score, and the run that trained the model.
template <class Config, class Data>
nlohmann::json export_manifest(const Config& c, const Data& d, const models::mf_export& e,
                               std::uint64_t steps) {
  const bool implicit = d.all.implicit;
  const auto nu = e.user_ids.size(), ni = e.item_ids.size();
  const auto file = [](const char* name, const char* dtype, nlohmann::json shape) {
    return nlohmann::json{{"file", std::string(name) + ".npy"}, {"dtype", dtype}, {"shape", shape}};
  };
  nlohmann::json j;
  j["format"] = export_format;
  j["format_version"] = export_format_version;
  j["model"] = "mf";
  j["dim"] = e.dim;
  j["labels"] = implicit ? "implicit" : "ratings";
  j["loss"] = implicit ? "logistic" : "squared";
  j["output"] = implicit ? "sigmoid" : "identity";
  j["score"] =
      "s(u, i) = global_bias + user_bias[u] + item_bias[i] + dot(user_factors[u], "
      "item_factors[i]) over dense indices; " +
      std::string(implicit ? "implicit labels: the probability of a 1 is 1 / (1 + exp(-s))"
                           : "ratings: s is the predicted rating");
  j["ids"] = "user_ids[u] and item_ids[i] are the source ids of dense indices u and i";
  if (e.user_names || e.item_names)
    j["names"] =
        "user_names[u] and item_names[i] (NumPy byte strings, UTF-8) are the ids as the data "
        "spell them; user_ids and item_ids are then their 64-bit codes";
  j["seen"] =
      "seen_items[seen_offsets[u]:seen_offsets[u + 1]] are the dense items of user u's training "
      "rows (any label), ascending";
  j["files"] = nlohmann::json::object();
  for (const models::mf_export_array& a : models::mf_export_arrays(e))
    j["files"][a.name] = file(a.name, a.dtype, a.shape);
  const auto name_file = [&](const char* name, const data::id_names& n) {
    std::size_t w = 1;
    for (std::size_t k = 0; k < n.size(); ++k) w = std::max(w, n[k].size());
    return file(name, ("|S" + std::to_string(w)).c_str(), {n.size()});
  };
  if (e.user_names) j["files"]["user_names"] = name_file("user_names", *e.user_names);
  if (e.item_names) j["files"]["item_names"] = name_file("item_names", *e.item_names);
  j["optimizer_state"] = {
      {"optimizer", choice_name(c.optimizer)},
      {"momentum", c.momentum},
      {"steps", steps},
      {"carried", e.state.has_value()},
      {"note",
       "user_state[u], item_state[i] and global_state hold the optimizer's state of each row "
       "(its factors', then its bias's), so that tutti train --init-from continues it; steps: "
       "the optimizer steps the model has taken"}};
  j["data"] = {{"source", d.source},
               {"file", c.file.path},
               {"users", nu},
               {"items", ni},
               {"train_rows", d.parts.train.size()},
               {"seen_rows", d.rank_local ? "rank 0's sealed shard only" : "all training rows"}};
  j["options"] = {{"model", choice_name(c.model)},
                  {"dim", c.dim},
                  {"l2", c.l2},
                  {"epochs", c.epochs},
                  {"batch", c.batch},
                  {"lr", c.lr},
                  {"optimizer", choice_name(c.optimizer)},
                  {"schedule", choice_name(c.schedule)},
                  {"scaling", choice_name(c.scaling)},
                  {"warmup_steps", c.warmup_steps},
                  {"ranks", c.ranks},
                  {"seed", c.seed},
                  {"test_fraction", c.test_fraction},
                  {"implicit", c.file.implicit},
                  {"user_col", c.file.user_col},
                  {"item_col", c.file.item_col},
                  {"label_col", c.file.label_col},
                  {"data_seed", c.data_seed},
                  {"learners", c.learners},
                  {"courses", c.courses},
                  {"synthetic_ratings", c.synthetic_ratings}};
  return j;
}

}  // namespace detail

/// After training, on rank 0: writes the export of trainer `t` into `c.export_dir` (checked by
/// `check_export`). model.json goes last, so a directory with a model.json holds a whole
/// export.
/// @tparam Config `train_config`; @tparam Data the loaded data (`detail::loaded_data`)
/// @tparam Trainer a `tutti::trainer` of a `matrix_factorization`
template <class Config, class Data, class Trainer>
void write_export(const Config& c, const Data& d, const Trainer& t) {
  if (c.export_dir.empty()) return;
  const std::filesystem::path dir = c.export_dir;
  // On a space the host reads, the tables are written from the trainer's arena where they lie
  // (a model near the machine's memory has no room for a second copy of them).
  using space = std::decay_t<decltype(t.model().space())>;
  std::vector<float> params_copy, state_copy;
  std::span<const float> params = t.parameters(), state = t.optimizer_state();
  if constexpr (!space::host_accessible) {
    params_copy = t.parameters_on_host();
    state_copy = to_host_vector(t.model().space(), state);
    params = params_copy;
    state = state_copy;
  }
  models::mf_export e = models::make_mf_export_header(t.model().layout(), d.parts.train);
  // The optimizer's state goes with its rows, where it keeps any and says where it lies.
  if (const auto map = optimizer_state_map(t.optimizer(), t.model().layout());
      map && !state.empty())
    e.state = models::make_mf_state(t.model().layout(), *map, state);
  std::filesystem::remove(dir / "model.json");
  models::write_mf_export(dir, e, models::mf_tables_of(t.model().layout(), params));
  write_json_file((dir / "model.json").string(),
                  detail::export_manifest(c, d, e, t.optimizer_steps()), "tutti train --export");
  if (!c.quiet)
    std::printf(
        "export: %s (model.json and %zu .npy files; tutti recommend --model %s --user ID)\n",
        dir.string().c_str(),
        std::size(models::mf_export_files) + (e.user_names ? 1 : 0) + (e.item_names ? 1 : 0) +
            (e.state ? std::size(models::mf_export_state_files) : 0),
        dir.string().c_str());
}

}  // namespace tutti::cli
