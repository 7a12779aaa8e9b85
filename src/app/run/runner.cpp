#include "app/run/runner.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "app/prune/prune_sweep.h"
#include "app/run/run_input.h"
#include "app/run/store_recorder.h"
#include "core/child.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "core/settings.h"
#include "dist/cluster.h"
#include "train/peak.h"

namespace amptune::app {
namespace {

// "process 123 on host-a": who holds a running run, for messages.
std::string holder_text(const records::RunRow& run) {
  if (!run.holder) return "another process";
  return "process " + std::to_string(run.holder->pid) + " on " +
         (run.provenance.host.empty() ? "another host" : run.provenance.host);
}

// A run with recorded epochs continues in this process: say when its thread count differs from
// the one it trained with, since reductions then sum in another order (not bitwise).
void warn_if_not_bitwise(const records::RunRow& run, const records::Provenance& now) {
  if (run.epochs_done == 0 || run.provenance.threads == now.threads) return;
  log::warn("run " + run.name + " trained with " + std::to_string(run.provenance.threads) +
            " threads and continues with " + std::to_string(now.threads) +
            ": its next epochs will differ by rounding from an uninterrupted run's (set threads: " +
            std::to_string(run.provenance.threads) + " or --threads " +
            std::to_string(run.provenance.threads) + " for bitwise results)");
}

// A run continued outside its sweep (resume) reads the data paths it recorded: they must hold
// the data it trained on.
void check_same_data(const records::RunRow& run, const Settings& settings) {
  if (run.data_fingerprint.empty()) return;  // recorded before fingerprints
  const std::string now = train::data_fingerprint(settings);
  if (now == run.data_fingerprint) return;
  throw DataError("run " + run.name + " trained on other data than its data paths hold now " +
                  "(fingerprint " + now.substr(0, 12) + ", recorded " +
                  run.data_fingerprint.substr(0, 12) + "; docs/CONFIG.md \"Identity\"): put " +
                  "the data it trained on back, or run its sweep with --set pointing at them");
}

records::Provenance provenance(const SweepOptions& options, const Settings& settings) {
  records::Provenance p = options.provenance;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  p.host = host;
  p.threads = train::resolve_threads(settings, options.training.threads);
  p.device = train::resolve_device(settings);
  p.command_line = options.training.command_line;
  p.world_size = options.training.cluster ? options.training.cluster->size() : 1;
  p.global_batch = settings.data.batch_size * p.world_size;
  return p;
}

// The label of a sweep fork: its declared name (plus the overrides when the entry has several
// sets, plus the parent when it forks several cells), or "" for the default label.
std::string fork_label(const PlannedFork& fork, const Plan& plan, const std::string& parent_label) {
  const ForkDecl& decl = plan.sweep.forks.at(fork.decl);
  if (decl.name.empty()) return "";
  std::string label = decl.name;
  if (decl.override_sets.size() > 1) {
    for (const auto& [k, v] : decl.override_sets.at(fork.set)) {
      label += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
  }
  if (decl.cells.size() > 1) label += " (from " + parent_label + ")";
  return label;
}

}  // namespace

void Tally::add(const train::RunResult& result) {
  switch (result.outcome) {
    case train::Outcome::kDone: ++done; break;
    case train::Outcome::kDiverged: ++diverged; break;
    case train::Outcome::kInterrupted: ++interrupted; break;
    case train::Outcome::kFailed: ++failed; break;
    case train::Outcome::kLost: ++lost; break;
    case train::Outcome::kRankLost: ++rank_lost; break;
    case train::Outcome::kPruned:
      ++pruned;
      break;
  }
}

void set_peak_flops(const std::optional<std::string>& option, train::RunOptions& training) {
  const char* env = std::getenv("AMPTUNE_PEAK_FLOPS");
  if (!option && (!env || !*env)) return;
  const std::string text = option ? *option : env;
  training.peak_flops = train::parse_peak_flops(text);
  training.peak_flops_by = option ? "--peak-flops" : "AMPTUNE_PEAK_FLOPS";
  if (training.peak_flops) return;
  const std::string what = training.peak_flops_by +
                           " must be a positive number of FLOP/s of one device (e.g. 3.2e11), "
                           "got '" +
                           log::clipped(text, 60) + "'";
  if (option) throw UsageError(what);
  throw ConfigError(what + "; correct it or unset it to detect the peak");
}

int Tally::exit_code() const {
  if (interrupted > 0 && train::stop_requested()) return static_cast<int>(ExitCode::kInterrupted);
  if (rank_lost > 0) return static_cast<int>(ExitCode::kEnvironment);
  if (failed > 0) return static_cast<int>(ExitCode::kFailedRuns);
  return 0;
}

std::string Tally::summary() const {
  return std::to_string(done) + " trained, " + std::to_string(skipped) + " skipped, " +
         std::to_string(diverged) + " diverged, " + std::to_string(failed) + " failed, " +
         std::to_string(interrupted) + " interrupted" +
         (pruned ? ", " + std::to_string(pruned) + " pruned" : "") +
         (lost ? ", " + std::to_string(lost) + " taken over by another process" : "") +
         (rank_lost ? ", " + std::to_string(rank_lost) + " stopped by a lost process (resumable)"
                    : "");
}

namespace {

// Trains one claimed run, logs its outcome and counts it.
train::RunResult train_claimed(store::Store& store, const records::RunRow& run,
                               const SweepOptions& options, Tally& tally,
                               const PruneSettings& prune = {}) {
  const train::RunResult result = train_claimed_run(store, run, options.training, prune);
  tally.add(result);
  switch (result.outcome) {
    case train::Outcome::kDone:
    case train::Outcome::kDiverged:
    case train::Outcome::kPruned:  // the recorder logged the decision
      break;
    case train::Outcome::kInterrupted:
      if (!train::stop_requested() && options.training.stop_after_epoch) {
        log::info("run " + run.name + ": " + result.message);
      } else {
        log::info("run " + run.name + ": " + result.message +
                  "; it continues from its last "
                  "checkpoint when the command is run again");
      }
      break;
    case train::Outcome::kFailed:
      log::warn("run " + run.name + " failed: " + result.message);
      break;
    case train::Outcome::kLost:
      log::warn("run " + run.name + ": " + result.message);
      break;
    case train::Outcome::kRankLost:
      log::warn("run " + run.name + " stopped: " + result.message + "; it continues from its "
                "last checkpoint when the command is run again");
      break;
  }
  if (options.on_result) options.on_result(run, result);
  return result;
}

// One run of run_sweep's work: a cell, or a fork of a cell with its parent and epoch.
struct WorkItem {
  int64_t run_id;
  int64_t parent_id = 0;  // forks
  int parent_epoch = -1;
};

// The plan's runs in `store` (ensure_run: created pending, or found again): every selected cell,
// then every fork of a selected cell.
std::vector<WorkItem> ensure_runs(store::Store& store, const Plan& plan, int64_t sweep_id) {
  const Sweep& sweep = plan.sweep;
  std::vector<WorkItem> work;
  std::vector<records::RunRow> cell_runs;
  cell_runs.reserve(plan.cells.size());
  if (plan.fingerprints.size() != plan.cells.size()) {
    throw Error(ExitCode::kInternal, "run_sweep needs a plan whose data were read (plan_sweep "
                                     "with data = true)");
  }
  size_t position = 0;
  for_each_config(plan.cells, [&](const Cell& cell, const Config& config) {
    records::RunRow run =
        store.ensure_run(sweep_id, cell_spec(sweep, cell, config, plan.fingerprints[position++]));
    work.push_back({run.id});
    // Forks need the parent's row; keep the rows only when there are forks.
    cell_runs.push_back(plan.forks.empty() ? records::RunRow{} : std::move(run));
  });
  for (const PlannedFork& fork : plan.forks) {
    const records::RunRow& parent = cell_runs.at(fork.parent);
    const ForkDecl& decl = sweep.forks.at(fork.decl);
    const records::RunSpec spec =
        train::plan_fork(resolve_run(parent), decl.epoch, decl.override_sets.at(fork.set),
                         decl.reset_optimizer, fork_label(fork, plan, parent.label));
    records::RunRow run = store.ensure_run(sweep_id, spec);
    work.push_back({run.id, parent.id, decl.epoch});
  }
  return work;
}

// The pruned cells of `work` that `prune` lets go on now (prune_promotions) become pending, all
// at once, so that each counts as still to come in the others' decisions. Returns their ids.
std::vector<int64_t> promote_runs(store::Store& store, const std::string& sweep,
                                  const std::vector<WorkItem>& work, const PruneSettings& prune,
                                  bool no_prune) {
  std::set<int64_t> in_work;
  for (const WorkItem& item : work) in_work.insert(item.run_id);
  std::vector<int64_t> promoted;
  for (records::PruneDecisionRow& row : prune_promotions(store, sweep, prune)) {
    if (!in_work.count(row.run_id)) continue;
    if (no_prune) row.reason = "--no-prune: the prune rule is off for this run";
    if (!store.promote_run(row)) continue;  // another process did
    const records::RunRow run = *store.find_run(row.run_id);
    log::info("run " + run.name + " [" + run.label + "] continues from epoch " +
              std::to_string(run.epochs_done - 1) + ": " + row.reason);
    promoted.push_back(row.run_id);
  }
  return promoted;
}

// A fork waits for its parent's checkpoint: while the parent trains (kWait), or for good when
// the parent has stopped without it (kSkip, said by `skipped`).
Turn fork_turn(const store::Store& store, const WorkItem& item, const records::RunRow& run,
               const std::function<void(const std::string&)>& skipped) {
  if (!item.parent_id || run.epochs_done > 0) return Turn::kTrain;
  for (const records::EpochRow& e : store.epochs(item.parent_id)) {
    if (e.epoch == item.parent_epoch && e.checkpoint) return Turn::kTrain;
  }
  const records::RunRow parent = *store.find_run(item.parent_id);
  if (parent.status == records::RunStatus::kRunning) return Turn::kWait;
  skipped("fork " + run.name + " waits for epoch " + std::to_string(item.parent_epoch) + " of " +
          parent.name + " (" + records::to_string(parent.status) + "), skipped");
  return Turn::kSkip;
}

}  // namespace

bool train_schedule(store::Store& store, const Schedule& schedule, const SweepOptions& options,
                    Tally& tally) {
  std::set<int64_t> attempted, reported;
  for (;;) {
    // Another process trains a run of the list (or what it waits for): poll until it is finished
    // or its holder is gone (then this process takes it over).
    bool waiting = false;
    for (const int64_t id : schedule.ids) {
      if (train::stop_requested()) return false;
      if (attempted.count(id)) continue;  // once per call (a failure stays failed)
      const records::RunRow run = *store.find_run(id);
      const Turn turn = schedule.turn ? schedule.turn(run) : Turn::kTrain;
      if (turn != Turn::kTrain) {
        waiting = waiting || turn == Turn::kWait;
        continue;
      }
      const Settings settings = resolve_run(run).settings();
      // The turn was decided on `run` as read: claimed only while it has the same epochs (else
      // another process trained it meanwhile, and the next pass decides again).
      if (!store.claim_run(run.id, provenance(options, settings), options.stale_after,
                           options.retry_failed, false, run.epochs_done)) {
        if (store.find_run(run.id)->epochs_done != run.epochs_done) {
          waiting = true;
          continue;
        }
        if (reported.insert(run.id).second) {
          log::info("run " + run.name + " is being trained by " + holder_text(run) +
                    "; waiting (taken over when that process is gone, or, on another host, "
                    "when its heartbeat is older than " +
                    std::to_string(static_cast<int64_t>(options.stale_after)) + " s)");
        }
        waiting = true;  // until it finishes, or its holder is gone and the run can be claimed
        continue;
      }
      attempted.insert(run.id);
      warn_if_not_bitwise(run, provenance(options, settings));
      train_claimed(store, *store.find_run(run.id), options, tally, schedule.prune);
      if (tally.rank_lost) return false;  // the job lost a process: no run can train now
    }
    if (train::stop_requested()) return false;
    bool reopened = false;
    if (schedule.reopen) {
      for (const int64_t id : schedule.reopen()) {
        attempted.erase(id);
        reopened = true;
      }
    }
    if (reopened) continue;  // runs trained since let a stopped one go on
    if (!waiting) return true;
    // Naps of a tenth of a second: a signal ends the wait at once.
    for (double slept = 0; slept < options.poll_seconds && !train::stop_requested();
         slept += 0.1) {
      nap(std::min(0.1, options.poll_seconds - slept));
    }
  }
}

Tally run_sweep(store::Store& store, const Plan& plan, const SweepOptions& options) {
  const Sweep& sweep = plan.sweep;
  const int64_t sweep_id =
      store.ensure_sweep(sweep.name, sweep.description, sweep.yaml_text, sweep.source_path);
  const std::vector<WorkItem> work = ensure_runs(store, plan, sweep_id);

  Tally tally;
  std::set<int64_t> reported;
  auto report_once = [&](int64_t id, const std::string& line, int& counter) {
    if (!reported.insert(id).second) return;
    log::info(line);
    ++counter;
  };
  Schedule schedule;
  schedule.prune = options.no_prune ? PruneSettings{} : plan.prune;
  std::map<int64_t, const WorkItem*> items;
  for (const WorkItem& item : work) {
    schedule.ids.push_back(item.run_id);
    items[item.run_id] = &item;
  }
  schedule.reopen = [&] {  // promoted runs may train again in this call
    return promote_runs(store, sweep.name, work, schedule.prune, options.no_prune);
  };
  schedule.reopen();
  const auto& stop_after = options.training.stop_after_epoch;
  schedule.turn = [&](const records::RunRow& run) {
    if (run.status == records::RunStatus::kPruned) {
      report_once(run.id,
                  "run " + run.name + " [" + run.label + "] is pruned (" + run.message +
                      "), skipped; --no-prune continues it",
                  tally.pruned);
      return Turn::kSkip;
    }
    if (stop_after && run.epochs_done > *stop_after) {
      // stopped at --stop-after-epoch by another worker: leave it there
      report_once(run.id, "run " + run.name + " has reached epoch " +
                              std::to_string(*stop_after) + ", skipped",
                  tally.skipped);
      return Turn::kSkip;
    }
    if (records::is_complete(run.status)) {
      report_once(run.id, "run " + run.name + " [" + run.label + "] is " +
                              records::to_string(run.status) + ", skipped",
                  tally.skipped);
      return Turn::kSkip;
    }
    if (run.status == records::RunStatus::kFailed && !options.retry_failed) {
      report_once(run.id, "run " + run.name + " failed before (" + run.message +
                              "), skipped; use --retry-failed to train it again",
                  tally.failed);
      return Turn::kSkip;
    }
    return fork_turn(store, *items.at(run.id), run, [&](const std::string& line) {
      report_once(run.id, line, tally.skipped);
    });
  };
  train_schedule(store, schedule, options, tally);
  return tally;
}

void require_checkpoint(const store::Store& store, const records::RunRow& run, int epoch) {
  bool found = false;
  std::string have;
  for (auto& e : store.epochs(run.id)) {
    if (!e.checkpoint) continue;
    found = found || e.epoch == epoch;
    have += (have.empty() ? "" : ", ") + std::to_string(e.epoch);
  }
  if (!found) {
    train::refuse_evaluation_only(resolve_run(run), "to continue or fork from");
    throw CheckpointError("run " + run.name + " has no checkpoint of epoch " +
                          std::to_string(epoch) + " (saved epochs: " +
                          (have.empty() ? "none" : have) + ")");
  }
}

Tally resume_run(store::Store& store, const records::RunRow& run, std::optional<int> from_epoch,
                 const SweepOptions& options) {
  Tally tally;
  if (run.status == records::RunStatus::kDone && !from_epoch) {
    tally.note = "run " + run.name + " is already done; use --from-epoch N to train again from "
                 "epoch N";
    ++tally.skipped;
    return tally;
  }
  // checked before the run is claimed: a typo must not touch the run
  if (from_epoch) require_checkpoint(store, run, *from_epoch);
  const Settings settings = resolve_run(run).settings();
  check_same_data(run, settings);
  const auto prov = provenance(options, settings);
  warn_if_not_bitwise(run, prov);
  if (records::is_complete(run.status)) {
    store.mark_running(run.id, prov);  // explicit request to train a finished run again
  } else if (!store.claim_run(run.id, prov, options.stale_after, true,
                              /*continue_pruned=*/true)) {  // an explicit request
    throw UsageError("run " + run.name + " is being trained by " + holder_text(run) +
                     " (heartbeat " + run.heartbeat_at + "); wait for it, or stop that process");
  }
  SweepOptions resumed = options;
  if (from_epoch) resumed.training.from_epoch = *from_epoch;
  train_claimed(store, *store.find_run(run.id), resumed, tally);
  return tally;
}

Tally fork_run(store::Store& store, const records::RunRow& parent, int epoch,
               const std::vector<std::pair<std::string, nlohmann::json>>& overrides,
               bool reset_optimizer, const std::string& name, const SweepOptions& options) {
  require_checkpoint(store, parent, epoch);
  const records::RunSpec spec =
      train::plan_fork(resolve_run(parent), epoch, overrides, reset_optimizer, name);
  records::RunRow run = store.ensure_run(parent.sweep_id, spec);
  log::info("fork " + run.name + " [" + run.label + "] of " + parent.name + " at epoch " +
            std::to_string(epoch));
  Tally tally;
  if (records::is_complete(run.status)) {
    tally.note = "fork " + run.name + " is already " + records::to_string(run.status) +
                 " (amptune show " + run.name + ")";
    ++tally.skipped;
    return tally;
  }
  if (!store.claim_run(run.id, provenance(options, resolve_run(run).settings()),
                       options.stale_after, true)) {
    throw UsageError("fork " + run.name + " is being trained by " + holder_text(run) +
                     " (heartbeat " + run.heartbeat_at + "); wait for it, or stop that process");
  }
  train_claimed(store, *store.find_run(run.id), options, tally);
  return tally;
}

ChildSpec self_command(const std::vector<std::string>& args) {
  ChildSpec spec;
  spec.program = "/proc/self/exe";
  spec.search_path = false;
  spec.argv = {"amptune"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  return spec;
}

int run_workers(const std::vector<std::string>& args, int workers, const std::string& db,
                const std::string& sweep_name) {
  ForwardSignals forwarding;  // a signal is passed on to the workers, who stop their runs
  std::vector<Child> children;
  for (int w = 0; w < workers; ++w) {
    ChildSpec spec = self_command(args);
    spec.name = "worker process " + std::to_string(w + 1) + " of " + std::to_string(workers);
    std::string failure;
    try {
      children.push_back(Child::start(spec));
      if (children.back().start_error()) {
        failure = "cannot start " + spec.name + ": " + children.back().start_failure();
      }
    } catch (const EnvironmentError& e) {
      failure = std::string(e.what()) + "; run with fewer --workers";
    }
    if (!failure.empty()) {
      for (Child& child : children) child.signal(SIGTERM);  // they stop their runs
      for (Child& child : children) child.stop(10);
      throw EnvironmentError(failure);
    }
  }
  log::info("started " + std::to_string(workers) + " worker processes");
  int code = 0, killed = 0;
  size_t running = children.size();
  while (running > 0) {
    if (const int sig = forwarding.take()) {
      for (Child& child : children) child.signal(sig);
    }
    for (Child& child : children) {
      if (!child.running()) continue;
      const std::optional<ChildEnd> end = child.poll();
      if (!end) continue;
      --running;
      if (end->signaled()) {
        log::warn("worker " + std::to_string(child.pid()) + " " + end->describe() +
                  "; its run is taken over by the other workers, or when the command is run "
                  "again");
        ++killed;
      } else if (code == 0) {
        code = end->code();
      }
    }
    if (running > 0) nap(0.2);
  }
  if (killed > 0 && code == 0 && !forwarding.received()) {
    // The survivors took the dead workers' runs over if they were still polling; otherwise the
    // sweep is not finished.
    store::Store store(db);
    int unfinished = 0;
    for (const auto& run : store.runs(sweep_name)) {
      unfinished += run.status == records::RunStatus::kPending ||
                    run.status == records::RunStatus::kRunning;
    }
    if (unfinished > 0) {
      log::warn(std::to_string(unfinished) + " runs of sweep " + sweep_name +
                " are unfinished after a worker died; run the command again");
      code = static_cast<int>(ExitCode::kFailedRuns);
    }
  }
  return code;
}

int lead_job(const SweepOptions& options, const std::function<int()>& command) {
  dist::Cluster* cluster = options.training.cluster;
  if (!cluster) return command();
  auto end = [cluster](int code) {
    try {
      train::end_runs(*cluster, code);
    } catch (const std::exception& e) {
      log::warn(std::string("could not tell the other ranks to stop: ") + e.what());
    }
  };
  try {
    const int code = command();
    end(code);
    return code;
  } catch (const Error& e) {
    end(static_cast<int>(e.code()));
    throw;
  } catch (...) {
    end(static_cast<int>(ExitCode::kInternal));
    throw;
  }
}

int follow_job(const SweepOptions& options) {
  dist::Cluster& cluster = *options.training.cluster;
  int leader_exit = 0;
  while (auto run = train::next_run(cluster, &leader_exit)) {
    const train::RunResult result = train::follow_run(*run, options.training);
    if (result.outcome == train::Outcome::kRankLost) {
      log::warn("rank " + std::to_string(cluster.rank()) + ", run " + run->name + ": " +
                result.message);
    }
  }
  return leader_exit;
}

}  // namespace amptune::app
