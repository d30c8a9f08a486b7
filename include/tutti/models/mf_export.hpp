// SPDX-License-Identifier: Apache-2.0
/// @file models/mf_export.hpp
/// @brief `tutti::models::mf_export`: a trained matrix factorisation as plain arrays keyed by
/// the data's source ids, written to and read from a directory of .npy files.
///
/// The files (docs/data.md#from-an-export-file-to-a-learners-top-10):
///
/// | file             | dtype | shape            | holds                                        |
/// |------------------|-------|------------------|----------------------------------------------|
/// | user_factors.npy | <f4   | (n_users, dim)   | p_u, row u = dense user index u              |
/// | item_factors.npy | <f4   | (n_items, dim)   | q_i                                          |
/// | user_bias.npy    | <f4   | (n_users,)       | b_u                                          |
/// | item_bias.npy    | <f4   | (n_items,)       | b_i                                          |
/// | global_bias.npy  | <f4   | ()               | g                                            |
/// | user_ids.npy     | <i8   | (n_users,)       | source id of dense user index u              |
/// | item_ids.npy     | <i8   | (n_items,)       | source id of dense item index i              |
/// | seen_offsets.npy | <i8   | (n_users + 1,)   | CSR offsets into seen_items                  |
/// | seen_items.npy   | <i8   | (offsets[-1],)   | dense items of each user's training rows     |
/// | user_names.npy   | \|S<w> | (n_users,)       | the id's text, when the data's ids are names |
/// | item_names.npy   | \|S<w> | (n_items,)       | the same for items                           |
/// | user_state.npy   | <f4   | (n_users, w_u)   | the optimizer's state of learner u's rows    |
/// | item_state.npy   | <f4   | (n_items, w_i)   | the same for course i                        |
/// | global_state.npy | <f4   | (w_g,)           | the same for the global bias                 |
///
/// The two name files exist only when the data's ids are names (data/id_names.hpp); their ids
/// are then the names' codes (`tutti::data::name_code`). The three state files exist only when
/// the export carries the optimizer's state (`mf_state`): a row's state is that of its factors'
/// row, then of its bias, plane after plane as the optimizer's `tutti::state_map` orders them.
///
/// Score s(u, i) = g + b_u + b_i + <p_u, q_i>, as `matrix_factorization::predict` computes it.
#pragma once

#include <tutti/data/detail/learner_lists.hpp>
#include <tutti/data/id_names.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/data/npy.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/state_map.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace tutti::models {

/// The optimizer's state of an export's rows, so that a continued run keeps it with each row:
/// row u of `user` (`user_width` floats) is the state of learner u's factors, then of its bias
/// (each plane after plane, as the optimizer's `tutti::state_map` orders them); likewise `item`;
/// `global` is the global bias's.
struct mf_state {
  std::size_t user_width = 0;
  std::size_t item_width = 0;
  std::vector<float> user;    ///< n_users × user_width
  std::vector<float> item;    ///< n_items × item_width
  std::vector<float> global;  ///< the global bias's state
};

/// A trained `matrix_factorization` on the host: factors, biases, source ids and the items
/// each user has in the training rows (CSR). Dense index u is row u of every per-user array.
struct mf_export {
  std::int32_t dim = 0;                    ///< embedding dimension
  std::vector<float> user_factors;         ///< n_users × dim, C order
  std::vector<float> item_factors;         ///< n_items × dim, C order
  std::vector<float> user_bias;            ///< n_users
  std::vector<float> item_bias;            ///< n_items
  float global_bias = 0;                   ///< g
  std::vector<std::int64_t> user_ids;      ///< dense user index -> source id
  std::vector<std::int64_t> item_ids;      ///< dense item index -> source id
  std::vector<std::int64_t> seen_offsets;  ///< n_users + 1; user u's items at [o[u], o[u+1])
  std::vector<std::int64_t> seen_items;    ///< dense item indices, ascending per user
  std::shared_ptr<const data::id_names> user_names;  ///< dense user index -> name, or null
  std::shared_ptr<const data::id_names> item_names;  ///< dense item index -> name, or null
  std::optional<mf_state> state;  ///< the optimizer's state of every row, where carried

