// The sweep runner: plans a sweep's runs (its cells and their declared forks), checks every one
// before anything is written, and trains them, sharing the sweep with any other amptune processes
// through the store's claims (store.h "Holding a run"); `resume` and `fork` of single runs.
//
//   app::Plan plan = app::plan_sweep("experiments/x.yaml", sets, only);  // throws, writes nothing
//   store::Store store(db);
//   app::Tally tally = app::run_sweep(store, plan, options);
//   return tally.exit_code();
//
// No torch in this header: the CLI and the unit tests include it.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/prune/prune_rules.h"
#include "app/run/shard.h"
#include "app/run/sweep_plan.h"
#include "core/child.h"
#include "core/sweep.h"
#include "store/store.h"
#include "train/plan.h"
#include "train/trainer.h"

namespace amptune::app {

// --stale-after's default: a run held by a process on another host that has not beaten its
// heartbeat for this long is presumed dead (Store::claim_run).
constexpr double kDefaultStaleAfterSeconds = store::kDefaultStaleAfterSeconds;

struct SweepOptions {
  train::RunOptions training;  // threads, progress, command line, stop after epoch
  // Version fields of the provenance recorded with each claim (the CLI fills them from the
  // binary; host, threads, device and command line are filled here).
  records::Provenance provenance;
  bool retry_failed = false;   // train failed runs again (they are skipped otherwise)
  // --no-prune: the plan's prune rule is off; pruned cells continue from their newest checkpoint.
  bool no_prune = false;
  double stale_after = kDefaultStaleAfterSeconds;  // Store::claim_run
  double poll_seconds = 2;     // while waiting for runs other processes hold
  // Called when this process has trained a run to an outcome (the CLI prints the end-of-run
  // JSON line of a done run).
  std::function<void(const records::RunRow&, const train::RunResult&)> on_result;
};

// One device's peak FLOP/s for the runs' MFU when detection is wrong (docs/PERFORMANCE.md "MFU"):
// `option` (--peak-flops) when given, else the environment's AMPTUNE_PEAK_FLOPS, into
// training.peak_flops and peak_flops_by; neither: the peak is detected. Throws UsageError (the
// option) or ConfigError (the environment) for a value that is not a positive number.
void set_peak_flops(const std::optional<std::string>& option, train::RunOptions& training);

// What one invocation did with its runs.
struct Tally {
  int done = 0, diverged = 0, failed = 0, skipped = 0, interrupted = 0, lost = 0;
  int pruned = 0;     // stopped by the prune rule here, or left pruned (exit code 0 either way)
  int rank_lost = 0;  // stopped because a process of the data-parallel job was lost
  // resume_run / fork_run of a run that is already finished: what to tell the user.
  std::string note;
  void add(const train::RunResult& result);
  // 130 when interrupted by a signal, 9 when a process of the job was lost, 8 when a run
  // failed, else 0 (README "Exit codes").
  int exit_code() const;
  // "3 trained, 1 skipped, 0 diverged, 0 failed, 0 interrupted[, 1 taken over ...]"
  std::string summary() const;
};

// Creates the plan's runs in `store` (pending; an existing run is found again by its config
// hash, whatever its index) and trains each one this process can claim: cells, then forks once
// their parent's checkpoint exists. Finished runs are skipped, failed ones too unless
// retry_failed; runs other processes hold are waited for (polling) until they finish or their
// holder is gone (then this process takes them over). The plan's prune rule may stop a cell after
// an epoch (status pruned); a pruned cell continues, from its newest checkpoint, once the rule
// lets it (prune_promotions: asha's late promotion, a changed rule, --no-prune), also after it
// was stopped in this call. Otherwise each run is tried at most once per call. Stops early on
// train::stop_requested().
Tally run_sweep(store::Store& store, const Plan& plan, const SweepOptions& options);

// The claim-and-train loop that `run` and `tune` share. What it does with a run of `ids` in one
// pass, as `turn` says from the run's row (re-read every pass): kTrain claims it and trains it
// (a run another process holds is waited for), kSkip leaves it, kWait leaves it for now but keeps
// the loop polling (a fork whose parent is still training).
enum class Turn { kTrain, kSkip, kWait };
struct Schedule {
  std::vector<int64_t> ids;  // in the order to train them
  std::function<Turn(const records::RunRow&)> turn;  // unset: kTrain
  // After each pass: runs that may train again in this call (pruned cells promoted since).
  std::function<std::vector<int64_t>()> reopen;
  PruneSettings prune;  // the rule the trainer applies after each epoch
};

// Trains each run of `schedule` this process can claim (Store::claim_run with
// options.retry_failed), at most once per call unless reopened, polling every
// options.poll_seconds while it waits (in naps of a tenth of a second: a signal ends the wait at
// once). Counts in `tally`. Returns false when a signal stopped it (train::stop_requested()) or a
// process of the data-parallel job was lost (tally.rank_lost), true when nothing is left to do.
bool train_schedule(store::Store& store, const Schedule& schedule, const SweepOptions& options,
                    Tally& tally);

// `amptune resume`: continues `run` from its newest valid checkpoint (or `from_epoch`'s). A
// finished run is trained again only with from_epoch. Throws CheckpointError naming the saved
// epochs when from_epoch has no checkpoint, UsageError when a live process holds the run.
Tally resume_run(store::Store& store, const records::RunRow& run, std::optional<int> from_epoch,
                 const SweepOptions& options);

// `amptune fork`: the fork of `parent` at `epoch` with `overrides` (see train::plan_fork),
// created or found again, then trained unless it is finished. Throws as plan_fork does,
// CheckpointError when the parent has no checkpoint of `epoch`.
Tally fork_run(store::Store& store, const records::RunRow& parent, int epoch,
               const std::vector<std::pair<std::string, nlohmann::json>>& overrides,
               bool reset_optimizer, const std::string& name, const SweepOptions& options);

// Throws CheckpointError naming the saved epochs when `run` keeps no checkpoint of `epoch`.
void require_checkpoint(const store::Store& store, const records::RunRow& run, int epoch);

// `run --workers N`: starts N processes of this binary with `args` (a `run` command line without
// --workers) on the same database, passes SIGINT/SIGTERM on (core/child.h ForwardSignals), and
// waits. Returns the first non-zero exit code of a worker; a worker killed by a signal makes it 8
// when runs of the sweep are left unfinished. Throws EnvironmentError when a process cannot be
// started (the workers already started are stopped first).
int run_workers(const std::vector<std::string>& args, int workers, const std::string& db,
                const std::string& sweep_name);

// This binary (/proc/self/exe) running `args` (a command line after the program name), for
// Child::start.
ChildSpec self_command(const std::vector<std::string>& args);

// Data-parallel jobs (docs/DISTRIBUTED.md; options.training.cluster set). The leader (rank 0)
// runs `command` (run_sweep, resume_run, fork_run: it alone plans, claims and writes), then
// tells the other ranks to stop, with its exit code, also when `command` throws. Without a
// cluster: command().
int lead_job(const SweepOptions& options, const std::function<int()>& command);
// The other ranks: train each run the leader announces (train::follow_run) until it stops;
// returns the leader's exit code. Throws RankLostError when the leader is gone.
int follow_job(const SweepOptions& options);

}  // namespace amptune::app
