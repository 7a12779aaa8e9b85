// The status of the sweeps in a results database (`amptune status`): per sweep how many runs
// are in each state, and for each running run its progress, heartbeat age, and either an ETA or
// why it looks dead. Plain data; the command formats it.
//
// A running run is judged by its holder (Store::claim_run): a holder in this machine's pid space
// is gone as soon as its process is (whatever its heartbeat), and hung while it lives with a
// heartbeat older than store::kDefaultStaleAfterSeconds; a holder elsewhere (or none) is stale
// when its heartbeat is older than that.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/store.h"

namespace amptune::app {

struct RunningRun {
  enum class Health {
    kLive,         // heartbeat fresh (or the holder's process, on this machine, lives and beats)
    kProcessGone,  // its holder is a process of this machine that no longer exists
    kHung,         // its holder on this machine lives but has not beaten for too long
    kStale,        // held elsewhere (or by nobody known) and no heartbeat for too long
  };
  int64_t run_id = 0;
  std::string name, label;
  int epochs_done = 0;     // recorded epochs (max epoch + 1)
  int planned_epochs = 0;  // the runs.epochs column, else schedule.epochs of its config; 0 unknown
  std::optional<double> heartbeat_age_seconds;  // unset without a readable heartbeat
  Health health = Health::kLive;
  int64_t holder_pid = 0;  // of the holder, 0 when none
  // Live runs with a timed epoch: mean epoch seconds x epochs left (never negative).
  std::optional<double> eta_seconds;
};

struct SweepStatus {
  std::string sweep;
  int runs = 0;
  std::map<records::RunStatus, int> counts;  // every status, 0 included
  std::vector<RunningRun> running;         // in cell order
};

// Every sweep that has runs (in sweep id order), or only `sweep` when set: then an unknown sweep
// is a UsageError naming the database; a known sweep without runs gives no entry. Heartbeat ages
// are measured from `now`.
std::vector<SweepStatus> build_status(
    const store::Store& store, const std::optional<std::string>& sweep,
    std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

// One line of `amptune list`: a run and the best value of its primary metric over its epochs
// (max or min as metric_info says; higher is better for metrics it does not list).
struct RunLine {
  records::RunRow run;
  std::optional<double> best;  // unset when no epoch recorded the metric
  int best_epoch = -1;
};
// The runs of the database (or of `sweep`), in sweep and cell order.
std::vector<RunLine> list_runs(const store::Store& store, const std::optional<std::string>& sweep);
// The runs of `sweep` from the `offset`th, at most `limit` (a page of the live view), and
// reading only those.
std::vector<RunLine> list_runs(const store::Store& store, const std::string& sweep, size_t offset,
                               size_t limit);

// Seconds from an ISO-8601 UTC timestamp ("2024-05-01T12:00:00.123Z") to `now`; unset when the
// text is not one.
std::optional<double> seconds_since(const std::string& stamp,
                                    std::chrono::system_clock::time_point now);

}  // namespace amptune::app