  /// Number of users.
  std::int32_t n_users() const noexcept { return static_cast<std::int32_t>(user_ids.size()); }
  /// Number of items.
  std::int32_t n_items() const noexcept { return static_cast<std::int32_t>(item_ids.size()); }
  /// User `u`'s id as the data spell it: its name, or its integer id in decimal.
  std::string user_text(std::int32_t u) const {
    return data::id_text(user_names, user_ids, static_cast<std::size_t>(u));
  }
  /// Item `i`'s id as the data spell it: its name, or its integer id in decimal.
  std::string item_text(std::int32_t i) const {
    return data::id_text(item_names, item_ids, static_cast<std::size_t>(i));
  }
  /// The dense items user `u` has in the training rows, ascending.
  std::span<const std::int64_t> seen(std::int32_t u) const {
    const auto b = static_cast<std::size_t>(seen_offsets[static_cast<std::size_t>(u)]);
    const auto e = static_cast<std::size_t>(seen_offsets[static_cast<std::size_t>(u) + 1]);
    return std::span<const std::int64_t>(seen_items).subspan(b, e - b);
  }
};

/// The file names of an export, in the order they are written.
inline constexpr const char* mf_export_files[] = {
    "user_factors.npy", "item_factors.npy", "user_bias.npy",    "item_bias.npy", "global_bias.npy",
    "user_ids.npy",     "item_ids.npy",     "seen_offsets.npy", "seen_items.npy"};

/// The files of the ids' names, written when the data's ids are names.
inline constexpr const char* mf_export_name_files[] = {"user_names.npy", "item_names.npy"};

/// The files of the optimizer's state, written when the export carries it.
inline constexpr const char* mf_export_state_files[] = {"user_state.npy", "item_state.npy",
                                                        "global_state.npy"};

/// One array file of an export: its name without ".npy", NumPy dtype and shape.
struct mf_export_array {
  const char* name;
  const char* dtype;
  std::vector<std::size_t> shape;
};

/// The nine array files of `e` with the shapes its values give them, in `mf_export_files`'
/// order, then the state's three where it carries them: what model.json describes and what a
/// reader checks the files against.
inline std::vector<mf_export_array> mf_export_arrays(const mf_export& e) {
  const std::size_t nu = e.user_ids.size(), ni = e.item_ids.size();
  const auto d = static_cast<std::size_t>(e.dim);
  std::vector<mf_export_array> arrays = {{"user_factors", "<f4", {nu, d}},
                                         {"item_factors", "<f4", {ni, d}},
                                         {"user_bias", "<f4", {nu}},
                                         {"item_bias", "<f4", {ni}},
                                         {"global_bias", "<f4", {}},
                                         {"user_ids", "<i8", {nu}},
                                         {"item_ids", "<i8", {ni}},
                                         {"seen_offsets", "<i8", {nu + 1}},
                                         {"seen_items", "<i8", {e.seen_items.size()}}};
  if (e.state)
    arrays.insert(arrays.end(), {{"user_state", "<f4", {nu, e.state->user_width}},
                                 {"item_state", "<f4", {ni, e.state->item_width}},
                                 {"global_state", "<f4", {e.state->global.size()}}});
  return arrays;
}

/// The distinct items of each user in `rows` as CSR (offsets n_users + 1, items ascending),
/// grouped by all threads (`detail::learner_courses`) in one array of the rows' length.
inline void seen_csr(const data::interactions& rows, std::vector<std::int64_t>& offsets,
                     std::vector<std::int64_t>& items) {
  std::vector<std::int32_t> lists(rows.size());
  const std::vector<std::uint64_t> at = tutti::detail::learner_courses(rows, lists.data());
  offsets.assign(at.begin(), at.end());
  items.assign(lists.begin(), lists.begin() + static_cast<std::ptrdiff_t>(at.back()));
}

