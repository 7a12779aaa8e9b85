// The plots drawn from a report's model (app/views/report.h), as one list that both writers
// iterate: the report's gnuplot files (app/views/report_gnuplot.cpp, `amptune report`) and the live
// view's SVG (web/pages.cpp, `amptune serve`). A plot added to the list is drawn wherever its
// `places` say, by both writers, from the model series its `data` names; its title, labels and axes
// are the same on both. How a writer draws an axis kind (gnuplot commands, SVG) stays the writer's.
// No torch.
#pragma once

#include <string>
#include <vector>

#include "app/views/report.h"

namespace amptune::app {

// Which series of the model a plot draws.
enum class PlotData {
  kMetric,       // ReportModel::metric: the primary metric per epoch, along the lineage
  kTrainLoss,    // ReportModel::train_loss
  kLossScale,    // ReportModel::loss_scale: per global step
  kImgPerEpoch,  // ReportModel::img_s: mean training img/s per epoch
  kModuleError,  // ReportModel::module_error: 1 - cosine per module, in execution order
  kTuneCurves,   // ReportModel::tune->curves: the tune search's reference, start and answer
  kThroughput,   // ReportModel::throughput: one bar per run
  kTimes,        // ReportModel::times: a bar per run stacked by kTimePhases
  kHeatmaps,     // ReportModel::heatmaps: one heatmap per pair of the table's keys
};

// x: epochs, global steps, module names, runs, a swept key's values (a heatmap's columns)
enum class PlotX { kEpoch, kStep, kModule, kRun, kKey };
enum class PlotY { kLinear, kLog2, kLog10 };  // the y axis's scale (a heatmap's rows: kLinear)
// kHeatmap: a figure per HeatMap of the model, each titled by heatmap_title; its files
// stem_1.png, stem_2.png, ... (stem_N.dat) in the order of ReportModel::heatmaps.
enum class PlotStyle { kLines, kSteps, kBars, kStackedBars, kHeatmap };

// Where a plot is drawn: bits of PlotDef::places.
enum PlotPlace : unsigned {
  kInReport = 1u << 0,     // amptune report's page (a PNG drawn by gnuplot)
  kOnSweepPage = 1u << 1,  // amptune serve's /sweep/NAME
  kOnRunPage = 1u << 2,    // /run/ID: the run's own series
  kOnTunePage = 1u << 3,   // /sweep/NAME/tune
};

// One plot. Texts may hold {metric} (the plot's metric), {direction} ("higher is better") and
// {answer} ("answer", or "closest run" for a search without one): plot_text fills them in.
struct PlotDef {
  PlotData data;
  std::string stem;  // the report's files: stem.png, stem.dat
  std::string id;    // the live view's figure (data-plot="id")
  std::string title, x_label, y_label;
  PlotX x;
  PlotY y;
  PlotStyle style;
  std::string no_data;  // the report's note in place of a plot without data
  unsigned places;      // PlotPlace bits
};

// Every plot, in the order the pages show them.
const std::vector<PlotDef>& report_plots();

// Whether `model` has the plot at all (the tune curves only for a sweep with a tune search, the
// heatmaps only for a table of two keys or more: drawn, or said to be left out);
// a plot it has may still be without points (the writers then say so).
bool has_plot(const ReportModel& model, const PlotDef& plot);

// `text` of `plot` with its {metric}, {direction} and {answer} filled in from `model`.
std::string plot_text(const std::string& text, const ReportModel& model, const PlotDef& plot);

// The lines of a line plot (PlotStyle kLines, kSteps), one series per run, from `model`.
std::vector<Series> plot_lines(const ReportModel& model, const PlotDef& plot);

// The bars of a bar chart (PlotStyle kBars: one value; kStackedBars: one per kTimePhases).
struct PlotBar {
  int64_t run_id = 0;
  std::string label;
  std::vector<double> values;
};
std::vector<PlotBar> plot_bars(const ReportModel& model, const PlotDef& plot);

}  // namespace amptune::app
