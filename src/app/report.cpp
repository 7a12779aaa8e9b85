#include "app/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "app/plot_axes.h"
#include "app/program.h"
#include "app/report_html.h"
#include "app/table.h"
#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/process.h"
#include "train/diagnose.h"
#include "train/model_info.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;

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
    std::map<int, std::pair<double, double>> points;  // epoch -> (metric, train loss)
    walk_lineage(index, id, [&](int64_t ancestor, int upto) {
      // A run's own epochs already read (`known`, the run page's) are not read again: 10,000
      // metrics x 100 epochs take a second each time.
      const bool own = known != nullptr && ancestor == id;
      const std::vector<records::EpochRow> read = own ? std::vector<records::EpochRow>{}
                                                    : store.epochs(ancestor);
      for (const auto& e : own ? *known : read) {
        if (e.epoch > upto) continue;
        points.emplace(e.epoch, std::make_pair(records::epoch_value(e, run->primary_metric), e.train_loss));
      }
    });
    if (points.empty()) continue;
    if (model->metric.size() == kMaxPlottedRuns) {
      model->truncated = true;
      return;
    }
    Series metric{id, run_title(*run), {}}, loss = metric;
    for (const auto& [epoch, values] : points) {
      if (std::isfinite(values.first)) metric.points.emplace_back(epoch, values.first);
      if (std::isfinite(values.second)) loss.points.emplace_back(epoch, values.second);
    }
    model->metric.push_back(std::move(metric));
    model->train_loss.push_back(std::move(loss));
  }
}

}  // namespace

const std::vector<std::string> kTimePhases = {"data wait", "forward", "backward", "optimizer",
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
    const double phases[] = {t.data_wait, t.forward, t.backward, t.optimizer, t.eval,
                             e.epoch_seconds - t.inside_epoch(), t.checkpoint,
                             std::max(0.0, t.db)};
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
  tree.status = records::to_string(s.status);
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
  std::set<std::string> peaks;
  for (const auto& run : runs) {
    if (run.work.peak_flops <= 0) continue;
    const std::string peak = significant(run.work.peak_flops / 1e12, 4) + " TFLOP/s " +
                             run.work.peak_precision + " (" + run.work.peak_source + ")";
    if (peaks.insert(peak).second) model.peaks.push_back(peak);
  }
  return model;
}

namespace {

// --- the files ----------------------------------------------------------------------------------

// `text` with every control character (a line break would end a script line and start a
// command: names come from databases merged from elsewhere) as a space.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return text;
}

// A gnuplot single-quoted string ('' stands for '), on one line.
std::string gp_string(const std::string& text) {
  std::string out = "'";
  for (char c : one_line(text)) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// Writes `text` to `path`, never through a link planted there (O_NOFOLLOW: prepare_dir removed
// the links at the names a report writes; one planted since makes this fail, not write elsewhere).
void write_text_file(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  const int open_error = errno;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (!ok) {
    throw EnvironmentError("cannot write " + path.string() + ": " +
                           std::strerror(fd < 0 ? open_error : errno) +
                           "; check that the --out directory is writable and the disk is not "
                           "full");
  }
}

std::string read_tail(const fs::path& path, size_t max_chars) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string tail = text.str();
  if (tail.size() > max_chars) tail = "..." + tail.substr(tail.size() - max_chars);
  return tail;
}

// Runs `program script` in `dir`, output to dir/gnuplot.log. Throws EnvironmentError with the
// log's tail when it fails or cannot start.
void run_gnuplot(const std::string& program, const fs::path& dir, const std::string& script) {
  const fs::path log = dir / "gnuplot.log";
  const ProgramRun run = run_program({program, script}, dir.string(), log.string());
  if (run.exec_error) {
    throw EnvironmentError("cannot run '" + program + "' (" + std::strerror(run.exec_error) +
                           "): amptune report draws its plots with gnuplot; install the Debian "
                           "package gnuplot-nox (tools/install-deps.sh) or set AMPTUNE_GNUPLOT "
                           "to its path");
  }
  if (!run.ok()) {
    throw EnvironmentError("gnuplot failed on " + (dir / script).string() + " (" +
                           run.outcome() + "); its output (" + log.string() + "):\n" +
                           read_tail(log, 1500));
  }
}

// The longest key entry that fits the width of a plot (about 8.5 pixels a character at 10
// points, after the line sample), and the longest run label under a bar.
constexpr size_t kKeyChars = 100, kBarLabelChars = 48;

