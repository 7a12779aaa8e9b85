// Unit tests of the status model (app/views/status.h): counts per sweep, the ETA of a running run,
// and when a running run counts as dead (a holder elsewhere by its heartbeat, a holder on this
// machine by its process). Claims of other processes are faked with raw SQL, as in
// tests/unit/store/store_test.cpp.
#include "app/views/status.h"

#include <unistd.h>

#include <chrono>

#include "core/error.h"
#include "core/process.h"
#include "unit/app/app_fixture.h"

namespace amptune::app {
namespace {

using records::RunStatus;
using Clock = std::chrono::system_clock;

class StatusTest : public AppTest {
 protected:
  // A run of "grid" that this process holds, planned for `epochs` epochs, with `seconds` as the
  // epoch times of its recorded epochs.
  int64_t running_run(int cell, int epochs, const std::vector<double>& seconds) {
    Run run;
    run.cell = cell;
    run.columns = {{"epochs", std::to_string(epochs)}};
    const int64_t id = add_run(run);
    store_.mark_running(id, records::Provenance{});
    for (size_t i = 0; i < seconds.size(); ++i) {
      Epoch e;
      e.seconds = seconds[i];
      add_epoch(id, static_cast<int>(i), e);
    }
    return id;
  }
  // The one running run of the one sweep (a copy: `sweeps` is usually a temporary).
  static RunningRun only_running(const std::vector<SweepStatus>& sweeps) {
    EXPECT_EQ(sweeps.size(), 1u);
    EXPECT_EQ(sweeps.at(0).running.size(), 1u);
    return sweeps.at(0).running.at(0);
  }
  void set_run(int64_t id, const std::string& assignments) {
    exec_raw("UPDATE runs SET " + assignments + " WHERE id = " + std::to_string(id));
  }
};

TEST_F(StatusTest, CountsEveryStatusPerSweep) {
  Run run;
  for (RunStatus status :
       {RunStatus::kDone, RunStatus::kDone, RunStatus::kFailed, RunStatus::kDiverged,
        RunStatus::kPending, RunStatus::kRunning, RunStatus::kPruned}) {
    const int64_t id = add_run(run);
    ++run.cell;
    if (status == RunStatus::kRunning) store_.mark_running(id, records::Provenance{});
    if (status == RunStatus::kPruned) set_run(id, "status = 'pruned'");
    if (status != RunStatus::kPending && status != RunStatus::kRunning &&
        status != RunStatus::kPruned) {
      finish(id, status);
    }
  }
  Run other;
  other.sweep = "other";
  add_run(other);

  const auto sweeps = build_status(store_, std::nullopt);
  ASSERT_EQ(sweeps.size(), 2u);
  EXPECT_EQ(sweeps[0].sweep, "grid");
  EXPECT_EQ(sweeps[0].runs, 7);
  EXPECT_EQ(sweeps[0].counts, (std::map<RunStatus, int>{{RunStatus::kPending, 1},
                                                        {RunStatus::kRunning, 1},
                                                        {RunStatus::kDone, 2},
                                                        {RunStatus::kFailed, 1},
                                                        {RunStatus::kDiverged, 1},
                                                        {RunStatus::kPruned, 1}}));
  EXPECT_EQ(sweeps[0].running.size(), 1u);
  EXPECT_EQ(sweeps[1].sweep, "other");
  EXPECT_EQ(sweeps[1].counts.at(RunStatus::kPending), 1);
  EXPECT_EQ(sweeps[1].counts.at(RunStatus::kDone), 0);
  EXPECT_TRUE(sweeps[1].running.empty());

  const auto one = build_status(store_, std::string("other"));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].sweep, "other");
}

TEST_F(StatusTest, UnknownSweepIsAUsageErrorAndASweepWithoutRunsIsEmpty) {
  store_.ensure_sweep("empty", "", "", "");
  EXPECT_TRUE(build_status(store_, std::string("empty")).empty());
  EXPECT_TRUE(build_status(store_, std::nullopt).empty());
  try {
    build_status(store_, std::string("nope"));
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what()), "no sweep 'nope' in " + path_ + " (see amptune status)");
  }
}

TEST_F(StatusTest, EtaIsTheMeanEpochTimeTimesTheEpochsLeft) {
  const int64_t id = running_run(0, 5, {10, 20});
  const RunningRun run = only_running(build_status(store_, std::nullopt));
  EXPECT_EQ(run.run_id, id);
  EXPECT_EQ(run.epochs_done, 2);
  EXPECT_EQ(run.planned_epochs, 5);
  EXPECT_EQ(run.health, RunningRun::Health::kLive);
  EXPECT_EQ(run.holder_pid, ::getpid());
  EXPECT_EQ(run.eta_seconds, 45.0);  // (10 + 20) / 2 x 3
  ASSERT_TRUE(run.heartbeat_age_seconds);
  EXPECT_GE(*run.heartbeat_age_seconds, 0);
  EXPECT_LT(*run.heartbeat_age_seconds, store::kDefaultStaleAfterSeconds);
}

