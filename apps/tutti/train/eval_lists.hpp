// SPDX-License-Identifier: Apache-2.0
// `tutti train --lists-out DIR`: the training rows and the ranking lists of `--holdout last`, as
// CSV files a peer (benchmarks/peers/implicit_quality.py) trains and ranks on, so both sides
// see the same split and the same candidates.
#pragma once

#include "data.hpp"

#include <tutti/detail/checked_file.hpp>
#include <tutti/error.hpp>

#include <filesystem>
#include <string>

namespace tutti::cli::detail {

/// Writes DIR/train.csv (`user,item`: the dense indices of every training row, in order) and
/// DIR/lists.csv (`user,sampled,item_0,...`: one list per held-out row, the held-out course
/// first, then `sampled` courses the learner never took; a short list repeats the held-out
/// course after them, never ranked), and DIR/README.txt saying so.
inline void write_eval_lists(const std::string& dir, const loaded_data& d) {
  constexpr const char* fn = "tutti train --lists-out";
  TUTTI_EXPECTS(d.lists != nullptr && !d.rank_local, fn,
                "there are no ranking lists; expected --holdout last on data every rank holds");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw error(std::string(fn) + ": cannot create '" + dir + "': " + ec.message());
  const auto& t = d.parts.train;
  std::string rows = "user,item\n";
  for (std::size_t r = 0; r < t.size(); ++r)
    rows += std::to_string(t.users[r]) + ',' + std::to_string(t.items[r]) + '\n';
  tutti::detail::write_file_replacing(std::filesystem::path(dir) / "train.csv", rows, fn);
  const auto& c = *d.lists;
  std::string lists = "user,sampled,items\n";
  for (std::size_t u = 0; u < c.size(); ++u) {
    lists += std::to_string(c.users[u]) + ',' + std::to_string(c.negatives[u]);
    for (std::size_t j = 0; j < c.width(); ++j)
      lists += ',' + std::to_string(c.items[u * c.width() + j]);
    lists += '\n';
  }
  tutti::detail::write_file_replacing(std::filesystem::path(dir) / "lists.csv", lists, fn);
  tutti::detail::write_file_replacing(
      std::filesystem::path(dir) / "README.txt",
      "Written by tutti train --lists-out for " + d.source + ": " + std::to_string(t.n_users()) +
          " users, " + std::to_string(t.n_items()) +
          " items (dense indices).\ntrain.csv: the training rows.\nlists.csv: per held-out row, "
          "the user, the number of sampled items, then the held-out item and the sampled ones.\n",
      fn);
}

}  // namespace tutti::cli::detail
