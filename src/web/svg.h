// Plots as inline SVG for the live view (amptune serve): line plots (a series per run, each point
// with its exact value as a tooltip, linear or log axes with app/views/plot_axes.h's ticks, module
// names as x labels), bar charts and heatmaps (app/views/heatmap.h). The SVG is text in the page:
// no script draws it, no file is loaded, and every title and label is HTML-escaped. No torch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "app/views/heatmap.h"

namespace amptune::web {

enum class Scale { kLinear, kLog2, kLog10 };

struct PlotSeries {
  std::string title;                              // the legend's entry (escaped when written)
  std::string href;                               // the legend entry links here when set
  std::vector<std::pair<double, double>> points;  // in x order; non-finite y are left out
  int64_t key = -1;  // picks the colour (a run's id: the same run has one colour on every plot);
                     // -1: the series' position
};

struct LinePlot {
  LinePlot(std::string id_, std::string title_, std::string x_label_, std::string y_label_,
           Scale y_scale_ = Scale::kLinear, bool steps_ = false)
      : id(std::move(id_)),
        title(std::move(title_)),
        x_label(std::move(x_label_)),
        y_label(std::move(y_label_)),
        y_scale(y_scale_),
        steps(steps_) {}
  std::string id;  // the figure's id (data-plot), e.g. "metric"
  std::string title, x_label, y_label;
  Scale y_scale = Scale::kLinear;
  bool steps = false;     // a step line (a loss scale holds until its next change)
  bool x_integer = true;  // x ticks at whole numbers only (epochs, steps)
  // Names for integer x positions (a module's execution index -> its name): ticks there are
  // labelled by name, at most about 24 of them evenly spaced.
  std::vector<std::pair<int, std::string>> x_names;
  std::vector<double> x_marks;  // vertical marks (the first module that departs)
  std::vector<PlotSeries> series;
};

struct BarChart {
  BarChart(std::string id_, std::string title_, std::string y_label_)
      : id(std::move(id_)), title(std::move(title_)), y_label(std::move(y_label_)) {}
  std::string id, title, y_label;
  std::vector<std::pair<std::string, double>> bars;  // label, value
};

// The plot as <figure data-plot="ID"><svg>...</svg><figcaption>legend</figcaption></figure>;
// a plot without a finite point is a note saying so instead ("no data yet").
std::string svg_line_plot(const LinePlot& plot);
std::string svg_bar_chart(const BarChart& chart);
// A heatmap as <figure data-plot="ID">: rows and columns named by the keys' values, each cell a
// <g class="cell"> with data-row, data-column and data-mark, filled with heat_colour (hatched
// when marked, grey without a value), its value printed and a tooltip naming its settings, the
// status and value of its row; a cell the sweep lacks a dashed empty square (class "empty"); the
// answer's cell outlined (class "answer"); under it the colour scale, a key of the marks present
// and heatmap_note. `n` tells apart the patterns of several heatmaps of one page (1, 2, ...).
std::string svg_heatmap(const std::string& id, const app::HeatMap& map, size_t n);

// A value as the pages print it: 6 significant digits (%.6g), "-" for NaN.
std::string number_text(double value);

}  // namespace amptune::web
