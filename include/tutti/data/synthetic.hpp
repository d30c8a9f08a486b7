// SPDX-License-Identifier: Apache-2.0
/// @file data/synthetic.hpp
/// @brief `tutti::data::synthetic_courses`: a seeded learner x course dataset with learnable taste.
///
/// Learners and courses carry latent taste vectors; a learner picks courses with probability
/// proportional to a power-law popularity times exp(affinity). Every random number comes from
/// the counter-based generators of detail/random.hpp, so a seed gives the same dataset on every
/// machine and standard library.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace tutti::data {

/// Hyper-parameters of the synthetic course-recommendation data.
struct synthetic_options {
  std::int32_t learners = 4000;          ///< number of learners (users), ids 1..learners
  std::int32_t courses = 500;            ///< number of courses (items), ids 1..courses
  double interactions_per_learner = 30;  ///< mean number of courses a learner takes
  std::int32_t latent_dim = 8;           ///< dimension of the latent taste vectors
  double popularity_exponent = 1.1;      ///< popularity of the course of rank r is r^-exponent
  bool implicit = true;                  ///< 0/1 labels (taken or not) instead of 1-5 ratings
  double negatives_per_positive = 1.0;   ///< implicit: label-0 rows per label-1 row
  double noise = 0.5;                    ///< explicit: standard deviation of the rating noise
  std::uint64_t seed = 42;               ///< the dataset is a function of the options alone
  double taste_strength = 2.0;           ///< weight of affinity in the choice; 0: popularity alone
};

}  // namespace tutti::data