/// The four tables and the global bias of an export where they lie: in an export's vectors
/// (`mf_tables_of(e)`) or in a matrix factorisation's arena on the host (`mf_tables_of(layout,
/// params)`), which `write_mf_export` then writes without a copy.
struct mf_tables {
  std::span<const float> user_factors, item_factors, user_bias, item_bias;
  float global_bias = 0;
};

/// The tables of the export `e`.
inline mf_tables mf_tables_of(const mf_export& e) {
  return {e.user_factors, e.item_factors, e.user_bias, e.item_bias, e.global_bias};
}

/// The tables of a `matrix_factorization` whose parameter arena, on the host, is `params` (laid
/// out as `layout`). Throws `tutti::invalid_argument` when the layout is not a matrix
/// factorisation's or `params` is not its arena.
inline mf_tables mf_tables_of(const parameter_layout& layout, std::span<const float> params) {
  TUTTI_EXPECTS(params.size() == layout.total(), "tutti::models::mf_tables_of",
                "params has " + std::to_string(params.size()) + " values; expected " +
                    std::to_string(layout.total()));
  const auto part = [&](const char* name) {
    const segment& s = layout.find(name);
    return params.subspan(s.offset, s.size());
  };
  return {part("user_embedding"), part("item_embedding"), part("user_bias"), part("item_bias"),
          part("global_bias").front()};
}

/// The export of a `matrix_factorization` laid out as `layout` without its tables: the dimension,
/// the source ids of `rows` and its rows as the seen items (`write_mf_export(dir, e, tables)`
/// writes the tables from where they lie). Throws `tutti::invalid_argument` when the layout is not
/// a matrix factorisation's or its tables do not match the index spaces of `rows`.
inline mf_export make_mf_export_header(const parameter_layout& layout,
                                       const data::interactions& rows) {
  constexpr const char* fn = "tutti::models::make_mf_export";
  const segment& pu = layout.find("user_embedding");
  const segment& qi = layout.find("item_embedding");
  TUTTI_EXPECTS(pu.rows == static_cast<std::size_t>(rows.n_users()) &&
                    qi.rows == static_cast<std::size_t>(rows.n_items()) && pu.cols == qi.cols,
                fn,
                "tables of " + std::to_string(pu.rows) + " users and " + std::to_string(qi.rows) +
                    " items; expected the data's " + std::to_string(rows.n_users()) + " and " +
                    std::to_string(rows.n_items()));
  mf_export e;
  e.dim = static_cast<std::int32_t>(pu.cols);
  e.user_ids = rows.user_ids;
  e.item_ids = rows.item_ids;
  e.user_names = rows.user_names;
  e.item_names = rows.item_names;
  seen_csr(rows, e.seen_offsets, e.seen_items);
  return e;
}

/// The export of a `matrix_factorization` whose parameter arena, copied to the host, is
/// `params` (laid out as `layout`), with the source ids of `rows` and its rows as the seen
/// items: `make_mf_export_header` with the tables copied. Throws `tutti::invalid_argument` as
/// those two do.
inline mf_export make_mf_export(const parameter_layout& layout, std::span<const float> params,
                                const data::interactions& rows) {
  const mf_tables t = mf_tables_of(layout, params);
  mf_export e = make_mf_export_header(layout, rows);
  e.user_factors.assign(t.user_factors.begin(), t.user_factors.end());
  e.item_factors.assign(t.item_factors.begin(), t.item_factors.end());
  e.user_bias.assign(t.user_bias.begin(), t.user_bias.end());
  e.item_bias.assign(t.item_bias.begin(), t.item_bias.end());
  e.global_bias = t.global_bias;
  return e;
}

}  // namespace tutti::models

