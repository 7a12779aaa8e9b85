#include "web/pages.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "app/views/inspect.h"
#include "app/views/report.h"
#include "app/views/report_html.h"
#include "app/views/report_plots.h"
#include "app/views/status.h"
#include "core/error.h"
#include "core/process.h"
#include "web/svg.h"

namespace amptune::web {
namespace {

using app::html_escape;

// Polls the live part of this page and swaps it in; says when it last did and when it will
// again. Two seconds after an answer, or five times as long as the answer took (a slow page is a
// busy server or a large database: it is asked less often); not while the tab is hidden (at once
// when it is shown again); after a failure 4, 8, ... up to 60 seconds. One request at a time.
const char* const kLiveScript = R"(<script>
(function () {
  var live = document.getElementById('live'), state = document.getElementById('state');
  var url = location.pathname + (location.search ? location.search + '&' : '?') + 'part=live';
  var timer = null, busy = false, failures = 0;
  function later(ms, text, cls) {
    busy = false;
    if (text) { state.textContent = text + Math.round(ms / 1000) + ' s'; state.className = cls; }
    timer = setTimeout(poll, ms);
  }
  function poll() {
    timer = null;
    if (document.hidden) return;
    busy = true;
    var start = Date.now();
    fetch(url, {cache: 'no-store'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.text();
    }).then(function (text) {
      if (live.innerHTML !== text) live.innerHTML = text;
      failures = 0;
      later(Math.max(2000, 5 * (Date.now() - start)),
            'live: updated ' + new Date().toLocaleTimeString() + ', next in ', 'state live');
    }).catch(function (e) {
      failures += 1;
      later(Math.min(60000, 2000 * Math.pow(2, failures)),
            'not updated (' + e.message + '); retrying in ', 'state stale');
    });
  }
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && timer === null && !busy) poll();
  });
  later(2000);
})();
</script>
)";

const char* const kServeStyle =
    "nav{margin-bottom:1em}nav a{margin-right:1em}.state{color:#666;font-size:0.85em}"
    ".stale{color:#a00}figure.plot{margin:1em 0;max-width:780px}figure svg{width:100%;"
    "height:auto;background:#fff}figcaption{font-size:0.8em}.key{margin-right:0.8em;"
    "white-space:nowrap}";

std::string document(const std::string& title, const std::string& live) {
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<meta name=\"viewport\" content=\"width=device-width\">\n<title>amptune: "
       << html_escape(title) << "</title>\n"
       << "<noscript><meta http-equiv=\"refresh\" content=\"10\"></noscript>\n<style>"
       << app::kPageStyle << kServeStyle << "</style>\n</head>\n<body>\n"
       << "<nav><a href=\"/\">sweeps</a></nav>\n"
       << "<p id=\"state\" class=\"state\">served by amptune serve, read-only</p>\n"
       << "<main id=\"live\">" << live << "</main>\n"
       << kLiveScript << "</body>\n</html>\n";
  return html.str();
}

