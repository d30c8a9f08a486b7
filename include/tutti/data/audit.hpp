// SPDX-License-Identifier: Apache-2.0
/// @file data/audit.hpp
/// @brief The audit trail: each rank appends hash-chained JSON-lines records of the samples it
/// consumed; `verify_audit` checks every chain and that each epoch covered the training set
/// exactly once.
///
/// One file per rank, `audit-rank-R.jsonl`, one JSON object per line, keys sorted, compact:
///   header         rank, world_size, train_rows, seed, dataset_digest, shard, key_id, sampler
///   record         epoch, first_step, last_step, count, ids_digest, sum_a, sum_b, time
///   epoch_summary  per epoch: records, count, sums, order_digest, set_digest, sat_out
///   end            epochs, lines: written by `finish()`, so a cut trail is told from a whole one
/// Every line carries `prev` (the previous line's `hash`; for line 1 the hash of
/// "tutti-audit/rank/R") and `hash`, BLAKE2b-256 of the line's canonical text without `hash`.
///
/// Coverage: `ids_digest` is BLAKE2b-256 of the ids as little-endian u64s in the order consumed;
/// `sum_a`/`sum_b` are sums mod 2^64 of two independent bijective 64-bit mixes of each id, a
/// multiset hash that adds up across records and ranks. An epoch is exactly-once when the
/// ranks' counts add up to train_rows and both sums equal those of {0, ..., train_rows-1}.
/// Needs libsodium (link `tutti::sodium`, or `-lsodium`).
#pragma once

#include <tutti/data/detail/sodium.hpp>
#include <tutti/error.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti::detail {