// `text` in at most `max` characters: a longer one keeps its start and end (where run labels put
// the first and last swept value) around "...".
std::string shortened(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  const size_t head = (max - 3) / 2;
  return text.substr(0, head) + "..." + text.substr(text.size() - (max - 3 - head));
}

// Writes the series with points as blocks of dir/stem.dat (two blank lines between them, so
// `index i` picks one) and returns the plot command, or "" when no series has a point. The i-th
// series written is drawn in gnuplot's line type i + 1.
std::string line_plot(const fs::path& dir, const std::string& stem, const std::vector<Series>& all,
                      const std::string& style) {
  std::ostringstream data, plot;
  data.precision(17);
  int index = 0;
  for (const auto& series : all) {
    if (series.points.empty()) continue;
    data << "# " << one_line(series.title) << "\n";
    for (const auto& [x, y] : series.points) {
      data << x << " ";
      if (std::isfinite(y)) {
        data << y;
      } else {
        data << "NaN";
      }
      data << "\n";
    }
    data << "\n\n";
    plot << (index ? ", \\\n     " : "plot ") << gp_string(stem + ".dat") << " index " << index
         << " using 1:2 with " << style << " title " << gp_string(shortened(series.title, kKeyChars));
    ++index;
  }
  if (index == 0) return "";
  write_text_file(dir / (stem + ".dat"), data.str());
  return plot.str() + "\n";
}

// A label as the first column of a .dat file: double-quoted, without quotes or control characters.
std::string dat_label(std::string label) {
  label = one_line(label);
  for (char& c : label) {
    if (c == '"') c = ' ';
  }
  return '"' + label + '"';
}

// A plot of the page: its PNG (empty: no data, the note says why) and lines of text below it.
struct Plot {
  std::string file, caption, note;
  std::vector<std::string> items;
};

std::string direction(const CompareTable& table) {
  return table.higher_is_better ? "higher is better" : "lower is better";
}

constexpr int kPlotWidth = 960, kPlotHeight = 560;

std::string terminal(int height) {
  return "set terminal pngcairo size " + std::to_string(kPlotWidth) + "," + std::to_string(height) +
         " noenhanced font 'sans,10'\n";
}

// The terminal and key of a line plot: the key goes below the plot, in as many columns as the
// titles allow, and the canvas grows by its rows, so the key never covers a curve however many
// runs there are. `height`: the canvas without the key; `more`: key entries besides the series'.
std::string line_frame(const std::vector<Series>& all, int height = kPlotHeight, size_t more = 0) {
  size_t titles = more, longest = 1;
  for (const auto& series : all) {
    if (series.points.empty()) continue;
    ++titles;
    longest = std::max(longest, shortened(series.title, kKeyChars).size());
  }
  // About 8.5 pixels a character at 10 points, and 8 characters of line sample and gap.
  const size_t columns = std::clamp<size_t>((kPlotWidth - 40) * 2 / (17 * (longest + 8)), 1,
                                            std::max<size_t>(titles, 1));
  const size_t rows = (titles + columns - 1) / columns;
  return terminal(height + 18 * static_cast<int>(rows)) +
         "set key default\nset key outside below left Left reverse maxcols " +
         std::to_string(columns) + "\n";
}

// The epoch line plots: the metric and the train loss.
void epoch_plots(const ReportModel& model, const fs::path& dir, std::ostream& script,
                 std::vector<Plot>* plots) {
  const std::string& metric = model.table.metric;
  double last_epoch = 0;
  for (const auto& series : model.train_loss) {
    for (const auto& point : series.points) last_epoch = std::max(last_epoch, point.first);
  }
  const std::string epoch_tics = last_epoch <= 20 ? "set xtics 1\n" : "set xtics autofreq\n";
  if (std::string plot = line_plot(dir, "metric_vs_epoch", model.metric, "linespoints");
      !plot.empty()) {
    script << line_frame(model.metric) << "set output 'metric_vs_epoch.png'\nset title "
           << gp_string(metric + " per epoch (forks continue their parent's line)")
           << "\nset xlabel 'epoch'\n"
           << epoch_tics << "set ylabel " << gp_string(metric + " (" + direction(model.table) + ")")
           << "\n"
           << plot << "unset output\n";
    plots->push_back({"metric_vs_epoch.png", metric + " per epoch", "", {}});
  } else {
    plots->push_back(
        {"", metric + " per epoch", "no run of this sweep has a value of " + metric + " yet", {}});
  }
  if (std::string plot = line_plot(dir, "train_loss_vs_epoch", model.train_loss, "linespoints");
      !plot.empty()) {
    script << line_frame(model.train_loss)
           << "set output 'train_loss_vs_epoch.png'\nset title 'train loss per epoch'\n"
           << "set xlabel 'epoch'\n"
           << epoch_tics << "set ylabel 'train loss'\n"
           << plot << "unset output\n";
    plots->push_back({"train_loss_vs_epoch.png", "train loss per epoch", "", {}});
  } else {
    plots->push_back(
        {"", "train loss per epoch", "no run of this sweep has finished an epoch yet", {}});
  }
}

