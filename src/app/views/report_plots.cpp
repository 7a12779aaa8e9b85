// app/views/report_plots.h: the one list of plots the report and the live view draw.
#include "app/views/report_plots.h"

namespace amptune::app {

const std::vector<PlotDef>& report_plots() {
  constexpr unsigned kEverywhere = kInReport | kOnSweepPage | kOnRunPage;
  // img/s per epoch is the run page's: the report and the sweep page show a run's img/s as its
  // bar (kThroughput). The live view draws no stacked bars: the time breakdown is the report's.
  // The heatmaps come first: they are the comparison table at a glance, and sit below it.
  static const std::vector<PlotDef> plots = {
      {PlotData::kHeatmaps, "heatmap", "heatmap", "{metric} per pair of swept keys", "", "",
       PlotX::kKey, PlotY::kLinear, PlotStyle::kHeatmap, "", kInReport | kOnSweepPage},
      {PlotData::kMetric, "metric_vs_epoch", "metric", "{metric} per epoch", "epoch",
       "{metric} ({direction})", PlotX::kEpoch, PlotY::kLinear, PlotStyle::kLines,
       "no run of this sweep has a value of {metric} yet", kEverywhere},
      {PlotData::kTrainLoss, "train_loss_vs_epoch", "train_loss", "train loss per epoch", "epoch",
       "train loss", PlotX::kEpoch, PlotY::kLinear, PlotStyle::kLines,
       "no run of this sweep has finished an epoch yet", kEverywhere},
      {PlotData::kLossScale, "loss_scale_vs_step", "loss_scale", "loss scale per global step",
       "global step", "loss scale (log2)", PlotX::kStep, PlotY::kLog2, PlotStyle::kSteps,
       "no run of this sweep recorded loss-scale events (fp32 / O0 runs, or no loss scaling), so "
       "there is no loss-scale plot",
       kEverywhere},
      {PlotData::kImgPerEpoch, "img_s_vs_epoch", "img_s", "training img/s per epoch", "epoch",
       "img/s", PlotX::kEpoch, PlotY::kLinear, PlotStyle::kLines, "no run has a recorded epoch yet",
       kOnRunPage},
      {PlotData::kModuleError, "module_error", "module_error",
       "per-module error (1 - cosine) of the newest diagnosis, modules in execution order",
       "module", "1 - cosine against the reference", PlotX::kModule, PlotY::kLog10,
       PlotStyle::kLines, "no run of this sweep was diagnosed (amptune diagnose RUN)",
       kInReport | kOnRunPage},
      {PlotData::kTuneCurves, "tune_curves", "tune_curves",
       "{metric} of the tune search's reference, start and {answer}", "epoch", "{metric}",
       PlotX::kEpoch, PlotY::kLinear, PlotStyle::kLines,
       "no run of the search has a value of {metric} yet", kInReport | kOnTunePage},
      {PlotData::kThroughput, "throughput", "throughput", "mean training img/s per run", "",
       "img/s", PlotX::kRun, PlotY::kLinear, PlotStyle::kBars, "no run has a recorded epoch yet",
       kInReport | kOnSweepPage},
      {PlotData::kTimes, "times", "times", "time per epoch by phase", "", "seconds per epoch",
       PlotX::kRun, PlotY::kLinear, PlotStyle::kStackedBars,
       "no run of this sweep recorded a time breakdown (epochs recorded before it existed)",
       kInReport},
  };
  return plots;
}

bool has_plot(const ReportModel& model, const PlotDef& plot) {
  if (plot.data == PlotData::kHeatmaps) {
    return !model.heatmaps.maps.empty() || !model.heatmaps.left_out.empty();
  }
  return plot.data != PlotData::kTuneCurves || model.tune.has_value();
}

std::string plot_text(const std::string& text, const ReportModel& model, const PlotDef& plot) {
  const bool tune = plot.data == PlotData::kTuneCurves && model.tune;
  const std::string metric = tune ? model.tune->metric : model.table.metric;
  const bool answered = tune && model.tune->status == records::TuneStatus::kAnswered;
  const std::pair<std::string, std::string> fields[] = {
      {"{metric}", metric},
      {"{direction}", model.table.higher_is_better ? "higher is better" : "lower is better"},
      {"{answer}", answered || !tune ? "answer" : "closest run"}};
  std::string out;
  for (size_t i = 0; i < text.size();) {
    bool replaced = false;
    for (const auto& [field, value] : fields) {
      if (text.compare(i, field.size(), field) != 0) continue;
      out += value;
      i += field.size();
      replaced = true;
      break;
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

std::vector<Series> plot_lines(const ReportModel& model, const PlotDef& plot) {
  switch (plot.data) {
    case PlotData::kMetric:
      return model.metric;
    case PlotData::kTrainLoss:
      return model.train_loss;
    case PlotData::kLossScale:
      return model.loss_scale;
    case PlotData::kImgPerEpoch:
      return model.img_s;
    case PlotData::kModuleError: {
      std::vector<Series> out;
      for (const auto& errors : model.module_error) out.push_back(errors.series);
      return out;
    }
    case PlotData::kTuneCurves:
      return model.tune ? model.tune->curves : std::vector<Series>{};
    case PlotData::kThroughput:
    case PlotData::kTimes:
    case PlotData::kHeatmaps:
      break;
  }
  return {};
}

std::vector<PlotBar> plot_bars(const ReportModel& model, const PlotDef& plot) {
  std::vector<PlotBar> out;
  if (plot.data == PlotData::kThroughput) {
    for (const auto& bar : model.throughput) out.push_back({bar.run_id, bar.label, {bar.img_s}});
  } else if (plot.data == PlotData::kTimes) {
    for (const auto& bar : model.times) out.push_back({bar.run_id, bar.label, bar.seconds});
  }
  return out;
}

}  // namespace amptune::app
