// SPDX-License-Identifier: Apache-2.0
/// @file plan/report.hpp
/// @brief The ledger as a picture: one self-contained HTML page with inline SVG charts of
/// speedup against the ideal line, efficiency, cost per epoch, and the step by account.
///
/// Every plotted series is one SVG element carrying `data-series="NAME"` and
/// `data-points="x:y,x:y,..."` (x = devices), so a script or a test can read the numbers back
/// without scraping coordinates. Series names: ideal-speedup, predicted-speedup,
/// measured-speedup, predicted-efficiency, measured-efficiency, cost-per-epoch, and for the
/// stacked bars step-data, step-compute, step-optimizer, step-reduce (predicted, seconds per
/// step) and measured-step-data, ... (the measured step, at its world size).
#pragma once

#include <tutti/detail/checked_file.hpp>
#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/projection.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace tutti {

/// A measured throughput: `samples_per_s` over all `devices` of a real run.
struct measured_point {
  int devices = 1;           ///< devices (ranks) of the run
  double samples_per_s = 0;  ///< its measured throughput
};

/// What the page shows.
struct report_input {
  std::string title = "tutti ledger";      ///< page heading
  projection proj;                         ///< the predicted side (and the measured step)
  std::vector<measured_point> measured{};  ///< measured runs, for the measured speedup
  bool show_measured_step = true;          ///< draw the measured step's accounts as a bar
  std::vector<std::string> notes{};        ///< lines under the heading (commands, machine)
  /// The gradient noise scale per epoch, (epoch, B_simple) where resolved and (epoch, lower
  /// bound) where not, and the run's global batch: a chart when either list is not empty.
  std::vector<std::pair<double, double>> noise_scale{}, noise_scale_at_least{};
  double global_batch = 0;
};

namespace detail::plan {

using series_points = std::vector<std::pair<double, double>>;

inline std::string points_attr(const series_points& pts) {
  std::string s;
  for (const auto& [x, y] : pts) {
    if (!s.empty()) s += ',';
    s += sfmt("%g:%.9g", x, y);
  }
  return s;
}

// A "nice" upper bound and tick step for a linear axis from 0 to v.
inline std::pair<double, double> nice_axis(double v) {
  if (!(v > 0) || !std::isfinite(v)) return {1.0, 0.25};
  const double raw = v / 4.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double f : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (f * mag >= raw) {
      step = f * mag;
      break;
    }
  return {step * std::ceil(v / step - 1e-9), step};
}

struct line_series {
  std::string name;   // data-series
  std::string label;  // legend
  std::string color;
  bool dashed = false;
  bool markers = false;  // circles only (measured points)
  series_points points;
};

// Plot geometry shared by the charts.
struct frame {
  double width = 640, height = 320, left = 64, right = 150, top = 24, bottom = 48;
  double x_max = 1;  // devices; x axis is log2 from 1 to x_max (linear with linear_x)
  bool linear_x = false;
  double y_max = 1, y_step = 0.25;
  bool log_y = false;  // log2 y axis from 1 to y_max (speedup: the ideal line is straight)
  double px(double x) const {
    if (linear_x) return left + (width - left - right) * (x - 1) / std::max(x_max - 1, 1.0);
    const double span = std::max(std::log2(x_max), 1.0);
    return left + (width - left - right) * std::log2(std::max(x, 1.0)) / span;
  }
  double py(double y) const {
    const double share =
        log_y ? std::log2(std::max(y, 1.0)) / std::max(std::log2(y_max), 1.0) : y / y_max;
    return top + (height - top - bottom) * (1.0 - share);
  }
  // The y values that get a grid line and a label.
  std::vector<double> y_ticks() const {
    std::vector<double> t;
    if (log_y)
      for (double y = 1; y <= y_max * (1 + 1e-9); y *= 2) t.push_back(y);
    else
      for (double y = 0; y <= y_max + 1e-9 * y_max; y += y_step) t.push_back(y);
    return t;
  }
};

// Presentation attributes rather than CSS, so a chart copied out of the page still draws.
inline constexpr const char* grid_style = "stroke=\"#e4e4e4\"";
inline constexpr const char* axis_style = "stroke=\"#444444\"";
inline constexpr const char* tick_style = "font-size=\"11\" fill=\"#444444\"";
inline constexpr const char* label_style = "font-size=\"12\" fill=\"#222222\"";

// The x and y axis lines.
inline std::string frame_lines(const frame& f) {
  return sfmt(
      "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
      "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
      axis_style, f.left, f.height - f.bottom, f.width - f.right, f.height - f.bottom, axis_style,
      f.left, f.top, f.left, f.height - f.bottom);
}

inline std::string axes(const frame& f, const std::vector<double>& xs, const std::string& x_label,
                        const std::string& y_label) {
  std::string s;
  for (const double y : f.y_ticks())
    s += sfmt(
        "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
        "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        grid_style, f.left, f.py(y), f.width - f.right, f.py(y), tick_style, f.left - 6,
        f.py(y) + 4, y);
  for (const double x : xs)
    s += sfmt(
        "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
        "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
        grid_style, f.px(x), f.top, f.px(x), f.height - f.bottom, tick_style, f.px(x),
        f.height - f.bottom + 16, x);
  s += frame_lines(f);
  s += sfmt("<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", label_style,
            (f.left + f.width - f.right) / 2, f.height - 10, xml_escape(x_label).c_str());
  s += sfmt(
      "<text %s transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
      label_style, (f.top + f.height - f.bottom) / 2, xml_escape(y_label).c_str());
  return s;
}

inline std::string legend_entry(const frame& f, int i, const std::string& color,
                                const std::string& label, bool dashed, bool box) {
  const double x = f.width - f.right + 12, y = f.top + 8 + 18.0 * i;
  std::string s;
  if (box)
    s = sfmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>", x, y - 5,
             color.c_str());
  else
    s = sfmt(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"2\"%s/>",
        x, y, x + 14, y, color.c_str(), dashed ? " stroke-dasharray=\"5 3\"" : "");
  return s + sfmt("<text %s x=\"%.1f\" y=\"%.1f\">%s</text>\n", tick_style, x + 20, y + 4,
                  xml_escape(label).c_str());
}

