#include "web/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "app/views/plot_axes.h"
#include "app/views/report_html.h"
#include "app/views/table.h"

namespace amptune::web {
namespace {

using app::html_escape;
using app::Tick;

constexpr int kWidth = 760, kHeight = 340, kLeft = 76, kRight = 16, kTop = 34;
constexpr size_t kMaxMarkedPoints = 400;  // points per series drawn with a tooltip circle
constexpr size_t kMaxNamedTicks = 24;
const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string colour(const PlotSeries& series, size_t index) {
  const size_t i = series.key >= 0 ? static_cast<size_t>(series.key) : index;
  return kColours[i % (sizeof kColours / sizeof *kColours)];
}

std::string fixed(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// A tick label as SVG text: "2^-8" with the exponent raised.
std::string tick_text(const std::string& label) {
  if (label.rfind("2^", 0) != 0) return html_escape(label);
  return "2<tspan dy=\"-6\" font-size=\"9\">" + html_escape(label.substr(2)) + "</tspan>";
}

double transformed(double v, Scale scale) {
  if (scale == Scale::kLog2) return std::log2(v);
  if (scale == Scale::kLog10) return std::log10(v);
  return v;
}

// The frame of a plot: the axes' ranges and the mapping of values to pixels.
struct Frame {
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;  // y in the scale's transformed units
  Scale y_scale = Scale::kLinear;
  int bottom = 48;  // pixels below the plot area
  double px(double x) const {
    return kLeft + (x - x_lo) / (x_hi - x_lo) * (kWidth - kLeft - kRight);
  }
  double py(double y) const {
    const double t = (transformed(y, y_scale) - y_lo) / (y_hi - y_lo);
    return kTop + (1 - t) * (kHeight - kTop - bottom);
  }
};

std::vector<std::vector<std::pair<double, double>>> usable_points(const LinePlot& plot) {
  std::vector<std::vector<std::pair<double, double>>> all;
  for (const auto& series : plot.series) {
    auto& points = all.emplace_back();
    for (const auto& [x, y] : series.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (plot.y_scale != Scale::kLinear && y <= 0) continue;
      points.emplace_back(x, y);
    }
  }
  return all;
}

std::vector<Tick> y_ticks(double lo, double hi, Scale scale) {
  if (scale == Scale::kLog2) return app::log2_ticks(lo, hi);
  if (scale == Scale::kLog10) return app::log10_ticks(lo, hi);
  return app::linear_ticks(lo, hi);
}

void x_axis(const LinePlot& plot, const Frame& f, std::ostream& svg) {
  const double y = kHeight - f.bottom;
  if (!plot.x_names.empty()) {
    const size_t every = (plot.x_names.size() + kMaxNamedTicks - 1) / kMaxNamedTicks;
    for (size_t i = 0; i < plot.x_names.size(); i += every) {
      const double x = f.px(plot.x_names[i].first);
      svg << "<text class=\"name\" transform=\"translate(" << fixed(x) << "," << fixed(y + 8)
          << ") rotate(-60)\" text-anchor=\"end\" font-size=\"9\">"
          << html_escape(plot.x_names[i].second) << "</text>";
    }
    return;
  }
  for (const Tick& tick : app::linear_ticks(f.x_lo, f.x_hi)) {
    if (tick.value < f.x_lo - 1e-9 || tick.value > f.x_hi + 1e-9) continue;
    if (plot.x_integer && tick.value != std::floor(tick.value)) continue;
    const double x = f.px(tick.value);
    svg << "<line x1=\"" << fixed(x) << "\" x2=\"" << fixed(x) << "\" y1=\"" << y << "\" y2=\""
        << y + 4 << "\" stroke=\"#444\"/><text x=\"" << fixed(x) << "\" y=\"" << y + 16
        << "\" text-anchor=\"middle\" font-size=\"10\">" << tick_text(tick.label) << "</text>";
  }
}

void y_axis(const std::vector<Tick>& ticks, const Frame& f, std::ostream& svg) {
  for (const Tick& tick : ticks) {
    const double y = f.py(tick.value);
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kWidth - kRight << "\" y1=\"" << fixed(y)
        << "\" y2=\"" << fixed(y) << "\" stroke=\"#e4e4e4\"/><text x=\"" << kLeft - 6 << "\" y=\""
        << fixed(y + 4) << "\" text-anchor=\"end\" font-size=\"10\">" << tick_text(tick.label)
        << "</text>";
  }
}

void series_path(const PlotSeries& series, const std::vector<std::pair<double, double>>& points,
                 size_t index, const LinePlot& plot, const Frame& f, std::ostream& svg) {
  svg << "<g class=\"series\" data-series=\"" << html_escape(series.title) << "\"><polyline "
      << "fill=\"none\" stroke-width=\"1.6\" stroke=\"" << colour(series, index) << "\" points=\"";
  for (size_t i = 0; i < points.size(); ++i) {
    if (plot.steps && i > 0) {
      svg << fixed(f.px(points[i].first)) << "," << fixed(f.py(points[i - 1].second)) << " ";
    }
    svg << fixed(f.px(points[i].first)) << "," << fixed(f.py(points[i].second)) << " ";
  }
  svg << "\"/>";
  if (points.size() <= kMaxMarkedPoints) {
    for (const auto& [x, y] : points) {
      svg << "<circle cx=\"" << fixed(f.px(x)) << "\" cy=\"" << fixed(f.py(y)) << "\" r=\"2.5\" "
          << "fill=\"" << colour(series, index) << "\"><title>" << html_escape(series.title) << " "
          << html_escape(plot.x_label) << " " << number_text(x) << ": " << number_text(y)
          << "</title></circle>";
    }
  }
  svg << "</g>";
}

std::string legend(const LinePlot& plot,
                   const std::vector<std::vector<std::pair<double, double>>>& points) {
  std::ostringstream html;
  html << "<figcaption>";
  for (size_t i = 0; i < plot.series.size(); ++i) {
    if (points[i].empty()) continue;
    const PlotSeries& series = plot.series[i];
    html << "<span class=\"key\"><span style=\"color:" << colour(series, i) << "\">&#9632;</span> ";
    if (series.href.empty()) {
      html << html_escape(series.title);
    } else {
      html << "<a href=\"" << html_escape(series.href) << "\">" << html_escape(series.title)
           << "</a>";
    }
    html << "</span> ";
  }
  html << "</figcaption>";
  return html.str();
}

// <figure data-plot="ID"><svg ...> with the title at `title_x`.
std::string figure_start(const std::string& id, const std::string& title, int height, int title_x) {
  return "<figure class=\"plot\" data-plot=\"" + html_escape(id) +
         "\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + std::to_string(kWidth) +
         " " + std::to_string(height) + "\" role=\"img\" aria-label=\"" + html_escape(title) +
         "\"><text x=\"" + std::to_string(title_x) +
         "\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" + html_escape(title) + "</text>";
}

std::string no_data(const std::string& id, const std::string& title) {
  return "<figure class=\"plot\" data-plot=\"" + html_escape(id) + "\"><p class=\"note\">" +
         html_escape(title) + ": no data yet</p></figure>\n";
}

}  // namespace

std::string number_text(double value) {
  return std::isnan(value) ? "-" : app::significant(value, 6);
}

std::string svg_line_plot(const LinePlot& plot) {
  const auto points = usable_points(plot);
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const auto& series : points) {
    for (const auto& [x, y] : series) {
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  }
  if (!std::isfinite(x_lo)) return no_data(plot.id, plot.title);
  Frame f;
  f.y_scale = plot.y_scale;
  f.bottom = plot.x_names.empty() ? 48 : 130;
  f.x_lo = x_lo, f.x_hi = x_hi > x_lo ? x_hi : x_lo + 1;
  const std::vector<Tick> ticks = y_ticks(y_lo, y_hi, plot.y_scale);
  f.y_lo = transformed(ticks.front().value, plot.y_scale);
  f.y_hi = transformed(ticks.back().value, plot.y_scale);
  if (f.y_hi <= f.y_lo) f.y_hi = f.y_lo + 1;
  std::ostringstream svg;
  svg << figure_start(plot.id, plot.title, kHeight, kLeft);
  y_axis(ticks, f, svg);
  x_axis(plot, f, svg);
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kWidth - kLeft - kRight
      << "\" height=\"" << kHeight - kTop - f.bottom << "\" fill=\"none\" stroke=\"#888\"/>";
  for (double mark : plot.x_marks) {
    svg << "<line class=\"mark\" x1=\"" << fixed(f.px(mark)) << "\" x2=\"" << fixed(f.px(mark))
        << "\" y1=\"" << kTop << "\" y2=\"" << kHeight - f.bottom
        << "\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>";
  }
  for (size_t i = 0; i < plot.series.size(); ++i) {
    if (!points[i].empty()) series_path(plot.series[i], points[i], i, plot, f, svg);
  }
  svg << "<text x=\"" << (kLeft + kWidth - kRight) / 2 << "\" y=\"" << kHeight - 4
      << "\" text-anchor=\"middle\" font-size=\"11\">" << html_escape(plot.x_label)
      << "</text><text transform=\"translate(14," << (kTop + kHeight - f.bottom) / 2
      << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"11\">" << html_escape(plot.y_label)
      << "</text></svg>" << legend(plot, points) << "</figure>\n";
  return svg.str();
}

std::string svg_bar_chart(const BarChart& chart) {
  double hi = 0;
  for (const auto& [label, value] : chart.bars) {
    if (std::isfinite(value)) hi = std::max(hi, value);
  }
  if (chart.bars.empty() || hi <= 0) return no_data(chart.id, chart.title);
  const int row = 20, height = kTop + row * static_cast<int>(chart.bars.size()) + 36;
  const int left = 260, width = kWidth - left - kRight;
  const std::vector<Tick> ticks = app::linear_ticks(0, hi);
  const double top = ticks.back().value;
  std::ostringstream svg;
  svg << figure_start(chart.id, chart.title, height, left);
  for (const Tick& tick : ticks) {
    const double x = left + tick.value / top * width;
    svg << "<line x1=\"" << fixed(x) << "\" x2=\"" << fixed(x) << "\" y1=\"" << kTop << "\" y2=\""
        << height - 30 << "\" stroke=\"#e4e4e4\"/><text x=\"" << fixed(x) << "\" y=\""
        << height - 16 << "\" text-anchor=\"middle\" font-size=\"10\">" << html_escape(tick.label)
        << "</text>";
  }
  for (size_t i = 0; i < chart.bars.size(); ++i) {
    const auto& [label, value] = chart.bars[i];
    const double w = std::isfinite(value) ? std::max(0.0, value) / top * width : 0;
    const int y = kTop + row * static_cast<int>(i);
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y + 14 << "\" text-anchor=\"end\" "
        << "font-size=\"10\">" << html_escape(label) << "</text><rect x=\"" << left << "\" y=\""
        << y + 3 << "\" width=\"" << fixed(w) << "\" height=\"" << row - 6 << "\" fill=\""
        << kColours[0] << "\"><title>" << html_escape(label) << ": " << number_text(value) << " "
        << html_escape(chart.y_label) << "</title></rect>";
  }
  svg << "<text x=\"" << left + width / 2 << "\" y=\"" << height - 2
      << "\" text-anchor=\"middle\" font-size=\"11\">" << html_escape(chart.y_label)
      << "</text></svg></figure>\n";
  return svg.str();
}

}  // namespace amptune::web