void loss_scale_plot(const ReportModel& model, const fs::path& dir, std::ostream& script,
                     std::vector<Plot>* plots) {
  const std::string caption = "loss scale vs global step";
  const std::string plot = line_plot(dir, "loss_scale_vs_step", model.loss_scale, "steps lw 2");
  if (plot.empty()) {
    plots->push_back({"",
                      caption,
                      "no run of this sweep recorded loss-scale events (fp32 / O0 runs, or no "
                      "loss scaling), so there is no loss-scale plot",
                      {}});
    return;
  }
  // Loss scales are powers of two: a log2 axis with a handful of ticks labelled 2^15 rather than
  // 32768.0 (app/plot_axes.h, as the live view labels it); a scale that fell from 2^13 to 2^-31
  // gets a tick every 8 powers, not 45 overlapping labels.
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const auto& series : model.loss_scale) {
    for (const auto& [step, scale] : series.points) {
      if (scale > 0 && std::isfinite(scale)) lo = std::min(lo, scale), hi = std::max(hi, scale);
    }
  }
  std::string tics;
  if (hi > 0) {
    for (const Tick& tick : log2_ticks(lo, hi)) {
      tics +=
          (tics.empty() ? "" : ", ") + gp_string(tick.label) + " " + significant(tick.value, 17);
    }
  }
  script << line_frame(model.loss_scale) << "set output 'loss_scale_vs_step.png'\n"
         << "set title 'loss scale'\nset xlabel 'global step'\nset xtics autofreq\n"
         << "set ylabel 'loss scale (log2)'\nset logscale y 2\n"
         << (tics.empty() ? "" : "set ytics (" + tics + ")\n") << plot
         << "unset logscale y\nset ytics autofreq\nunset output\n";
  plots->push_back({"loss_scale_vs_step.png", caption, "", {}});
}

// The x tics of the module-error plot: module names by execution index (the first name seen for
// an index), at most kMaxNamedModules of them evenly spaced, and every marked module (its evenly
// spaced neighbours then unnamed, so the names do not crowd); the rest unlabelled minor tics.
constexpr size_t kMaxNamedModules = 48;

std::string module_tics(const std::vector<ModuleErrors>& all, size_t* longest) {
  std::map<int, std::string> names;
  std::set<int> marked_seqs;
  for (const auto& plot : all) {
    for (size_t i = 0; i < plot.series.points.size() && i < plot.modules.size(); ++i) {
      names.emplace(static_cast<int>(plot.series.points[i].first), plot.modules[i]);
    }
    if (plot.first) marked_seqs.insert(plot.first->seq);
  }
  std::vector<size_t> marked;  // positions in `names`
  size_t n = 0;
  for (const auto& entry : names) {
    if (marked_seqs.count(entry.first)) marked.push_back(n);
    ++n;
  }
  const size_t every = (names.size() + kMaxNamedModules - 1) / kMaxNamedModules;
  auto named = [&](size_t position) {
    bool near_mark = false;
    for (size_t m : marked) {
      if (m == position) return true;
      near_mark = near_mark || (m > position ? m - position : position - m) < every;
    }
    return position % every == 0 && !near_mark;
  };
  std::string tics;
  n = 0;
  *longest = 0;
  for (const auto& [seq, name] : names) {
    const bool shown = named(n++);
    if (shown) *longest = std::max(*longest, name.size());
    tics += (tics.empty() ? "" : ", ") + gp_string(shown ? name : "") + " " + std::to_string(seq) +
            (shown ? "" : " 1");
  }
  return "set xtics rotate by 90 right font ',8' (" + tics + ")\n";
}

