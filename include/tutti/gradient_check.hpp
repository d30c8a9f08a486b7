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
  /// The parts of the `loss_and_gradient` contract the model broke, one sentence each: a scale
  /// other than 1 not applied, gradients or the loss sum written over instead of added to, two
  /// micro-batches that do not add up to the whole batch (docs/models.md).
  std::vector<std::string> contract;
  /// No parameter past the tolerance, some derivative not 0 (a model that writes no gradient
  /// at all would otherwise pass), and the contract kept.
  bool passed() const noexcept { return failed == 0 && nonzero > 0 && contract.empty(); }
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
    for (const auto& c : contract) s += "\n  contract: " + c;
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

/// What `loss_and_gradient` leaves after one call per batch of `batches` at `scale`, into a
/// gradient that held `start` and a loss sum that held `start_loss`: the loss sum, and the
/// gradient in `*gradient` when asked.
template <class Model, class T = typename Model::value_type>
double accumulate_at(Model& model, std::span<const T> params, std::span<const batch_view> batches,
                     std::span<const T> start, T start_loss, T scale, std::vector<T>* gradient) {
  using Space = typename Model::space_type;
  const Space& s = model.space();
  auto p = make_buffer(s, params);
  auto g = make_buffer(s, start);
  auto loss = make_buffer(s, std::span<const T>(&start_loss, 1));
  for (const batch_view& b : batches)
    model.loss_and_gradient(std::span<const T>(p.span()), b, g.span(), scale, loss.data());
  if (gradient) *gradient = to_host_vector(s, std::span<const T>(g.span()));
  return double(to_host_vector(s, std::span<const T>(loss.span()))[0]);
}

/// The model's reported loss (weighted data loss, scale 1) and gradient at `params`.
template <class Model, class T = typename Model::value_type>
double loss_and_gradient_at(Model& model, std::span<const T> params, const batch_view& batch,
                            std::vector<T>* gradient) {
  const std::vector<T> zeros(params.size(), T(0));
  return accumulate_at(model, params, std::span<const batch_view>(&batch, 1),
                       std::span<const T>(zeros), T(0), T(1), gradient);
}

/// Relative error as the derivative check measures it.
inline double relative_error(double got, double want, double floor) {
  return std::fabs(got - want) / std::max({std::fabs(got), std::fabs(want), floor});
}

/// The index of `got`'s value furthest (relatively) from `want`'s, or npos when every one is
/// within `tolerance`.
template <class T>
std::size_t worst_outside(const std::vector<T>& got, const std::vector<double>& want,
                          const gradient_check_options& o) {
  std::size_t worst = static_cast<std::size_t>(-1);
  double err = o.tolerance;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double e = relative_error(double(got[k]), want[k], o.floor);
    if (!(e <= err)) {
      err = e;
      worst = k;
    }
  }
  return worst;
}

/// "parameter 12 is 0.5; expected 0.3" for the contract's sentences.
inline std::string value_text(std::size_t k, double got, double want) {
  char line[128];
  std::snprintf(line, sizeof line, "parameter %zu is %.9g; expected %.9g", k, got, want);
  return line;
}

/// The `loss_and_gradient` contract beyond the derivatives, given the gradient `g1` and loss
/// `l1` of one call at scale 1 into zeros: a call at scale 3/8 onto gradients and a loss sum
/// that are not zero must add 3/8 of the gradient and the whole loss; the batch's two halves,
/// called one after the other into one gradient, must add up to the whole batch's. What fails
/// goes into `out.contract`.
template <class Model, class T = typename Model::value_type>
void check_contract(Model& model, std::span<const T> params, const batch_view& batch,
                    const std::vector<T>& g1, double l1, const gradient_check_options& o,
                    gradient_check_result& out) {
  constexpr double scale = 0.375;
  constexpr T start_loss = T(1.5);
  std::vector<T> start(g1.size());
  for (std::size_t k = 0; k < start.size(); ++k) start[k] = T(0.25 * (double(k % 7) - 3.0));
  std::vector<T> g;
  double l = accumulate_at(model, params, std::span<const batch_view>(&batch, 1),
                           std::span<const T>(start), start_loss, T(scale), &g);
  std::vector<double> want(g1.size());
  for (std::size_t k = 0; k < want.size(); ++k) want[k] = double(start[k]) + scale * double(g1[k]);
  if (const std::size_t k = worst_outside(g, want, o); k != static_cast<std::size_t>(-1))
    out.contract.push_back("called with scale 0.375 onto a gradient that was not zero, " +
                           value_text(k, double(g[k]), want[k]) +
                           " (what it held + 0.375 x its derivative): expected the model to "
                           "multiply by scale and add into grads");
  if (relative_error(l, double(start_loss) + l1, o.floor) > o.tolerance)
    out.contract.push_back("called onto a loss sum of 1.5, it left " + std::to_string(l) +
                           "; expected 1.5 + " + std::to_string(l1) +
                           " (the data loss added, at scale 1, whatever the scale)");
  // Halves of whole lists (`batch_view::list_size`): a list loss reads a list at once.
  const std::size_t list = batch.list_size > 0 ? batch.list_size : 1;
  const std::size_t half = batch.size() / list / 2 * list;
  if (half == 0) return;
  const auto part = [&](std::size_t b, std::size_t n) {
    return batch_view{
        batch.users.subspan(b, n),   batch.items.subspan(b, n), batch.labels.subspan(b, n),
        batch.weights.subspan(b, n), batch.list_size,           batch.item_log_q};
  };
  const batch_view halves[2] = {part(0, half), part(half, batch.size() - half)};
  const std::vector<T> zeros(g1.size(), T(0));
  l = accumulate_at(model, params, std::span<const batch_view>(halves), std::span<const T>(zeros),
                    T(0), T(1), &g);
  for (std::size_t k = 0; k < want.size(); ++k) want[k] = double(g1[k]);
  if (const std::size_t k = worst_outside(g, want, o); k != static_cast<std::size_t>(-1))
    out.contract.push_back("the batch's two halves, one call each into one gradient, left " +
                           value_text(k, double(g[k]), want[k]) +
                           " (the whole batch's): expected a sum over slots, not a mean");
  if (relative_error(l, l1, o.floor) > o.tolerance)
    out.contract.push_back("the batch's two halves added a loss of " + std::to_string(l) +
                           "; expected the whole batch's " + std::to_string(l1));
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
/// parameter, and checks the rest of the `loss_and_gradient` contract that W ranks and
/// accumulation rely on (a scale other than 1 applied, gradients and loss added onto what the
/// buffers held, micro-batches that add up to the batch): the check every new model should
/// pass before it trains.
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
  const double loss = detail::loss_and_gradient_at(model, params, batch, &analytic);

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
    m.relative_error = detail::relative_error(m.analytic, m.numeric, options.floor);
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
  detail::check_contract(model, params, batch, analytic, loss, options, out);
  return out;
}

}  // namespace tutti
