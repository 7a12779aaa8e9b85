// `amptune report`: a self-contained HTML page (DIR/index.html + PNG plots in DIR) with the
// comparison table of a sweep and plots drawn by gnuplot (run as a child process): primary metric
// vs epoch (forks continue their parent's line, from the lineage view), train loss vs epoch, loss
// scale vs global step, mean throughput per run.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <boost/program_options.hpp>

#include "cli/commands.h"
#include "app/compare.h"
#include "core/error.h"
#include "core/version.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace amptune::cli {
namespace {

// Runs in the line plots; more would make the legend unreadable (the table lists them all).
constexpr size_t kMaxPlottedRuns = 60;

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
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
    throw Error(ExitCode::kInternal, "cannot write " + path.string() +
                                         "; check that the --out directory is writable and the "
                                         "disk is not full");
  }
}

// Runs `gnuplot script` in `dir` (AMPTUNE_GNUPLOT overrides the program), output to
// dir/gnuplot.log. Throws with the log's tail when it fails or cannot start.
void run_gnuplot(const fs::path& dir, const std::string& script) {
  const char* env = std::getenv("AMPTUNE_GNUPLOT");
  const std::string program = env && *env ? env : "gnuplot";
  const fs::path log = dir / "gnuplot.log";
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw Error(ExitCode::kInternal, std::string("cannot start gnuplot: pipe: ") + std::strerror(errno));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    throw Error(ExitCode::kInternal, std::string("cannot start gnuplot: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (chdir(dir.c_str()) == 0 && fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execlp(program.c_str(), program.c_str(), script.c_str(), static_cast<char*>(nullptr));
    }
    const int error = errno;
    (void)!write(pipe_fds[1], &error, sizeof error);
    _exit(127);
  }
  close(pipe_fds[1]);
  int exec_errno = 0;
  const ssize_t got = read(pipe_fds[0], &exec_errno, sizeof exec_errno);
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    throw Error(ExitCode::kInternal,
                "cannot run '" + program + "' (" + std::strerror(exec_errno) +
                    "): amptune report draws its plots with gnuplot; install the Debian package "
                    "gnuplot-nox (tools/install-deps.sh) or set AMPTUNE_GNUPLOT to its path");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    std::string tail = text.str();
    if (tail.size() > 1500) tail = "..." + tail.substr(tail.size() - 1500);
    throw Error(ExitCode::kInternal,
                "gnuplot failed on " + (dir / script).string() + " (" +
                    (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                       : "killed by signal " + std::to_string(WTERMSIG(status))) +
                    "); its output (" + log.string() + "):\n" + tail);
  }
}

struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;  // x, y (NaN y: gap)
};

// Writes the series as blocks of one .dat file (two blank lines between them, so `index i` picks
// one) and returns the plot command, or "" when no series has a point.
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

}  // namespace

