#include "app/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "app/program.h"
#include "core/error.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;

// --- the model ----------------------------------------------------------------------------------

std::string run_title(const store::RunRow& run) { return run.label.empty() ? run.name : run.label; }

// Metric and train loss along each run's lineage, one series per run (by run id).
void lineage_series(const store::Store& store, const std::map<int64_t, const store::RunRow*>& runs,
                    ReportModel* model) {
  std::vector<int64_t> order;
  std::map<int64_t, Series> metric, loss;
  for (const auto& point : store.lineage(model->sweep)) {
    const int64_t id = point.run_id;
    if (!metric.count(id)) {
      order.push_back(id);
      const auto run = runs.find(id);
      const std::string title = run == runs.end() ? std::to_string(id) : run_title(*run->second);
      metric[id] = loss[id] = Series{id, title, {}};
    }
    const double epoch = point.epoch;
    if (std::isfinite(point.value)) metric[id].points.emplace_back(epoch, point.value);
    if (std::isfinite(point.train_loss)) loss[id].points.emplace_back(epoch, point.train_loss);
  }
  model->truncated = order.size() > kMaxPlottedRuns;
  if (model->truncated) order.resize(kMaxPlottedRuns);
  for (int64_t id : order) {
    model->metric.push_back(metric[id]);
    model->train_loss.push_back(loss[id]);
  }
}

}  // namespace

const std::vector<std::string> kTimePhases = {"data wait", "forward", "backward", "optimizer",
                                               "eval",      "other",   "checkpoint", "db"};