// The departure marks: a dashed line at each run's first departing module, in the run's color,
// labelled with the module.
std::string departure_marks(const std::vector<ModuleErrors>& all) {
  std::ostringstream marks;
  double last_seq = 1;
  for (const auto& plot : all) {
    for (const auto& point : plot.series.points) last_seq = std::max(last_seq, point.first);
  }
  int line = 0;
  for (const auto& plot : all) {
    if (plot.series.points.empty()) continue;
    ++line;
    if (!plot.first) continue;
    const int seq = plot.first->seq;
    const bool right = seq > 0.6 * last_seq;  // keep the label inside the plot
    marks << "set arrow from " << seq << ", graph 0 to " << seq
          << ", graph 1 nohead dt 2 lw 1.5 lc " << line << " front\n"
          << "set label " << gp_string("first departure: " + plot.first->module) << " at " << seq
          << ", graph " << 0.97 - 0.05 * ((line - 1) % 10)
          << (right ? " right offset -0.6,0" : " left offset 0.6,0") << " tc lt " << line
          << " front\n";
  }
  return marks.str();
}

// The thresholds 1 - cosine_min of the diagnoses (those a log scale can show).
std::set<double> thresholds(const std::vector<ModuleErrors>& all) {
  std::set<double> out;
  for (const auto& plot : all) {
    if (!plot.series.points.empty() && 1 - plot.cosine_min > 0) out.insert(1 - plot.cosine_min);
  }
  return out;
}

// More elements of the plot command: the thresholds as dotted horizontal lines in the key (as
// functions they widen the y range to show them).
std::string threshold_lines(const std::set<double>& thresholds) {
  std::ostringstream lines;
  lines.precision(17);
  for (double t : thresholds) {
    lines << ", \\\n     " << t << " with lines dt 3 lw 1.5 lc rgb 'gray40' title "
          << gp_string("threshold: 1 - cosine_min = " + significant(t, 3));
  }
  return lines.str();
}

// Each run's first departure (or none), in words, for the page.
std::vector<std::string> departure_items(const std::vector<ModuleErrors>& all) {
  std::vector<std::string> items;
  for (const auto& run : all) {
    items.push_back(
        run.series.title + ": " +
        (run.first ? "first departs at " + run.first->module + " (execution index " +
                         std::to_string(run.first->seq) + "): " + run.first->reason
                   : "no module departs (1 - cosine <= " + significant(1 - run.cosine_min, 3) +
                         " everywhere, no overflow)"));
  }
  return items;
}

void module_error_plot(const ReportModel& model, const fs::path& dir, std::ostream& script,
                       std::vector<Plot>* plots) {
  const std::string caption = "per-module error (1 - cosine) of diagnosed runs";
  std::vector<Series> series;
  for (const auto& plot : model.module_error) series.push_back(plot.series);
  std::string plot = line_plot(dir, "module_error", series, "linespoints");
  if (plot.empty()) {
    plots->push_back(
        {"", caption, "no run of this sweep was diagnosed (amptune diagnose RUN)", {}});
    return;
  }
  plot.pop_back();  // its newline: the thresholds follow
  size_t longest = 0;
  const std::string tics = module_tics(model.module_error, &longest);
  const std::set<double> lines = thresholds(model.module_error);
  // About 5 pixels a character of the rotated names at 8 points.
  script << line_frame(series, kPlotHeight + static_cast<int>(5 * longest), lines.size())
         << "set output 'module_error.png'\n"
         << "set title 'per-module error of diagnosed runs (amptune diagnose), modules in "
            "execution order'\nset xlabel ''\n"
         << tics << "set ylabel '1 - cosine against the reference'\nset logscale y 10\n"
         << "set format y '10^%L'\n"
         << departure_marks(model.module_error) << plot << threshold_lines(lines)
         << "\nunset logscale y\nset format y '% h'\nunset arrow\nunset label\n"
         << "set xtics autofreq norotate autojustify font ''\nunset output\n";
  plots->push_back({"module_error.png", caption, "", departure_items(model.module_error)});
}

// A bar chart's data file: a row per bar, its run label (shortened) and `values`; and the
// terminal and x tics of the chart: the labels slanted under the bars, the canvas taller by the
// longest (about 4.3 pixels down a character).
std::string bar_chart(const fs::path& file, const std::vector<std::string>& labels,
                      const std::vector<std::vector<double>>& values, int precision) {
  std::ostringstream data;
  data.precision(precision);
  size_t longest = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string label = shortened(labels[i], kBarLabelChars);
    longest = std::max(longest, label.size());
    data << dat_label(label);
    for (double v : values[i]) data << " " << v;
    data << "\n";
  }
  write_text_file(file, data.str());
  return terminal(kPlotHeight + static_cast<int>(4.3 * longest)) +
         "set xtics rotate by -30 left noenhanced\n";
}