int cmd_report(const Invocation& inv) {
  std::string db, out_dir;
  app::CompareOptions options;
  po::options_description desc("amptune report options");
  desc.add_options()("help,h", "show this help")(
      "db", po::value(&db)->default_value(default_db()), "results database (env AMPTUNE_DB)")(
      "sweep", po::value(&options.sweep), "the sweep to report (required)")(
      "out", po::value(&out_dir), "output directory: index.html and the plots (required)");
  po::variables_map vm;
  po::store(po::command_line_parser(inv.args).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: amptune report --sweep NAME --out DIR [options]\n\n"
                 "Writes DIR/index.html (no network needed to view it) with the comparison table\n"
                 "(as `amptune compare`) and PNG plots drawn by gnuplot (package gnuplot-nox;\n"
                 "AMPTUNE_GNUPLOT overrides the program): primary metric vs epoch (a fork continues\n"
                 "its parent's line), train loss vs epoch, loss scale vs step, img/s per run.\n\n"
              << desc;
    return 0;
  }
  if (options.sweep.empty()) throw UsageError("amptune report needs --sweep NAME");
  if (out_dir.empty()) throw UsageError("amptune report needs --out DIR");
  store::Store store = open_existing(db);
  const app::CompareTable table = app::build_compare(store, options);
  const auto runs = store.runs(options.sweep);

  const fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw UsageError("cannot create the --out directory " + out_dir + ": " + ec.message());
  }

  std::map<int64_t, std::string> title;
  for (const auto& run : runs) title[run.id] = run.label.empty() ? run.name : run.label;
  const std::string in_sweep =
      "(SELECT r.id FROM runs r JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = ?1)";

  // Metric and train loss per epoch along each run's lineage (a fork starts with its parent's
  // epochs up to the fork point, so both plot as one line).
  std::map<int64_t, Series> metric_series, loss_series;
  std::vector<int64_t> order;
  for (const auto& row :
       store.query("SELECT l.run_id, l.epoch, l.value, l.train_loss FROM lineage l "
                   "WHERE l.run_id IN " + in_sweep + " ORDER BY l.run_id, l.epoch",
                   {options.sweep})
           .rows) {
    const int64_t id = std::stoll(row[0].value_or("0"));
    if (!metric_series.count(id)) {
      order.push_back(id);
      metric_series[id].title = loss_series[id].title = title[id];
    }
    const double epoch = std::strtod(row[1].value_or("0").c_str(), nullptr);
    if (row[2]) metric_series[id].points.emplace_back(epoch, std::strtod(row[2]->c_str(), nullptr));
    if (row[3]) loss_series[id].points.emplace_back(epoch, std::strtod(row[3]->c_str(), nullptr));
  }
  const bool truncated = order.size() > kMaxPlottedRuns;
  if (truncated) order.resize(kMaxPlottedRuns);
  std::vector<Series> metric_lines, loss_lines;
  for (int64_t id : order) {
    metric_lines.push_back(metric_series[id]);
    loss_lines.push_back(loss_series[id]);
  }
  // The primary metric as the lineage view gives it (a metric, not an epochs column).
  if (table.metric != (runs.empty() ? table.metric : runs.front().primary_metric)) {
    metric_lines.clear();
  }

  std::map<int64_t, Series> scale_series;
  std::vector<int64_t> scale_order;
  for (const auto& row :
       store.query("SELECT run_id, global_step, scale FROM loss_scale_trajectory "
                   "WHERE sweep = ?1 ORDER BY run_id, global_step",
                   {options.sweep})
           .rows) {
    const int64_t id = std::stoll(row[0].value_or("0"));
    if (!scale_series.count(id)) {
      scale_order.push_back(id);
      scale_series[id].title = title[id];
    }
    scale_series[id].points.emplace_back(std::strtod(row[1].value_or("0").c_str(), nullptr),
                                         std::strtod(row[2].value_or("0").c_str(), nullptr));
  }
  // Hold each run's last scale until its last recorded step, so a constant scale is a line.
  for (const auto& row :
       store.query("SELECT e.run_id, MAX(e.global_step) FROM epochs e WHERE e.run_id IN " +
                       in_sweep + " GROUP BY e.run_id",
                   {options.sweep})
           .rows) {
    auto it = scale_series.find(std::stoll(row[0].value_or("0")));
    const double end = std::strtod(row[1].value_or("0").c_str(), nullptr);
    if (it != scale_series.end() && !it->second.points.empty() &&
        it->second.points.back().first < end) {
      it->second.points.emplace_back(end, it->second.points.back().second);
    }
  }
  std::vector<Series> scale_lines;
  for (int64_t id : scale_order) {
    if (scale_lines.size() < kMaxPlottedRuns) scale_lines.push_back(scale_series[id]);
  }

  std::ostringstream fps_data;
  int fps_rows = 0;
  for (const auto& row :
       store.query("SELECT r.cell_index, r.label, r.name, AVG(e.train_fps_mean) FROM runs r "
                   "JOIN sweeps s ON s.id = r.sweep_id JOIN epochs e ON e.run_id = r.id "
                   "WHERE s.name = ?1 GROUP BY r.id HAVING AVG(e.train_fps_mean) IS NOT NULL "
                   "ORDER BY r.cell_index, r.id",
                   {options.sweep})
           .rows) {
    std::string label = row[0].value_or("?") + ": " + (row[1] && !row[1]->empty() ? *row[1] : row[2].value_or(""));
    for (char& c : label) {
      if (c == '"' || c == '\t' || c == '\n') c = ' ';
    }
    fps_data << '"' << label << "\" " << row[3].value_or("0") << "\n";
    ++fps_rows;
  }

  // The gnuplot script: one PNG per plot that has data.
  struct Plot {
    std::string file, caption, note;
  };
  std::vector<Plot> plots;
  std::ostringstream script;
  script << "# Generated by amptune report for sweep " << options.sweep << "\n"
         << "set terminal pngcairo size 960,560 noenhanced font 'sans,10'\n"
         << "set grid\nset key outside right top\n"
         << "set offsets graph 0, graph 0.02, graph 0.05, graph 0.05\n";
  const std::string direction = table.higher_is_better ? "higher is better" : "lower is better";
  double last_epoch = 0;
  for (const auto& series : loss_lines) {
    for (const auto& point : series.points) last_epoch = std::max(last_epoch, point.first);
  }
  const std::string epoch_tics = last_epoch <= 20 ? "set xtics 1\n" : "set xtics autofreq\n";
  if (std::string plot = line_plot(dir, "metric_vs_epoch", metric_lines, "linespoints");
      !plot.empty()) {
    script << "set output 'metric_vs_epoch.png'\nset title " << gp_string(table.metric + " per epoch (forks continue their parent's line)")
           << "\nset xlabel 'epoch'\n" << epoch_tics << "set ylabel "
           << gp_string(table.metric + " (" + direction + ")") << "\n" << plot << "unset output\n";
    plots.push_back({"metric_vs_epoch.png", table.metric + " per epoch", ""});
  } else {
    plots.push_back({"", table.metric + " per epoch", "no run of this sweep has a value of " + table.metric + " yet"});
  }
  if (std::string plot = line_plot(dir, "train_loss_vs_epoch", loss_lines, "linespoints");
      !plot.empty()) {
    script << "set output 'train_loss_vs_epoch.png'\nset title 'train loss per epoch'\n"
           << "set xlabel 'epoch'\n" << epoch_tics << "set ylabel 'train loss'\n" << plot << "unset output\n";
    plots.push_back({"train_loss_vs_epoch.png", "train loss per epoch", ""});
  } else {
    plots.push_back({"", "train loss per epoch", "no run of this sweep has finished an epoch yet"});
  }
  if (std::string plot = line_plot(dir, "loss_scale_vs_step", scale_lines, "steps lw 2");
      !plot.empty()) {
    script << "set output 'loss_scale_vs_step.png'\nset title 'loss scale'\n"
           << "set xlabel 'global step'\nset xtics autofreq\nset ylabel 'loss scale'\nset logscale y 2\n"
           << plot
           << "unset logscale y\nunset output\n";
    plots.push_back({"loss_scale_vs_step.png", "loss scale vs global step", ""});
  } else {
    plots.push_back({"", "loss scale vs global step",
                     "no run of this sweep recorded loss-scale events (fp32 / O0 runs, or no "
                     "loss scaling), so there is no loss-scale plot"});
  }
  if (fps_rows) {
    write_text_file(dir / "throughput.dat", fps_data.str());
    script << "set output 'throughput.png'\nset title 'mean training throughput per run'\n"
           << "set xlabel ''\nset ylabel 'img/s'\nset style fill solid 0.6\nset boxwidth 0.7\n"
           << "set xtics rotate by -30 noenhanced\nset yrange [0:*]\nunset key\n"
           << "plot 'throughput.dat' using 0:2:xtic(1) with boxes notitle\nunset output\n";
    plots.push_back({"throughput.png", "mean training img/s per run", ""});
  } else {
    plots.push_back({"", "mean training img/s per run", "no run has a recorded epoch yet"});
  }
  bool any_plot = false;
  for (const auto& plot : plots) any_plot = any_plot || !plot.file.empty();
  if (any_plot) {
    write_text_file(dir / "report.gp", script.str());
    run_gnuplot(dir, "report.gp");
    for (const auto& plot : plots) {
      if (!plot.file.empty() && (!fs::exists(dir / plot.file) || fs::file_size(dir / plot.file) == 0)) {
        throw Error(ExitCode::kInternal, "gnuplot exited 0 but did not write " +
                                             (dir / plot.file).string() + "; see " +
                                             (dir / "gnuplot.log").string());
      }
    }
  }

  // The page: inline CSS, local images only.
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<title>amptune report: " << html_escape(options.sweep) << "</title>\n<style>\n"
       << "body{font-family:sans-serif;margin:2em;color:#222}"
       << "table{border-collapse:collapse;font-size:0.9em}"
       << "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}"
       << "th{background:#f0f0f0}td.t{text-align:left}.note{color:#666;font-style:italic}"
       << "img{max-width:100%;border:1px solid #eee;margin:0.5em 0}\n</style>\n</head>\n<body>\n"
       << "<h1>Sweep " << html_escape(options.sweep) << "</h1>\n<p>" << runs.size()
       << " runs; metric <b>" << html_escape(table.metric) << "</b> (" << direction
       << "), best epoch of each run, mean over runs with the same settings. Database "
       << html_escape(db) << ".</p>\n<h2>Comparison</h2>\n<table>\n<tr>";
  for (const auto& name : app::compare_columns(table)) html << "<th>" << html_escape(name) << "</th>";
  html << "</tr>\n";
  for (const auto& row : table.rows) {
    html << "<tr>";
    size_t i = 0;
    for (const auto& cell : app::compare_cells(table, row)) {
      const bool text_cell = i < table.by.size() || i == app::compare_columns(table).size() - (table.has_baseline ? 3 : 2);
      html << (text_cell ? "<td class=\"t\">" : "<td>") << html_escape(cell) << "</td>";
      ++i;
    }
    html << "</tr>\n";
  }
  html << "</table>\n";
  if (truncated) {
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
  html << "<p class=\"note\">Written by amptune " << kVersion << " (" << kGitCommit
       << "). Plots by gnuplot; the data and script are report.gp and *.dat next to this "
          "page.</p>\n</body>\n</html>\n";
  const fs::path temp = dir / ".index.html.tmp";
  write_text_file(temp, html.str());
  fs::rename(temp, dir / "index.html", ec);
  if (ec) {
    throw Error(ExitCode::kInternal, "cannot rename " + temp.string() + " to index.html: " + ec.message());
  }
  std::cout << "wrote " << (dir / "index.html").string() << " (" << runs.size() << " runs, "
            << std::count_if(plots.begin(), plots.end(), [](const Plot& p) { return !p.file.empty(); })
            << " plots)\n";
  return 0;
}

}  // namespace amptune::cli