namespace tutti::detail {

/// The segments of a matrix factorisation's layout whose rows are learner (`table` "user") or
/// course ("item") rows, or the global bias ("global"), in the order a row's state lists them.
inline std::vector<std::size_t> mf_table_segments(const parameter_layout& layout,
                                                  const std::string& table) {
  const auto index = [&](const std::string& name) {
    return static_cast<std::size_t>(&layout.find(name) - layout.segments().data());
  };
  if (table == "global") return {index("global_bias")};
  return {index(table + "_embedding"), index(table + "_bias")};
}

/// Floats of state one row of `table` holds: those of its segments (`mf_table_segments`).
inline std::size_t table_state_width(const state_map& map, const std::vector<std::size_t>& segs) {
  std::size_t width = 0;
  for (std::size_t s : segs) width += row_state_width(map, s);
  return width;
}

/// The state of every row of `table` (see `mf_table_segments`) as rows × width, and the width.
inline std::vector<float> gather_table_state(const parameter_layout& layout, const state_map& map,
                                             std::span<const float> state, const std::string& table,
                                             std::size_t& width) {
  const std::vector<std::size_t> segs = mf_table_segments(layout, table);
  width = table_state_width(map, segs);
  const std::size_t rows = layout.segments()[segs.front()].rows;
  std::vector<float> out(rows * width);
  for (std::size_t r = 0; r < rows; ++r) {
    std::size_t at = r * width;
    for (std::size_t s : segs) {
      const std::size_t w = row_state_width(map, s);
      gather_row_state(map, s, r, state, std::span<float>(out).subspan(at, w));
      at += w;
    }
  }
  return out;
}

}  // namespace tutti::detail

namespace tutti::models {

/// The optimizer's state of every row of a `matrix_factorization` (its arena laid out as
/// `layout`, the optimizer's state arena `state` mapped by `map`), as an export carries it.
/// Throws `tutti::invalid_argument` when the layout is not a matrix factorisation's or the map
/// does not fit `state` (`check_state_map`).
inline mf_state make_mf_state(const parameter_layout& layout, const state_map& map,
                              std::span<const float> state) {
  check_state_map(map, layout, state.size());
  mf_state st;
  std::size_t global_width = 0;
  st.user = tutti::detail::gather_table_state(layout, map, state, "user", st.user_width);
  st.item = tutti::detail::gather_table_state(layout, map, state, "item", st.item_width);
  st.global = tutti::detail::gather_table_state(layout, map, state, "global", global_width);
  return st;
}

/// Writes the nine .npy files of `e`, its tables from `t` (and the name files when its ids are
/// names) into the existing directory `dir`. Throws `tutti::error` naming the file that cannot be
/// written, `tutti::invalid_argument` when a table's size is not that of `e`'s ids.
inline void write_mf_export(const std::filesystem::path& dir, const mf_export& e,
                            const mf_tables& t) {
  using data::write_npy;
  const std::size_t nu = e.user_ids.size(), ni = e.item_ids.size();
  const auto d = static_cast<std::size_t>(e.dim);
  write_npy<float>(dir / "user_factors.npy", t.user_factors, {nu, d});
  write_npy<float>(dir / "item_factors.npy", t.item_factors, {ni, d});
  write_npy<float>(dir / "user_bias.npy", t.user_bias, {nu});
  write_npy<float>(dir / "item_bias.npy", t.item_bias, {ni});
  write_npy<float>(dir / "global_bias.npy", std::span<const float>(&t.global_bias, 1), {});
  write_npy<std::int64_t>(dir / "user_ids.npy", e.user_ids, {nu});
  write_npy<std::int64_t>(dir / "item_ids.npy", e.item_ids, {ni});
  write_npy<std::int64_t>(dir / "seen_offsets.npy", e.seen_offsets, {nu + 1});
  write_npy<std::int64_t>(dir / "seen_items.npy", e.seen_items, {e.seen_items.size()});
  // A name file of an earlier export in `dir` would not match these ids: it goes.
  std::error_code ec;
  if (e.user_names)
    data::write_npy_names(dir / "user_names.npy", *e.user_names);
  else
    std::filesystem::remove(dir / "user_names.npy", ec);
  if (e.item_names)
    data::write_npy_names(dir / "item_names.npy", *e.item_names);
  else
    std::filesystem::remove(dir / "item_names.npy", ec);
  if (e.state) {
    const mf_state& st = *e.state;
    write_npy<float>(dir / "user_state.npy", st.user, {nu, st.user_width});
    write_npy<float>(dir / "item_state.npy", st.item, {ni, st.item_width});
    write_npy<float>(dir / "global_state.npy", st.global, {st.global.size()});
  } else {
    for (const char* f : mf_export_state_files) std::filesystem::remove(dir / f, ec);
  }
}

/// Writes the nine .npy files of `e` (and the name files when its ids are names) into the
/// existing directory `dir`. Throws `tutti::error` naming the file that cannot be written.
inline void write_mf_export(const std::filesystem::path& dir, const mf_export& e) {
  write_mf_export(dir, e, mf_tables_of(e));
}

}  // namespace tutti::models

