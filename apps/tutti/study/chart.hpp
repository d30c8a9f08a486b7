// SPDX-License-Identifier: Apache-2.0
// The printed table and the SVG chart of `tutti study large-batch`: one panel per model x
// dataset, the metric against the global batch under each recipe.
#pragma once

#include "cells.hpp"

#include <tutti/detail/number_format.hpp>
#include <tutti/plan/report.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace tutti::cli::detail {

/// The table of one panel, as printed and as the HTML page shows it.
inline std::string panel_table(const study_baseline& b, const std::vector<study_cell>& cells) {
  using tutti::detail::sfmt;
  std::string s =
      sfmt("%s on %s: test %s (%s is better); baseline %.4f = %s at batch %zu; %s %.4f\n",
           b.model.c_str(), b.dataset.c_str(), b.metric,
           higher_is_better(b.metric) ? "higher" : "lower", b.value, b.recipe.c_str(), b.batch,
           higher_is_better(b.metric) ? "random scores" : "global mean", b.trivial);
  s += sfmt("%7s  %-13s  %9s  %-17s  %8s  %-26s  %11s  %11s  %10s\n", "batch", "recipe", "lr",
            "mean +- std", "vs base", "seeds", "to base", sfmt("to %g%%", b.tolerance).c_str(),
            "samples/s");
  for (const auto& c : cells) {
    if (c.model != b.model || c.dataset != b.dataset) continue;
    std::string seeds;
    for (const auto& r : c.runs) {
      if (!seeds.empty()) seeds += ' ';
      seeds += metric_text(r.final_metric);
    }
    const std::string ms =
        std::isfinite(c.mean) ? sfmt("%.4f +- %.4f", c.mean, c.stdev) : std::string("diverged");
    const std::string gap = std::isfinite(c.gap_percent) ? sfmt("%+.2f%%", c.gap_percent) : "-";
    const auto epochs = [&](const std::optional<std::size_t>& e) {
      return e ? sfmt("%zu ep", *e) : std::string("not reached");
    };
    s += sfmt("%7zu  %-13s  %9.4g  %-17s  %8s  %-26s  %11s  %11s  %10s\n", c.batch,
              c.recipe.name.c_str(), c.runs.front().lr, ms.c_str(), gap.c_str(), seeds.c_str(),
              epochs(c.epochs_to_baseline).c_str(), epochs(c.epochs_to_tolerance).c_str(),
              thousands(c.samples_per_s).c_str());
  }
  return s;
}

inline const char* recipe_color(const std::string& name) {
  if (name == "same") return "#4e79a7";
  if (name == "linear") return "#e15759";
  if (name == "linear-warmup") return "#f28e2b";
  if (name == "sqrt-warmup") return "#59a14f";
  return "#b07aa1";  // lamb
}

