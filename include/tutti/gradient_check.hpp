// SPDX-License-Identifier: Apache-2.0
/// @file gradient_check.hpp
/// @brief `tutti::check_gradient`: a model's analytic gradient (`loss_and_gradient`) against
/// central finite differences of the loss it reports, for users writing their own models.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/concepts.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/buffer.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace tutti {

/// How `check_gradient` compares.
struct gradient_check_options {
  double step = 1e-5;           ///< h of the central difference (f(θ + h) − f(θ − h)) / 2h
  double tolerance = 1e-6;      ///< the largest relative error accepted
  double floor = 1e-3;          ///< relative errors divide by max(|analytic|, |numeric|, floor)
  std::size_t max_checked = 0;  ///< 0: every parameter; else this many, drawn by `seed`
  std::uint64_t seed = 1;       ///< which parameters a sample checks
  std::size_t reported = 10;    ///< mismatches kept in the result, worst first
};

/// One parameter whose analytic and numeric derivatives disagree.
struct gradient_mismatch {
  /// `segment` of a value in the alignment padding between segments.
  static constexpr std::size_t padding = static_cast<std::size_t>(-1);
  std::size_t index = 0;    ///< in the parameter arena
  std::size_t segment = 0;  ///< the layout segment that holds it, or `padding`
  std::size_t row = 0, col = 0;
  double analytic = 0, numeric = 0, relative_error = 0;
};

/// What `check_gradient` found.
struct gradient_check_result {
  std::size_t checked = 0;  ///< parameters compared
  std::size_t nonzero = 0;  ///< of them, those whose analytic derivative is not 0
  double max_relative_error = 0;
  std::size_t failed = 0;                ///< parameters past the tolerance
  std::vector<gradient_mismatch> worst;  ///< up to `reported` of them, worst first
  /// No parameter past the tolerance, and some derivative not 0 (a model that writes no
  /// gradient at all would otherwise pass).
  bool passed() const noexcept { return failed == 0 && nonzero > 0; }
  /// One line per finding: "gradient check: passed, ..." or the worst mismatches with their
  /// segment, row and column.
  std::string describe() const {
    char line[256];
    std::snprintf(line, sizeof line,
                  "gradient check: %s, %zu parameters compared (%zu with a non-zero derivative), "
                  "largest relative error %.3g",
                  passed() ? "passed" : "FAILED", checked, nonzero, max_relative_error);
    std::string s = line;
    if (nonzero == 0) s += "; the model wrote no gradient for this batch";
    if (failed > 0) s += "; " + std::to_string(failed) + " past the tolerance:";
    for (const auto& m : worst) {
      if (m.segment == gradient_mismatch::padding)
        std::snprintf(line, sizeof line, "\n  parameter %zu (alignment padding)", m.index);
      else
        std::snprintf(line, sizeof line, "\n  parameter %zu (segment %zu, row %zu, column %zu)",
                      m.index, m.segment, m.row, m.col);
      s += line;
      std::snprintf(line, sizeof line, ": analytic %.9g, numeric %.9g, relative error %.3g",
                    m.analytic, m.numeric, m.relative_error);
      s += line;
    }
    return s;
  }
};

namespace detail {

/// The model's reported loss (weighted data loss, scale 1) and gradient at `params`.
template <class Model, class T = typename Model::value_type>
double loss_and_gradient_at(Model& model, std::span<const T> params, const batch_view& batch,
                            std::vector<T>* gradient) {
  using Space = typename Model::space_type;
  const Space& s = model.space();
  auto p = make_buffer(s, params);
  const std::vector<T> zeros(params.size(), T(0));
  auto g = make_buffer(s, std::span<const T>(zeros));
  const std::vector<T> zero_loss(1, T(0));
  auto loss = make_buffer(s, std::span<const T>(zero_loss));
  model.loss_and_gradient(std::span<const T>(p.span()), batch, g.span(), T(1), loss.data());
  if (gradient) *gradient = to_host_vector(s, std::span<const T>(g.span()));
  return double(to_host_vector(s, std::span<const T>(loss.span()))[0]);
}

/// The layout segment, row and column of arena index `k`, or false in padding.
inline bool locate(const parameter_layout& layout, std::size_t k, gradient_mismatch& m) {
  const auto& segs = layout.segments();
  for (std::size_t i = 0; i < segs.size(); ++i) {
    if (k < segs[i].offset || k >= segs[i].offset + segs[i].rows * segs[i].cols) continue;
    m.segment = i;
    m.row = (k - segs[i].offset) / segs[i].cols;
    m.col = (k - segs[i].offset) % segs[i].cols;
    return true;
  }
  return false;
}

}  // namespace detail