/// First multiset hash of a sample id (SplitMix64 finaliser: a bijection).
inline std::uint64_t audit_mix_a(std::uint64_t id) noexcept {
  std::uint64_t x = id ^ 0x243f6a8885a308d3ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Second, independent multiset hash (MurmurHash3's fmix64 on a shifted id: a bijection).
inline std::uint64_t audit_mix_b(std::uint64_t id) noexcept {
  std::uint64_t k = id + 0x13198a2e03707344ULL;
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  return k ^ (k >> 33);
}

/// Running count and multiset hashes of a bag of sample ids.
struct audit_bag {
  std::uint64_t count = 0;
  std::uint64_t sum_a = 0;
  std::uint64_t sum_b = 0;
  void add(std::span<const std::uint64_t> ids) noexcept {
    for (std::uint64_t id : ids) {
      sum_a += audit_mix_a(id);
      sum_b += audit_mix_b(id);
    }
    count += ids.size();
  }
  void add(const audit_bag& o) noexcept {
    count += o.count;
    sum_a += o.sum_a;
    sum_b += o.sum_b;
  }
  bool operator==(const audit_bag&) const = default;
};

/// The bag {0, ..., n-1}: what one epoch must add up to.
inline audit_bag audit_full_bag(std::uint64_t n) noexcept {
  audit_bag b;
  for (std::uint64_t i = 0; i < n; ++i) {
    b.sum_a += audit_mix_a(i);
    b.sum_b += audit_mix_b(i);
  }
  b.count = n;
  return b;
}

/// Hash of the (absent) line before line 1 of rank `r`'s file.
inline std::string audit_genesis(int rank) {
  return blake2b_hex("tutti-audit/rank/" + std::to_string(rank));
}

/// The hash a line must carry: BLAKE2b-256 of its canonical text without "hash".
inline std::string audit_line_hash(const nlohmann::json& line) {
  nlohmann::json j = line;
  j.erase("hash");
  return blake2b_hex(j.dump());
}

/// Current UTC time as ISO 8601 with milliseconds.
inline std::string audit_now() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

/// Name of rank `r`'s file.
inline std::string audit_file_name(int rank) {
  return "audit-rank-" + std::to_string(rank) + ".jsonl";
}

struct audit_file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

}  // namespace tutti::detail

namespace tutti::data {

/// What a rank states once, at the top of its trail.
struct audit_header {
  int rank = 0;                      ///< this rank
  int world_size = 1;                ///< ranks in the run
  std::uint64_t train_rows = 0;      ///< N: the sample ids of an epoch are 0..N-1
  std::uint64_t seed = 0;            ///< the sampler's seed
  std::uint64_t dataset_digest = 0;  ///< `interactions::digest()` of the training set
  std::int64_t shard = -1;   ///< the shard this rank reads; -1: the shard numbered as the rank
  std::string key_id = "";   ///< id of the key that opened its data (never the key); optional
  std::string sampler = "";  ///< how samples were dealt, e.g. "shuffled_shards/pad"; optional
};

/// Writes one rank's audit trail, `dir/audit-rank-R.jsonl`, a line per call, flushed at once.
///
/// Call `record` for the samples of each step or log interval (real samples only, not padding),
/// `end_epoch` after each epoch and `finish` at the end of a completed run. The destructor does
/// not write `end`, so a run that died shows as cut. An existing trail file is never
/// overwritten or appended to.
class audit_log {
 public:
  /// Creates the rank's file in `dir` (created when missing) and writes its header line.
  /// @throws tutti::invalid_argument for a bad header; tutti::error when the file exists or
  /// cannot be written.
  audit_log(const std::filesystem::path& dir, audit_header header) : m_header(std::move(header)) {
    constexpr const char* fn = "tutti::data::audit_log";
    TUTTI_EXPECTS(
        m_header.world_size >= 1 && m_header.rank >= 0 && m_header.rank < m_header.world_size, fn,
        "rank " + std::to_string(m_header.rank) + " of world size " +
            std::to_string(m_header.world_size) + "; expected 0 <= rank < world_size");
    TUTTI_EXPECTS(m_header.train_rows >= 1, fn, "train_rows = 0; expected the training set size");
    if (m_header.shard < 0) m_header.shard = m_header.rank;
    detail::sodium_ready();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    m_path = dir / detail::audit_file_name(m_header.rank);
    int fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      int err = errno;
      throw error(std::string(fn) + ": cannot create '" + m_path.string() +
                  "': " + std::strerror(err) +
                  (err == EEXIST ? " (a trail is never overwritten; choose a new directory)" : ""));
    }
    m_file.reset(::fdopen(fd, "w"));
    if (!m_file) {
      ::close(fd);
      throw error(std::string(fn) + ": cannot open '" + m_path.string() + "'");
    }
    m_head = detail::audit_genesis(m_header.rank);
    nlohmann::json j = {{"type", "header"},
                        {"format", "tutti-audit"},
                        {"version", 1},
                        {"rank", m_header.rank},
                        {"world_size", m_header.world_size},
                        {"train_rows", m_header.train_rows},
                        {"seed", m_header.seed},
                        {"dataset_digest", detail::hex64(m_header.dataset_digest)},
                        {"shard", m_header.shard}};
    if (!m_header.key_id.empty()) j["key_id"] = m_header.key_id;
    if (!m_header.sampler.empty()) j["sampler"] = m_header.sampler;
    write(std::move(j));
  }

  /// Records that steps [first_step, last_step] of `epoch` consumed `sample_ids` (real samples
  /// only, in the order consumed). Epochs and steps must not go backwards.
  void record(std::uint64_t epoch, std::uint64_t first_step, std::uint64_t last_step,
              std::span<const std::uint64_t> sample_ids) {
    constexpr const char* fn = "tutti::data::audit_log::record";
    TUTTI_EXPECTS(!m_finished, fn, "the trail is finished; expected no more records");
    TUTTI_EXPECTS(first_step <= last_step, fn,
                  "first_step " + std::to_string(first_step) + " > last_step " +
                      std::to_string(last_step) + "; expected first_step <= last_step");
    open_epoch(epoch, fn);
    TUTTI_EXPECTS(m_epoch_records == 0 || first_step > m_epoch_last_step, fn,
                  "steps " + std::to_string(first_step) + ".." + std::to_string(last_step) +
                      " overlap or precede step " + std::to_string(m_epoch_last_step) +
                      " already recorded; expected increasing steps");
    for (std::uint64_t id : sample_ids)
      TUTTI_EXPECTS(id < m_header.train_rows, fn,
                    "sample id " + std::to_string(id) + " >= train_rows " +
                        std::to_string(m_header.train_rows) + "; expected ids of the training set");
    detail::audit_bag bag;
    bag.add(sample_ids);
    m_epoch_bag.add(bag);
    m_order->update_le64(sample_ids);
    m_epoch_ids.insert(m_epoch_ids.end(), sample_ids.begin(), sample_ids.end());
    if (m_epoch_records == 0) m_epoch_first_step = first_step;
    m_epoch_last_step = last_step;
    ++m_epoch_records;
    nlohmann::json j = {
        {"type", "record"},
        {"rank", m_header.rank},
        {"epoch", epoch},
        {"shard", m_header.shard},
        {"first_step", first_step},
        {"last_step", last_step},
        {"count", bag.count},
        {"ids_digest", detail::to_hex(detail::blake2b().update_le64(sample_ids).finish())},
        {"sum_a", detail::hex64(bag.sum_a)},
        {"sum_b", detail::hex64(bag.sum_b)},
        {"time", detail::audit_now()}};
    if (!m_header.key_id.empty()) j["key_id"] = m_header.key_id;
    write(std::move(j));
  }

  /// Closes `epoch` with its summary line. `sat_out` lists samples this rank knows sat the
  /// epoch out (a `drop` tail); the verifier counts them towards coverage, never twice.
  void end_epoch(std::uint64_t epoch, std::span<const std::uint64_t> sat_out = {}) {
    constexpr const char* fn = "tutti::data::audit_log::end_epoch";
    TUTTI_EXPECTS(!m_finished, fn, "the trail is finished; expected no more epochs");
    open_epoch(epoch, fn);
    for (std::uint64_t id : sat_out)
      TUTTI_EXPECTS(id < m_header.train_rows, fn,
                    "sat-out id " + std::to_string(id) + " >= train_rows " +
                        std::to_string(m_header.train_rows));
    detail::audit_bag out;
    out.add(sat_out);
    std::vector<std::uint64_t> sorted = std::move(m_epoch_ids);
    std::sort(sorted.begin(), sorted.end());
    nlohmann::json j = {
        {"type", "epoch_summary"},
        {"rank", m_header.rank},
        {"epoch", epoch},
        {"records", m_epoch_records},
        {"first_step", m_epoch_first_step},
        {"last_step", m_epoch_last_step},
        {"count", m_epoch_bag.count},
        {"sum_a", detail::hex64(m_epoch_bag.sum_a)},
        {"sum_b", detail::hex64(m_epoch_bag.sum_b)},
        {"order_digest", detail::to_hex(m_order->finish())},
        {"set_digest", detail::to_hex(detail::blake2b().update_le64(sorted).finish())},
        {"sat_out", out.count},
        {"sat_out_sum_a", detail::hex64(out.sum_a)},
        {"sat_out_sum_b", detail::hex64(out.sum_b)},
        {"time", detail::audit_now()}};
    write(std::move(j));
    m_last_closed = epoch;
    m_epoch.reset();
    m_order.reset();
    m_epoch_ids.clear();
    ++m_epochs;
  }

  /// Writes the `end` line of a completed run; the trail takes no more lines.
  void finish() {
    TUTTI_EXPECTS(!m_finished, "tutti::data::audit_log::finish", "called twice");
    TUTTI_EXPECTS(!m_epoch, "tutti::data::audit_log::finish",
                  "epoch " + std::to_string(m_epoch.value_or(0)) +
                      " is still open; expected end_epoch() first");
    write({{"type", "end"},
           {"rank", m_header.rank},
           {"epochs", m_epochs},
           {"lines", m_lines},
           {"time", detail::audit_now()}});
    m_finished = true;
  }

  /// Hash of the last line written: anchors the whole chain (record it elsewhere to make a
  /// rewrite of the complete file detectable).
  const std::string& head() const noexcept { return m_head; }
  /// The file being written.
  const std::filesystem::path& path() const noexcept { return m_path; }

 private:
  void open_epoch(std::uint64_t epoch, const char* fn) {
    if (m_epoch) {
      TUTTI_EXPECTS(*m_epoch == epoch, fn,
                    "epoch " + std::to_string(epoch) + " while epoch " + std::to_string(*m_epoch) +
                        " is open; expected end_epoch(" + std::to_string(*m_epoch) + ") first");
      return;
    }
    TUTTI_EXPECTS(!m_last_closed || epoch > *m_last_closed, fn,
                  "epoch " + std::to_string(epoch) + " after epoch " +
                      std::to_string(m_last_closed.value_or(0)) +
                      " was closed; expected increasing epochs");
    m_epoch = epoch;
    m_epoch_bag = {};
    m_epoch_records = 0;
    m_epoch_first_step = 0;
    m_epoch_last_step = 0;
    m_order = std::make_unique<detail::blake2b>();
  }

  void write(nlohmann::json j) {
    j["prev"] = m_head;
    const std::string hash = detail::audit_line_hash(j);
    j["hash"] = hash;
    const std::string line = j.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), m_file.get()) != line.size() ||
        std::fflush(m_file.get()) != 0)
      throw error("tutti::data::audit_log: cannot write '" + m_path.string() +
                  "': " + std::strerror(errno));
    m_head = hash;
    ++m_lines;
  }

  audit_header m_header;
  std::filesystem::path m_path;
  std::unique_ptr<std::FILE, detail::audit_file_closer> m_file;
  std::string m_head;
  std::uint64_t m_lines = 0;
  std::uint64_t m_epochs = 0;
  bool m_finished = false;
  std::optional<std::uint64_t> m_epoch;
  std::optional<std::uint64_t> m_last_closed;
  std::uint64_t m_epoch_records = 0;
  std::uint64_t m_epoch_first_step = 0;
  std::uint64_t m_epoch_last_step = 0;
  detail::audit_bag m_epoch_bag;
  std::unique_ptr<detail::blake2b> m_order;
  std::vector<std::uint64_t> m_epoch_ids;
};