// A "nice" axis over [lo, hi]: bounds on whole ticks and the tick step.
inline std::tuple<double, double, double> study_axis(double lo, double hi) {
  if (!(hi > lo)) {
    const double pad = std::max(std::abs(lo) * 0.01, 1e-3);
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / 4.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (const double f : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (f * mag >= raw) {
      step = f * mag;
      break;
    }
  return {step * std::floor(lo / step + 1e-9), step * std::ceil(hi / step - 1e-9), step};
}

/// The chart: one panel per model x dataset, the test metric (mean, with +-std bars) against the
/// global batch on a log2 axis, one line per recipe, the baseline dashed. Every line carries
/// `data-series="MODEL/DATASET/RECIPE"` and `data-points="batch:mean,..."` so a script or a
/// test can read the numbers back. Means beyond the trivial predictor are drawn at its line.
inline std::string study_svg(const std::vector<study_baseline>& panels,
                             const std::vector<study_cell>& cells,
                             const std::vector<std::string>& recipes,
                             const std::vector<std::size_t>& batches) {
  using namespace tutti::detail::plan;  // the report's chart styles and series
  using tutti::detail::sfmt;
  using tutti::detail::xml_escape;
  const double pw = 400, ph = 280, left = 58, right = 12, top = 30, bottom = 44;
  const int columns = panels.size() > 1 ? 2 : 1;
  const int rows = static_cast<int>((panels.size() + 1) / std::size_t(columns));
  const double legend_h = 28;
  const double width = pw * columns, height = legend_h + ph * std::max(rows, 1);
  std::string out = sfmt(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
      "font-family=\"sans-serif\">\n<rect width=\"%g\" height=\"%g\" fill=\"#ffffff\"/>\n",
      width, height, width, height, width, height);
  // One legend for all panels.
  double lx = 10;
  for (const auto& r : recipes) {
    out += sfmt(
        "<line x1=\"%.1f\" y1=\"14\" x2=\"%.1f\" y2=\"14\" stroke=\"%s\" stroke-width=\"2\"/>"
        "<text %s x=\"%.1f\" y=\"18\">%s</text>\n",
        lx, lx + 16, recipe_color(r), tick_style, lx + 20, xml_escape(r).c_str());
    lx += 28 + 7.0 * double(r.size());
  }
  out += sfmt(
      "<line x1=\"%.1f\" y1=\"14\" x2=\"%.1f\" y2=\"14\" stroke=\"#222222\" "
      "stroke-dasharray=\"5 3\"/><text %s x=\"%.1f\" y=\"18\">baseline</text>\n",
      lx, lx + 16, tick_style, lx + 20);
  const double bmin = double(*std::min_element(batches.begin(), batches.end()));
  const double bmax = double(*std::max_element(batches.begin(), batches.end()));
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const study_baseline& b = panels[p];
    const bool auc = higher_is_better(b.metric);
    const double ox = pw * double(int(p) % columns), oy = legend_h + ph * double(int(p) / columns);
    // The y range: every finite mean +- std, capped at the trivial predictor.
    double lo = b.value, hi = b.value;
    for (const auto& c : cells) {
      if (c.model != b.model || c.dataset != b.dataset || !std::isfinite(c.mean)) continue;
      lo = std::min(lo, c.mean - c.stdev);
      hi = std::max(hi, c.mean + c.stdev);
    }
    if (auc)
      lo = std::max(lo, b.trivial);
    else
      hi = std::min(hi, b.trivial);
    const auto [y0, y1, ystep] = study_axis(lo, hi);
    const double x_left = ox + left, x_right = ox + pw - right;
    const double y_top = oy + top, y_bottom = oy + ph - bottom;
    // The smallest and largest batch sit 14 px inside the axes, clear of them.
    const auto px = [&](double x) {
      const double span = std::log2(bmax / bmin), inset = 14;
      return span > 0 ? x_left + inset + (x_right - x_left - 2 * inset) * std::log2(x / bmin) / span
                      : (x_left + x_right) / 2;
    };
    const auto clip = [&](double y) {
      return std::clamp(y, y0, y1);
    };
    const auto py = [&](double y) {
      return y_bottom - (y_bottom - y_top) * (clip(y) - y0) / (y1 - y0);
    };
    out += sfmt("<g data-panel=\"%s/%s\">\n", xml_escape(b.model).c_str(),
                xml_escape(b.dataset).c_str());
    out += sfmt("<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s on %s</text>\n",
                label_style, (x_left + x_right) / 2, oy + 16, xml_escape(b.model).c_str(),
                xml_escape(b.dataset).c_str());
    for (double y = y0; y <= y1 + 1e-9 * std::abs(y1); y += ystep)
      out += sfmt(
          "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
          "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
          grid_style, x_left, py(y), x_right, py(y), tick_style, x_left - 5, py(y) + 4,
          std::round(y / ystep) * ystep);
    for (const std::size_t x : batches)
      out += sfmt(
          "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
          "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%zu</text>\n",
          grid_style, px(double(x)), y_top, px(double(x)), y_bottom, tick_style, px(double(x)),
          y_bottom + 15, x);
    out += sfmt(
        "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
        "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
        axis_style, x_left, y_bottom, x_right, y_bottom, axis_style, x_left, y_top, x_left,
        y_bottom);
    out +=
        sfmt("<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">global batch (log2)</text>\n",
             tick_style, (x_left + x_right) / 2, y_bottom + 32);
    out += sfmt(
        "<text %s transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\">test %s "
        "(%s is better)</text>\n",
        tick_style, ox + 14, (y_top + y_bottom) / 2, b.metric, auc ? "higher" : "lower");
    out += sfmt(
        "<line data-series=\"%s/%s/baseline\" data-points=\"%zu:%.9g\" x1=\"%.1f\" y1=\"%.1f\" "
        "x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222222\" stroke-dasharray=\"5 3\"/>\n",
        xml_escape(b.model).c_str(), xml_escape(b.dataset).c_str(), b.batch, b.value, x_left,
        py(b.value), x_right, py(b.value));
    for (std::size_t ri = 0; ri < recipes.size(); ++ri) {
      const std::string& r = recipes[ri];
      // Recipes that coincide (same and linear at the reference batch) stay visible side by side.
      const double dx = (double(ri) - double(recipes.size() - 1) / 2) * 3.0;
      series_points pts;
      std::string marks, line;
      for (const auto& c : cells) {
        if (c.model != b.model || c.dataset != b.dataset || c.recipe.name != r ||
            !std::isfinite(c.mean))
          continue;
        pts.emplace_back(double(c.batch), c.mean);
        const double x = px(double(c.batch)) + dx;
        line += sfmt("%s%.1f,%.1f", line.empty() ? "" : " ", x, py(c.mean));
        const bool clipped = clip(c.mean) != c.mean;
        marks += sfmt(
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s, batch %zu: %.4f +- "
            "%.4f</title></circle>",
            x, py(c.mean - c.stdev), x, py(c.mean + c.stdev), x, py(c.mean),
            clipped ? "#ffffff" : recipe_color(r), xml_escape(r).c_str(), c.batch, c.mean, c.stdev);
      }
      out += sfmt(
          "<g data-series=\"%s/%s/%s\" data-points=\"%s\" stroke=\"%s\" fill=\"none\">"
          "<polyline points=\"%s\" stroke-width=\"2\"/>%s</g>\n",
          xml_escape(b.model).c_str(), xml_escape(b.dataset).c_str(), xml_escape(r).c_str(),
          points_attr(pts).c_str(), recipe_color(r), line.c_str(), marks.c_str());
    }
    out += "</g>\n";
  }
  return out + "</svg>\n";
}

}  // namespace tutti::cli::detail
