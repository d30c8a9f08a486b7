// SPDX-License-Identifier: Apache-2.0
/// @file ranking_options.hpp
/// @brief `tutti train`'s ranking evaluation: `--holdout last` (leave-one-out), `--negatives`,
/// `--top-k`, and `--target METRIC=VALUE` (stop at the first epoch reaching it); their parsing,
/// the candidate lists, and how the results print and go into the JSON report.
#pragma once

#include <tutti/data/leave_one_out.hpp>
#include <tutti/error.hpp>
#include <tutti/ranking.hpp>
#include <tutti/trainer/options.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tutti::cli {

/// What `--holdout`, `--negatives`, `--top-k` and `--target` said.
struct ranking_config {
  std::string holdout = "random";  // random: --test-fraction of the pairs; last: leave-one-out
  std::size_t negatives = 99;      // sampled items ranked with each held-out one (NCF: 100 in all)
  // sampled: --negatives courses per list; full: every course the learner did not take, so HR@K
  // is Recall@K of the full ranking (one held-out course per learner)
  std::string eval = "sampled";
  std::size_t top_k = 10;  // K of HR@K and NDCG@K
  bool top_k_given = false;
  std::string target;  // e.g. hr@10=0.6; empty: none
};

namespace detail {

/// `--target` text: `hr@K=V`, `ndcg@K=V`, `auc=V` or `rmse=V`. A ranking target's K must agree
/// with `--top-k` when both are given; alone, it sets K.
inline std::optional<quality_target> parse_target(ranking_config& r) {
  if (r.target.empty()) return std::nullopt;
  const auto bad = [&](const std::string& why) {
    tutti::detail::throw_invalid("tutti train", "--target " + r.target + ": " + why);
  };
  const std::string_view t = r.target;
  const std::size_t eq = t.find('=');
  if (eq == std::string_view::npos)
    bad("expected METRIC=VALUE, e.g. hr@10=0.6, ndcg@10=0.4, auc=0.8 or rmse=0.9");
  std::string_view name = t.substr(0, eq), value = t.substr(eq + 1);
  quality_target q;
  const char* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, q.value);
  if (ec != std::errc{} || p != end || !std::isfinite(q.value))
    bad("'" + std::string(value) + "' is not a number; expected METRIC=VALUE");
  const std::size_t at = name.find('@');
  const std::string_view metric = name.substr(0, at);
  if (metric == "hr" || metric == "ndcg") {
    q.metric = metric == "hr" ? quality_target::measure::hit_rate : quality_target::measure::ndcg;
    if (at == std::string_view::npos) return q;  // K from --top-k
    std::size_t k = 0;
    const std::string_view ks = name.substr(at + 1);
    const auto [kp, kec] = std::from_chars(ks.data(), ks.data() + ks.size(), k);
    if (kec != std::errc{} || kp != ks.data() + ks.size() || k == 0)
      bad("'" + std::string(ks) + "' is not a cut-off; expected K >= 1 as in hr@10");
    if (r.top_k_given && k != r.top_k)
      bad("K = " + std::to_string(k) + " but --top-k " + std::to_string(r.top_k) +
          "; expected the same K");
    r.top_k = k;
    return q;
  }
  if (at == std::string_view::npos && (metric == "auc" || metric == "rmse")) {
    q.metric = metric == "auc" ? quality_target::measure::auc : quality_target::measure::rmse;
    return q;
  }
  bad("unknown metric '" + std::string(name) + "'; expected hr@K, ndcg@K, auc or rmse");
  return q;
}

/// Checks the ranking options against each other and against the data: `target` is what
/// `parse_target` made of `--target`; `--holdout last` needs every row on every rank (a user's
/// rows must all be seen to hold out the last).
inline void check_ranking(const ranking_config& r, const std::optional<quality_target>& target,
                          bool rank_local, bool logistic) {
  using m = quality_target::measure;
  TUTTI_EXPECTS(r.holdout == "last" || r.holdout == "random", "tutti train",
                "--holdout " + r.holdout + ": expected random or last");
  TUTTI_EXPECTS(r.holdout == "random" || !rank_local, "tutti train",
                "--holdout last with shard keys: each rank sees only its shard, so a learner's "
                "last interaction cannot be chosen; expected a master key or plain data");
  if (!target) return;
  const bool ranking = target->metric == m::hit_rate || target->metric == m::ndcg;
  TUTTI_EXPECTS(r.holdout == "last" || !ranking, "tutti train",
                "--target " + r.target +
                    ": ranking metrics need the leave-one-out protocol; expected --holdout last");
  TUTTI_EXPECTS(target->metric != m::rmse || !logistic, "tutti train",
                "--target " + r.target +
                    ": implicit data is evaluated by AUC; expected --target auc=V (or hr@K=V, "
                    "ndcg@K=V with --holdout last)");
  TUTTI_EXPECTS(
      target->metric != m::auc || logistic, "tutti train",
      "--target " + r.target + ": ratings are evaluated by RMSE; expected --target rmse=V");
  TUTTI_EXPECTS(!(r.holdout == "last" && logistic && target->metric == m::auc), "tutti train",
                "--target auc with --holdout last on implicit data: the held-out rows are all "
                "positives, which have no AUC; expected --target hr@K=V or ndcg@K=V");
}