/// One thing wrong with a trail. `line` is 1-based; 0 when the fault is the file as a whole, and
/// `file` is empty when it concerns the trail as a whole (an epoch's coverage).
struct audit_problem {
  std::string file;  ///< file name (audit-rank-R.jsonl), or empty
  std::size_t line;  ///< 1-based line, or 0
  std::string what;  ///< what is wrong and what it suggests
};

/// Coverage of one epoch over all ranks.
struct audit_epoch {
  std::uint64_t epoch = 0;     ///< epoch number as recorded
  std::uint64_t consumed = 0;  ///< samples the ranks recorded
  std::uint64_t sat_out = 0;   ///< samples recorded as sitting the epoch out
  bool exactly_once = false;   ///< consumed + sat_out is {0..N-1}, each once
};

/// What `verify_audit` found.
struct audit_report {
  int world_size = 0;                   ///< from the headers
  std::uint64_t train_rows = 0;         ///< from the headers
  std::uint64_t seed = 0;               ///< from the headers
  std::string dataset_digest;           ///< from the headers (hex)
  std::size_t lines = 0;                ///< lines read over all files
  std::size_t records = 0;              ///< record lines over all files
  std::vector<std::string> heads;       ///< per rank, hash of its last line
  std::vector<audit_epoch> epochs;      ///< per epoch, in order
  std::vector<audit_problem> problems;  ///< empty when the trail is sound
  /// True when every chain holds and every epoch covered the training set exactly once.
  bool ok() const noexcept { return problems.empty() && world_size > 0; }
};