namespace {

// The run's time bar (when it has epochs with a breakdown) and profile traces.
void add_times(const store::Store& store, const store::RunRow& run, ReportModel* model) {
  if (model->times.size() >= kMaxPlottedRuns) return;
  TimeBar bar{run.id, std::to_string(run.cell_index) + ": " + run_title(run),
              std::vector<double>(kTimePhases.size(), 0.0)};
  int epochs = 0;
  for (const auto& e : store.epochs(run.id)) {
    if (!e.profile_trace.empty()) model->traces.push_back({run.name, e.epoch, e.profile_trace});
    if (!e.times) continue;
    const store::EpochTimes& t = *e.times;
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

}  // namespace

ReportModel build_report(const store::Store& store, const std::string& sweep) {
  ReportModel model;
  model.sweep = sweep;
  model.database = store.path();
  CompareOptions options;
  options.sweep = sweep;
  model.table = build_compare(store, options);
  const std::vector<store::RunRow> runs = store.runs(sweep);
  model.runs = static_cast<int>(runs.size());
  std::map<int64_t, const store::RunRow*> by_id;
  for (const auto& run : runs) by_id[run.id] = &run;
  lineage_series(store, by_id, &model);

  std::map<int64_t, store::Store::RunTotals> totals;
  for (const auto& t : store.run_totals(sweep)) totals[t.run_id] = t;
  for (const auto& run : runs) {
    const store::Store::RunTotals& t = totals[run.id];
    if (t.mean_fps) {
      model.throughput.push_back(
          {run.id, std::to_string(run.cell_index) + ": " + run_title(run), *t.mean_fps});
    }
    add_times(store, run, &model);
    if (model.loss_scale.size() >= kMaxPlottedRuns) continue;
    Series scale{run.id, run_title(run), {}};
    for (const auto& event : store.scale_events(run.id)) {
      scale.points.emplace_back(static_cast<double>(event.global_step), event.scale);
    }
    if (scale.points.empty()) continue;
    // Hold the last scale until the last recorded step, so a constant scale is a line.
    if (t.last_global_step && scale.points.back().first < *t.last_global_step) {
      scale.points.emplace_back(static_cast<double>(*t.last_global_step),
                                scale.points.back().second);
    }
    model.loss_scale.push_back(std::move(scale));
  }

  const auto errors = store.module_errors(sweep);
  std::map<int64_t, int> newest;  // run -> its newest diagnosed epoch
  for (const auto& e : errors) {
    auto [it, added] = newest.try_emplace(e.run_id, e.epoch);
    if (!added) it->second = std::max(it->second, e.epoch);
  }
  for (const auto& run : runs) {
    const auto it = newest.find(run.id);
    if (it == newest.end() || model.module_error.size() >= kMaxPlottedRuns) continue;
    Series series{run.id,
                  run_title(run) + (it->second >= 0 ? ", epoch " + std::to_string(it->second)
                                                    : ", initial weights"),
                  {}};
    for (const auto& e : errors) {
      if (e.run_id != run.id || e.epoch != it->second) continue;
      const double c = e.worst.cosine;
      series.points.emplace_back(static_cast<double>(e.worst.seq),
                                 std::isnan(c) ? 1.0 : std::max(1.0 - c, 1e-12));
    }
    model.module_error.push_back(std::move(series));
  }
  return model;
}

namespace {

// --- the files ----------------------------------------------------------------------------------

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A gnuplot single-quoted string ('' stands for ').
std::string gp_string(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += '\'';
    if (c == '\n') continue;
    out += c;
  }
  return out + "'";
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    throw EnvironmentError("cannot write " + path.string() +
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

// Writes the series with points as blocks of dir/stem.dat (two blank lines between them, so
// `index i` picks one) and returns the plot command, or "" when no series has a point.
std::string line_plot(const fs::path& dir, const std::string& stem, const std::vector<Series>& all,
                      const std::string& style) {
  std::ostringstream data, plot;
  data.precision(17);
  int index = 0;
  for (const auto& series : all) {
    if (series.points.empty()) continue;
    data << "# " << series.title << "\n";
    for (const auto& [x, y] : series.points) {
      data << x << " " << (std::isfinite(y) ? std::to_string(y) : std::string("NaN")) << "\n";
    }
    data << "\n\n";
    plot << (index ? ", \\\n     " : "plot ") << gp_string(stem + ".dat") << " index " << index
         << " using 1:2 with " << style << " title " << gp_string(series.title);
    ++index;
  }
  if (index == 0) return "";
  write_text_file(dir / (stem + ".dat"), data.str());
  return plot.str() + "\n";
}

// A label as the first column of a .dat file: double-quoted, without quotes, tabs or newlines.
std::string dat_label(std::string label) {
  for (char& c : label) {
    if (c == '"' || c == '\t' || c == '\n') c = ' ';
  }
  return '"' + label + '"';
}

// A plot of the page: its PNG (empty: no data, the note says why).
struct Plot {
  std::string file, caption, note;
};

std::string direction(const CompareTable& table) {
  return table.higher_is_better ? "higher is better" : "lower is better";
}

// Writes the data files and returns the gnuplot script with one PNG per plot that has data;
// `plots` gets every plot of the page.
std::string plot_script(const ReportModel& model, const fs::path& dir, std::vector<Plot>* plots) {
  const std::string& metric = model.table.metric;
  std::ostringstream script;
  script << "# Generated by amptune report for sweep " << model.sweep << "\n"
         << "set terminal pngcairo size 960,560 noenhanced font 'sans,10'\n"
         << "set grid\nset key outside right top\n"
         << "set offsets graph 0, graph 0.02, graph 0.05, graph 0.05\n";
  double last_epoch = 0;
  for (const auto& series : model.train_loss) {
    for (const auto& point : series.points) last_epoch = std::max(last_epoch, point.first);
  }
  const std::string epoch_tics = last_epoch <= 20 ? "set xtics 1\n" : "set xtics autofreq\n";
  if (std::string plot = line_plot(dir, "metric_vs_epoch", model.metric, "linespoints");
      !plot.empty()) {
    script << "set output 'metric_vs_epoch.png'\nset title "
           << gp_string(metric + " per epoch (forks continue their parent's line)")
           << "\nset xlabel 'epoch'\n"
           << epoch_tics << "set ylabel " << gp_string(metric + " (" + direction(model.table) + ")")
           << "\n"
           << plot << "unset output\n";
    plots->push_back({"metric_vs_epoch.png", metric + " per epoch", ""});
  } else {
    plots->push_back(
        {"", metric + " per epoch", "no run of this sweep has a value of " + metric + " yet"});
  }
  if (std::string plot = line_plot(dir, "train_loss_vs_epoch", model.train_loss, "linespoints");
      !plot.empty()) {
    script << "set output 'train_loss_vs_epoch.png'\nset title 'train loss per epoch'\n"
           << "set xlabel 'epoch'\n"
           << epoch_tics << "set ylabel 'train loss'\n"
           << plot << "unset output\n";
    plots->push_back({"train_loss_vs_epoch.png", "train loss per epoch", ""});
  } else {
    plots->push_back(
        {"", "train loss per epoch", "no run of this sweep has finished an epoch yet"});
  }
  if (std::string plot = line_plot(dir, "loss_scale_vs_step", model.loss_scale, "steps lw 2");
      !plot.empty()) {
    script << "set output 'loss_scale_vs_step.png'\nset title 'loss scale'\n"
           << "set xlabel 'global step'\nset xtics autofreq\nset ylabel 'loss scale'\n"
           << "set logscale y 2\n"
           << plot << "unset logscale y\nunset output\n";
    plots->push_back({"loss_scale_vs_step.png", "loss scale vs global step", ""});
  } else {
    plots->push_back({"", "loss scale vs global step",
                      "no run of this sweep recorded loss-scale events (fp32 / O0 runs, or no "
                      "loss scaling), so there is no loss-scale plot"});
  }
  if (std::string plot = line_plot(dir, "module_error", model.module_error, "linespoints");
      !plot.empty()) {
    script << "set output 'module_error.png'\n"
           << "set title 'per-module error of diagnosed runs (amptune diagnose)'\n"
           << "set xlabel 'module, in execution order (diagnostics.seq)'\nset xtics autofreq\n"
           << "set ylabel '1 - cosine against the reference'\nset logscale y 10\n"
           << plot << "unset logscale y\nunset output\n";
    plots->push_back({"module_error.png", "per-module error (1 - cosine) of diagnosed runs", ""});
  } else {
    plots->push_back({"", "per-module error of diagnosed runs",
                      "no run of this sweep was diagnosed (amptune diagnose RUN)"});
  }
  if (!model.throughput.empty()) {
    std::ostringstream data;
    data.precision(17);
    for (const auto& bar : model.throughput) {
      data << dat_label(bar.label) << " " << bar.img_s << "\n";
    }
    write_text_file(dir / "throughput.dat", data.str());
    script << "set output 'throughput.png'\nset title 'mean training throughput per run'\n"
           << "set xlabel ''\nset ylabel 'img/s'\nset style fill solid 0.6\nset boxwidth 0.7\n"
           << "set xtics rotate by -30 noenhanced\nset yrange [0:*]\nunset key\n"
           << "plot 'throughput.dat' using 0:2:xtic(1) with boxes notitle\nunset output\n";
    plots->push_back({"throughput.png", "mean training img/s per run", ""});
  } else {
    plots->push_back({"", "mean training img/s per run", "no run has a recorded epoch yet"});
  }
  if (!model.times.empty()) {
    std::ostringstream data;
    data.precision(6);
    for (const auto& bar : model.times) {
      data << dat_label(bar.label);
      for (double v : bar.seconds) data << " " << v;
      data << "\n";
    }
    write_text_file(dir / "times.dat", data.str());
    script << "set output 'times.png'\nset title 'time per epoch by phase (mean per run)'\n"
           << "set xlabel ''\nset ylabel 'seconds per epoch'\nset style data histograms\n"
           << "set style histogram rowstacked\nset style fill solid 0.8 border -1\n"
           << "set boxwidth 0.7\nset xtics rotate by -30 noenhanced\nset yrange [0:*]\n"
           << "set key outside right top\nplot ";
    for (size_t i = 0; i < kTimePhases.size(); ++i) {
      script << (i ? ", '' using " : "'times.dat' using ") << i + 2 << (i ? "" : ":xtic(1)")
             << " title " << gp_string(kTimePhases[i]);
    }
    script << "\nunset output\n";
    plots->push_back({"times.png", "time per epoch by phase", ""});
  } else {
    plots->push_back({"", "time per epoch by phase",
                      "no run of this sweep recorded a time breakdown (epochs recorded before "
                      "it existed)"});
  }
  return script.str();
}

// The page: inline CSS, local images only.
std::string page(const ReportModel& model, const std::vector<Plot>& plots,
                 const std::string& written_by) {
  const CompareTable& table = model.table;
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<title>amptune report: " << html_escape(model.sweep) << "</title>\n<style>\n"
       << "body{font-family:sans-serif;margin:2em;color:#222}"
       << "table{border-collapse:collapse;font-size:0.9em}"
       << "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}"
       << "th{background:#f0f0f0}td.t{text-align:left}.note{color:#666;font-style:italic}"
       << "img{max-width:100%;border:1px solid #eee;margin:0.5em 0}\n</style>\n</head>\n<body>\n"
       << "<h1>Sweep " << html_escape(model.sweep) << "</h1>\n<p>" << model.runs
       << " runs; metric <b>" << html_escape(table.metric) << "</b> (" << direction(table)
       << "), best epoch of each run, mean over runs with the same settings. Database "
       << html_escape(model.database) << ".</p>\n<h2>Comparison</h2>\n<table>\n<tr>";
  const std::vector<std::string> columns = compare_columns(table);
  for (const auto& name : columns) html << "<th>" << html_escape(name) << "</th>";
  html << "</tr>\n";
  // Left-aligned: the --by values and the status.
  const size_t status_column = columns.size() - (table.has_baseline ? 3 : 2);
  for (const auto& row : table.rows) {
    html << "<tr>";
    size_t i = 0;
    for (const auto& cell : compare_cells(table, row)) {
      const bool text_cell = i < table.by.size() || i == status_column;
      html << (text_cell ? "<td class=\"t\">" : "<td>") << html_escape(cell) << "</td>";
      ++i;
    }
    html << "</tr>\n";
  }
  html << "</table>\n";
  if (model.truncated) {
    html << "<p class=\"note\">The line plots show the first " << kMaxPlottedRuns
         << " runs only.</p>\n";
  }
  for (const auto& plot : plots) {
    html << "<h2>" << html_escape(plot.caption) << "</h2>\n";
    if (plot.file.empty()) {
      html << "<p class=\"note\">" << html_escape(plot.note) << "</p>\n";
    } else {
      html << "<img src=\"" << html_escape(plot.file) << "\" alt=\"" << html_escape(plot.caption)
           << "\">\n";
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
  const fs::path temp = dir / ".index.html.tmp";
  write_text_file(temp, page(model, plots, output.written_by));
  std::error_code ec;
  fs::rename(temp, dir / "index.html", ec);
  if (ec) {
    throw EnvironmentError("cannot rename " + temp.string() + " to index.html: " + ec.message());
  }
  files.index = (dir / "index.html").string();
  return files;
}

}  // namespace amptune::app