namespace tutti::detail {

/// Seeds of the independent random streams the generator draws from.
enum class synthetic_stream : std::uint64_t {
  learner_taste = 1,
  course_taste,
  learner_bias,
  course_bias,
  learner_rows
};

/// Seed of one stream of the generator.
inline std::uint64_t synthetic_seed(std::uint64_t seed, synthetic_stream s) {
  return hash2(seed, static_cast<std::uint64_t>(s));
}

/// Component `k` of the latent vector of entity `index` in stream `s`.
inline double synthetic_factor(std::uint64_t seed, synthetic_stream s, std::int32_t dim,
                               std::int32_t index, std::int32_t k) {
  return normal01(synthetic_seed(seed, s),
                  static_cast<std::uint64_t>(index) * static_cast<std::uint64_t>(dim) +
                      static_cast<std::uint64_t>(k));
}

/// Checks the options; names the field at fault.
inline void check_synthetic_options(const data::synthetic_options& o) {
  const char* fn = "tutti::data::synthetic_courses";
  TUTTI_EXPECTS(o.learners >= 1, fn,
                "learners = " + std::to_string(o.learners) + "; expected >= 1");
  TUTTI_EXPECTS(o.courses >= 2, fn, "courses = " + std::to_string(o.courses) + "; expected >= 2");
  TUTTI_EXPECTS(std::isfinite(o.interactions_per_learner) && o.interactions_per_learner > 0, fn,
                "interactions_per_learner = " + std::to_string(o.interactions_per_learner) +
                    "; expected a finite number > 0");
  TUTTI_EXPECTS(o.latent_dim >= 1, fn,
                "latent_dim = " + std::to_string(o.latent_dim) + "; expected >= 1");
  TUTTI_EXPECTS(std::isfinite(o.popularity_exponent) && o.popularity_exponent >= 0, fn,
                "popularity_exponent = " + std::to_string(o.popularity_exponent) +
                    "; expected a finite number >= 0");
  TUTTI_EXPECTS(std::isfinite(o.negatives_per_positive) && o.negatives_per_positive >= 0, fn,
                "negatives_per_positive = " + std::to_string(o.negatives_per_positive) +
                    "; expected a finite number >= 0");
  TUTTI_EXPECTS(std::isfinite(o.noise) && o.noise >= 0, fn,
                "noise = " + std::to_string(o.noise) + "; expected a finite number >= 0");
  TUTTI_EXPECTS(
      std::isfinite(o.taste_strength) && o.taste_strength >= 0, fn,
      "taste_strength = " + std::to_string(o.taste_strength) + "; expected a finite number >= 0");
}

/// Gumbel(0, 1) noise from 53 random bits, never infinite.
inline double gumbel(splitmix& rng) {
  double u = (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1.0p-53;
  return -std::log(-std::log(u));
}

}  // namespace tutti::detail

namespace tutti::data {

/// The true affinity of learner `learner` for course `course` (dense indices) in the data
/// `synthetic_courses(opt)` generates: taste_strength * <u, v> / sqrt(latent_dim). A learner
/// takes a course with probability proportional to popularity x exp(affinity).
inline double synthetic_affinity(const synthetic_options& opt, std::int32_t learner,
                                 std::int32_t course) {
  using detail::synthetic_stream;
  double dot = 0;
  for (std::int32_t k = 0; k < opt.latent_dim; ++k)
    dot += detail::synthetic_factor(opt.seed, synthetic_stream::learner_taste, opt.latent_dim,
                                    learner, k) *
           detail::synthetic_factor(opt.seed, synthetic_stream::course_taste, opt.latent_dim,
                                    course, k);
  return opt.taste_strength * dot / std::sqrt(static_cast<double>(opt.latent_dim));
}

/// Generates learner x course interactions. Course `c` (dense index, id c + 1) has popularity
/// rank c + 1. Each learner takes a log-normally varying number of distinct courses, drawn
/// without replacement with probability proportional to popularity x exp(affinity).
/// Implicit: taken courses are label 1, and negatives_per_positive as many courses not taken,
/// drawn by popularity alone, are label 0. Explicit: each taken course is rated
/// round(clamp(3.5 + 0.8 (z - mean z) + learner bias + course bias + noise, 1, 5)), where
/// z = <u, v> / sqrt(latent_dim) is the standardised affinity and the mean runs over all rows.
/// Timestamps increase within each learner's rows; rows are grouped by learner.
/// @throws tutti::invalid_argument on options out of range.
inline interactions synthetic_courses(const synthetic_options& opt = {}) {
  using detail::synthetic_stream;
  detail::check_synthetic_options(opt);
  const auto n_courses = static_cast<std::size_t>(opt.courses);
  const auto dim = static_cast<std::size_t>(opt.latent_dim);
  const double inv_sqrt_dim = 1.0 / std::sqrt(static_cast<double>(dim));

  std::vector<double> course_taste(n_courses * dim);
  std::vector<double> log_popularity(n_courses);
  for (std::size_t c = 0; c < n_courses; ++c) {
    for (std::size_t k = 0; k < dim; ++k)
      course_taste[c * dim + k] =
          detail::synthetic_factor(opt.seed, synthetic_stream::course_taste, opt.latent_dim,
                                   static_cast<std::int32_t>(c), static_cast<std::int32_t>(k));
    log_popularity[c] = -opt.popularity_exponent * std::log(static_cast<double>(c + 1));
  }

  // Positives and negatives together must fit in the catalogue.
  const double rows_per_positive = opt.implicit ? 1.0 + opt.negatives_per_positive : 1.0;
  const auto max_positives = std::max<std::size_t>(
      1, static_cast<std::size_t>(static_cast<double>(n_courses) / rows_per_positive));

  interactions out;
  out.implicit = opt.implicit;
  const auto expected_rows = static_cast<std::size_t>(
      static_cast<double>(opt.learners) * opt.interactions_per_learner * rows_per_positive * 1.1);
  out.users.reserve(expected_rows);
  out.items.reserve(expected_rows);
  out.labels.reserve(expected_rows);
  out.timestamps.reserve(expected_rows);
  out.user_ids.resize(static_cast<std::size_t>(opt.learners));
  std::iota(out.user_ids.begin(), out.user_ids.end(), std::int64_t{1});
  out.item_ids.resize(n_courses);
  std::iota(out.item_ids.begin(), out.item_ids.end(), std::int64_t{1});

  const std::uint64_t rows_seed = detail::synthetic_seed(opt.seed, synthetic_stream::learner_rows);
  const std::uint64_t learner_bias_seed =
      detail::synthetic_seed(opt.seed, synthetic_stream::learner_bias);
  const std::uint64_t course_bias_seed =
      detail::synthetic_seed(opt.seed, synthetic_stream::course_bias);
  constexpr std::int64_t epoch = 1'577'836'800;  // 2020-01-01, so timestamps look like Unix time
  constexpr std::uint64_t day = 86'400;

  std::vector<double> taste(dim), z(n_courses), key(n_courses);
  std::vector<std::int32_t> order(n_courses);
  struct pick {
    std::int32_t course;
    double score;  // the label; for ratings the score before centring and rounding
  };
  std::vector<pick> picks;
  std::vector<double> scores;  // explicit: per row, until the mean z is known
  double sum_z = 0;

  for (std::int32_t l = 0; l < opt.learners; ++l) {
    detail::splitmix rng(detail::hash2(rows_seed, static_cast<std::uint64_t>(l)));
    for (std::size_t k = 0; k < dim; ++k)
      taste[k] = detail::synthetic_factor(opt.seed, synthetic_stream::learner_taste, opt.latent_dim,
                                          l, static_cast<std::int32_t>(k));

    // Log-normal with mean interactions_per_learner: a few heavy learners, many light ones.
    double draw = opt.interactions_per_learner * std::exp(0.6 * rng.normal() - 0.18);
    auto n_pos = static_cast<std::size_t>(std::llround(std::clamp(draw, 1.0, 1e9)));
    n_pos = std::min(n_pos, max_positives);

    // Gumbel top-k: the k largest of log(weight) + Gumbel are k draws without replacement with
    // probability proportional to weight.
    for (std::size_t c = 0; c < n_courses; ++c) {
      double dot = 0;
      for (std::size_t k = 0; k < dim; ++k) dot += taste[k] * course_taste[c * dim + k];
      z[c] = dot * inv_sqrt_dim;
      key[c] = log_popularity[c] + opt.taste_strength * z[c] + detail::gumbel(rng);
    }
    std::iota(order.begin(), order.end(), 0);
    auto by_key = [&](std::int32_t a, std::int32_t b) {
      double ka = key[static_cast<std::size_t>(a)], kb = key[static_cast<std::size_t>(b)];
      return ka > kb || (ka == kb && a < b);
    };
    auto pos_end = order.begin() + static_cast<std::ptrdiff_t>(n_pos);
    std::nth_element(order.begin(), pos_end, order.end(), by_key);

    picks.clear();
    for (auto it = order.begin(); it != pos_end; ++it) picks.push_back({*it, 1.0});

    if (opt.implicit) {
      // Negatives follow popularity alone, so a model has to learn taste to tell them apart.
      double want = static_cast<double>(n_pos) * opt.negatives_per_positive;
      auto n_neg = static_cast<std::size_t>(want);
      if (rng.uniform() < want - static_cast<double>(n_neg)) ++n_neg;
      n_neg = std::min(n_neg, n_courses - n_pos);
      for (auto it = pos_end; it != order.end(); ++it)
        key[static_cast<std::size_t>(*it)] =
            log_popularity[static_cast<std::size_t>(*it)] + detail::gumbel(rng);
      auto neg_end = pos_end + static_cast<std::ptrdiff_t>(n_neg);
      std::nth_element(pos_end, neg_end, order.end(), by_key);
      for (auto it = pos_end; it != neg_end; ++it) picks.push_back({*it, 0.0});
    }
    // nth_element leaves each part in an order that differs between standard libraries;
    // sorting before any further draw keeps the dataset the same everywhere.
    std::sort(picks.begin(), picks.end(),
              [](const pick& a, const pick& b) { return a.course < b.course; });
    if (!opt.implicit) {
      const double learner_bias =
          0.3 * detail::normal01(learner_bias_seed, static_cast<std::uint64_t>(l));
      for (auto& p : picks) {
        auto c = static_cast<std::size_t>(p.course);
        double course_bias = 0.3 * detail::normal01(course_bias_seed, c);
        // Taken courses lean to high z; its mean is removed once all rows are drawn.
        sum_z += z[c];
        p.score = 0.8 * z[c] + learner_bias + course_bias + opt.noise * rng.normal();
      }
    }
    // Interleave positives and negatives in time, as impressions and enrolments would be.
    for (std::size_t i = picks.size(); i > 1; --i) std::swap(picks[i - 1], picks[rng.below(i)]);
    auto t = epoch + static_cast<std::int64_t>(rng.below(180 * day));
    for (const auto& p : picks) {
      t += 60 + static_cast<std::int64_t>(rng.below(2 * day));
      out.users.push_back(l);
      out.items.push_back(p.course);
      out.labels.push_back(static_cast<float>(p.score));
      if (!opt.implicit) scores.push_back(p.score);
      out.timestamps.push_back(t);
    }
  }
  if (!opt.implicit) {
    const double centre = 3.5 - 0.8 * sum_z / static_cast<double>(out.size());
    for (std::size_t i = 0; i < out.size(); ++i)
      out.labels[i] = static_cast<float>(std::round(std::clamp(centre + scores[i], 1.0, 5.0)));
  }
  return out;
}

}  // namespace tutti::data