std::string sweep_href(const std::string& sweep) {
  std::string out = "/sweep/";
  for (unsigned char c : sweep) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789ABCDEF";
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string run_href(int64_t id) { return "/run/" + std::to_string(id); }

// The rows [from, end) of `total` a paged table shows (web/pages.h kPageRows).
size_t page_end(size_t from, size_t total) { return std::min(total, from + kPageRows); }

// Under a paged table of `total` rows that shows [from, page_end): which rows, and links to the
// pages before and after at `href` (the page's path, escaped here). Nothing when one page holds
// them all.
std::string pager(const std::string& href, size_t from, size_t total, const std::string& what) {
  if (from == 0 && total <= kPageRows) return "";
  std::ostringstream html;
  html << "<p class=\"note pager\">" << what << " " << std::min(from + 1, total) << "-"
       << page_end(from, total) << " of " << total << ".";
  const std::string base = html_escape(href) + "?from=";
  if (from > 0) {
    html << " <a href=\"" << base << (from > kPageRows ? from - kPageRows : 0) << "\">previous "
         << kPageRows << "</a>";
  }
  if (page_end(from, total) < total) {
    html << " <a href=\"" << base << page_end(from, total) << "\">next " << kPageRows << "</a>";
  }
  html << "</p>\n";
  return html.str();
}

// --- the sweeps ---------------------------------------------------------------------------------

// The sweeps [from, page_end) with their run counts alone, when the database holds more runs than
// a page reads whole (build_status reads every run: 100,000 took seconds and 700 MB).
std::string large_index_part(const store::Store& store, const std::vector<std::string>& names,
                             const std::map<std::string, int64_t>& counts, size_t from) {
  std::ostringstream html;
  html << "<h1>Sweeps</h1>\n<p>Database " << html_escape(store.path()) << ". More runs than a "
       << "page reads for their status (" << kMaxComparedRuns
       << "): <code>amptune status</code> counts them.</p>\n"
       << "<table>\n<tr><th class=\"t\">sweep</th><th>runs</th></tr>\n";
  for (size_t i = from; i < page_end(from, names.size()); ++i) {
    check_work_bound();
    html << "<tr><td class=\"t\"><a href=\"" << html_escape(sweep_href(names[i])) << "\">"
         << html_escape(names[i]) << "</a></td><td>"
         << (counts.count(names[i]) ? counts.at(names[i]) : 0) << "</td></tr>\n";
  }
  html << "</table>\n" << pager("/", from, names.size(), "Sweeps");
  return html.str();
}

std::string index_part(const store::Store& store, size_t from) {
  const std::vector<std::string> names = store.sweep_names();
  const std::map<std::string, int64_t> counts = store.run_counts();
  int64_t runs = 0;
  for (const auto& [name, count] : counts) runs += count;
  if (names.size() > kPageRows || runs > static_cast<int64_t>(kMaxComparedRuns)) {
    return large_index_part(store, names, counts, from);
  }
  std::ostringstream html;
  const auto sweeps = app::build_status(store, std::nullopt);
  html << "<h1>Sweeps</h1>\n<p>Database " << html_escape(store.path()) << ".</p>\n";
  if (sweeps.empty()) {
    html << "<p class=\"note\">No sweep has runs yet.</p>\n";
    return html.str();
  }
  html << "<table>\n<tr><th class=\"t\">sweep</th><th>runs</th>";
  for (auto status : records::kRunStatuses) html << "<th>" << records::to_string(status) << "</th>";
  html << "<th class=\"t\">training now</th></tr>\n";
  for (size_t i = from; i < page_end(from, sweeps.size()); ++i) {
    check_work_bound();
    const auto& sweep = sweeps[i];
    html << "<tr><td class=\"t\"><a href=\"" << html_escape(sweep_href(sweep.sweep)) << "\">"
         << html_escape(sweep.sweep) << "</a></td><td>" << sweep.runs << "</td>";
    for (auto status : records::kRunStatuses) {
      const auto it = sweep.counts.find(status);
      html << "<td>" << (it == sweep.counts.end() ? 0 : it->second) << "</td>";
    }
    html << "<td class=\"t\">";
    for (const auto& run : sweep.running) {
      html << "<a href=\"" << run_href(run.run_id) << "\">" << html_escape(run.name) << "</a> "
           << run.epochs_done << "/" << run.planned_epochs << " epochs";
      if (run.eta_seconds) html << ", about " << std::lround(*run.eta_seconds) << " s left";
      html << "<br>";
    }
    html << "</td></tr>\n";
  }
  html << "</table>\n" << pager("/", from, sweeps.size(), "Sweeps");
  return html.str();
}

// --- a sweep ------------------------------------------------------------------------------------

// The report's series of the run `only` (every run when 0), linked to their run pages.
std::vector<PlotSeries> plot_series(const std::vector<app::Series>& all, int64_t only = 0) {
  std::vector<PlotSeries> out;
  for (const auto& series : all) {
    if (only != 0 && series.run_id != only) continue;
    out.push_back({series.title, run_href(series.run_id), series.points, series.run_id});
  }
  return out;
}

Scale scale_of(app::PlotY y) {
  if (y == app::PlotY::kLog2) return Scale::kLog2;
  if (y == app::PlotY::kLog10) return Scale::kLog10;
  return Scale::kLinear;
}

// A plot of the list (app/views/report_plots.h) as SVG, of the run `only` (every run when 0).
std::string svg_plot(const app::ReportModel& model, const app::PlotDef& def, int64_t only) {
  const std::string title = app::plot_text(def.title, model, def);
  const std::string y_label = app::plot_text(def.y_label, model, def);
  if (def.style == app::PlotStyle::kBars || def.style == app::PlotStyle::kStackedBars) {
    BarChart chart{def.id, title, y_label};
    for (const auto& bar : app::plot_bars(model, def)) {
      if (only != 0 && bar.run_id != only) continue;
      chart.bars.emplace_back(bar.label, bar.values.empty() ? 0.0 : bar.values.front());
    }
    return svg_bar_chart(chart);
  }
  LinePlot plot{def.id,  title,           app::plot_text(def.x_label, model, def),
                y_label, scale_of(def.y), def.style == app::PlotStyle::kSteps};
  plot.series = plot_series(app::plot_lines(model, def), only);
  if (def.x != app::PlotX::kModule) return svg_line_plot(plot);
  for (const auto& errors : model.module_error) {  // the modules' names, the departures marked
    if (only != 0 && errors.series.run_id != only) continue;
    for (size_t i = 0; i < errors.series.points.size() && i < errors.modules.size(); ++i) {
      plot.x_names.emplace_back(static_cast<int>(errors.series.points[i].first), errors.modules[i]);
    }
    if (errors.first) plot.x_marks.push_back(errors.first->seq);
  }
  return svg_line_plot(plot);
}

// A run's newest diagnosis: the first module that departs, in words, above its plot; nothing for
// a run never diagnosed.
std::string diagnosis(const app::ReportModel& model, const app::PlotDef& def, int64_t run_id) {
  for (const auto& errors : model.module_error) {
    if (errors.series.run_id != run_id) continue;
    std::string text = "no module departs";
    if (errors.first) {
      text = "first module that departs: <b>" + html_escape(errors.first->module) + "</b> (" +
             html_escape(errors.first->reason) + ")";
    }
    return "<h2>Diagnosis</h2>\n<p>" + text + ".</p>\n" + svg_plot(model, def, run_id);
  }
  return "";
}

// The heatmaps of the model under the list's heading for them, and the pairs left out.
std::string heatmaps(const app::ReportModel& model, const app::PlotDef& def) {
  std::string html = "<h2>" + html_escape(app::plot_text(def.title, model, def)) + "</h2>\n";
  const std::vector<app::HeatMap>& maps = model.heatmaps.maps;
  for (size_t i = 0; i < maps.size(); ++i) html += svg_heatmap(def.id, maps[i], i + 1);
  const std::string left_out = app::heatmaps_left_out(model.heatmaps);
  if (!left_out.empty()) html += "<p class=\"note\">" + html_escape(left_out) + "</p>\n";
  return html;
}

// The plots of the list (app/views/report_plots.h) that `place` shows, in its order, of the run
// `only` (every run when 0): the heatmaps alone (`heatmap_plots`), or every other plot.
std::string plots(const app::ReportModel& model, app::PlotPlace place, int64_t only = 0,
                  bool heatmap_plots = false) {
  std::string html;
  for (const app::PlotDef& def : app::report_plots()) {
    if (!(def.places & place) || !app::has_plot(model, def)) continue;
    const bool heatmap = def.style == app::PlotStyle::kHeatmap;
    if (heatmap != heatmap_plots) continue;
    html += heatmap                                     ? heatmaps(model, def)
            : def.x == app::PlotX::kModule && only != 0 ? diagnosis(model, def, only)
                                                        : svg_plot(model, def, only);
  }
  return html;
}

// The runs [from, page_end) of the `total` of `sweep`: only those are read.
std::string runs_table(const store::Store& store, const std::string& sweep, size_t from,
                       size_t total) {
  std::ostringstream html;
  html << "<h2>Runs</h2>\n<table>\n<tr><th>id</th><th class=\"t\">name</th><th class=\"t\">label"
       << "</th><th class=\"t\">status</th><th>epochs</th><th>best</th></tr>\n";
  for (const app::RunLine& line : app::list_runs(store, sweep, from, kPageRows)) {
    check_work_bound();
    html << "<tr><td><a href=\"" << run_href(line.run.id) << "\">" << line.run.id
         << "</a></td><td class=\"t\">" << html_escape(line.run.name) << "</td><td class=\"t\">"
         << html_escape(line.run.label) << "</td><td class=\"t\">"
         << records::to_string(line.run.status) << "</td><td>" << line.run.epochs_done
         << "</td><td>" << (line.best ? number_text(*line.best) : "-") << "</td></tr>\n";
  }
  html << "</table>\n" << pager(sweep_href(sweep), from, total, "Runs");
  return html.str();
}

// The comparison table's kPageRows best rows (the rest dropped from `table`), and what is left
// out said.
void comparison(app::CompareTable& table, std::ostream& html) {
  const size_t rows = table.rows.size();
  if (rows > kPageRows) table.rows.erase(table.rows.begin() + kPageRows, table.rows.end());
  app::write_comparison_table(table, html);
  if (rows > kPageRows) {
    html << "<p class=\"note\">The best " << kPageRows << " of " << rows
         << " rows; <code>amptune compare --sweep " << html_escape(table.sweep)
         << "</code> prints them all.</p>\n";
  }
}

// A sweep of more runs than kMaxComparedRuns: its runs, a page at a time, and where to compare
// them (reading every run of 100,000 takes the store seconds and most of a GB).
std::string large_sweep_part(const store::Store& store, const std::string& sweep, size_t from,
                             size_t total) {
  std::ostringstream html;
  html << "<h1>Sweep " << html_escape(sweep) << "</h1>\n<p class=\"note\">" << total
       << " runs: more than a page compares (" << kMaxComparedRuns
       << "). <code>amptune compare --sweep " << html_escape(sweep)
       << "</code> and <code>amptune report --sweep " << html_escape(sweep)
       << "</code> compare and plot them all.</p>\n"
       << runs_table(store, sweep, from, total);
  return html.str();
}

std::string sweep_part(const store::Store& store, const std::string& sweep, size_t from) {
  const auto total = static_cast<size_t>(store.run_count(sweep));
  if (total > kMaxComparedRuns) return large_sweep_part(store, sweep, from, total);
  app::ReportModel model = app::build_report(store, sweep);
  std::ostringstream html;
  html << "<h1>Sweep " << html_escape(sweep) << "</h1>\n<p>" << model.runs << " runs; metric <b>"
       << html_escape(model.table.metric) << "</b> ("
       << (model.table.higher_is_better ? "higher" : "lower")
       << " is better), best epoch of each run, mean over runs with the same settings.";
  if (model.tune) {
    html << " <a href=\"" << html_escape(sweep_href(sweep))
         << "/tune\">Tune search: " << records::to_string(model.tune->status) << "</a>.";
  }
  html << "</p>\n<h2>Comparison</h2>\n";
  comparison(model.table, html);
  app::write_mfu_note(model.peaks, html);
  html << plots(model, app::kOnSweepPage, 0, true);  // the table's heatmaps, below it
  html << runs_table(store, sweep, from, total) << "<h2>Curves</h2>\n";
  if (model.truncated) {
    html << "<p class=\"note\">The curves show the first " << app::kMaxPlottedRuns
         << " runs with an epoch; each run's page shows its own.</p>\n";
  }
  html << plots(model, app::kOnSweepPage);
  return html.str();
}

std::string tune_part(const store::Store& store, const std::string& sweep) {
  std::ostringstream html;
  html << "<h1>Sweep <a href=\"" << html_escape(sweep_href(sweep)) << "\">" << html_escape(sweep)
       << "</a>: tune search</h1>\n";
  // Each candidate of a search is a run: a sweep past the bound is a search of as many rounds.
  if (const int64_t runs = store.run_count(sweep); runs > static_cast<int64_t>(kMaxComparedRuns)) {
    html << "<p class=\"note\">" << runs << " runs: more than a page reads for a search's tree ("
         << kMaxComparedRuns << "). <code>amptune report --sweep " << html_escape(sweep)
         << "</code> draws it.</p>\n";
    return html.str();
  }
  const app::ReportModel model = app::build_report(store, sweep);
  if (!model.tune) {
    html << "<p class=\"note\">This sweep has no tune search (amptune tune).</p>\n";
    return html.str();
  }
  app::write_tune_section(*model.tune, html, "/run/");
  html << plots(model, app::kOnTunePage);
  return html.str();
}

// --- a run --------------------------------------------------------------------------------------

// The metric names of `epochs`, sorted: a set, so the work is linear in epochs x metrics (a
// vector searched for each epoch's each metric took 18 s for 10,000 metrics x 100 epochs).
std::set<std::string> metric_names(const std::vector<records::EpochRow>& epochs) {
  std::set<std::string> names;
  for (const auto& e : epochs) {
    check_work_bound();
    for (const auto& entry : e.metrics) names.insert(names.end(), entry.first);
  }
  return names;
}

// The epochs [from, page_end) with their first kPageMetrics metrics by name.
std::string epochs_table(const records::RunRow& run, const std::vector<records::EpochRow>& epochs,
                         size_t from) {
  if (epochs.empty()) return "<h2>Epochs</h2>\n<p class=\"note\">No epoch recorded yet.</p>\n";
  const std::set<std::string> all = metric_names(epochs);
  std::vector<std::string> metrics(all.begin(), all.end());
  if (metrics.size() > kPageMetrics) metrics.resize(kPageMetrics);
  std::ostringstream html;
  html << "<h2>Epochs</h2>\n<div class=\"scroll\"><table id=\"epochs\">\n<tr><th>epoch</th>"
       << "<th>step</th><th>lr</th><th>train_loss</th><th>img/s</th><th>seconds</th>";
  for (const auto& name : metrics) html << "<th>" << html_escape(name) << "</th>";
  html << "</tr>\n";
  for (size_t i = from; i < page_end(from, epochs.size()); ++i) {
    check_work_bound();
    const records::EpochRow& e = epochs[i];
    html << "<tr><td>" << e.epoch << "</td><td>" << e.global_step << "</td><td>"
         << number_text(e.lr) << "</td><td>" << number_text(e.train_loss) << "</td><td>"
         << number_text(e.train_fps_mean) << "</td><td>" << number_text(e.epoch_seconds) << "</td>";
    for (const auto& name : metrics) {
      const auto it = e.metrics.find(name);
      html << "<td>" << (it == e.metrics.end() ? "-" : number_text(it->second)) << "</td>";
    }
    html << "</tr>\n";
  }
  html << "</table></div>\n" << pager(run_href(run.id), from, epochs.size(), "Epochs");
  if (all.size() > metrics.size()) {
    html << "<p class=\"note\">The first " << metrics.size() << " of " << all.size()
         << " metrics (by name); <code>amptune show " << run.id << "</code> prints them all.</p>\n";
  }
  return html.str();
}

std::string run_summary(const app::RunDetails& details) {
  const records::RunRow& run = details.run;
  std::ostringstream html;
  html << "<h1>Run " << run.id << ": " << html_escape(run.name) << "</h1>\n<p>Sweep <a href=\""
       << html_escape(sweep_href(run.sweep_name)) << "\">" << html_escape(run.sweep_name)
       << "</a>; status <b class=\"status\">" << records::to_string(run.status) << "</b>; "
       << run.epochs_done << " epochs recorded; primary metric " << html_escape(run.primary_metric);
  if (!run.label.empty()) html << "; label " << html_escape(run.label);
  html << ".</p>\n";
  if (run.fork) {
    html << "<p>Forked from <a href=\"" << run_href(run.fork->parent_run_id) << "\">run "
         << run.fork->parent_run_id << "</a> at epoch " << run.fork->parent_epoch << ": "
         << html_escape(run.fork->changes) << ".</p>\n";
  }
  if (!run.message.empty()) html << "<p class=\"note\">" << html_escape(run.message) << "</p>\n";
  for (const auto& d : details.prune_decisions) {
    html << "<p class=\"note\">epoch " << d.epoch << ": " << records::to_string(d.action) << " ("
         << html_escape(d.reason) << ")</p>\n";
  }
  return html.str();
}

std::string run_part(const store::Store& store, int64_t run_id, size_t from) {
  const app::RunDetails details = app::show_run(store, std::to_string(run_id));
  const app::ReportModel model = app::build_run_plots(store, details.run, details.epochs);
  return run_summary(details) + epochs_table(details.run, details.epochs, from) +
         "<h2>Curves</h2>\n" + plots(model, app::kOnRunPage, run_id);
}

// --- routing ------------------------------------------------------------------------------------

struct Route {
  enum class Kind { kIndex, kSweep, kTune, kRun, kNotFound, kMalformed } kind = Kind::kNotFound;
  std::string sweep;
  int64_t run_id = 0;
  bool live = false;  // ?part=live
  size_t from = 0;    // ?from=N: the first row of a paged table
};

// The query's parameters into `r`; false when ?from= is not a row number.
bool read_query(const std::string& query, Route* r) {
  std::istringstream params(query);
  for (std::string param; std::getline(params, param, '&');) {
    r->live |= param == "part=live";
    if (param.rfind("from=", 0) != 0) continue;
    const std::string n = param.substr(5);
    if (n.empty() || n.size() > 9 || !std::all_of(n.begin(), n.end(), ::isdigit)) return false;
    r->from = std::stoul(n);
  }
  return true;
}

Route route(const std::string& target) {
  Route r;
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  if (!read_query(query, &r)) return r.kind = Route::Kind::kMalformed, r;
  if (path == "/" || path == "/index.html") return r.kind = Route::Kind::kIndex, r;
  if (path.rfind("/run/", 0) == 0) {
    const std::string id = path.substr(5);
    if (id.empty() || id.size() > 18 || !std::all_of(id.begin(), id.end(), ::isdigit)) return r;
    r.run_id = std::stoll(id);
    return r.kind = Route::Kind::kRun, r;
  }
  if (path.rfind("/sweep/", 0) != 0) return r;
  std::string rest = path.substr(7);
  const bool tune = rest.size() > 5 && rest.compare(rest.size() - 5, 5, "/tune") == 0;
  if (tune) rest.resize(rest.size() - 5);
  const std::optional<std::string> sweep = percent_decoded(rest);
  if (!sweep) return r.kind = Route::Kind::kMalformed, r;
  if (sweep->empty()) return r;
  r.sweep = *sweep;
  r.kind = tune ? Route::Kind::kTune : Route::Kind::kSweep;
  return r;
}

Page error_page(int status, const std::string& title, const std::string& message, bool live) {
  const std::string part =
      "<h1>" + html_escape(title) + "</h1>\n<p>" + html_escape(message) + "</p>\n";
  return {status, live ? part : document(title, part)};
}

}  // namespace

