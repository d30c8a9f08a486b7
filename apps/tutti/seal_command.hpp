// SPDX-License-Identifier: Apache-2.0
// `tutti seal`: makes a master key, seals a CSV/TSV file into W encrypted shards, or exports one
// shard's key for the rank that may read only that shard. See docs/security.md.
#pragma once

#include "data_options.hpp"
#include "output_paths.hpp"

#include <tutti/error.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#if __has_include(<sodium.h>)
#include <tutti/data/csv.hpp>
#include <tutti/data/sealed.hpp>
#endif

namespace tutti::cli {

/// Everything `tutti seal` can be told.
struct seal_config {
  data_file_options file;  // --data and how to read it (read strictly: a bad row stops)
  std::uint32_t shards = 0;
  std::size_t chunk_size = 64 * 1024;
  std::string key_file;
  std::string out;
  std::string gen_key;
  std::optional<std::uint32_t> export_shard;
};

/// The `seal` subcommand: registers its options on construction, runs when parsed.
class seal_command {
 public:
  explicit seal_command(CLI::App& parent) {
    m_app = parent.add_subcommand("seal", "seal a dataset into encrypted shards, or manage keys");
    auto& c = m_cfg;
    m_app->add_option("--gen-key", c.gen_key, "write a new random master key to this file (0600)");
    m_app->add_option("--export-shard-key", c.export_shard,
                      "write shard I's key alone to --out (it opens shard I and no other)");
    add_data_file_options(*m_app, c.file, "CSV/TSV file to seal (header line, as tutti train)");
    m_app->add_option("--shards", c.shards, "W: number of shard files (usually the rank count)")
        ->check(CLI::Range(1u, 1u << 20));
    m_app->add_option("--chunk-size", c.chunk_size, "plaintext bytes per encrypted chunk")
        ->check(CLI::Range(std::size_t{64}, std::size_t{1} << 26))
        ->capture_default_str();
    m_app->add_option("--key-file", c.key_file, "the master key file (mode 0600)");
    m_app->add_option("--out", c.out, "output directory (sealing) or key file (export)");
    m_app->footer(
        "Examples:\n"
        "  tutti seal --gen-key master.key\n"
        "  tutti seal --data ratings.csv --shards 4 --key-file master.key --out sealed/\n"
        "  tutti seal --export-shard-key 2 --key-file master.key --out rank-2.key");
  }
  seal_command(const seal_command&) = delete;
  seal_command& operator=(const seal_command&) = delete;

  /// Throws the usage error `tutti seal: what` (exit status 2) unless `ok`.
  static void usage(bool ok, const std::string& what) {
    if (!ok) throw tutti::invalid_argument("tutti seal: " + what);
  }

  /// True when the command line chose `seal`.
  bool parsed() const { return m_app->parsed(); }

  /// Runs the chosen mode; returns the exit status. Usage errors throw tutti::invalid_argument.
  int run() const {
#if __has_include(<sodium.h>)
    const auto& c = m_cfg;
    const int modes = !c.gen_key.empty() + c.export_shard.has_value() + !c.file.path.empty();
    usage(modes == 1, "choose one of --gen-key K, --data PATH or --export-shard-key I");
    // Every output checked before the work (a key or a shard is never written over: they are
    // created new, and an existing one is refused).
    const bool sealing = !c.file.path.empty();
    check_outputs("tutti seal", {{"--gen-key", c.gen_key}, {"--out", sealing ? "" : c.out}},
                  {{{"--out", sealing ? c.out : ""}, {}}},
                  {{"--data", c.file.path}, {"--key-file", c.key_file}});
    if (!c.gen_key.empty()) {
      const auto key = data::secret_key::generate();
      data::write_key_file(c.gen_key, key);
      std::printf("wrote a new master key to %s (mode 0600, key id %s)\n", c.gen_key.c_str(),
                  key.id().c_str());
      std::printf(
          "anyone holding this file can read every shard sealed with it: keep it "
          "private and backed up\n");
      return 0;
    }
    usage(!c.key_file.empty(), "--key-file K is required");
    usage(!c.out.empty(), "--out is required");
    const auto master = data::read_key_file(c.key_file);
    usage(master.kind() == data::key_kind::master,
          "'" + c.key_file + "' holds shard " + std::to_string(master.shard()) +
              "'s key; sealing and exporting need the master key");
    if (c.export_shard) {
      const auto key = data::derive_shard_key(master, *c.export_shard);
      data::write_key_file(c.out, key);
      std::printf("wrote shard %u's key to %s (mode 0600, key id %s); it opens shard %u only\n",
                  *c.export_shard, c.out.c_str(), key.id().c_str(), *c.export_shard);
      return 0;
    }
    usage(c.shards >= 1, "--shards W is required with --data");
    const auto rows = load_data_file(c.file).rows;
    const auto m =
        data::seal_shards(rows, master, c.out, {.shards = c.shards, .chunk_size = c.chunk_size});
    std::printf("sealed %s: %llu rows, %u users, %u items into %u shards in %s\n",
                c.file.path.c_str(), static_cast<unsigned long long>(m.rows),
                static_cast<unsigned>(rows.n_users()), static_cast<unsigned>(rows.n_items()),
                m.shards, c.out.c_str());
    std::printf("  %5s  %-16s  %10s  %10s  %12s  %7s  %s\n", "shard", "file", "first row", "rows",
                "bytes", "chunks", "key id");
    for (const auto& f : m.files)
      std::printf("  %5u  %-16s  %10llu  %10llu  %12llu  %7llu  %s\n", f.id, f.file.c_str(),
                  static_cast<unsigned long long>(f.first_row),
                  static_cast<unsigned long long>(f.rows),
                  static_cast<unsigned long long>(f.ciphertext_bytes),
                  static_cast<unsigned long long>(f.chunks), f.key_id.c_str());
    std::printf(
        "master key id %s; no plaintext was written. Give rank I only its shard key:\n"
        "  tutti seal --export-shard-key I --key-file %s --out rank-I.key\n",
        m.master_key_id.c_str(), c.key_file.c_str());
    return 0;
#else
    std::fprintf(stderr,
                 "tutti: error: this tutti was built without libsodium; `tutti seal` needs it "
                 "(Debian: apt-get install libsodium-dev pkg-config, then rebuild)\n");
    return 1;
#endif
  }

 private:
  CLI::App* m_app = nullptr;
  seal_config m_cfg;
};

}  // namespace tutti::cli
