#include "app/views/status.h"

#include "app/run/run_input.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/process.h"

namespace amptune::app {
namespace {

// The run's planned number of epochs: the epochs column, else schedule.epochs of its config.
int planned_epochs(const records::RunRow& run) {
  if (auto it = run.columns.find("epochs"); it != run.columns.end()) {
    try {
      return nlohmann::json::parse(it->second).get<int>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  try {
    return static_cast<int>(resolve_run(run).settings().schedule.epochs);
  } catch (const Error&) {  // a configuration this build cannot read: status still answers
    return 0;
  }
}

// Mean seconds of the run's epochs that have a time; unset when none has.
std::optional<double> mean_epoch_seconds(const store::Store& store, int64_t run_id) {
  double seconds = 0;
  int timed = 0;
  for (const auto& epoch : store.epochs(run_id)) {
    if (std::isfinite(epoch.epoch_seconds)) {
      seconds += epoch.epoch_seconds;
      ++timed;
    }
  }
  if (timed == 0) return std::nullopt;
  return seconds / timed;
}

RunningRun running_run(const store::Store& store, const records::RunRow& run,
                       std::chrono::system_clock::time_point now) {
  RunningRun r;
  r.run_id = run.id;
  r.name = run.name;
  r.label = run.label;
  r.epochs_done = run.epochs_done;
  r.planned_epochs = planned_epochs(run);
  r.heartbeat_age_seconds = seconds_since(run.heartbeat_at, now);
  if (run.holder) r.holder_pid = run.holder->pid;
  const std::optional<bool> alive = run.holder ? alive_if_local(*run.holder) : std::nullopt;
  const bool old_heartbeat =
      r.heartbeat_age_seconds && *r.heartbeat_age_seconds > store::kDefaultStaleAfterSeconds;
  if (alive == false) {
    r.health = RunningRun::Health::kProcessGone;
  } else if (old_heartbeat) {
    r.health = alive ? RunningRun::Health::kHung : RunningRun::Health::kStale;
  } else if (const auto seconds = mean_epoch_seconds(store, run.id)) {
    r.eta_seconds = *seconds * std::max(0, r.planned_epochs - r.epochs_done);
  }
  return r;
}

}  // namespace

std::optional<double> seconds_since(const std::string& stamp,
                                    std::chrono::system_clock::time_point now) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0;
  double second = 0;
  if (std::sscanf(stamp.c_str(), "%d-%d-%dT%d:%d:%lfZ", &year, &month, &day, &hour, &minute,
                  &second) != 6) {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  const double then = static_cast<double>(timegm(&tm)) + second;
  return std::chrono::duration<double>(now.time_since_epoch()).count() - then;
}

std::vector<SweepStatus> build_status(const store::Store& store,
                                      const std::optional<std::string>& sweep,
                                      std::chrono::system_clock::time_point now) {
  const std::vector<records::RunRow> runs = store.runs(sweep);
  if (sweep && runs.empty()) {
    const std::vector<std::string> names = store.sweep_names();
    if (std::find(names.begin(), names.end(), *sweep) == names.end()) {
      throw UsageError("no sweep '" + *sweep + "' in " + store.path() + " (see amptune status)");
    }
  }
  std::vector<SweepStatus> sweeps;
  for (const records::RunRow& run : runs) {
    if (sweeps.empty() || sweeps.back().sweep != run.sweep_name) {
      SweepStatus s;
      s.sweep = run.sweep_name;
      for (auto status : records::kRunStatuses) s.counts[status] = 0;
      sweeps.push_back(s);
    }
    SweepStatus& s = sweeps.back();
    ++s.runs;
    ++s.counts[run.status];
    if (run.status == records::RunStatus::kRunning) {
      s.running.push_back(running_run(store, run, now));
    }
  }
  return sweeps;
}

namespace {

// `runs` with the best value of each one's primary metric over its epochs.
std::vector<RunLine> with_best(const store::Store& store, std::vector<records::RunRow> runs) {
  std::vector<RunLine> lines;
  std::map<std::string, bool> higher;  // metric -> higher is better
  for (records::RunRow& run : runs) {
    RunLine line;
    const std::string& metric = run.primary_metric;
    if (!higher.count(metric)) higher[metric] = store.higher_is_better(metric).value_or(true);
    for (const auto& epoch : store.epochs(run.id)) {
      const auto it = epoch.metrics.find(metric);
      if (it == epoch.metrics.end() || std::isnan(it->second)) continue;
      const bool better = !line.best || (higher[metric] ? it->second > *line.best
                                                        : it->second < *line.best);
      if (better) {
        line.best = it->second;
        line.best_epoch = epoch.epoch;
      }
    }
    line.run = std::move(run);
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace

std::vector<RunLine> list_runs(const store::Store& store,
                               const std::optional<std::string>& sweep) {
  return with_best(store, store.runs(sweep));
}

std::vector<RunLine> list_runs(const store::Store& store, const std::string& sweep, size_t offset,
                               size_t limit) {
  return with_best(store, store.runs(sweep, static_cast<int64_t>(offset),
                                     static_cast<int64_t>(limit)));
}

}  // namespace amptune::app
