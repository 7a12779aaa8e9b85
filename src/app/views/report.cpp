// app/views/report.h build_report, build_run_plots: the report's model, read from the store.
#include "app/views/report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "app/views/table.h"
#include "core/error.h"
#include "core/process.h"
#include "train/diagnose.h"
#include "train/model_info.h"

namespace amptune::app {
namespace {

// --- the model ----------------------------------------------------------------------------------

// A pruned run says where its prune rule stopped it.
std::string run_title(const records::RunRow& run) {
  const std::string title = run.label.empty() ? run.name : run.label;
  if (run.status != records::RunStatus::kPruned) return title;
  return title + " (pruned after epoch " + std::to_string(run.epochs_done - 1) + ")";
}

// The runs a report reads, by id: the sweep's, and ancestors elsewhere read once when asked for.
class RunIndex {
 public:
  RunIndex(const store::Store& store, const std::vector<records::RunRow>& runs) : store_(store) {
    for (const auto& run : runs) runs_[run.id] = &run;
  }
  const records::RunRow* find(int64_t id) const {
    if (const auto it = runs_.find(id); it != runs_.end()) return it->second;
    auto [it, added] = others_.try_emplace(id);
    if (added) it->second = store_.find_run(id);
    return it->second ? &*it->second : nullptr;
  }
  std::string name(int64_t id) const {
    const records::RunRow* run = find(id);
    return run ? run->name : "run " + std::to_string(id);
  }

