#include "web/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "app/views/heatmap.h"
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

namespace {

// --- heatmaps -----------------------------------------------------------------------------------

constexpr int kCellHeight = 36, kMaxCellWidth = 110;
constexpr double kCharWidth = 6.2;  // pixels a character of 10-pixel text takes, about

// Where a heatmap's cells go: their left and top edge, width, whether the column names slant.
struct HeatFrame {
  int left = 0, top = 0, cell_w = 0, height = 0;
  bool slanted = false;
  double cx(size_t x) const { return left + cell_w * (x + 0.5); }
  int y(size_t row) const { return top + kCellHeight * static_cast<int>(row); }
  int x(size_t column) const { return left + cell_w * static_cast<int>(column); }
};

size_t longest_label(const std::vector<std::string>& values) {
  size_t longest = 1;
  for (const auto& v : values) {
    longest = std::max(longest, app::shortened(v, app::kHeatLabelChars).size());
  }
  return longest;
}

HeatFrame heat_frame(const app::HeatMap& map) {
  HeatFrame f;
  const size_t y_chars = longest_label(map.y_values), x_chars = longest_label(map.x_values);
  f.left = 38 + static_cast<int>(std::min(kCharWidth * y_chars, 240.0));
  const int columns = static_cast<int>(std::max<size_t>(map.x_values.size(), 1));
  f.cell_w = std::min(kMaxCellWidth, (kWidth - f.left - kRight) / columns);
  f.slanted = kCharWidth * x_chars > f.cell_w - 4;
  f.top = 62 + (f.slanted ? static_cast<int>(3.6 * x_chars) : 0);
  f.height = f.y(map.y_values.size()) + 64;  // the scale and the key below the cells
  return f;
}

// The hatches of the marks and the colour scale, named "heatmap-N-...".
std::string heat_defs(const std::string& prefix) {
  std::ostringstream svg;
  svg << "<defs>";
  const std::pair<const char*, const char*> hatches[] = {
      {"pruned", "rotate(45)"}, {"diverged", "rotate(-45)"}, {"failed", "rotate(45)"}};
  for (const auto& [mark, turn] : hatches) {
    svg << "<pattern id=\"" << prefix << mark << "\" width=\"6\" height=\"6\" "
        << "patternUnits=\"userSpaceOnUse\" patternTransform=\"" << turn << "\"><rect width=\"2\" "
        << "height=\"6\" fill=\"#808080\" fill-opacity=\"0.75\"/>"
        << (std::string(mark) == "failed"
                ? "<rect width=\"6\" height=\"2\" fill=\"#808080\" fill-opacity=\"0.75\"/>"
                : "")
        << "</pattern>";
  }
  svg << "<linearGradient id=\"" << prefix << "scale\">";
  for (const auto& [at, colour] : app::heat_stops()) {
    svg << "<stop offset=\"" << at << "\" stop-color=\"" << colour << "\"/>";
  }
  svg << "</linearGradient></defs>";
  return svg.str();
}

// The keys' names and their values along the rows and columns.
void heat_axes(const app::HeatMap& map, const HeatFrame& f, std::ostream& svg) {
  svg << "<text x=\"" << (f.left + f.x(map.x_values.size())) / 2
      << "\" y=\"38\" text-anchor=\"middle\" font-size=\"11\">" << html_escape(map.x_key)
      << "</text><text transform=\"translate(14," << (f.top + f.y(map.y_values.size())) / 2
      << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"11\">" << html_escape(map.y_key)
      << "</text>";
  for (size_t x = 0; x < map.x_values.size(); ++x) {
    const std::string label = html_escape(app::shortened(map.x_values[x], app::kHeatLabelChars));
    svg << "<text class=\"column\" font-size=\"10\" ";
    if (f.slanted) {
      svg << "transform=\"translate(" << fixed(f.cx(x)) << "," << f.top - 6 << ") rotate(-35)\">"
          << label << "</text>";
    } else {
      svg << "x=\"" << fixed(f.cx(x)) << "\" y=\"" << f.top - 6 << "\" text-anchor=\"middle\">"
          << label << "</text>";
    }
  }
  for (size_t y = 0; y < map.y_values.size(); ++y) {
    svg << "<text class=\"row\" x=\"" << f.left - 6 << "\" y=\"" << f.y(y) + kCellHeight / 2 + 4
        << "\" text-anchor=\"end\" font-size=\"10\">"
        << html_escape(app::shortened(map.y_values[y], app::kHeatLabelChars)) << "</text>";
  }
}

// One cell the table has: its colour, hatch, value, mark's name and tooltip.
void heat_cell(const app::HeatMap& map, const app::HeatCell& cell, const HeatFrame& f,
               const std::string& prefix, std::ostream& svg) {
  const bool has = cell.value && std::isfinite(*cell.value);
  const double goodness = has ? app::heat_goodness(map, *cell.value) : 0.5;
  const std::string mark = app::to_string(cell.mark);
  const std::string ink = has && app::heat_dark(goodness) ? "#fff" : "#000";
  const int x = f.x(cell.x), y = f.y(cell.y);
  svg << "<g class=\"cell\" data-row=\"" << html_escape(map.y_values[cell.y]) << "\" data-column=\""
      << html_escape(map.x_values[cell.x]) << "\" data-mark=\"" << mark << "\"><rect x=\"" << x
      << "\" y=\"" << y << "\" width=\"" << f.cell_w << "\" height=\"" << kCellHeight
      << "\" fill=\"" << (has ? app::heat_colour(goodness) : app::kHeatNoValue)
      << "\" stroke=\"#fff\"/>";
  if (!mark.empty()) {
    svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << f.cell_w << "\" height=\""
        << kCellHeight << "\" fill=\"url(#" << prefix << mark << ")\"/>";
  }
  const double cx = f.cx(cell.x);
  svg << "<text class=\"value\" x=\"" << fixed(cx) << "\" y=\""
      << y + (mark.empty() ? kCellHeight / 2 + 4 : 15) << "\" text-anchor=\"middle\" "
      << "font-size=\"12\" fill=\"" << ink << "\">" << html_escape(app::heat_cell_text(cell))
      << "</text>";
  if (!mark.empty()) {
    svg << "<text class=\"mark\" x=\"" << fixed(cx) << "\" y=\"" << y + 29
        << "\" text-anchor=\"middle\" font-size=\"9\" fill=\"" << ink << "\">" << mark << "</text>";
  }
  svg << "<title>"
      << html_escape(map.y_key + "=" + map.y_values[cell.y] + ", " + map.x_key + "=" +
                     map.x_values[cell.x] + ": " + map.metric + " ")
      << (cell.value ? number_text(*cell.value) : "-") << " (" << html_escape(cell.status) << ")";
  if (!cell.others.empty()) {
    svg << "; the best of " << cell.rows << " rows, from " << html_escape(cell.others);
  }
  svg << (cell.answer ? "; the tune search's answer" : "") << "</title></g>";
}

// The colour scale from the worst value to the best, and a key of the marks the map has.
void heat_key(const app::HeatMap& map, const HeatFrame& f, const std::string& prefix,
              std::ostream& svg) {
  const int y = f.y(map.y_values.size()) + 16;
  int x = f.left;
  if (map.lo && map.hi) {
    const double worst = map.higher_is_better ? *map.lo : *map.hi;
    const double best = map.higher_is_better ? *map.hi : *map.lo;
    svg << "<rect class=\"scale\" x=\"" << x << "\" y=\"" << y << "\" width=\"180\" height=\"10\" "
        << "fill=\"url(#" << prefix << "scale)\"/><text x=\"" << x << "\" y=\"" << y + 24
        << "\" font-size=\"10\">" << number_text(worst) << " worst</text><text x=\"" << x + 180
        << "\" y=\"" << y + 24 << "\" text-anchor=\"end\" font-size=\"10\">best "
        << number_text(best) << "</text><text x=\"" << x + 90 << "\" y=\"" << y + 38
        << "\" text-anchor=\"middle\" font-size=\"10\">" << html_escape(map.metric) << " ("
        << app::heatmap_direction(map) << ")</text>";
    x += 200;
  }
  bool present[4] = {false, false, false, false}, valueless = false, answer = false;
  for (const auto& cell : map.cells) {
    present[static_cast<int>(cell.mark)] = true;
    valueless = valueless || !cell.value || !std::isfinite(*cell.value);
    answer = answer || cell.answer;
  }
  // A swatch and its word; `stroke` the swatch's outline attributes.
  auto entry = [&](const std::string& fill, const std::string& stroke, const std::string& word) {
    svg << "<g class=\"key\"><rect x=\"" << x << "\" y=\"" << y - 2 << "\" width=\"14\" "
        << "height=\"14\" fill=\"" << fill << "\" " << stroke << "/><text x=\"" << x + 18
        << "\" y=\"" << y + 10 << "\" font-size=\"10\">" << word << "</text></g>";
    x += 30 + static_cast<int>(kCharWidth * word.size());
  };
  if (valueless) entry(app::kHeatNoValue, "", "no value yet");
  for (int m = 1; m < 4; ++m) {
    const std::string mark = app::to_string(static_cast<app::HeatMark>(m));
    if (present[m]) entry("url(#" + prefix + mark + ")", "stroke=\"#999\"", mark);
  }
  if (answer) {
    const std::string outline =
        std::string("stroke=\"") + app::kHeatAnswer + "\" stroke-width=\"3\"";
    entry("none", outline, "tune answer");
  }
  if (map.cells.size() < map.x_values.size() * map.y_values.size()) {
    entry("none", "stroke=\"#bbb\" stroke-dasharray=\"3 3\"", "not in the sweep");
  }
}

}  // namespace