// The bar charts: img/s and the time breakdown per run.
void bar_plots(const ReportModel& model, const fs::path& dir, std::ostream& script,
               std::vector<Plot>* plots) {
  if (!model.throughput.empty()) {
    std::vector<std::string> labels;
    std::vector<std::vector<double>> values;
    for (const auto& bar : model.throughput) {
      labels.push_back(bar.label);
      values.push_back({bar.img_s});
    }
    script << bar_chart(dir / "throughput.dat", labels, values, 17)
           << "set output 'throughput.png'\nset title 'mean training throughput per run'\n"
           << "set xlabel ''\nset ylabel 'img/s'\nset style fill solid 0.6\nset boxwidth 0.7\n"
           << "set yrange [0:*]\nunset key\n"
           << "plot 'throughput.dat' using 0:2:xtic(1) with boxes notitle\nunset output\n";
    plots->push_back({"throughput.png", "mean training img/s per run", "", {}});
  } else {
    plots->push_back({"", "mean training img/s per run", "no run has a recorded epoch yet", {}});
  }
  if (!model.times.empty()) {
    std::vector<std::string> labels;
    std::vector<std::vector<double>> values;
    for (const auto& bar : model.times) {
      labels.push_back(bar.label);
      values.push_back(bar.seconds);
    }
    script << bar_chart(dir / "times.dat", labels, values, 6)
           << "set output 'times.png'\nset title 'time per epoch by phase (mean per run)'\n"
           << "set xlabel ''\nset ylabel 'seconds per epoch'\nset style data histograms\n"
           << "set style histogram rowstacked\nset style fill solid 0.8 border -1\n"
           << "set boxwidth 0.7\nset yrange [0:*]\n"
           << "set key default\nset key outside right top\nplot ";
    for (size_t i = 0; i < kTimePhases.size(); ++i) {
      script << (i ? ", '' using " : "'times.dat' using ") << i + 2 << (i ? "" : ":xtic(1)")
             << " title " << gp_string(kTimePhases[i]);
    }
    script << "\nunset output\n";
    plots->push_back({"times.png", "time per epoch by phase", "", {}});
  } else {
    plots->push_back({"",
                      "time per epoch by phase",
                      "no run of this sweep recorded a time breakdown (epochs recorded before "
                      "it existed)",
                      {}});
  }
}

// Writes the data files and returns the gnuplot script with one PNG per plot that has data;
// `plots` gets every plot of the page.
void tune_plot(const ReportModel& model, const fs::path& dir, std::ostream& script,
               std::vector<Plot>* plots) {
  if (!model.tune) return;
  const std::string caption = model.tune->metric + " of the tune search's reference, start and " +
                              (model.tune->status == "answered" ? "answer" : "closest run");
  const std::string plot = line_plot(dir, "tune_curves", model.tune->curves, "linespoints");
  if (plot.empty()) {
    plots->push_back(
        {"", caption, "no run of the search has a value of " + model.tune->metric + " yet", {}});
    return;
  }
  script << line_frame(model.tune->curves) << "set output 'tune_curves.png'\nset title "
         << gp_string(caption) << "\nset xlabel 'epoch'\nset xtics 1\nset ylabel "
         << gp_string(model.tune->metric) << "\n"
         << plot << "unset output\n";
  plots->push_back({"tune_curves.png", caption, "", {}});
}

std::string plot_script(const ReportModel& model, const fs::path& dir, std::vector<Plot>* plots) {
  std::ostringstream script;
  script << "# Generated by amptune report for sweep " << one_line(model.sweep) << "\n"
         << "set grid\nset offsets graph 0, graph 0.02, graph 0.05, graph 0.05\n";
  epoch_plots(model, dir, script, plots);
  loss_scale_plot(model, dir, script, plots);
  module_error_plot(model, dir, script, plots);
  tune_plot(model, dir, script, plots);
  bar_plots(model, dir, script, plots);
  return script.str();
}