TEST_F(StatusTest, WithoutATimedEpochThereIsNoEtaAndPlannedEpochsComeFromTheConfig) {
  Run run;  // no epochs column: schedule.epochs of the config (3)
  store_.mark_running(add_run(run), records::Provenance{});
  const RunningRun r = only_running(build_status(store_, std::nullopt));
  EXPECT_EQ(r.planned_epochs, 3);
  EXPECT_EQ(r.epochs_done, 0);
  EXPECT_EQ(r.eta_seconds, std::nullopt);
  EXPECT_EQ(r.health, RunningRun::Health::kLive);

  // More epochs than planned: no time left rather than a negative one.
  const int64_t over = running_run(1, 1, {10, 10});
  const auto running = build_status(store_, std::nullopt).at(0).running;
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[1].run_id, over);
  EXPECT_EQ(running[1].eta_seconds, 0.0);
}

TEST_F(StatusTest, AnotherHostsRunIsStaleWhenItsHeartbeatIsOlderThanTheThreshold) {
  const int64_t id = running_run(0, 5, {10});
  set_run(id,
          "claim_machine = 'another-host', claim_pid = 1234, "
          "heartbeat_at = '2024-05-01T12:00:00.000Z'");
  const Clock::time_point beat = Clock::from_time_t(1714564800);  // 2024-05-01T12:00:00Z
  const auto after = [&](double seconds) {
    return beat +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  RunningRun r =
      only_running(build_status(store_, std::nullopt, after(store::kDefaultStaleAfterSeconds - 1)));
  EXPECT_EQ(r.health, RunningRun::Health::kLive);
  EXPECT_EQ(r.eta_seconds, 40.0);
  EXPECT_DOUBLE_EQ(*r.heartbeat_age_seconds, store::kDefaultStaleAfterSeconds - 1);

  r = only_running(build_status(store_, std::nullopt, after(store::kDefaultStaleAfterSeconds + 1)));
  EXPECT_EQ(r.health, RunningRun::Health::kStale);
  EXPECT_EQ(r.holder_pid, 1234);
  EXPECT_EQ(r.eta_seconds, std::nullopt);
}

TEST_F(StatusTest, ALiveHolderOnThisMachineWithAnOldHeartbeatIsHung) {
  const int64_t id = running_run(0, 5, {10});
  set_run(id, "heartbeat_at = '2000-01-01T00:00:00.000Z'");  // holder: this process
  const RunningRun r = only_running(build_status(store_, std::nullopt));
  EXPECT_EQ(r.health, RunningRun::Health::kHung);
  EXPECT_EQ(r.holder_pid, ::getpid());
  EXPECT_EQ(r.eta_seconds, std::nullopt);
}

TEST_F(StatusTest, AGoneHolderOnThisMachineIsStaleWhateverItsHeartbeat) {
  const int64_t id = running_run(0, 5, {10});
  // A pid above any pid_max: that process does not exist. The heartbeat is in the future.
  set_run(id, "claim_machine = '" + current_process().machine +
                  "', claim_pid = 2147483600, heartbeat_at = '2999-01-01T00:00:00.000Z'");
  const RunningRun r = only_running(build_status(store_, std::nullopt));
  EXPECT_EQ(r.health, RunningRun::Health::kProcessGone);
  EXPECT_EQ(r.holder_pid, 2147483600);
  EXPECT_EQ(r.eta_seconds, std::nullopt);
}

TEST_F(StatusTest, ListGivesEachRunsBestPrimaryMetricInItsDirection) {
  Run acc;
  const int64_t a = add_run(acc);
  add_epochs(a, "acc1", {61.0, 75.5, 70.0});
  Run mrpe;
  mrpe.cell = 1;
  mrpe.columns = {{"primary_metric", "\"mrpe\""}};
  const int64_t m = add_run(mrpe);
  add_epochs(m, "mrpe", {400.0, 350.25, 380.0});
  Run none;
  none.sweep = "other";
  add_run(none);

  const auto lines = list_runs(store_, std::string("grid"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].run.id, a);
  EXPECT_EQ(lines[0].best, 75.5);
  EXPECT_EQ(lines[0].best_epoch, 1);
  EXPECT_EQ(lines[1].run.primary_metric, "mrpe");
  EXPECT_EQ(lines[1].best, 350.25);  // lower is better (metric_info)
  EXPECT_EQ(lines[1].best_epoch, 1);
  const auto all = list_runs(store_, std::nullopt);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_FALSE(all[2].best);
}

TEST_F(StatusTest, SecondsSinceReadsIsoUtcTimestamps) {
  const Clock::time_point now = Clock::from_time_t(1714564800 + 10);  // 2024-05-01T12:00:10Z
  EXPECT_DOUBLE_EQ(*seconds_since("2024-05-01T12:00:00.500Z", now), 9.5);
  EXPECT_DOUBLE_EQ(*seconds_since("2024-05-01T11:00:10.000Z", now), 3600);
  EXPECT_EQ(seconds_since("", now), std::nullopt);
  EXPECT_EQ(seconds_since("yesterday", now), std::nullopt);
}

}  // namespace
}  // namespace amptune::app