std::string svg_heatmap(const std::string& id, const app::HeatMap& map, size_t n) {
  const HeatFrame f = heat_frame(map);
  const std::string prefix = "heatmap-" + std::to_string(n) + "-";
  std::ostringstream svg;
  svg << figure_start(id, app::heatmap_title(map), f.height, f.left) << heat_defs(prefix);
  heat_axes(map, f, svg);
  std::vector<bool> filled(map.x_values.size() * map.y_values.size(), false);
  for (const auto& cell : map.cells) {
    heat_cell(map, cell, f, prefix, svg);
    filled[cell.y * map.x_values.size() + cell.x] = true;
  }
  for (size_t i = 0; i < filled.size(); ++i) {  // the combinations the sweep does not have
    if (filled[i]) continue;
    const size_t y = i / map.x_values.size(), x = i % map.x_values.size();
    svg << "<rect class=\"empty\" x=\"" << f.x(x) + 2 << "\" y=\"" << f.y(y) + 2 << "\" width=\""
        << f.cell_w - 4 << "\" height=\"" << kCellHeight - 4 << "\" fill=\"none\" stroke=\"#bbb\" "
        << "stroke-dasharray=\"3 3\"><title>"
        << html_escape(map.y_key + "=" + map.y_values[y] + ", " + map.x_key + "=" + map.x_values[x])
        << ": not in the sweep</title></rect>";
  }
  for (const auto& cell : map.cells) {  // on top of the cells around it
    if (!cell.answer) continue;
    svg << "<rect class=\"answer\" x=\"" << f.x(cell.x) + 1.5 << "\" y=\"" << f.y(cell.y) + 1.5
        << "\" width=\"" << f.cell_w - 3 << "\" height=\"" << kCellHeight - 3
        << "\" fill=\"none\" stroke=\"" << app::kHeatAnswer << "\" stroke-width=\"3\"/>";
  }
  heat_key(map, f, prefix, svg);
  svg << "</svg><figcaption>" << html_escape(app::heatmap_note(map)) << "</figcaption></figure>\n";
  return svg.str();
}

}  // namespace amptune::web