/// Compares `model`'s gradient at `params` (host memory, the whole arena) on `batch` (memory
/// of the model's space) with central finite differences of the loss it reports, parameter by
/// parameter: the check every new model should pass before it trains.
///
/// It differentiates what `loss_and_gradient` adds into `*loss_sum` (Σ w·L, at scale 1), so a
/// regulariser that enters the gradient but not the reported loss (tutti's models' `l2`) must
/// be off for the check. Run it with `value_type = double`: in float, h = 1e-5 is lost in
/// rounding. Values in the alignment padding between segments are checked too: the loss may not
/// depend on them, nor the gradient write them.
template <class Model>
gradient_check_result check_gradient(Model& model,
                                     std::span<const typename Model::value_type> params,
                                     const batch_view& batch,
                                     const gradient_check_options& options = {}) {
  using T = typename Model::value_type;
  static_assert(check_model<Model>());
  const parameter_layout& layout = model.layout();
  TUTTI_EXPECTS(params.size() == layout.total(), "tutti::check_gradient",
                "params holds " + std::to_string(params.size()) +
                    " values; expected the whole arena, layout().total() = " +
                    std::to_string(layout.total()));
  TUTTI_EXPECTS(options.step > 0 && options.tolerance > 0 && options.floor > 0,
                "tutti::check_gradient", "step, tolerance and floor must be > 0");
  std::vector<T> analytic;
  detail::loss_and_gradient_at(model, params, batch, &analytic);

  std::vector<std::size_t> order(params.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  if (options.max_checked > 0 && options.max_checked < order.size()) {
    detail::splitmix rng(options.seed);
    for (std::size_t k = 0; k < options.max_checked; ++k)
      std::swap(order[k], order[k + rng.below(order.size() - k)]);
    order.resize(options.max_checked);
    std::sort(order.begin(), order.end());
  }

  gradient_check_result out;
  std::vector<T> probe(params.begin(), params.end());
  std::vector<gradient_mismatch> bad;
  for (const std::size_t k : order) {
    const T keep = probe[k];
    probe[k] = keep + T(options.step);
    const double up = detail::loss_and_gradient_at(model, std::span<const T>(probe), batch,
                                                   static_cast<std::vector<T>*>(nullptr));
    probe[k] = keep - T(options.step);
    const double down = detail::loss_and_gradient_at(model, std::span<const T>(probe), batch,
                                                     static_cast<std::vector<T>*>(nullptr));
    probe[k] = keep;
    gradient_mismatch m;
    m.index = k;
    m.analytic = double(analytic[k]);
    m.numeric = (up - down) / (2 * options.step);
    if (!detail::locate(layout, k, m)) m.segment = gradient_mismatch::padding;
    m.relative_error = std::fabs(m.analytic - m.numeric) /
                       std::max({std::fabs(m.analytic), std::fabs(m.numeric), options.floor});
    ++out.checked;
    if (m.analytic != 0) ++out.nonzero;
    out.max_relative_error = std::max(out.max_relative_error, m.relative_error);
    if (!(m.relative_error <= options.tolerance)) bad.push_back(m);
  }
  out.failed = bad.size();
  std::stable_sort(bad.begin(), bad.end(), [](const auto& a, const auto& b) {
    return a.relative_error > b.relative_error;
  });
  if (bad.size() > options.reported) bad.resize(options.reported);
  out.worst = std::move(bad);
  return out;
}

}  // namespace tutti
