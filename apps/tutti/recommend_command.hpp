// SPDX-License-Identifier: Apache-2.0
// `tutti recommend`: a learner's top-k unseen courses from a `tutti train --export` directory
// (docs/data.md#from-an-export-file-to-a-learners-top-10).
#pragma once

#include "export.hpp"
#include "output_paths.hpp"

#include <tutti/error.hpp>
#include <tutti/models/mf_export.hpp>
#include <tutti/models/mf_recommend.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tutti::cli {

/// Everything `tutti recommend` can be told.
struct recommend_config {
  std::string model_dir;            // written by tutti train --export
  std::optional<std::string> user;  // one learner id, as the data spell it
  std::string users_file;           // one learner id per line
  std::size_t k = 10;               // items per user
  std::string json;                 // write the lists as JSON here
};

/// Registers `tutti recommend` on `app`.
inline CLI::App* add_recommend_command(CLI::App& app, recommend_config& c) {
  CLI::App* cmd = app.add_subcommand(
      "recommend", "a learner's top-k unseen courses from a model written by tutti train --export");
  cmd->add_option("--model", c.model_dir, "directory written by tutti train --export")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* user = cmd->add_option("--user", c.user, "the learner's id, as the data spell it");
  cmd->add_option("--users", c.users_file, "file of learner ids, one per line")
      ->check(CLI::ExistingFile)
      ->excludes(user);
  cmd->add_option("--k", c.k, "courses per learner")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--json", c.json, "also write the lists to this JSON file");
  cmd->footer(
      "Examples:\n"
      "  tutti train --export model/\n"
      "  tutti recommend --model model/ --user 17 --k 10\n"
      "  tutti recommend --model model/ --users learners.txt --json top10.json");
  return cmd;
}

namespace detail {

/// A learner id as given: trimmed of blanks around it.
struct given_id {
  std::string text;
  std::size_t line = 0;  // in --users FILE; 0 for --user
};

/// The learner ids of `--users FILE`: one per line, blanks around it trimmed; blank lines are
/// skipped, as is a UTF-8 byte-order mark at the start (as the CSV reader does).
inline std::vector<given_id> read_user_ids(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw error("tutti recommend: cannot open '" + file + "'");
  std::vector<given_id> ids;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (n == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    const auto e = line.find_last_not_of(" \t\r");
    ids.push_back({line.substr(b, e - b + 1), n});
  }
  return ids;
}

/// The dense index of each id; a usage error naming the first the model does not know, with
/// its line in `--users FILE` and how many of the file's ids are unknown (an id that is not an
/// integer where the ids are integers says so).
inline std::vector<std::int32_t> find_users(const models::mf_export& e,
                                            const std::vector<given_id>& ids,
                                            const recommend_config& c) {
  const models::id_index users(e.user_ids);
  std::vector<std::int32_t> dense;
  const given_id* first_unknown = nullptr;
  std::size_t unknown = 0;
  for (const given_id& id : ids) {
    const auto u = users.find(id.text, e.user_names.get());
    if (!u && id.line > 0 && !e.user_names &&
        id.text.find_first_not_of("+-0123456789") != std::string::npos)
      throw data_error(c.users_file, id.line, 1,
                       "'" + id.text +
                           "' is not an integer learner id; the model's ids are "
                           "integers");
    if (!u && unknown++ == 0) first_unknown = &id;
    dense.push_back(u.value_or(-1));
  }
  if (first_unknown == nullptr) return dense;
  const std::string what = "learner id '" + first_unknown->text + "' is not in the model " +
                           c.model_dir + " (" + std::to_string(e.n_users()) + " learners)";
  if (first_unknown->line == 0)
    ::tutti::detail::throw_invalid("tutti recommend",
                                   what + "; expected an id of the training data");
  ::tutti::detail::throw_invalid(
      "tutti recommend", c.users_file + ":" + std::to_string(first_unknown->line) + ": " + what +
                             "; " + std::to_string(unknown) + " of the file's " +
                             std::to_string(ids.size()) +
                             " ids are unknown; expected ids of the training data");
}

/// An id for the JSON lists: a string for names, a number for integer ids.
inline nlohmann::json id_json(const std::shared_ptr<const data::id_names>& names,
                              const std::vector<std::int64_t>& ids, std::int32_t k) {
  const auto at = static_cast<std::size_t>(k);
  if (names) return std::string((*names)[at]);
  return ids[at];
}

/// The model's output for score s: a probability for implicit labels, else the rating.
inline double model_output(bool sigmoid, float s) {
  return sigmoid ? 1.0 / (1.0 + std::exp(-double(s))) : double(s);
}

}  // namespace detail