namespace tutti::detail {

/// Reads `dir/file` and checks its shape against `expected` (-1: any extent).
template <class T>
std::vector<T> read_export_array(const std::filesystem::path& dir, const char* file,
                                 std::vector<long long> expected,
                                 std::vector<std::size_t>* shape = nullptr) {
  data::npy_array<T> a = data::read_npy<T>(dir / file);
  bool ok = a.shape.size() == expected.size();
  for (std::size_t k = 0; ok && k < expected.size(); ++k)
    ok = expected[k] < 0 || a.shape[k] == static_cast<std::size_t>(expected[k]);
  if (!ok) {
    std::string want = "(";
    for (std::size_t k = 0; k < expected.size(); ++k)
      want += (k ? ", " : "") + (expected[k] < 0 ? std::string("*") : std::to_string(expected[k]));
    throw tutti::error("tutti::models::read_mf_export(): '" + (dir / file).string() + "': shape " +
                       npy_shape_text(a.shape) + "; expected " + want +
                       (expected.size() == 1 ? ",)" : ")") + " to match the other files");
  }
  if constexpr (std::is_floating_point_v<T>) {
    const std::size_t cols = a.shape.size() == 2 ? a.shape[1] : 0;
    for (std::size_t k = 0; k < a.values.size(); ++k)
      if (!std::isfinite(a.values[k]))
        throw tutti::error(
            "tutti::models::read_mf_export(): '" + (dir / file).string() + "': " +
            (cols > 0 ? "row " + std::to_string(k / cols) + ", column " + std::to_string(k % cols)
                      : "value " + std::to_string(k)) +
            " is " + (std::isnan(a.values[k]) ? "NaN" : "infinite") +
            "; expected finite values (the model diverged, or the file was "
            "edited after the export)");
  }
  if (shape) *shape = a.shape;
  return std::move(a.values);
}

/// The names in `dir/file` when the file exists (null when not), checked to be one per id and
/// each the name of its id's code.
inline std::shared_ptr<const data::id_names> read_export_names(
    const std::filesystem::path& dir, const char* file, const std::vector<std::int64_t>& ids) {
  const std::filesystem::path path = dir / file;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nullptr;
  data::id_names names = data::read_npy_names(path);
  if (names.size() != ids.size())
    throw tutti::error("tutti::models::read_mf_export(): '" + path.string() +
                       "': " + std::to_string(names.size()) + " names; expected one per id (" +
                       std::to_string(ids.size()) + ")");
  for (std::size_t k = 0; k < ids.size(); ++k)
    if (data::name_code(names[k]) != ids[k])
      throw tutti::error("tutti::models::read_mf_export(): '" + path.string() + "': name " +
                         std::to_string(k) + " is not the name of its id " +
                         std::to_string(ids[k]) + " (the files come from different exports)");
  return std::make_shared<const data::id_names>(std::move(names));
}

/// The optimizer's state in `dir` when its files exist (nullopt when none does), each checked
/// to hold one row per learner (per course) and finite values.
inline std::optional<models::mf_state> read_export_state(const std::filesystem::path& dir,
                                                         long long users, long long items) {
  std::error_code ec;
  bool any = false;
  for (const char* f : models::mf_export_state_files)
    any = any || std::filesystem::exists(dir / f, ec);
  if (!any) return std::nullopt;
  models::mf_state st;
  std::vector<std::size_t> shape;
  st.user = read_export_array<float>(dir, "user_state.npy", {users, -1}, &shape);
  st.user_width = shape[1];
  st.item = read_export_array<float>(dir, "item_state.npy", {items, -1}, &shape);
  st.item_width = shape[1];
  st.global = read_export_array<float>(dir, "global_state.npy", {-1});
  return st;
}

/// Checks that the CSR arrays are well formed; the message names seen_offsets/seen_items.
inline void check_seen(const std::filesystem::path& dir, const models::mf_export& e) {
  const auto& o = e.seen_offsets;
  bool ok = o.front() == 0 && o.back() == static_cast<std::int64_t>(e.seen_items.size());
  for (std::size_t u = 0; ok && u + 1 < o.size(); ++u) ok = o[u] <= o[u + 1];
  if (!ok)
    throw tutti::error("tutti::models::read_mf_export(): '" + (dir / "seen_offsets.npy").string() +
                       "': offsets are not ascending from 0 to the length of seen_items.npy");
  for (std::int64_t i : e.seen_items)
    if (i < 0 || i >= e.n_items())
      throw tutti::error("tutti::models::read_mf_export(): '" + (dir / "seen_items.npy").string() +
                         "': item index " + std::to_string(i) + " outside [0, " +
                         std::to_string(e.n_items()) + ")");
}

}  // namespace tutti::detail