inline std::string line_chart(const std::string& id, const std::string& x_label,
                              const std::string& y_label, const std::vector<double>& xs,
                              const std::vector<line_series>& series, bool log_y = false,
                              bool linear_x = false) {
  frame f;
  f.x_max = xs.empty() ? 1 : xs.back();
  f.log_y = log_y;
  f.linear_x = linear_x;
  double y = 0;
  for (const auto& s : series)
    for (const auto& p : s.points)
      if (std::isfinite(p.second)) y = std::max(y, p.second);
  if (log_y)
    f.y_max = std::exp2(std::ceil(std::log2(std::max(y, 2.0))));
  else
    std::tie(f.y_max, f.y_step) = nice_axis(y * 1.05);
  std::string out = sfmt(
      "<svg id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
      "viewBox=\"0 0 %g %g\">\n",
      id.c_str(), f.width, f.height, f.width, f.height);
  out += axes(f, xs, x_label, y_label);
  int i = 0;
  for (const auto& s : series) {
    const std::string attrs = sfmt("data-series=\"%s\" data-points=\"%s\"", s.name.c_str(),
                                   points_attr(s.points).c_str());
    if (s.markers) {
      out += "<g " + attrs + sfmt(" fill=\"%s\">", s.color.c_str());
      for (const auto& [x, v] : s.points)
        out += sfmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\"/>", f.px(x), f.py(v));
      out += "</g>\n";
    } else {
      std::string pts;
      for (const auto& [x, v] : s.points)
        pts += sfmt("%s%.1f,%.1f", pts.empty() ? "" : " ", f.px(x), f.py(v));
      out += sfmt("<polyline %s points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                  attrs.c_str(), pts.c_str(), s.color.c_str(),
                  s.dashed ? " stroke-dasharray=\"5 3\"" : "");
    }
    out += legend_entry(f, i++, s.color, s.label, s.dashed, false);
  }
  return out + "</svg>\n";
}

struct bar_account {
  const char* name;
  const char* label;
  const char* color;
  double projection_row::*field;
};

inline const bar_account (&bar_accounts())[4] {
  static const bar_account a[4] = {
      {"data", "data", "#4e79a7", &projection_row::data_s},
      {"compute", "compute", "#59a14f", &projection_row::compute_s},
      {"optimizer", "optimizer", "#edc948", &projection_row::optimizer_s},
      {"reduce", "reduce (exposed)", "#e15759", &projection_row::reduce_exposed_s},
  };
  return a;
}