/// How strict `verify_audit` is.
struct audit_verify_options {
  bool allow_incomplete = false;  ///< accept trails without their `end` line (a run that died)
  std::size_t max_problems_per_file = 50;  ///< stop listing a file's problems after this many
};

}  // namespace tutti::data

namespace tutti::detail {

/// An epoch as one rank's trail states it.
struct audit_rank_epoch {
  audit_bag consumed;
  audit_bag sat_out;
};

/// What one rank's file states once its lines are checked.
struct audit_rank_trail {
  bool has_header = false;
  nlohmann::json header;
  std::map<std::uint64_t, audit_rank_epoch> epochs;
  std::string head;
  std::size_t lines = 0;
  std::size_t records = 0;
};

/// Checks one rank's file line by line: chain, canonical form, field types and the order of
/// epochs and steps; reports into `report`.
inline audit_rank_trail audit_check_file(const std::filesystem::path& path, int rank,
                                         const data::audit_verify_options& opt,
                                         data::audit_report& report) {
  const std::string name = path.filename().string();
  std::size_t reported = 0;
  auto problem = [&](std::size_t line, const std::string& what) {
    if (reported++ < opt.max_problems_per_file) report.problems.push_back({name, line, what});
  };
  audit_rank_trail t;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problem(0, "cannot be read");
    return t;
  }
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};

  std::string expected_prev = audit_genesis(rank);
  // Plain flags rather than std::optional: GCC's -Wmaybe-uninitialized misfires on the latter.
  bool is_open = false, any_closed = false;
  std::uint64_t open = 0, last_closed = 0;
  std::uint64_t last_step = 0, epochs_closed = 0;
  audit_bag bag;
  std::uint64_t epoch_records = 0;
  bool ended = false;
  std::size_t lineno = 0, pos = 0;

  auto u64 = [](const nlohmann::json& j, const char* key) -> std::optional<std::uint64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<std::uint64_t>();
  };
  auto hex = [](const nlohmann::json& j, const char* key) -> std::optional<std::uint64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return parse_hex64(it->get<std::string>());
  };

  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    const bool terminated = end != std::string::npos;
    if (!terminated) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++lineno;
    if (!terminated) problem(lineno, "the last line has no newline: it was cut while written");

    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      problem(lineno, "not a JSON object: the line was damaged or inserted");
      expected_prev.clear();
      continue;
    }
    auto hash_it = j.find("hash");
    const std::string hash =
        hash_it != j.end() && hash_it->is_string() ? hash_it->get<std::string>() : std::string();
    auto prev_it = j.find("prev");
    const std::string prev =
        prev_it != j.end() && prev_it->is_string() ? prev_it->get<std::string>() : std::string();
    if (hash.empty() || audit_line_hash(j) != hash) {
      problem(lineno, "its hash does not match its content: the line was edited");
    } else if (j.dump() != line) {
      problem(lineno, "not in canonical form (compact, keys sorted): the line was re-written");
    }
    if (!expected_prev.empty() && prev != expected_prev) {
      problem(lineno, lineno == 1
                          ? "its prev is not rank " + std::to_string(rank) +
                                "'s genesis hash: the first line was removed or replaced, or the "
                                "file belongs to another rank"
                          : "its prev is not the hash of line " + std::to_string(lineno - 1) +
                                ": a line was dropped, inserted or reordered here");
    }
    // The recorded hash, not a recomputed one: one edited line gives one report, not a cascade.
    expected_prev = hash;
    t.head = hash;

    if (ended) {
      problem(lineno, "a line after the end line");
      continue;
    }
    const auto type = j.value("type", std::string());
    auto r = j.find("rank");
    if (r == j.end() || !r->is_number_integer() || r->get<std::int64_t>() != rank) {
      problem(lineno, "rank is not " + std::to_string(rank) + " as the file name says");
      continue;
    }
    if (type == "header") {
      if (lineno != 1 || t.has_header) {
        problem(lineno, "a header line after line 1");
        continue;
      }
      if (j.value("format", std::string()) != "tutti-audit" || !u64(j, "version") ||
          *u64(j, "version") != 1 || !u64(j, "train_rows") || *u64(j, "train_rows") == 0 ||
          !u64(j, "world_size") || !u64(j, "seed") || !hex(j, "dataset_digest")) {
        problem(lineno,
                "malformed header (format, version 1, train_rows, world_size, seed, "
                "dataset_digest)");
        continue;
      }
      t.has_header = true;
      t.header = j;
      continue;
    }
    if (!t.has_header) {
      problem(lineno, "a '" + type + "' line before the header");
      continue;
    }
    if (type == "record") {
      ++t.records;
      auto epoch = u64(j, "epoch"), first = u64(j, "first_step"), last = u64(j, "last_step"),
           count = u64(j, "count");
      auto sa = hex(j, "sum_a"), sb = hex(j, "sum_b");
      if (!epoch || !first || !last || !count || !sa || !sb) {
        problem(lineno, "malformed record (epoch, first_step, last_step, count, sum_a, sum_b)");
        continue;
      }
      if (is_open && *epoch != open) {
        problem(lineno, "epoch " + std::to_string(*epoch) + " begins before epoch " +
                            std::to_string(open) + " has its summary");
        is_open = false;
      }
      if (!is_open) {
        if (any_closed && *epoch <= last_closed) {
          problem(lineno, "epoch " + std::to_string(*epoch) + " after epoch " +
                              std::to_string(last_closed) + ": epochs out of order");
        }
        is_open = true;
        open = *epoch;
        bag = {};
        epoch_records = 0;
      } else if (*first <= last_step) {
        problem(lineno, "steps " + std::to_string(*first) + ".." + std::to_string(*last) +
                            " do not follow step " + std::to_string(last_step) +
                            ": records reordered or repeated");
      }
      if (*first > *last) problem(lineno, "first_step > last_step");
      last_step = *last;
      bag.add(audit_bag{*count, *sa, *sb});
      ++epoch_records;
    } else if (type == "epoch_summary") {
      auto epoch = u64(j, "epoch"), records = u64(j, "records"), count = u64(j, "count"),
           sat = u64(j, "sat_out");
      auto sa = hex(j, "sum_a"), sb = hex(j, "sum_b"), oa = hex(j, "sat_out_sum_a"),
           ob = hex(j, "sat_out_sum_b");
      if (!epoch || !records || !count || !sat || !sa || !sb || !oa || !ob) {
        problem(lineno, "malformed epoch_summary");
        continue;
      }
      if (!is_open) {
        if (any_closed && *epoch <= last_closed)
          problem(lineno, "summary of epoch " + std::to_string(*epoch) + " after epoch " +
                              std::to_string(last_closed) + ": epochs out of order");
        bag = {};
        epoch_records = 0;
      } else if (*epoch != open) {
        problem(lineno, "summary of epoch " + std::to_string(*epoch) + " while epoch " +
                            std::to_string(open) + " is open");
      }
      const audit_bag stated{*count, *sa, *sb};
      if (*records != epoch_records || !(stated == bag))
        problem(lineno, "the summary (" + std::to_string(*records) + " records, " +
                            std::to_string(*count) + " samples) disagrees with the epoch's " +
                            std::to_string(epoch_records) + " record lines (" +
                            std::to_string(bag.count) +
                            " samples): a record was removed or "
                            "changed");
      if (t.epochs.count(*epoch) != 0)
        problem(lineno, "a second summary of epoch " + std::to_string(*epoch));
      t.epochs[*epoch] = {stated, audit_bag{*sat, *oa, *ob}};
      last_closed = *epoch;
      any_closed = true;
      is_open = false;
      ++epochs_closed;
    } else if (type == "end") {
      auto epochs = u64(j, "epochs"), lines = u64(j, "lines");
      if (is_open) problem(lineno, "the end line while epoch " + std::to_string(open) + " is open");
      if (!epochs || *epochs != epochs_closed || !lines || *lines != lineno - 1)
        problem(lineno, "the end line states " + std::to_string(epochs.value_or(0)) +
                            " epochs in " + std::to_string(lines.value_or(0)) +
                            " lines; the file holds " + std::to_string(epochs_closed) + " in " +
                            std::to_string(lineno - 1));
      ended = true;
    } else {
      problem(lineno, "unknown line type '" + type + "'");
    }
  }
  t.lines = lineno;
  if (lineno == 0) problem(0, "empty: no header");
  if (is_open)
    problem(lineno, "epoch " + std::to_string(open) +
                        " has no summary: the trail was cut after line " + std::to_string(lineno));
  if (!ended && !opt.allow_incomplete && lineno > 0)
    problem(lineno, "no end line: the trail was cut after line " + std::to_string(lineno) +
                        ", or the run did not finish (accept with allow_incomplete)");
  return t;
}

}  // namespace tutti::detail