 private:
  const store::Store& store_;
  std::map<int64_t, const records::RunRow*> runs_;
  mutable std::map<int64_t, std::optional<records::RunRow>> others_;
};

// Calls visit(ancestor id, upto) for `run_id` and each run up its fork chain, `upto` the last
// epoch of the ancestor on the lineage (INT_MAX for the run itself). One step per ancestor,
// however deep the chain; a parent link that leads back to a run already visited (a database
// edited by hand) ends the walk.
template <typename Visit>
void walk_lineage(const RunIndex& runs, int64_t run_id, Visit visit) {
  std::set<int64_t> seen;
  int upto = std::numeric_limits<int>::max();
  while (upto >= 0 && seen.insert(run_id).second) {  // past epoch 0 no ancestor adds a point
    check_work_bound();  // a chain of 100,000 forks: the live view's page bound stops it
    visit(run_id, upto);
    const records::RunRow* run = runs.find(run_id);
    if (!run || !run->fork) break;
    upto = std::min(upto, run->fork->parent_epoch);
    run_id = run->fork->parent_run_id;
  }
}

// Metric and train loss along the lineage of the first kMaxPlottedRuns runs (by id) that have a
// point, one series per run. Each plotted run reads its own and its ancestors' epoch rows: the
// work is the plotted lineages', not every run's full lineage (the lineage view's).
void lineage_series(const store::Store& store, const RunIndex& index,
                    const std::map<int64_t, const records::RunRow*>& runs, ReportModel* model,
                    const std::vector<records::EpochRow>* known = nullptr) {
  for (const auto& [id, run] : runs) {
    std::map<int, std::array<double, 3>> points;  // epoch -> (metric, train loss, img/s)
    walk_lineage(index, id, [&](int64_t ancestor, int upto) {
      // A run's own epochs already read (`known`, the run page's) are not read again: 10,000
      // metrics x 100 epochs take a second each time.
      const bool own = known != nullptr && ancestor == id;
      const std::vector<records::EpochRow> read =
          own ? std::vector<records::EpochRow>{} : store.epochs(ancestor);
      for (const auto& e : own ? *known : read) {
        if (e.epoch > upto) continue;
        points.emplace(e.epoch, std::array<double, 3>{records::epoch_value(e, run->primary_metric),
                                                      e.train_loss, e.train_fps_mean});
      }
    });
    if (points.empty()) continue;
    if (model->metric.size() == kMaxPlottedRuns) {
      model->truncated = true;
      return;
    }
    std::vector<Series*> lines = {&model->metric.emplace_back(), &model->train_loss.emplace_back(),
                                  &model->img_s.emplace_back()};
    for (size_t i = 0; i < lines.size(); ++i) {
      *lines[i] = {id, run_title(*run), {}};
      for (const auto& [epoch, values] : points) {
        if (std::isfinite(values[i])) lines[i]->points.emplace_back(epoch, values[i]);
      }
    }
  }
}

}  // namespace

const std::vector<std::string> kTimePhases = {"data wait", "forward", "backward",   "optimizer",
                                              "eval",      "other",   "checkpoint", "db"};

namespace {

// The run's time bar (when it has epochs with a breakdown) and profile traces, from its epoch
// rows (Store::timed_epochs).
void add_times(const records::RunRow& run, const std::vector<records::EpochRow>& rows,
               ReportModel* model) {
  if (model->times.size() >= kMaxPlottedRuns) return;
  TimeBar bar{run.id, std::to_string(run.cell_index) + ": " + run_title(run),
              std::vector<double>(kTimePhases.size(), 0.0)};
  int epochs = 0;
  for (const auto& e : rows) {
    if (!e.profile_trace.empty()) model->traces.push_back({run.name, e.epoch, e.profile_trace});
    if (!e.times) continue;
    const records::EpochTimes& t = *e.times;
    const double phases[] = {t.data_wait,  t.forward,
                             t.backward,   t.optimizer,
                             t.eval,       e.epoch_seconds - t.inside_epoch(),
                             t.checkpoint, std::max(0.0, t.db)};
    for (size_t i = 0; i < bar.seconds.size(); ++i) bar.seconds[i] += phases[i];
    ++epochs;
  }
  if (epochs == 0) return;
  for (double& v : bar.seconds) v /= epochs;
  model->times.push_back(std::move(bar));
}

// The headline metrics (train/model_info.h) of the runs' models that the sweep recorded, in the
// order of the runs and of each model's list.
std::vector<std::string> headline_metrics(const store::Store& store, const std::string& sweep,
                                          const std::vector<records::RunRow>& runs) {
  const std::vector<std::string> recorded = store.metric_names(sweep);
  std::set<std::string> models;  // the runs' model columns (JSON text) seen
  std::vector<std::string> out;
  for (const auto& run : runs) {
    const auto column = run.columns.find("model");
    if (column == run.columns.end() || !models.insert(column->second).second) continue;
    const nlohmann::json name = nlohmann::json::parse(column->second, nullptr, false);
    if (!name.is_string()) continue;  // discarded (unparsable) or not a name
    for (const auto& metric : train::headline_metrics(name.get<std::string>())) {
      const bool known = std::count(recorded.begin(), recorded.end(), metric) > 0;
      if (known && std::count(out.begin(), out.end(), metric) == 0) out.push_back(metric);
    }
  }
  return out;
}

// Why the first departing module departs, in words.
std::string departure_reason(const records::DiagnosticRow& row, double cosine_min) {
  if (row.overflow_frac > 0) {
    return "overflow (" + significant(100 * row.overflow_frac, 3) + "% of its outputs)";
  }
  if (std::isnan(row.cosine)) return "values lost to inf/NaN";
  return "1 - cosine " + significant(1 - row.cosine, 3) + " > " + significant(1 - cosine_min, 3);
}

// The newest diagnosis of each diagnosed run, in cell order, at most kMaxPlottedRuns.
void add_module_errors(const store::Store& store, const std::vector<records::RunRow>& runs,
                       ReportModel* model) {
  const auto errors = store.module_errors(model->sweep);
  std::map<int64_t, int> newest;  // run -> its newest diagnosed epoch
  for (const auto& e : errors) {
    auto [it, added] = newest.try_emplace(e.run_id, e.epoch);
    if (!added) it->second = std::max(it->second, e.epoch);
  }
  for (const auto& run : runs) {
    const auto it = newest.find(run.id);
    if (it == newest.end() || model->module_error.size() >= kMaxPlottedRuns) continue;
    ModuleErrors plot;
    plot.series = {run.id,
                   run_title(run) + (it->second >= 0 ? ", epoch " + std::to_string(it->second)
                                                     : ", initial weights"),
                   {}};
    records::Diagnosis diagnosis;  // its worst rows, for train::first_divergence
    for (const auto& e : errors) {
      if (e.run_id != run.id || e.epoch != it->second) continue;
      const double c = e.worst.cosine;
      plot.series.points.emplace_back(static_cast<double>(e.worst.seq),
                                      std::isnan(c) ? 1.0 : std::max(1.0 - c, 1e-12));
      plot.modules.push_back(e.worst.module);
      plot.cosine_min = diagnosis.cosine_min = e.cosine_min;
      diagnosis.rows.push_back(e.worst);
    }
    if (const auto first = train::first_divergence(diagnosis)) {
      plot.first = ModuleErrors::Departure{first->seq, first->module,
                                           departure_reason(*first, diagnosis.cosine_min)};
    }
    model->module_error.push_back(std::move(plot));
  }
}

}  // namespace

namespace {

// `run_id`'s values along its lineage (a fork's epochs up to its parent's epoch are its
// ancestors'), from `values` (run id -> epoch -> value).
std::vector<std::pair<double, double>> lineage_of(
    const RunIndex& runs, int64_t run_id, const std::map<int64_t, std::map<int, double>>& values) {
  std::map<int, double> points;
  walk_lineage(runs, run_id, [&](int64_t ancestor, int upto) {
    const auto own = values.find(ancestor);
    if (own == values.end()) return;
    for (const auto& [epoch, value] : own->second) {
      if (epoch > upto) break;
      points.emplace(epoch, value);
    }
  });
  return {points.begin(), points.end()};
}

// A candidate as a node (its children are added later).
TuneNode candidate_node(const records::TuneCandidateRow& c, const records::TuneSearchRow& s,
                        const RunIndex& runs) {
  TuneNode node;
  node.run_id = c.run_id;
  node.run = runs.name(c.run_id);
  node.move = c.move ? to_string(*c.move) : "";
  const nlohmann::json change = nlohmann::json::parse(c.change_json, nullptr, false);
  for (const auto& [key, value] : change.items()) {
    node.move += " " + key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  node.reason = c.reason;
  node.outcome = records::to_string(c.outcome);
  node.round = c.round;
  node.value = c.value;
  node.answer = s.status == records::TuneStatus::kAnswered && s.answer_run_id == c.run_id;
  return node;
}

void add_tune_tree(const store::Store& store, const RunIndex& runs, const std::string& sweep,
                   ReportModel* model) {
  const auto searches = store.tune_searches(sweep);
  if (searches.empty()) return;
  const records::TuneSearchRow& s = searches.back();
  TuneTree tree;
  tree.status = s.status;
  tree.metric = s.metric;
  tree.note = s.note;
  tree.answer_yaml = s.answer_yaml;
  tree.reference_value = s.reference_value;
  tree.epochs_spent = s.epochs_spent;
  tree.grid_epochs = s.grid_epochs;
  tree.reference = runs.name(s.reference_run_id);
  std::map<int64_t, std::map<int, double>> values;  // run -> epoch -> the search's metric
  for (const auto& v : store.metric_values(sweep, s.metric, /*with_nulls=*/true)) {
    values[v.run_id].emplace(v.epoch, v.value);
  }
  TuneNode root;
  root.run_id = s.start_run_id;
  root.run = runs.name(s.start_run_id);
  root.outcome = "start";
  root.answer = s.status == records::TuneStatus::kAnswered && s.answer_run_id == s.start_run_id;
  const auto start_curve = lineage_of(runs, s.start_run_id, values);
  root.value =
      start_curve.empty() ? std::numeric_limits<double>::quiet_NaN() : start_curve.back().second;
  tree.nodes.push_back(std::move(root));
  // Nodes are added round by round; a run's newest node is where its own rounds hang.
  std::map<int64_t, size_t> node_of{{s.start_run_id, 0}};  // run id -> its newest node
  std::map<int, int64_t> round_start;
  for (const auto& r : store.tune_rounds(s.id)) round_start[r.round] = r.start_run_id;
  for (const auto& c : store.tune_candidates(s.id)) {
    const auto parent = node_of.find(round_start[c.round]);
    if (parent == node_of.end()) continue;       // a round whose start is not in the tree
    const size_t parent_index = parent->second;  // (node_of may grow below)
    tree.nodes.push_back(candidate_node(c, s, runs));
    tree.nodes[parent_index].children.push_back(tree.nodes.size() - 1);
    node_of[c.run_id] = tree.nodes.size() - 1;
  }
  tree.curves.push_back({s.reference_run_id, "reference " + tree.reference,
                         lineage_of(runs, s.reference_run_id, values)});
  tree.curves.push_back({s.start_run_id, "start " + tree.nodes[0].run, start_curve});
  if (s.answer_run_id && s.answer_run_id != s.start_run_id) {
    tree.curves.push_back({s.answer_run_id,
                           (s.status == records::TuneStatus::kAnswered ? "answer " : "closest ") +
                               runs.name(s.answer_run_id),
                           lineage_of(runs, s.answer_run_id, values)});
  }
  model->tune = std::move(tree);
}

// A run's loss scale per global step (`events` not empty): each change as recorded, then the last
// scale held until `last_step`, so a constant scale is a line.
Series scale_series(const records::RunRow& run, const std::vector<records::ScaleEvent>& events,
                    std::optional<int64_t> last_step) {
  Series scale{run.id, run_title(run), {}};
  for (const auto& event : events) {
    scale.points.emplace_back(static_cast<double>(event.global_step), event.scale);
  }
  if (last_step && scale.points.back().first < *last_step) {
    scale.points.emplace_back(static_cast<double>(*last_step), scale.points.back().second);
  }
  return scale;
}

// Per run, in cell order, at most kMaxPlottedRuns each: the throughput bar, the time bar with
// its traces, and the loss scale per step. The runs with times or scale events come from one
// query each (a sweep of 100,000 runs made one query per run).
void add_run_plots(const store::Store& store, const std::string& sweep,
                   const std::vector<records::RunRow>& runs, ReportModel* model) {
  std::map<int64_t, store::Store::RunTotals> totals;
  for (const auto& t : store.run_totals(sweep)) totals[t.run_id] = t;
  std::map<int64_t, std::vector<records::EpochRow>> timed;
  for (auto& [id, rows] : store.timed_epochs(sweep, kMaxPlottedRuns)) timed[id] = std::move(rows);
  std::map<int64_t, std::vector<records::ScaleEvent>> scaled;
  for (auto& [id, events] : store.scale_events(sweep, kMaxPlottedRuns)) {
    scaled[id] = std::move(events);
  }
  for (const auto& run : runs) {
    const store::Store::RunTotals& t = totals[run.id];
    if (t.mean_fps && model->throughput.size() < kMaxPlottedRuns) {
      model->throughput.push_back(
          {run.id, std::to_string(run.cell_index) + ": " + run_title(run), *t.mean_fps});
    }
    if (const auto it = timed.find(run.id); it != timed.end()) add_times(run, it->second, model);
    const auto events = scaled.find(run.id);
    if (events == scaled.end()) continue;
    model->loss_scale.push_back(scale_series(run, events->second, t.last_global_step));
  }
}

}  // namespace

ReportModel build_run_plots(const store::Store& store, const records::RunRow& run,
                            const std::vector<records::EpochRow>& epochs) {
  ReportModel model;
  model.sweep = run.sweep_name;
  model.database = store.path();
  model.runs = 1;
  model.table.sweep = run.sweep_name;
  model.table.metric = run.primary_metric;
  const std::vector<records::RunRow> only{run};
  const RunIndex index(store, only);  // its ancestors are read as its lineage reaches them
  lineage_series(store, index, {{run.id, &only[0]}}, &model, &epochs);
  if (const auto events = store.scale_events(run.id); !events.empty()) {
    model.loss_scale.push_back(scale_series(
        run, events,
        epochs.empty() ? std::nullopt : std::optional<int64_t>(epochs.back().global_step)));
  }
  add_module_errors(store, only, &model);
  return model;
}

ReportModel build_report(const store::Store& store, const std::string& sweep) {
  ReportModel model;
  model.sweep = sweep;
  model.database = store.path();
  const std::vector<records::RunRow> runs = store.runs(sweep);
  CompareOptions options;
  options.sweep = sweep;
  options.also = headline_metrics(store, sweep, runs);
  model.table = build_compare(store, options, runs);
  model.runs = static_cast<int>(runs.size());
  std::map<int64_t, const records::RunRow*> by_id;
  for (const auto& run : runs) by_id[run.id] = &run;
  const RunIndex index(store, runs);
  lineage_series(store, index, by_id, &model);

  add_run_plots(store, sweep, runs, &model);
  add_module_errors(store, runs, &model);
  add_tune_tree(store, index, sweep, &model);
  std::map<int64_t, records::RunStatus> status;
  for (const auto& run : runs) status[run.id] = run.status;
  std::optional<int64_t> answer;
  for (size_t i = 0; model.tune && i < model.tune->nodes.size(); ++i) {
    if (model.tune->nodes[i].answer) answer = model.tune->nodes[i].run_id;
  }
  model.heatmaps = build_heatmaps(model.table, status, answer);
  std::set<std::string> peaks;
  for (const auto& run : runs) {
    if (run.work.peak_flops <= 0) continue;
    const std::string peak = significant(run.work.peak_flops / 1e12, 4) + " TFLOP/s " +
                             run.work.peak_precision + " (" + run.work.peak_source + ")";
    if (peaks.insert(peak).second) model.peaks.push_back(peak);
  }
  return model;
}

}  // namespace amptune::app