inline std::string step_bars(const projection& p, bool show_measured) {
  // The measured step as a row of accounts, drawn first, so the bars compare like with like.
  const measured_step& m = p.measured;
  projection_row measured_row;
  measured_row.devices = m.world_size;
  measured_row.data_s = m.data_s;
  measured_row.compute_s = m.compute_s;
  measured_row.optimizer_s = m.optimizer_s;
  measured_row.reduce_exposed_s = m.reduce_exposed_s;
  measured_row.step_s = m.step_s();
  std::vector<std::pair<std::string, const projection_row*>> bars;
  if (show_measured) bars.emplace_back(sfmt("measured %d", m.world_size), &measured_row);
  for (const auto& r : p.rows) bars.emplace_back(sfmt("%d", r.devices), &r);

  frame f;
  f.width = std::max(640.0, f.left + f.right + 44.0 * double(bars.size()));
  double y = 0;
  for (const auto& b : bars) y = std::max(y, b.second->step_s);
  std::tie(f.y_max, f.y_step) = nice_axis(y * 1e3 * 1.05);  // milliseconds
  const double slot = (f.width - f.left - f.right) / double(std::max<std::size_t>(bars.size(), 1));
  std::string out = sfmt(
      "<svg id=\"step-accounts\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
      "viewBox=\"0 0 %g %g\">\n",
      f.width, f.height, f.width, f.height);
  for (const double v : f.y_ticks())
    out += sfmt(
        "<line %s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
        "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        grid_style, f.left, f.py(v), f.width - f.right, f.py(v), tick_style, f.left - 6,
        f.py(v) + 4, v);
  for (std::size_t i = 0; i < bars.size(); ++i)
    out += sfmt("<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", tick_style,
                f.left + slot * (double(i) + 0.5), f.height - f.bottom + 16,
                xml_escape(bars[i].first).c_str());
  out += sfmt(
      "<text %s x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">devices</text>\n"
      "<text %s transform=\"translate(16 %.1f) rotate(-90)\" "
      "text-anchor=\"middle\">ms per step</text>\n",
      label_style, (f.left + f.width - f.right) / 2, f.height - 10, label_style,
      (f.top + f.height - f.bottom) / 2);
  std::vector<double> base(bars.size(), 0.0);
  int legend = 0;
  for (const auto& acc : bar_accounts()) {
    series_points predicted, measured;
    std::string rects;
    for (std::size_t i = 0; i < bars.size(); ++i) {
      const projection_row& r = *bars[i].second;
      const double v = r.*acc.field;
      const bool is_measured = show_measured && i == 0;
      (is_measured ? measured : predicted).emplace_back(r.devices, v);
      const double y0 = f.py(base[i] * 1e3), y1 = f.py((base[i] + v) * 1e3);
      rects += sfmt(
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>%s, %s: %s</title>"
          "</rect>",
          f.left + slot * (double(i) + 0.15), y1, slot * 0.7, std::max(y0 - y1, 0.0),
          xml_escape(bars[i].first).c_str(), acc.label, duration_text(v).c_str());
      base[i] += v;
      if (is_measured) {
        out += sfmt("<g data-series=\"measured-step-%s\" data-points=\"%s\" fill=\"%s\">%s</g>\n",
                    acc.name, points_attr(measured).c_str(), acc.color, rects.c_str());
        rects.clear();
      }
    }
    out += sfmt("<g data-series=\"step-%s\" data-points=\"%s\" fill=\"%s\">%s</g>\n", acc.name,
                points_attr(predicted).c_str(), acc.color, rects.c_str());
    out += legend_entry(f, legend++, acc.color, acc.label, false, true);
  }
  out += frame_lines(f);
  return out + "</svg>\n";
}

}  // namespace detail::plan

namespace detail::plan {

// The gradient noise scale over the epochs against the global batch; empty without one.
inline std::string noise_scale_section(const report_input& in) {
  if (in.noise_scale.empty() && in.noise_scale_at_least.empty()) return {};
  std::vector<double> xs;
  for (const auto* s : {&in.noise_scale, &in.noise_scale_at_least})
    for (const auto& pt : *s) xs.push_back(pt.first);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  std::vector<line_series> series;
  if (!in.noise_scale.empty())
    series.push_back({"noise-scale", "B_simple", "#4e79a7", false, false, in.noise_scale});
  if (!in.noise_scale_at_least.empty())
    series.push_back({"noise-scale-at-least", "at least (unresolved)", "#f28e2b", false, true,
                      in.noise_scale_at_least});
  series_points batch;
  for (double x : xs) batch.emplace_back(x, in.global_batch);
  series.push_back({"global-batch", "global batch", "#999999", true, false, batch});
  return "<h2>Gradient noise scale</h2>\n" +
         line_chart("noise-scale", "epoch", "samples", xs, series, false, true) +
         "<p>B_simple = tr(&#931;)/|G|&#178;, the batch beyond which a larger one buys little "
         "more progress per step, estimated from the gradients the ranks exchange. It grows as "
         "the loss falls, so the late epochs bound a useful batch; where |G|&#178; is lost in its "
         "noise the chart shows a lower bound.</p>\n";
}

}  // namespace detail::plan