namespace tutti::models {

/// Reads the export in `dir` and checks that the files agree with one another. Throws
/// `tutti::error` naming the file that is missing, is not a valid .npy of its dtype, or whose
/// shape does not match the others.
inline mf_export read_mf_export(const std::filesystem::path& dir) {
  using tutti::detail::read_export_array;
  mf_export e;
  std::vector<std::size_t> shape;
  e.user_factors = read_export_array<float>(dir, "user_factors.npy", {-1, -1}, &shape);
  const auto nu = static_cast<long long>(shape[0]), d = static_cast<long long>(shape[1]);
  e.item_factors = read_export_array<float>(dir, "item_factors.npy", {-1, d}, &shape);
  const auto ni = static_cast<long long>(shape[0]);
  e.dim = static_cast<std::int32_t>(d);
  e.user_bias = read_export_array<float>(dir, "user_bias.npy", {nu});
  e.item_bias = read_export_array<float>(dir, "item_bias.npy", {ni});
  e.global_bias = read_export_array<float>(dir, "global_bias.npy", {}).front();
  e.user_ids = read_export_array<std::int64_t>(dir, "user_ids.npy", {nu});
  e.item_ids = read_export_array<std::int64_t>(dir, "item_ids.npy", {ni});
  e.seen_offsets = read_export_array<std::int64_t>(dir, "seen_offsets.npy", {nu + 1});
  e.seen_items = read_export_array<std::int64_t>(dir, "seen_items.npy", {-1});
  tutti::detail::check_seen(dir, e);
  e.user_names = tutti::detail::read_export_names(dir, "user_names.npy", e.user_ids);
  e.item_names = tutti::detail::read_export_names(dir, "item_names.npy", e.item_ids);
  e.state = tutti::detail::read_export_state(dir, nu, ni);
  return e;
}

}  // namespace tutti::models