namespace tutti::data {

/// Verifies the trail in `dir`: every rank's chain, line order and summaries, headers that agree,
/// and, for every epoch, that the ranks' samples (with any recorded as sitting out) cover
/// 0..train_rows-1 exactly once. Problems name the file and 1-based line.
/// @throws tutti::error only when an existing `dir` cannot be listed.
inline audit_report verify_audit(const std::filesystem::path& dir,
                                 const audit_verify_options& opt = {}) {
  detail::sodium_ready();
  audit_report report;
  std::error_code ec;
  std::map<int, std::filesystem::path> files;
  if (!std::filesystem::is_directory(dir, ec)) {
    report.problems.push_back({"", 0, "'" + dir.string() + "' is not a directory"});
    return report;
  }
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view pre = "audit-rank-", post = ".jsonl";
    if (name.size() <= pre.size() + post.size() || name.compare(0, pre.size(), pre) != 0 ||
        name.compare(name.size() - post.size(), post.size(), post) != 0)
      continue;
    const std::string_view digits(name.data() + pre.size(), name.size() - pre.size() - post.size());
    int r = -1;
    auto [p, e] = std::from_chars(digits.data(), digits.data() + digits.size(), r);
    if (e != std::errc{} || p != digits.data() + digits.size() || r < 0 ||
        detail::audit_file_name(r) != name)
      continue;
    files[r] = it->path();
  }
  if (ec)
    throw error("tutti::data::verify_audit(): cannot list '" + dir.string() + "': " + ec.message());
  if (files.empty()) {
    report.problems.push_back({"", 0, "no audit-rank-R.jsonl files in '" + dir.string() + "'"});
    return report;
  }

