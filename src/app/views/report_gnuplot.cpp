// app/views/report.h write_report: the report's files from its model - the gnuplot script and the
// data files of the plots app/views/report_plots.h lists for the report, gnuplot run on them, and
// the HTML page. Every value from a database that reaches the script is quoted (gp_string) or
// written to a data file; names reach the page through html_escape.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "app/views/plot_axes.h"
#include "app/run/program.h"
#include "app/views/report.h"
#include "app/views/report_gnuplot.h"
#include "app/views/report_html.h"
#include "app/views/report_plots.h"
#include "app/views/table.h"
#include "core/config.h"  // join
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"

namespace amptune::app {

std::string one_line(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return text;
}

std::string gp_string(const std::string& text) {
  std::string out = "'";
  for (char c : one_line(text)) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

namespace {

namespace fs = std::filesystem;

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
    throw EnvironmentError("gnuplot failed on " + (dir / script).string() + " (" + run.outcome() +
                           "); its output (" + log.string() + "):\n" + read_tail(log, 1500));
  }
}

// The longest key entry that fits the width of a plot (about 8.5 pixels a character at 10
// points, after the line sample), and the longest run label under a bar.
constexpr size_t kKeyChars = 100, kBarLabelChars = 48;

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
         << " using 1:2 with " << style << " title "
         << gp_string(shortened(series.title, kKeyChars));
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

// The x tics of a line plot over epochs or steps: every epoch while they are few.
std::string x_tics(const std::vector<Series>& all, PlotX x) {
  double last = 0;
  for (const auto& series : all) {
    for (const auto& point : series.points) last = std::max(last, point.first);
  }
  return x == PlotX::kEpoch && last <= 20 ? "set xtics 1\n" : "set xtics autofreq\n";
}

// Loss scales are powers of two: a log2 axis with a handful of ticks labelled 2^15 rather than
// 32768.0 (app/views/plot_axes.h, as the live view labels it); a scale that fell from 2^13 to 2^-31
// gets a tick every 8 powers, not 45 overlapping labels.
std::string log2_axis(const std::vector<Series>& all) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const auto& series : all) {
    for (const auto& [x, y] : series.points) {
      if (y > 0 && std::isfinite(y)) lo = std::min(lo, y), hi = std::max(hi, y);
    }
  }
  std::string tics;
  if (hi > 0) {
    for (const Tick& tick : log2_ticks(lo, hi)) {
      tics +=
          (tics.empty() ? "" : ", ") + gp_string(tick.label) + " " + significant(tick.value, 17);
    }
  }
  return "set logscale y 2\n" + (tics.empty() ? "" : "set ytics (" + tics + ")\n");
}

// What a plot draws, read once from the model with its texts filled in.
struct Drawn {
  const PlotDef& def;
  std::string title, x_label, y_label, no_data;
};

Drawn drawn(const ReportModel& model, const PlotDef& def) {
  return {def, plot_text(def.title, model, def), plot_text(def.x_label, model, def),
          plot_text(def.y_label, model, def), plot_text(def.no_data, model, def)};
}

// A line plot over epochs or steps (linear or log2 y).
void line_section(const ReportModel& model, const Drawn& d, const fs::path& dir,
                  std::ostream& script, std::vector<Plot>* plots) {
  const std::vector<Series> all = plot_lines(model, d.def);
  const std::string style = d.def.style == PlotStyle::kSteps ? "steps lw 2" : "linespoints";
  const std::string plot = line_plot(dir, d.def.stem, all, style);
  if (plot.empty()) {
    plots->push_back({"", d.title, d.no_data, {}});
    return;
  }
  const bool log2 = d.def.y == PlotY::kLog2;
  script << line_frame(all) << "set output " << gp_string(d.def.stem + ".png") << "\nset title "
         << gp_string(d.title) << "\nset xlabel " << gp_string(d.x_label) << "\n"
         << x_tics(all, d.def.x) << "set ylabel " << gp_string(d.y_label) << "\n"
         << (log2 ? log2_axis(all) : "") << plot
         << (log2 ? "unset logscale y\nset ytics autofreq\n" : "") << "unset output\n";
  plots->push_back({d.def.stem + ".png", d.title, "", {}});
}

