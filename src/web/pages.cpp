#include "web/pages.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

#include "app/inspect.h"
#include "app/report.h"
#include "app/report_html.h"
#include "app/status.h"
#include "core/error.h"
#include "web/svg.h"

namespace amptune::web {
namespace {

using app::html_escape;

// Polls the live part of this page every two seconds and swaps it in; says when it last did.
const char* const kLiveScript = R"(<script>
(function () {
  var live = document.getElementById('live'), state = document.getElementById('state');
  var url = location.pathname + (location.search ? location.search + '&' : '?') + 'part=live';
  function poll() {
    fetch(url, {cache: 'no-store'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.text();
    }).then(function (text) {
      if (live.innerHTML !== text) live.innerHTML = text;
      state.textContent = 'live: updated ' + new Date().toLocaleTimeString();
      state.className = 'state live';
    }).catch(function (e) {
      state.textContent = 'not updated (' + e.message + '); retrying';
      state.className = 'state stale';
    }).then(function () { setTimeout(poll, 2000); });
  }
  setTimeout(poll, 2000);
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

// --- the sweeps ---------------------------------------------------------------------------------

const std::vector<store::RunStatus> kStatuses = {
    store::RunStatus::kPending, store::RunStatus::kRunning,  store::RunStatus::kDone,
    store::RunStatus::kFailed,  store::RunStatus::kDiverged, store::RunStatus::kPruned};

std::string index_part(const store::Store& store) {
  std::ostringstream html;
  const auto sweeps = app::build_status(store, std::nullopt);
  html << "<h1>Sweeps</h1>\n<p>Database " << html_escape(store.path()) << ".</p>\n";
  if (sweeps.empty()) {
    html << "<p class=\"note\">No sweep has runs yet.</p>\n";
    return html.str();
  }
  html << "<table>\n<tr><th class=\"t\">sweep</th><th>runs</th>";
  for (auto status : kStatuses) html << "<th>" << store::to_string(status) << "</th>";
  html << "<th class=\"t\">training now</th></tr>\n";
  for (const auto& sweep : sweeps) {
    html << "<tr><td class=\"t\"><a href=\"" << html_escape(sweep_href(sweep.sweep)) << "\">"
         << html_escape(sweep.sweep) << "</a></td><td>" << sweep.runs << "</td>";
    for (auto status : kStatuses) {
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
  html << "</table>\n";
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

std::string curves(const app::ReportModel& model, int64_t only) {
  const std::string& metric = model.table.metric;
  LinePlot metric_plot{"metric", metric + " per epoch", "epoch", metric};
  metric_plot.series = plot_series(model.metric, only);
  LinePlot loss{"train_loss", "train loss per epoch", "epoch", "train loss"};
  loss.series = plot_series(model.train_loss, only);
  LinePlot scale{"loss_scale",  "loss scale per global step",
                 "global step", "loss scale (log2)",
                 Scale::kLog2,  true};
  scale.series = plot_series(model.loss_scale, only);
  return svg_line_plot(metric_plot) + svg_line_plot(loss) + svg_line_plot(scale);
}

std::string runs_table(const store::Store& store, const std::string& sweep) {
  std::ostringstream html;
  html << "<h2>Runs</h2>\n<table>\n<tr><th>id</th><th class=\"t\">name</th><th class=\"t\">label"
       << "</th><th class=\"t\">status</th><th>epochs</th><th>best</th></tr>\n";
  for (const auto& line : app::list_runs(store, sweep)) {
    html << "<tr><td><a href=\"" << run_href(line.run.id) << "\">" << line.run.id
         << "</a></td><td class=\"t\">" << html_escape(line.run.name) << "</td><td class=\"t\">"
         << html_escape(line.run.label) << "</td><td class=\"t\">"
         << store::to_string(line.run.status) << "</td><td>" << line.run.epochs_done << "</td><td>"
         << (line.best ? number_text(*line.best) : "-") << "</td></tr>\n";
  }
  html << "</table>\n";
  return html.str();
}

std::string sweep_part(const store::Store& store, const std::string& sweep) {
  const app::ReportModel model = app::build_report(store, sweep);
  std::ostringstream html;
  html << "<h1>Sweep " << html_escape(sweep) << "</h1>\n<p>" << model.runs << " runs; metric <b>"
       << html_escape(model.table.metric) << "</b> ("
       << (model.table.higher_is_better ? "higher" : "lower")
       << " is better), best epoch of each run, mean over runs with the same settings.";
  if (model.tune) {
    html << " <a href=\"" << html_escape(sweep_href(sweep))
         << "/tune\">Tune search: " << html_escape(model.tune->status) << "</a>.";
  }
  html << "</p>\n<h2>Comparison</h2>\n";
  app::write_comparison_table(model.table, html);
  app::write_mfu_note(model.peaks, html);
  html << runs_table(store, sweep) << "<h2>Curves</h2>\n" << curves(model, 0);
  BarChart fps{"throughput", "mean training img/s per run", "img/s"};
  for (const auto& bar : model.throughput) fps.bars.emplace_back(bar.label, bar.img_s);
  html << svg_bar_chart(fps);
  return html.str();
}

std::string tune_part(const store::Store& store, const std::string& sweep) {
  const app::ReportModel model = app::build_report(store, sweep);
  std::ostringstream html;
  html << "<h1>Sweep <a href=\"" << html_escape(sweep_href(sweep)) << "\">" << html_escape(sweep)
       << "</a>: tune search</h1>\n";
  if (!model.tune) {
    html << "<p class=\"note\">This sweep has no tune search (amptune tune).</p>\n";
    return html.str();
  }
  app::write_tune_section(*model.tune, html, "/run/");
  LinePlot plot{"tune_curves", model.tune->metric + " of the reference, start and answer", "epoch",
                model.tune->metric};
  plot.series = plot_series(model.tune->curves);
  html << svg_line_plot(plot);
  return html.str();
}

// --- a run --------------------------------------------------------------------------------------

std::vector<std::string> metric_names(const std::vector<store::EpochRow>& epochs) {
  std::vector<std::string> names;
  for (const auto& e : epochs) {
    for (const auto& [name, value] : e.metrics) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string epochs_table(const std::vector<store::EpochRow>& epochs) {
  if (epochs.empty()) return "<h2>Epochs</h2>\n<p class=\"note\">No epoch recorded yet.</p>\n";
  const std::vector<std::string> metrics = metric_names(epochs);
  std::ostringstream html;
  html << "<h2>Epochs</h2>\n<div class=\"scroll\"><table id=\"epochs\">\n<tr><th>epoch</th>"
       << "<th>step</th><th>lr</th><th>train_loss</th><th>img/s</th><th>seconds</th>";
  for (const auto& name : metrics) html << "<th>" << html_escape(name) << "</th>";
  html << "</tr>\n";
  for (const auto& e : epochs) {
    html << "<tr><td>" << e.epoch << "</td><td>" << e.global_step << "</td><td>"
         << number_text(e.lr) << "</td><td>" << number_text(e.train_loss) << "</td><td>"
         << number_text(e.train_fps_mean) << "</td><td>" << number_text(e.epoch_seconds) << "</td>";
    for (const auto& name : metrics) {
      const auto it = e.metrics.find(name);
      html << "<td>" << (it == e.metrics.end() ? "-" : number_text(it->second)) << "</td>";
    }
    html << "</tr>\n";
  }
  html << "</table></div>\n";
  return html.str();
}

std::string diagnosis(const app::ReportModel& model, int64_t run_id) {
  for (const auto& errors : model.module_error) {
    if (errors.series.run_id != run_id) continue;
    LinePlot plot{"module_error", "each module's error against the reference (newest diagnosis)",
                  "module", "1 - cosine", Scale::kLog10};
    for (size_t i = 0; i < errors.series.points.size() && i < errors.modules.size(); ++i) {
      plot.x_names.emplace_back(static_cast<int>(errors.series.points[i].first), errors.modules[i]);
    }
    plot.series.push_back({errors.series.title, "", errors.series.points, run_id});
    std::string text = "no module departs";
    if (errors.first) {
      plot.x_marks.push_back(errors.first->seq);
      text = "first module that departs: <b>" + html_escape(errors.first->module) + "</b> (" +
             html_escape(errors.first->reason) + ")";
    }
    return "<h2>Diagnosis</h2>\n<p>" + text + ".</p>\n" + svg_line_plot(plot);
  }
  return "";
}

std::string run_summary(const app::RunDetails& details) {
  const store::RunRow& run = details.run;
  std::ostringstream html;
  html << "<h1>Run " << run.id << ": " << html_escape(run.name) << "</h1>\n<p>Sweep <a href=\""
       << html_escape(sweep_href(run.sweep_name)) << "\">" << html_escape(run.sweep_name)
       << "</a>; status <b class=\"status\">" << store::to_string(run.status) << "</b>; "
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
    html << "<p class=\"note\">epoch " << d.epoch << ": " << store::to_string(d.action) << " ("
         << html_escape(d.reason) << ")</p>\n";
  }
  return html.str();
}

std::string run_part(const store::Store& store, int64_t run_id) {
  const app::RunDetails details = app::show_run(store, std::to_string(run_id));
  const app::ReportModel model = app::build_run_plots(store, details.run);
  LinePlot fps{"img_s", "training img/s per epoch", "epoch", "img/s"};
  PlotSeries points{details.run.name, "", {}, details.run.id};
  for (const auto& e : details.epochs) points.points.emplace_back(e.epoch, e.train_fps_mean);
  fps.series.push_back(points);
  return run_summary(details) + epochs_table(details.epochs) + "<h2>Curves</h2>\n" +
         curves(model, run_id) + svg_line_plot(fps) + diagnosis(model, run_id);
}

// --- routing ------------------------------------------------------------------------------------

struct Route {
  enum class Kind { kIndex, kSweep, kTune, kRun, kNotFound, kMalformed } kind = Kind::kNotFound;
  std::string sweep;
  int64_t run_id = 0;
  bool live = false;  // ?part=live
};

Route route(const std::string& target) {
  Route r;
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  std::istringstream params(query);
  for (std::string param; std::getline(params, param, '&');) r.live |= param == "part=live";
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
        part = index_part(*store), title = "sweeps";
        break;
      case Route::Kind::kSweep:
        part = sweep_part(*store, r.sweep), title = "sweep " + r.sweep;
        break;
      case Route::Kind::kTune:
        part = tune_part(*store, r.sweep), title = "tune search of " + r.sweep;
        break;
      default:
        part = run_part(*store, r.run_id), title = "run " + std::to_string(r.run_id);
    }
    return {200, r.live ? part : document(title, part)};
  } catch (const UsageError& e) {  // an unknown sweep or run
    return error_page(404, "Not found", e.what(), r.live);
  } catch (const StoreError& e) {
    return error_page(503, "Database not readable", e.what(), r.live);
  }
}

}  // namespace amptune::web