/// The largest candidate lists `--eval full` builds (learners x courses x 4 bytes).
inline constexpr double full_lists_max_bytes = 4.0 * (1u << 30);

/// The leave-one-out lists of `parts` (held-out rows in `test`): `r.negatives` sampled courses
/// per learner, or under `--eval full` every course the learner did not take.
inline std::shared_ptr<const data::ranking_candidates> ranking_lists(
    const ranking_config& r, const data::split_result& parts, std::uint64_t seed) {
  std::size_t negatives = r.negatives;
  const auto courses = static_cast<std::size_t>(parts.train.n_items());
  TUTTI_EXPECTS(courses >= 2, "tutti train",
                "--holdout last: the training data holds " + std::to_string(courses) +
                    " course(s); expected at least 2 to rank");
  TUTTI_EXPECTS(r.eval == "full" || negatives < courses, "tutti train",
                "--negatives " + std::to_string(negatives) + ": the training data holds " +
                    std::to_string(courses) + " courses, so a list holds at most " +
                    std::to_string(courses - 1) +
                    " beside the held-out one; expected --negatives " +
                    std::to_string(courses - 1) +
                    " or fewer, or --eval full to rank every course a learner did not take");
  if (r.eval == "full") {
    negatives = courses - 1;
    const double bytes = 4.0 * double(parts.test.size()) * double(negatives + 1);
    TUTTI_EXPECTS(bytes <= full_lists_max_bytes, "tutti train",
                  "--eval full: " + std::to_string(parts.test.size()) + " learners x " +
                      std::to_string(courses) + " courses need " +
                      std::to_string(bytes / double(1u << 30)) +
                      " GiB of candidate lists; expected at most 4 GiB (or --eval sampled "
                      "with --negatives N)");
  }
  return std::make_shared<const data::ranking_candidates>(
      data::sample_candidates(parts.train, parts.test, {.negatives = negatives, .seed = seed}));
}

/// " hr@10 0.6123  ndcg@10 0.3456" for an epoch line, or "".
inline std::string ranking_cells(const std::optional<ranking_result>& r) {
  if (!r) return "";
  char s[96];
  std::snprintf(s, sizeof s, "  hr@%zu %.4f  ndcg@%zu %.4f", r->k, r->hit_rate, r->k, r->ndcg);
  return s;
}

inline nlohmann::json to_json(const ranking_result& r) {
  return {{"k", r.k}, {"lists", r.lists}, {"hit_rate", r.hit_rate}, {"ndcg", r.ndcg}};
}

inline const char* target_name(quality_target::measure m) {
  switch (m) {
    case quality_target::measure::rmse:
      return "rmse";
    case quality_target::measure::auc:
      return "auc";
    case quality_target::measure::hit_rate:
      return "hr";
    case quality_target::measure::ndcg:
      return "ndcg";
  }
  return "?";
}

inline nlohmann::json to_json(const quality_target& q, const target_result& t) {
  nlohmann::json j{{"metric", target_name(q.metric)}, {"value", q.value}, {"reached", t.reached}};
  if (t.reached) {
    j["epoch"] = t.epoch;
    j["seconds"] = t.seconds;
    j["reached_value"] = t.value;
  }
  return j;
}

/// "target hr@10 >= 0.6: reached after epoch 3, 12.4 s" or "... not reached in 8 epochs".
inline std::string target_sentence(const ranking_config& r, const quality_target& q,
                                   const target_result& t, std::size_t epochs) {
  const bool ranking =
      q.metric == quality_target::measure::hit_rate || q.metric == quality_target::measure::ndcg;
  std::string name = target_name(q.metric);
  if (ranking) name += "@" + std::to_string(r.top_k);
  char s[160];
  if (t.reached)
    std::snprintf(s, sizeof s, "target %s %s %g: reached after epoch %zu (%.5f), %.1f s",
                  name.c_str(), q.metric == quality_target::measure::rmse ? "<=" : ">=", q.value,
                  t.epoch, t.value, t.seconds);
  else
    std::snprintf(s, sizeof s, "target %s %s %g: not reached in %zu epoch(s)", name.c_str(),
                  q.metric == quality_target::measure::rmse ? "<=" : ">=", q.value, epochs);
  return s;
}

}  // namespace detail

}  // namespace tutti::cli