/// Runs `tutti recommend`; returns the process exit code. An id the model does not know is a
/// usage error (exit status 2), a missing or damaged export file an error (exit status 1).
inline int run_recommend(const recommend_config& c) {
  TUTTI_EXPECTS(c.user.has_value() != !c.users_file.empty(), "tutti recommend",
                "expected one of --user ID or --users FILE");
  check_outputs("tutti recommend", {{"--json", c.json}}, {},
                {{"--model", c.model_dir}, {"--users", c.users_file}});
  const nlohmann::json manifest = detail::read_export_manifest(c.model_dir, "tutti recommend");
  const std::string output = manifest.value("output", "");
  if (output != "sigmoid" && output != "identity")
    throw error("tutti recommend: '" +
                (std::filesystem::path(c.model_dir) / "model.json").string() +
                "': \"output\" is '" + output + "'; expected \"sigmoid\" or \"identity\"");
  const bool sigmoid = output == "sigmoid";
  const models::mf_export e = models::read_mf_export(c.model_dir);
  detail::check_manifest_agrees(manifest, e, c.model_dir, "tutti recommend");
  const std::vector<detail::given_id> ids =
      c.user ? std::vector<detail::given_id>{{*c.user, 0}} : detail::read_user_ids(c.users_file);
  const std::vector<std::int32_t> dense = detail::find_users(e, ids, c);
  nlohmann::json out = {{"model", c.model_dir},
                        {"k", c.k},
                        {"output", sigmoid ? "sigmoid" : "identity"},
                        {"users", nlohmann::json::array()}};
  // Every list first, so the columns fit the longest id (names such as UUIDs run past 12).
  std::vector<std::vector<models::scored_item>> lists;
  int user_w = 12, item_w = 12;
  for (std::size_t n = 0; n < ids.size(); ++n) {
    lists.push_back(models::top_k(e, dense[n], c.k));
    user_w = std::max(user_w, int(e.user_text(dense[n]).size()));
    for (const models::scored_item& s : lists.back())
      item_w = std::max(item_w, int(e.item_text(s.item).size()));
  }
  std::printf("%*s  %5s  %*s  %12s\n", user_w, "learner", "rank", item_w, "course",
              sigmoid ? "probability" : "rating");
  for (std::size_t n = 0; n < ids.size(); ++n) {
    nlohmann::json items = nlohmann::json::array();
    std::size_t rank = 0;
    const std::string user = e.user_text(dense[n]);
    for (const models::scored_item& s : lists[n]) {
      const double value = detail::model_output(sigmoid, s.score);
      std::printf("%*s  %5zu  %*s  %12.6f\n", user_w, user.c_str(), ++rank, item_w,
                  e.item_text(s.item).c_str(), value);
      items.push_back({{"item", detail::id_json(e.item_names, e.item_ids, s.item)},
                       {"score", value},
                       {"raw", s.score}});
    }
    out["users"].push_back({{"user", detail::id_json(e.user_names, e.user_ids, dense[n])},
                            {"seen", e.seen(dense[n]).size()},
                            {"items", std::move(items)}});
  }
  if (!c.json.empty()) {
    write_json_file(c.json, out, "tutti recommend --json");
  }
  return 0;
}

}  // namespace tutti::cli