// The page: inline CSS, local images only.
std::string page(const ReportModel& model, const std::vector<Plot>& plots,
                 const std::string& written_by) {
  const CompareTable& table = model.table;
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<title>amptune report: " << html_escape(model.sweep) << "</title>\n<style>\n"
       << kPageStyle << "\n</style>\n</head>\n<body>\n"
       << "<h1>Sweep " << html_escape(model.sweep) << "</h1>\n<p>" << model.runs
       << " runs; metric <b>" << html_escape(table.metric) << "</b> (" << direction(table)
       << "), best epoch of each run, mean over runs with the same settings";
  if (!table.also.empty()) {
    std::vector<std::string> also;
    for (const auto& name : table.also) also.push_back("<b>" + html_escape(name) + "</b>");
    html << "; beside it " << join(also, ", ") << " at the same epoch";
  }
  html << ". Database " << html_escape(model.database) << ".</p>\n<h2>Comparison</h2>\n";
  write_comparison_table(table, html);
  write_mfu_note(model.peaks, html);
  if (model.tune) write_tune_section(*model.tune, html);
  if (model.truncated) {
    html << "<p class=\"note\">The plots show the first " << kMaxPlottedRuns
         << " runs only; the table lists them all.</p>\n";
  }
  for (const auto& plot : plots) {
    html << "<h2>" << html_escape(plot.caption) << "</h2>\n";
    if (plot.file.empty()) {
      html << "<p class=\"note\">" << html_escape(plot.note) << "</p>\n";
    } else {
      html << "<img src=\"" << html_escape(plot.file) << "\" alt=\"" << html_escape(plot.caption)
           << "\">\n";
    }
    if (!plot.items.empty()) {
      html << "<ul>\n";
      for (const auto& item : plot.items) html << "<li>" << html_escape(item) << "</li>\n";
      html << "</ul>\n";
    }
  }
  if (!model.traces.empty()) {
    html << "<h2>Profile traces</h2>\n<p>Chrome-trace JSON of the steps in profile.steps: open "
            "in chrome://tracing or ui.perfetto.dev.</p>\n<ul>\n";
    for (const auto& trace : model.traces) {
      html << "<li>" << html_escape(trace.run) << " epoch " << trace.epoch << ": <a href=\"file://"
           << html_escape(fs::absolute(trace.path).string()) << "\">" << html_escape(trace.path)
           << "</a></li>\n";
    }
    html << "</ul>\n";
  }
  html << "<p class=\"note\">Written by " << html_escape(written_by)
       << ". Plots by gnuplot; the data and script are report.gp and *.dat next to this "
          "page.</p>\n</body>\n</html>\n";
  return html.str();
}

fs::path prepare_dir(const std::string& out) {
  const fs::path dir(out);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw EnvironmentError("cannot create the --out directory " + out + ": " +
                           (ec ? ec.message() : "a file of that name is in the way") +
                           "; choose another directory");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw EnvironmentError("the --out directory " + out +
                           " is not writable; fix its permissions or choose another directory");
  }
  // A link at a name the report (or gnuplot) writes would send that write elsewhere: remove the
  // link (never its target) before anything is written.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_symlink(ec) && (ext == ".png" || ext == ".dat" || ext == ".gp" ||
                                 ext == ".log" || ext == ".html" || ext == ".tmp")) {
      log::warn("removing the link " + entry.path().string() + " from the --out directory (a " +
                "report writes files of its own there)");
      fs::remove(entry.path(), ec);
    }
  }
  return dir;
}

}  // namespace

ReportFiles write_report(const ReportModel& model, const ReportOutput& output) {
  const fs::path dir = prepare_dir(output.dir);
  std::vector<Plot> plots;
  const std::string script = plot_script(model, dir, &plots);
  ReportFiles files;
  for (const auto& plot : plots) files.plots += plot.file.empty() ? 0 : 1;
  if (files.plots > 0) {
    write_text_file(dir / "report.gp", script);
    run_gnuplot(output.gnuplot, dir, "report.gp");
    for (const auto& plot : plots) {
      if (!plot.file.empty() &&
          (!fs::exists(dir / plot.file) || fs::file_size(dir / plot.file) == 0)) {
        throw EnvironmentError("gnuplot exited 0 but did not write " + (dir / plot.file).string() +
                               "; see " + (dir / "gnuplot.log").string());
      }
    }
  }
  write_file_atomic((dir / "index.html").string(), page(model, plots, output.written_by));
  files.index = (dir / "index.html").string();
  return files;
}

}  // namespace amptune::app