  std::map<int, detail::audit_rank_trail> trails;
  for (const auto& [r, path] : files) {
    trails[r] = detail::audit_check_file(path, r, opt, report);
    report.lines += trails[r].lines;
    report.records += trails[r].records;
  }

  // The headers must tell one story; rank 0's (or the lowest rank's) is the reference.
  const detail::audit_rank_trail* ref = nullptr;
  for (const auto& [r, t] : trails)
    if (t.has_header) {
      ref = &t;
      break;
    }
  if (ref == nullptr) {
    report.problems.push_back({"", 0, "no rank's file has a readable header"});
    return report;
  }
  const nlohmann::json& h = ref->header;
  report.world_size = static_cast<int>(h.value("world_size", std::uint64_t{0}));
  report.train_rows = h.value("train_rows", std::uint64_t{0});
  report.seed = h.value("seed", std::uint64_t{0});
  report.dataset_digest = h.value("dataset_digest", std::string());
  for (const auto& [r, t] : trails) {
    if (!t.has_header) continue;
    for (const char* key : {"world_size", "train_rows", "seed", "dataset_digest"})
      if (t.header.value(key, nlohmann::json()) != h.value(key, nlohmann::json()))
        report.problems.push_back({detail::audit_file_name(r), 1,
                                   std::string("its header's ") + key + " differs from rank " +
                                       std::to_string(ref->header.value("rank", 0)) + "'s"});
  }
  for (int r = 0; r < report.world_size; ++r)
    if (files.count(r) == 0)
      report.problems.push_back({detail::audit_file_name(r), 0,
                                 "missing: world size " + std::to_string(report.world_size) +
                                     " needs ranks 0.." + std::to_string(report.world_size - 1)});
  for (const auto& [r, path] : files)
    if (r >= report.world_size)
      report.problems.push_back({path.filename().string(), 0,
                                 "rank " + std::to_string(r) + " beyond world size " +
                                     std::to_string(report.world_size)});
  report.heads.resize(static_cast<std::size_t>(std::max(report.world_size, 0)));
  for (const auto& [r, t] : trails)
    if (r < report.world_size) report.heads[static_cast<std::size_t>(r)] = t.head;