/// The report as one self-contained HTML page (no scripts, no external files).
inline std::string render_report(const report_input& in) {
  using detail::sfmt;
  using detail::xml_escape;
  const projection& p = in.proj;
  std::vector<double> xs;
  detail::plan::series_points ideal, speed, eff, cost;
  for (const auto& r : p.rows) {
    xs.push_back(r.devices);
    ideal.emplace_back(r.devices, r.devices);
    speed.emplace_back(r.devices, r.speedup);
    eff.emplace_back(r.devices, r.efficiency);
    cost.emplace_back(r.devices, r.cost_per_epoch);
  }
  double baseline = p.one_device_samples_per_s;
  for (const auto& m : in.measured)
    if (m.devices == 1 && m.samples_per_s > 0) baseline = m.samples_per_s;
  detail::plan::series_points mspeed, meff;
  for (const auto& m : in.measured) {
    TUTTI_EXPECTS(m.devices >= 1 && m.samples_per_s >= 0, "tutti::render_report",
                  "measured point (" + std::to_string(m.devices) + " devices, " +
                      detail::num(m.samples_per_s) +
                      " samples/s); expected devices >= 1 and samples/s >= 0");
    mspeed.emplace_back(m.devices, m.samples_per_s / baseline);
    meff.emplace_back(m.devices, m.samples_per_s / baseline / m.devices);
    if (std::find(xs.begin(), xs.end(), double(m.devices)) == xs.end()) xs.push_back(m.devices);
  }
  std::sort(xs.begin(), xs.end());

  std::vector<detail::plan::line_series> speed_series = {
      {"ideal-speedup", "ideal (N)", "#999999", true, false, ideal},
      {"predicted-speedup", "predicted", "#4e79a7", false, false, speed}};
  std::vector<detail::plan::line_series> eff_series = {
      {"predicted-efficiency", "predicted", "#4e79a7", false, false, eff}};
  if (!mspeed.empty()) {
    speed_series.push_back({"measured-speedup", "measured", "#e15759", false, true, mspeed});
    eff_series.push_back({"measured-efficiency", "measured", "#e15759", false, true, meff});
  }
  const std::string money =
      p.options.price_per_device_hour == 1.0 ? "cost per epoch (device-hours)" : "cost per epoch";

  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
      xml_escape(in.title) +
      "</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\n"
      "h1{font-size:1.4em}h2{font-size:1.1em;margin-top:28px}\n"
      "pre{background:#f6f6f6;padding:8px;overflow-x:auto}\n"
      "</style>\n</head>\n<body>\n<h1>" +
      xml_escape(in.title) + "</h1>\n";
  for (const auto& n : in.notes) html += "<p>" + xml_escape(n) + "</p>\n";
  if (!p.rows.empty()) {
    // Where the tax is paid: the share of the largest-N step the reduce takes.
    const projection_row& last = p.rows.back();
    html += sfmt(
        "<p>At %d devices the reduce takes %.0f%% of the step (%s of %s); speedup %.2fx, "
        "efficiency %.0f%%.",
        last.devices, 100.0 * last.reduce_exposed_s / last.step_s,
        detail::duration_text(last.reduce_exposed_s).c_str(),
        detail::duration_text(last.step_s).c_str(), last.speedup, 100.0 * last.efficiency);
    html += p.knee ? sfmt(" The knee is at %d devices; the last worth paying for is %d.</p>\n",
                          *p.knee, p.last_worthwhile)
                   : sfmt(" No knee up to %d devices.</p>\n", last.devices);
  }
  html += "<h2>Speedup</h2>\n" + detail::plan::line_chart("speedup", "devices (log2)",
                                                          "speedup (log2)", xs, speed_series, true);
  html += "<h2>Efficiency</h2>\n" +
          detail::plan::line_chart("efficiency", "devices (log2)", "efficiency", xs, eff_series);
  html += "<h2>Cost per epoch</h2>\n" +
          detail::plan::line_chart("cost", "devices (log2)", money, xs,
                                   {{"cost-per-epoch", money, "#59a14f", false, false, cost}});
  html += "<h2>The step by account</h2>\n" + detail::plan::step_bars(p, in.show_measured_step);
  html += "<h2>Table</h2>\n<pre>" + xml_escape(format_projection_table(p)) + "</pre>\n";
  html += detail::plan::noise_scale_section(in);
  return html + "</body>\n</html>\n";
}

/// Writes `render_report(in)` to DIR/report.html, creating DIR; returns the file's path.
/// Throws `tutti::error` when the file cannot be written.
inline std::string write_report(const std::string& dir, const report_input& in) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw error("tutti::write_report(): cannot create '" + dir + "': " + ec.message());
  const std::string path = (std::filesystem::path(dir) / "report.html").string();
  detail::write_file_replacing(path, render_report(in), "tutti::write_report()");
  return path;
}

}  // namespace tutti
