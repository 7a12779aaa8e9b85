// `amptune run` and `amptune resume`.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include <boost/program_options.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sweep.h"
#include "core/version.h"
#include "store/store.h"
#include "train/runner.h"

#include <torch/version.h>

namespace po = boost::program_options;

namespace amptune::cli {
namespace {

bool wants_help(const po::variables_map& vm, const po::options_description& desc,
                const char* usage) {
  if (!vm.count("help")) return false;
  std::cout << usage << "\n" << desc;
  return true;
}

store::Provenance provenance(const Config& config, int threads_override,
                             const std::string& command_line) {
  store::Provenance p;
  p.amptune_version = kVersion;
  p.git_commit = kGitCommit;
  p.git_dirty = kGitDirty;
  p.torch_version = TORCH_VERSION;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  p.host = host;
  p.threads = train::resolve_threads(config, threads_override);
  p.device = train::resolve_device(config);
  p.command_line = command_line;
  return p;
}

struct Tally {
  int done = 0, diverged = 0, failed = 0, skipped = 0, interrupted = 0, lost = 0;
};

// Trains one claimed run and reports its outcome.
void train_claimed(store::Store& store, const store::RunRow& run, const train::RunOptions& opts,
                   Tally& tally) {
  auto result = train::train_run(store, run, opts);
  switch (result.outcome) {
    case train::Outcome::kDone:
      ++tally.done;
      std::cout << result.summary_json << std::endl;
      break;
    case train::Outcome::kDiverged:
      ++tally.diverged;
      break;
    case train::Outcome::kInterrupted:
      ++tally.interrupted;
      log::info("run " + run.name + ": " + result.message + "; it continues from its last "
                "checkpoint when the command is run again");
      break;
    case train::Outcome::kFailed:
      ++tally.failed;
      log::warn("run " + run.name + " failed: " + result.message);
      break;
    case train::Outcome::kLost:
      ++tally.lost;
      log::warn("run " + run.name + ": " + result.message);
      break;
  }
}

// "process 123 on host-a": who holds a running run, for messages.
std::string holder_text(const store::RunRow& run) {
  if (!run.holder) return "another process";
  return "process " + std::to_string(run.holder->pid) + " on " +
         (run.provenance.host.empty() ? "another host" : run.provenance.host);
}

// Throws CheckpointError naming the saved epochs when `run` keeps no checkpoint of `epoch`.
void require_checkpoint(const store::Store& store, const store::RunRow& run, int epoch) {
  bool found = false;
  std::string have;
  for (auto& e : store.epochs(run.id)) {
    if (!e.checkpoint) continue;
    found = found || e.epoch == epoch;
    have += (have.empty() ? "" : ", ") + std::to_string(e.epoch);
  }
  if (!found) {
    throw CheckpointError("run " + run.name + " has no checkpoint of epoch " +
                          std::to_string(epoch) + " (saved epochs: " +
                          (have.empty() ? "none" : have) + ")");
  }
}

// Training options shared by run / resume / fork (--quiet, --no-progress where offered).
train::RunOptions run_options(const po::variables_map& vm, const Invocation& inv, int threads,
                              int stop_after) {
  train::RunOptions opts;
  opts.threads = threads;
  opts.progress = !vm.count("quiet") && !vm.count("no-progress");
  opts.progress_tty = opts.progress && ::isatty(STDERR_FILENO);
  opts.command_line = inv.command_line;
  if (stop_after >= 0) opts.stop_after_epoch = stop_after;
  return opts;
}

int exit_code(const Tally& t) {
  if (t.interrupted > 0 && train::stop_requested()) return static_cast<int>(ExitCode::kInterrupted);
  if (t.failed > 0) return static_cast<int>(ExitCode::kFailedRuns);
  return 0;
}

// `run --workers N`: N child processes run the same command (without --workers) on the same
// database; each claims runs atomically and waits for runs other workers hold (taking over those
// whose heartbeat goes stale). SIGINT/SIGTERM are passed on. Returns the first non-zero exit code
// of a child; a worker killed by a signal makes it kFailedRuns only when runs are left unfinished.
int run_workers(const Invocation& inv, int workers, const std::string& db,
                const std::string& sweep_name) {
  std::vector<std::string> args = {"run"};
  bool no_progress = false;
  for (size_t i = 0; i < inv.args.size(); ++i) {
    const std::string& a = inv.args[i];
    if (a == "--workers") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--workers=", 0) == 0) continue;
    no_progress = no_progress || a == "--no-progress";
    args.push_back(a);
  }
  if (!no_progress) args.push_back("--no-progress");  // workers share one stderr
  std::vector<pid_t> children;
  for (int w = 0; w < workers; ++w) {
    pid_t pid = ::fork();
    if (pid < 0) throw Error(ExitCode::kInternal, std::string("cannot start worker process: ") + std::strerror(errno));
    if (pid == 0) {
      std::vector<char*> argv;
      static std::string self = "amptune";
      argv.push_back(self.data());
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "amptune: cannot start worker: %s\n", std::strerror(errno));
      ::_exit(static_cast<int>(ExitCode::kInternal));
    }
    children.push_back(pid);
  }
  log::info("started " + std::to_string(workers) + " worker processes");
  int code = 0, killed = 0;
  bool forwarded = false;
  size_t running = children.size();
  while (running > 0) {
    if (train::stop_requested() && !forwarded) {
      for (pid_t pid : children) {
        if (pid > 0) ::kill(pid, SIGTERM);
      }
      forwarded = true;
    }
    for (pid_t& pid : children) {
      if (pid <= 0) continue;
      int status = 0;
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == 0) continue;
      int child_code = static_cast<int>(ExitCode::kInternal);
      if (r == pid && WIFEXITED(status)) child_code = WEXITSTATUS(status);
      if (r == pid && WIFSIGNALED(status)) {
        log::warn("worker " + std::to_string(pid) + " was killed by signal " +
                  std::to_string(WTERMSIG(status)) + "; its run is taken over once its "
                  "heartbeat is stale (run the command again)");
      }
      if (r == pid && WIFSIGNALED(status)) {
        ++killed;
      } else if (code == 0) {
        code = child_code;
      }
      pid = 0;
      --running;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (killed > 0 && code == 0 && !train::stop_requested()) {
    // The survivors took the dead workers' runs over if their heartbeats went stale in time;
    // otherwise the sweep is not finished.
    store::Store store(db);
    int unfinished = 0;
    for (const auto& run : store.runs(sweep_name)) {
      unfinished += run.status == store::RunStatus::kPending || run.status == store::RunStatus::kRunning;
    }
    if (unfinished > 0) {
      log::warn(std::to_string(unfinished) + " runs of sweep " + sweep_name +
                " are unfinished after a worker died; run the command again (with --stale-after "
                "to take them over sooner)");
      code = static_cast<int>(ExitCode::kFailedRuns);
    }
  }
  return code;
}

}  // namespace

po::variables_map parse_args(const std::vector<std::string>& args,
                             const po::options_description& desc, std::string* positional) {
  po::options_description hidden;
  hidden.add_options()("positional", po::value(positional));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("positional", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
  po::notify(vm);
  return vm;
}

int cmd_run(const Invocation& inv) {
  std::string sweep_path, db;
  std::vector<std::string> sets, only;
  int threads = 0, stop_after = -1, workers = 1;
  double stale_after = 60;
  po::options_description desc("amptune run options");
  desc.add_options()("help,h", "show this help")(
      "set", po::value(&sets)->composing(), "override a base key before expansion: key=value (YAML value); repeatable")(
      "only", po::value(&only)->composing(), "train only the cells whose key equals value: key=value; repeatable")(
      "db", po::value(&db)->default_value(default_db()), "results database (env AMPTUNE_DB)")(
      "dry-run", "print the cells (index, config hash, axis values) and train nothing")(
      "workers", po::value(&workers)->default_value(1),
      "worker processes training cells of the sweep at the same time (each claims cells)")(
      "threads", po::value(&threads)->default_value(0), "LibTorch threads; 0 = the config's `threads`")(
      "retry-failed", "train failed runs again (they are skipped otherwise)")(
      "stale-after", po::value(&stale_after)->default_value(60.0),
      "seconds without heartbeat after which a run held by a process on another host is taken "
      "over (presumed dead); a holder on this host is taken over as soon as its process is gone")(
      "stop-after-epoch", po::value(&stop_after)->default_value(-1),
      "stop each run after this epoch (0-based), leaving it resumable; -1 = train to the end")(
      "no-progress", "no per-step progress lines (epoch lines stay)")(
      "quiet,q", "no progress lines");
  po::variables_map vm = parse_args(inv.args, desc, &sweep_path);
  if (wants_help(vm, desc, "usage: amptune run SWEEP.yaml [options]\n\nTrains every cell of the "
                           "sweep, then its forks; running it again skips finished runs and "
                           "resumes the rest.\n"))
    return 0;
  if (sweep_path.empty()) throw UsageError("amptune run needs a sweep file: amptune run SWEEP.yaml");
  if (workers < 1) throw UsageError("--workers must be at least 1, got " + std::to_string(workers));
  if (vm.count("quiet")) log::set_quiet(true);

  Sweep sweep = load_sweep(sweep_path, sets);  // validation happens before the database is touched
  std::vector<Cell> cells = filter_cells(sweep.cells, only);
  if (vm.count("dry-run")) {
    Table table({"cell", "hash", "settings"});
    for (auto& c : cells) table.add({std::to_string(c.index), c.hash.substr(0, 8), c.label()});
    table.print(std::cout);
    std::cout << cells.size() << " of " << sweep.cells.size() << " cells of sweep " << sweep.name
              << " (dry run: nothing trained)\n";
    size_t forks = 0;
    for (const auto& f : sweep.forks) forks += f.cells.size() * f.override_sets.size();
    if (forks) std::cout << "plus " << forks << " forks declared under forks:\n";
    return 0;
  }
  if (cells.empty()) throw UsageError("--only matched no cell of sweep " + sweep.name);

  store::Store store(db);
  const int64_t sweep_id =
      store.ensure_sweep(sweep.name, sweep.description, sweep.yaml_text, sweep.source_path);
  if (workers > 1) return run_workers(inv, workers, db, sweep.name);
  const train::RunOptions opts = run_options(vm, inv, threads, stop_after);

  // The work: every selected cell, then every declared fork of a selected cell.
  struct Item {
    int64_t run_id;
    int64_t parent_id = 0;  // forks
    int parent_epoch = -1;
  };
  std::vector<Item> work;
  std::map<int, store::RunRow> cell_runs;
  for (const Cell& cell : cells) {
    store::RunSpec spec;
    spec.sweep_name = sweep.name;
    spec.cell_index = cell.index;
    spec.label = cell.label();
    spec.config_json = cell.config.canonical_json();
    spec.config_hash = cell.hash;
    spec.axes_json = cell.axes.dump();
    spec.columns = train::run_columns(cell.config);
    store::RunRow run = store.ensure_run(sweep_id, spec);
    cell_runs.emplace(cell.index, run);
    work.push_back({run.id});
  }
  for (const ForkDecl& decl : sweep.forks) {
    for (int index : decl.cells) {
      auto parent = cell_runs.find(index);
      if (parent == cell_runs.end()) continue;  // not selected by --only
      for (const auto& overrides : decl.override_sets) {
        std::string label;
        if (!decl.name.empty()) {
          label = decl.name;
          if (decl.override_sets.size() > 1) {
            for (const auto& [k, v] : overrides) label += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
          }
          if (decl.cells.size() > 1) label += " (from " + parent->second.label + ")";
        }
        store::RunSpec spec;
        try {
          spec = train::plan_fork(parent->second, decl.epoch, overrides, decl.reset_optimizer, label);
        } catch (const ConfigError& e) {
          throw ConfigError(decl.loc.prefix() + e.what());
        }
        store::RunRow run = store.ensure_run(sweep_id, spec);
        work.push_back({run.id, parent->second.id, decl.epoch});
      }
    }
  }

  Tally tally;
  std::set<int64_t> reported, attempted;
  auto report_once = [&](int64_t id, const std::string& line, int& counter) {
    if (!reported.insert(id).second) return;
    log::info(line);
    ++counter;
  };
  for (;;) {
    // Another process trains a run of the work, or a fork's parent: poll until it is finished
    // or its heartbeat is stale (then this process takes it over).
    bool waiting = false;
    for (const Item& item : work) {
      if (train::stop_requested()) break;
      if (attempted.count(item.run_id)) continue;  // once per invocation (a failure stays failed)
      store::RunRow run = *store.find_run(item.run_id);
      if (opts.stop_after_epoch && run.epochs_done > *opts.stop_after_epoch) {
        // stopped at --stop-after-epoch by another worker: leave it there
        report_once(run.id, "run " + run.name + " has reached epoch " +
                                std::to_string(*opts.stop_after_epoch) + ", skipped", tally.skipped);
        continue;
      }
      if (run.status == store::RunStatus::kDone || run.status == store::RunStatus::kDiverged) {
        report_once(run.id, "run " + run.name + " [" + run.label + "] is " +
                                store::to_string(run.status) + ", skipped", tally.skipped);
        continue;
      }
      if (run.status == store::RunStatus::kFailed && !vm.count("retry-failed")) {
        report_once(run.id, "run " + run.name + " failed before (" + run.message +
                                "), skipped; use --retry-failed to train it again", tally.failed);
        continue;
      }
      if (item.parent_id && run.epochs_done == 0) {
        bool ready = false;
        for (auto& e : store.epochs(item.parent_id)) {
          ready = ready || (e.epoch == item.parent_epoch && e.checkpoint);
        }
        if (!ready) {
          store::RunRow parent = *store.find_run(item.parent_id);
          if (parent.status == store::RunStatus::kRunning) {
            waiting = true;
          } else {
            report_once(run.id, "fork " + run.name + " waits for epoch " +
                                    std::to_string(item.parent_epoch) + " of " + parent.name +
                                    " (" + store::to_string(parent.status) + "), skipped",
                        tally.skipped);
          }
          continue;
        }
      }
      if (!store.claim_run(run.id, provenance(Config::from_json(run.config_json, run.name),
                                              threads, inv.command_line),
                           stale_after, vm.count("retry-failed") > 0)) {
        if (!reported.count(run.id)) {
          log::info("run " + run.name + " is being trained by " + holder_text(run) +
                    "; waiting (taken over when that process is gone, or, on another host, when "
                    "its heartbeat is older than " + fixed(stale_after, 0) + " s)");
        }
        reported.insert(run.id);
        waiting = true;  // until it finishes, or its process dies and the run can be claimed
        continue;
      }
      reported.insert(run.id);
      attempted.insert(run.id);
      train_claimed(store, *store.find_run(run.id), opts, tally);
    }
    if (!waiting || train::stop_requested()) break;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  log::info("sweep " + sweep.name + ": " + std::to_string(tally.done) + " trained, " +
            std::to_string(tally.skipped) + " skipped, " + std::to_string(tally.diverged) +
            " diverged, " + std::to_string(tally.failed) + " failed, " +
            std::to_string(tally.interrupted) + " interrupted" +
            (tally.lost ? ", " + std::to_string(tally.lost) + " taken over by another process" : ""));
  log::info("results: sqlite3 -header -column " + db +
            " \"select * from run_summary where sweep = '" + sweep.name + "'\"");
  return exit_code(tally);
}

int cmd_resume(const Invocation& inv) {
  std::string run_ref, db;
  int from_epoch = -1, threads = 0, stop_after = -1;
  double stale_after = 60;
  po::options_description desc("amptune resume options");
  desc.add_options()("help,h", "show this help")(
      "from-epoch", po::value(&from_epoch)->default_value(-1),
      "continue after this epoch's checkpoint (later epochs are discarded); -1 = newest valid")(
      "db", po::value(&db)->default_value(default_db()), "results database (env AMPTUNE_DB)")(
      "threads", po::value(&threads)->default_value(0), "LibTorch threads; 0 = the config's `threads`")(
      "stale-after", po::value(&stale_after)->default_value(60.0),
      "seconds without heartbeat after which a running run is taken over")(
      "stop-after-epoch", po::value(&stop_after)->default_value(-1),
      "stop after this epoch (0-based), leaving the run resumable")(
      "quiet,q", "no progress lines");
  po::variables_map vm = parse_args(inv.args, desc, &run_ref);
  if (wants_help(vm, desc, "usage: amptune resume RUN [options]\n\nRUN is a run id or name "
                           "(amptune list). Continues from the newest valid checkpoint.\n"))
    return 0;
  if (run_ref.empty()) throw UsageError("amptune resume needs a run id or name (see amptune list)");
  if (vm.count("quiet")) log::set_quiet(true);
  store::Store store = open_existing(db);
  auto run = store.find_run(run_ref);
  if (!run) throw UsageError("no run '" + run_ref + "' in " + db + " (see amptune list --db " + db + ")");
  if (run->status == store::RunStatus::kDone && from_epoch < 0) {
    std::cout << "run " << run->name << " is already done; use --from-epoch N to train again "
              << "from epoch N\n";
    return 0;
  }
  // check before the run is claimed: a typo must not touch the run
  if (from_epoch >= 0) require_checkpoint(store, *run, from_epoch);
  const Config config = Config::from_json(run->config_json, "run " + run->name);
  const auto prov = provenance(config, threads, inv.command_line);
  const bool finished =
      run->status == store::RunStatus::kDone || run->status == store::RunStatus::kDiverged;
  if (finished) {
    store.mark_running(run->id, prov);  // explicit request to train a finished run again
  } else if (!store.claim_run(run->id, prov, stale_after, true)) {
    throw UsageError("run " + run->name + " is being trained by " + holder_text(*run) +
                     " (heartbeat " + run->heartbeat_at + "); wait for it, or stop that process");
  }
  train::RunOptions opts = run_options(vm, inv, threads, stop_after);
  if (from_epoch >= 0) opts.from_epoch = from_epoch;
  Tally tally;
  train_claimed(store, *store.find_run(run->id), opts, tally);
  return exit_code(tally);
}

int cmd_fork(const Invocation& inv) {
  std::string run_ref, db, name;
  std::vector<std::string> sets;
  int epoch = -1, threads = 0, stop_after = -1;
  po::options_description desc("amptune fork options");
  desc.add_options()("help,h", "show this help")(
      "epoch", po::value(&epoch)->default_value(-1), "the parent's epoch whose checkpoint the fork starts from (required)")(
      "set", po::value(&sets)->composing(), "a changed setting: key=value (YAML value); repeatable")(
      "name", po::value(&name), "label of the fork (default: the parent's label and the changes)")(
      "reset-optimizer", "take only the weights: optimizer state and loss scaler start fresh")(
      "db", po::value(&db)->default_value(default_db()), "results database (env AMPTUNE_DB)")(
      "threads", po::value(&threads)->default_value(0), "LibTorch threads; 0 = the config's `threads`")(
      "stop-after-epoch", po::value(&stop_after)->default_value(-1),
      "stop after this epoch (0-based), leaving the fork resumable")(
      "quiet,q", "no progress lines");
  po::variables_map vm = parse_args(inv.args, desc, &run_ref);
  if (wants_help(vm, desc, "usage: amptune fork RUN --epoch N [--set key=value]... [options]\n\n"
                           "A new run that starts from RUN's checkpoint of epoch N with the changed "
                           "settings and trains to the end of its schedule. Running the same fork "
                           "again continues it.\n"))
    return 0;
  if (run_ref.empty()) throw UsageError("amptune fork needs a run id or name (see amptune list)");
  if (epoch < 0) throw UsageError("amptune fork needs --epoch N: the parent's epoch to start from");
  if (vm.count("quiet")) log::set_quiet(true);
  store::Store store = open_existing(db);
  auto parent = store.find_run(run_ref);
  if (!parent) throw UsageError("no run '" + run_ref + "' in " + db + " (see amptune list --db " + db + ")");
  require_checkpoint(store, *parent, epoch);
  std::vector<std::pair<std::string, nlohmann::json>> overrides;
  for (const std::string& text : sets) {
    auto [key, value] = split_assignment(text);
    Config probe;  // set_yaml does the lookup, YAML parse and coercion for the key
    probe.set_yaml(key, value, SourceLoc{"--set " + text});
    overrides.emplace_back(key, probe.at(key));
  }
  const store::RunSpec spec =
      train::plan_fork(*parent, epoch, overrides, vm.count("reset-optimizer") > 0, name);
  store::RunRow run = store.ensure_run(parent->sweep_id, spec);
  log::info("fork " + run.name + " [" + run.label + "] of " + parent->name + " at epoch " +
            std::to_string(epoch));
  if (run.status == store::RunStatus::kDone || run.status == store::RunStatus::kDiverged) {
    std::cout << "fork " << run.name << " is already " << store::to_string(run.status)
              << " (amptune show " << run.name << ")\n";
    return 0;
  }
  const Config config = Config::from_json(run.config_json, "run " + run.name);
  if (!store.claim_run(run.id, provenance(config, threads, inv.command_line), 60, true)) {
    throw UsageError("fork " + run.name + " is being trained by " + holder_text(run) +
                     " (heartbeat " + run.heartbeat_at + "); wait for it, or stop that process");
  }
  const train::RunOptions opts = run_options(vm, inv, threads, stop_after);
  Tally tally;
  train_claimed(store, *store.find_run(run.id), opts, tally);
  return exit_code(tally);
}

}  // namespace amptune::cli
