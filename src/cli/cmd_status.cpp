// `amptune status`: per sweep, how many runs are done / running / pending / failed / diverged /
// pruned, and for each running run its epoch, heartbeat age and ETA. The model is
// app::build_status (app/views/status.h).
#include <cmath>
#include <iostream>

#include "app/run/runner.h"
#include "app/views/status.h"
#include "app/views/table.h"
#include "cli/commands.h"
#include "core/log.h"

namespace amptune::cli {
namespace {

std::string duration_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  if (s < 120) return std::to_string(s) + " s";
  if (s < 7200) return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
  return std::to_string(s / 3600) + " h " + std::to_string((s % 3600) / 60) + " min";
}

// The eta column: the ETA of a live run, else why the run looks dead.
std::string eta_text(const app::RunningRun& run) {
  const std::string pid = std::to_string(run.holder_pid);
  switch (run.health) {
    case app::RunningRun::Health::kProcessGone:
      return "stale (its process " + pid + " is gone)";
    case app::RunningRun::Health::kHung:
      return "no heartbeat (process " + pid + " lives: hung?)";
    case app::RunningRun::Health::kStale:
      return "stale (worker died?)";
    case app::RunningRun::Health::kLive:
      break;
  }
  return run.eta_seconds ? duration_text(*run.eta_seconds) : "-";
}

void print_sweep(const app::SweepStatus& sweep, std::ostream& out) {
  auto count = [&](records::RunStatus status) { return sweep.counts.at(status); };
  out << "sweep " << log::printable(sweep.sweep) << ": " << sweep.runs << " runs: done "
      << count(records::RunStatus::kDone) << ", running " << count(records::RunStatus::kRunning)
      << ", pending " << count(records::RunStatus::kPending) << ", failed "
      << count(records::RunStatus::kFailed) << ", diverged " << count(records::RunStatus::kDiverged)
      << ", pruned " << count(records::RunStatus::kPruned) << "\n";
  if (sweep.running.empty()) return;
  app::Table running({"run", "label", "epoch", "heartbeat", "eta"});
  for (const auto& run : sweep.running) {
    running.add(
        {run.name, run.label,
         std::to_string(run.epochs_done) + "/" + std::to_string(run.planned_epochs),
         run.heartbeat_age_seconds ? duration_text(*run.heartbeat_age_seconds) + " ago" : "-",
         eta_text(run)});
  }
  running.print(out);
}

}  // namespace

int cmd_status(const Invocation& inv) {
  std::vector<std::string> dbs;
  std::string sweep;
  Options opts(
      "status",
      "usage: amptune status [options]\n\n"
      "Per sweep: done / running / pending / failed / diverged / pruned counts; for each running\n"
      "run its epoch, heartbeat age and ETA (mean epoch seconds x epochs left). A\n"
      "running run whose process on this host is gone, or (another host) whose\n"
      "heartbeat is older than " +
          app::fixed(app::kDefaultStaleAfterSeconds, 0) + " s, is shown as stale.\n");
  opts.dbs(&dbs);
  opts.add()("sweep", po::value(&sweep), "only this sweep");
  if (!opts.parse(inv.args)) return 0;
  const auto store = open_results(dbs);
  const auto sweeps =
      app::build_status(*store, sweep.empty() ? std::nullopt : std::optional<std::string>(sweep));
  if (sweeps.empty()) std::cout << "no runs in " << store->path() << "\n";
  for (const auto& s : sweeps) print_sweep(s, std::cout);
  return 0;
}

}  // namespace amptune::cli