std::optional<std::string> percent_decoded(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      return std::nullopt;
    }
    const char c = static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
    if (c == '\0') return std::nullopt;
    out += c;
    i += 2;
  }
  return out;
}

Page render_page(const std::string& db, const std::string& target) {
  const Route r = route(target);
  if (r.kind == Route::Kind::kMalformed) {
    return error_page(400, "Bad request", "the address " + target + " is malformed", false);
  }
  if (r.kind == Route::Kind::kNotFound) {
    return error_page(404, "Not found", "no page " + target + " (see the sweeps at /)", false);
  }
  try {
    const std::unique_ptr<store::Store> store = app::open_read_only(db);
    std::string part, title;
    switch (r.kind) {
      case Route::Kind::kIndex:
        part = index_part(*store, r.from), title = "sweeps";
        break;
      case Route::Kind::kSweep:
        part = sweep_part(*store, r.sweep, r.from), title = "sweep " + r.sweep;
        break;
      case Route::Kind::kTune:
        part = tune_part(*store, r.sweep), title = "tune search of " + r.sweep;
        break;
      default:
        part = run_part(*store, r.run_id, r.from), title = "run " + std::to_string(r.run_id);
    }
    return {200, r.live ? part : document(title, part)};
  } catch (const UsageError& e) {  // an unknown sweep or run
    return error_page(404, "Not found", e.what(), r.live);
  } catch (const StoreError& e) {
    check_work_bound();  // a query interrupted because the page's bound passed: its owner says so
    return error_page(503, "Database not readable", e.what(), r.live);
  }
}

}  // namespace amptune::web
