// The report of a sweep (`amptune report`): a self-contained HTML page, DIR/index.html, with the
// comparison table (as `amptune compare` with its defaults, plus the model's headline metrics)
// and PNG plots drawn by gnuplot (run as a child process): primary metric and train loss per
// epoch (a fork continues its parent's line, from the lineage), loss scale per global step,
// mean training img/s per run, where the epochs' time went per run, links to the runs' profile
// traces, and for diagnosed runs (amptune diagnose) each module's error in execution order,
// named, with the first module that departs marked; for a sweep searched by `amptune tune`, the
// search's decision tree (each run a node coloured by its outcome, each edge the move that made
// it) beside the metric curves of the reference, the start and the answer; and the table's metric
// as a heatmap per pair of swept keys (app/views/heatmap.h).
//
// build_report reads the data of the page into plain structs (no files, no gnuplot; report.cpp);
// write_report turns them into files (report_gnuplot.cpp). Which plots are drawn from the model,
// by the report and by the live view alike, is one list: app/views/report_plots.h.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/views/compare.h"
#include "app/views/heatmap.h"
#include "store/store.h"

namespace amptune::app {

// Runs in each line plot; more would make the legend unreadable (the table lists them all).
constexpr size_t kMaxPlottedRuns = 60;

// One run's line: (x, y) points in x order, titled by the run's label (its name when unlabelled).
struct Series {
  int64_t run_id = 0;
  std::string title;
  std::vector<std::pair<double, double>> points;
};

struct ThroughputBar {
  int64_t run_id = 0;
  std::string label;  // "<cell index>: <label or name>"
  double img_s = 0;   // mean over the run's epochs of train_fps_mean
};

// Where a run's epochs spent their time (records::EpochTimes), mean seconds per epoch over its
// epochs with a breakdown, in kTimePhases order.
struct TimeBar {
  int64_t run_id = 0;
  std::string label;  // as ThroughputBar
  std::vector<double> seconds;
};
// The phases of a TimeBar: data wait, forward, backward, optimizer, eval, other (the rest of
// epoch_seconds), checkpoint, db.
extern const std::vector<std::string> kTimePhases;

// A diagnosed run's newest diagnosis (amptune diagnose): its forward rows as a Series,
// execution index -> 1 - cosine (worst over its batches; 1 where values were lost to inf/NaN,
// 1e-12 where exact, so the log scale can show it), the modules' names, and the first module
// that departs as train::first_divergence says (cosine below the diagnosis's cosine_min, values
// lost to inf/NaN, or overflow; the view first_divergence).
struct ModuleErrors {
  Series series;
  std::vector<std::string> modules;  // per point of series
  double cosine_min = 0;             // the diagnosis's threshold
  struct Departure {
    int seq = 0;  // the execution index (x of its point)
    std::string module;
    std::string reason;  // "1 - cosine 0.1 > 0.01", "overflow (2.5% of its outputs)", ...
  };
  std::optional<Departure> first;  // unset: no module departs
};

// A profile trace (profile.steps) recorded on an epoch row.
struct TraceLink {
  std::string run;  // the run's name
  int epoch = 0;
  std::string path;
};

// The newest tune search of the sweep (docs/TUNE.md) as a tree of runs: the start at the root,
// each candidate a child of its round's start (a bisection probe of the solution it bisects).
// The nodes are held flat, children by index, so a search of 100,000 rounds in a chain is built,
// written and freed without recursion and in time and memory linear in its candidates.
struct TuneNode {
  int64_t run_id = 0;
  std::string run;      // the run's name
  std::string move;     // the edge from the parent: "fp32_modules amp.fp32_modules=[conv1]"
  std::string reason;   // why the move was tried (the advice row, or the move order)
  std::string outcome;  // start | within | outside | pruned | diverged | failed | pending
  int round = 0;        // 0 for the start
  double value = 0;     // its metric at the last decision (NaN: none)
  bool answer = false;
  std::vector<size_t> children;  // indices into TuneTree::nodes, in round, then candidate order
};
struct TuneTree {
  records::TuneStatus status = records::TuneStatus::kSearching;
  std::string metric, note, answer_yaml;
  std::string reference;  // the reference run's name
  double reference_value = 0;
  int epochs_spent = 0, grid_epochs = 0;
  std::vector<TuneNode> nodes;  // nodes[0] is the start; each child comes after its parent
  // Along their lineage, epoch -> the search's metric of the reference, the start and the answer.
  std::vector<Series> curves;
};

struct ReportModel {
  std::string sweep;
  std::string database;  // the database path, as the page names it
  int runs = 0;          // runs of the sweep
  // As `amptune compare` with its defaults and --also the headline metrics of the runs' models
  // (train/model_info.h) that the sweep recorded: mrpe beside ap_root_25 for RootNet.
  CompareTable table;
  // Along each run's lineage, epoch -> the run's primary metric (from the metrics table or, for
  // train_loss, lr, ..., the epoch row: Store::lineage) / train loss / mean training img/s (an
  // epoch whose value is NULL has no point). One series per run that has an epoch, by run id, at
  // most kMaxPlottedRuns (series are kept even without points).
  std::vector<Series> metric, train_loss, img_s;
  bool truncated = false;  // more runs than kMaxPlottedRuns had an epoch (the plots show the first)
  // Per run with loss-scale events, in cell order, at most kMaxPlottedRuns: global step ->
  // scale, each change as recorded, then the last scale held until the run's last recorded step.
  std::vector<Series> loss_scale;
  // Runs with a recorded img/s, in cell order, at most kMaxPlottedRuns.
  std::vector<ThroughputBar> throughput;
  // Per diagnosed run, in cell order, at most kMaxPlottedRuns.
  std::vector<ModuleErrors> module_error;
  // Runs with a time breakdown, in cell order, at most kMaxPlottedRuns; their traces.
  std::vector<TimeBar> times;
  std::vector<TraceLink> traces;
  std::optional<TuneTree> tune;  // the sweep's newest tune search, when it has one
  // The table's metric per pair of its keys (app/views/heatmap.h), from `table` before any
  // writer trims it, the runs' statuses and the tune search's answer.
  HeatMaps heatmaps;
  // The distinct peaks the table's mfu column is a share of: "0.333 TFLOP/s fp32 (cpu: ...)".
  std::vector<std::string> peaks;
};

// Reads the report of `sweep`. Throws what build_compare throws (UsageError for an unknown
// sweep) and StoreError.
ReportModel build_report(const store::Store& store, const std::string& sweep);

// The plots of one run as build_report has them for the runs it plots (the live view's run
// page): its metric and train loss along its lineage, its loss scale per step, its newest
// diagnosis; whatever its place in the sweep (build_report plots the first kMaxPlottedRuns), and
// without reading the sweep's other runs. The table is empty but for its sweep and metric (the
// run's primary metric); no tune tree, throughput or time bars. `epochs` are the run's as
// Store::epochs(run.id) reads them: the caller has them already (the run page's table), and a
// run of 10,000 metrics x 100 epochs takes a second to read each time. Throws StoreError.
ReportModel build_run_plots(const store::Store& store, const records::RunRow& run,
                            const std::vector<records::EpochRow>& epochs);

// --- the files (report_gnuplot.cpp) ---

struct ReportOutput {
  std::string dir;                  // created (with its parents) when missing
  std::string gnuplot = "gnuplot";  // the program that draws the plots (a name on PATH or a path)
  std::string written_by;           // the page's footer names it: "amptune 0.4.0 (1a2b3c)"
};

struct ReportFiles {
  std::string index;  // DIR/index.html
  int plots = 0;      // PNG files drawn
};

// Writes DIR/report.gp and the *.dat files it plots, runs gnuplot on them (its output goes to
// DIR/gnuplot.log), then DIR/index.html (through a temp file and a rename, so a failure leaves no
// page). A plot without data is a note on the page instead; without any, gnuplot is not run.
// EnvironmentError when DIR cannot be created or written, gnuplot cannot be started or fails
// (the message has the tail of its log), or a PNG is missing afterwards.
ReportFiles write_report(const ReportModel& model, const ReportOutput& output);

}  // namespace amptune::app