  // Coverage, epoch by epoch, over every rank.
  std::map<std::uint64_t, int> seen;
  for (const auto& [r, t] : trails)
    for (const auto& [e, _] : t.epochs) ++seen[e];
  const detail::audit_bag full = detail::audit_full_bag(report.train_rows);
  for (const auto& [e, ranks_with] : seen) {
    audit_epoch result;
    result.epoch = e;
    detail::audit_bag total;
    for (const auto& [r, t] : trails) {
      auto it = t.epochs.find(e);
      if (it == t.epochs.end()) {
        report.problems.push_back(
            {detail::audit_file_name(r), 0,
             "has no summary of epoch " + std::to_string(e) + ", which other ranks have"});
        continue;
      }
      result.consumed += it->second.consumed.count;
      result.sat_out += it->second.sat_out.count;
      total.add(it->second.consumed);
      total.add(it->second.sat_out);
    }
    result.exactly_once = ranks_with == static_cast<int>(files.size()) && total == full;
    if (total.count != full.count) {
      report.problems.push_back(
          {"", 0,
           "epoch " + std::to_string(e) + ": the ranks consumed " +
               std::to_string(result.consumed) +
               (result.sat_out ? " samples and " + std::to_string(result.sat_out) + " sat out"
                               : std::string(" samples")) +
               "; exactly-once coverage needs " + std::to_string(report.train_rows)});
    } else if (!(total == full)) {
      report.problems.push_back(
          {"", 0,
           "epoch " + std::to_string(e) + ": " + std::to_string(total.count) +
               " samples, but not 0.." + std::to_string(report.train_rows - 1) +
               " each once: some sample was consumed twice and another never"});
    }
    report.epochs.push_back(result);
  }
  return report;
}

}  // namespace tutti::data