// The module errors: names under the x axis, the departures marked, the thresholds as lines.
void module_error_section(const ReportModel& model, const Drawn& d, const fs::path& dir,
                          std::ostream& script, std::vector<Plot>* plots) {
  const std::vector<Series> series = plot_lines(model, d.def);
  std::string plot = line_plot(dir, d.def.stem, series, "linespoints");
  if (plot.empty()) {
    plots->push_back({"", d.title, d.no_data, {}});
    return;
  }
  plot.pop_back();  // its newline: the thresholds follow
  size_t longest = 0;
  const std::string tics = module_tics(model.module_error, &longest);
  const std::set<double> lines = thresholds(model.module_error);
  // About 5 pixels a character of the rotated names at 8 points.
  script << line_frame(series, kPlotHeight + static_cast<int>(5 * longest), lines.size())
         << "set output " << gp_string(d.def.stem + ".png") << "\nset title " << gp_string(d.title)
         << "\nset xlabel ''\n"
         << tics << "set ylabel " << gp_string(d.y_label) << "\nset logscale y 10\n"
         << "set format y '10^%L'\n"
         << departure_marks(model.module_error) << plot << threshold_lines(lines)
         << "\nunset logscale y\nset format y '% h'\nunset arrow\nunset label\n"
         << "set xtics autofreq norotate autojustify font ''\nunset output\n";
  plots->push_back({d.def.stem + ".png", d.title, "", departure_items(model.module_error)});
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

// A bar chart: one bar per run (kBars), or bars stacked by kTimePhases (kStackedBars).
void bar_section(const ReportModel& model, const Drawn& d, const fs::path& dir,
                 std::ostream& script, std::vector<Plot>* plots) {
  const std::vector<PlotBar> bars = plot_bars(model, d.def);
  if (bars.empty()) {
    plots->push_back({"", d.title, d.no_data, {}});
    return;
  }
  std::vector<std::string> labels;
  std::vector<std::vector<double>> values;
  for (const auto& bar : bars) {
    labels.push_back(bar.label);
    values.push_back(bar.values);
  }
  const bool stacked = d.def.style == PlotStyle::kStackedBars;
  const std::string data = d.def.stem + ".dat";
  script << bar_chart(dir / data, labels, values, stacked ? 6 : 17) << "set output "
         << gp_string(d.def.stem + ".png") << "\nset title " << gp_string(d.title)
         << "\nset xlabel ''\nset ylabel " << gp_string(d.y_label) << "\n";
  if (!stacked) {
    script << "set style fill solid 0.6\nset boxwidth 0.7\nset yrange [0:*]\nunset key\n"
           << "plot " << gp_string(data) << " using 0:2:xtic(1) with boxes notitle\n";
  } else {
    script << "set style data histograms\nset style histogram rowstacked\n"
           << "set style fill solid 0.8 border -1\nset boxwidth 0.7\nset yrange [0:*]\n"
           << "set key default\nset key outside right top\nplot ";
    for (size_t i = 0; i < kTimePhases.size(); ++i) {
      script << (i ? ", '' using " : gp_string(data) + " using ") << i + 2 << (i ? "" : ":xtic(1)")
             << " title " << gp_string(kTimePhases[i]);
    }
    script << "\n";
  }
  script << "unset output\n";
  plots->push_back({d.def.stem + ".png", d.title, "", {}});
}

// What every plot of the script starts from (a heatmap resets gnuplot and sets it again).
const char* const kScriptSettings =
    "set grid\nset offsets graph 0, graph 0.02, graph 0.05, graph 0.05\n";

// The heatmaps: a PNG each (stem_1.png, ...), titled by heatmap_title; the pairs left out said.
void heatmap_section(const ReportModel& model, const Drawn& d, const fs::path& dir,
                     std::ostream& script, std::vector<Plot>* plots) {
  const std::vector<HeatMap>& maps = model.heatmaps.maps;
  for (size_t i = 0; i < maps.size(); ++i) {
    const std::string stem = d.def.stem + "_" + std::to_string(i + 1);
    std::string data;
    script << heatmap_script(maps[i], stem, heatmap_title(maps[i]), kScriptSettings, &data);
    write_text_file(dir / (stem + ".dat"), data);
    plots->push_back({stem + ".png", heatmap_title(maps[i]), "", {heatmap_note(maps[i])}});
  }
  if (!model.heatmaps.left_out.empty()) {
    plots->push_back({"", d.title, heatmaps_left_out(model.heatmaps), {}});
  }
}

// Writes the data files and returns the gnuplot script with one PNG per plot that has data;
// `plots` gets every plot of the report's (app/views/report_plots.h), in the list's order.
std::string plot_script(const ReportModel& model, const fs::path& dir, std::vector<Plot>* plots) {
  std::ostringstream script;
  script << "# Generated by amptune report for sweep " << one_line(model.sweep) << "\n"
         << kScriptSettings;
  for (const PlotDef& def : report_plots()) {
    if (!(def.places & kInReport) || !has_plot(model, def)) continue;
    const Drawn d = drawn(model, def);
    if (def.style == PlotStyle::kHeatmap) {
      heatmap_section(model, d, dir, script, plots);
    } else if (def.style == PlotStyle::kBars || def.style == PlotStyle::kStackedBars) {
      bar_section(model, d, dir, script, plots);
    } else if (def.x == PlotX::kModule) {
      module_error_section(model, d, dir, script, plots);
    } else {
      line_section(model, d, dir, script, plots);
    }
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
    if (entry.is_symlink(ec) && (ext == ".png" || ext == ".dat" || ext == ".gp" || ext == ".log" ||
                                 ext == ".html" || ext == ".tmp")) {
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
