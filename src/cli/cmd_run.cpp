// `amptune run` and `amptune resume`.
#include <unistd.h>

#include <filesystem>
#include <iostream>

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
  int done = 0, diverged = 0, failed = 0, skipped = 0, interrupted = 0;
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
  }
}

int exit_code(const Tally& t) {
  if (t.interrupted > 0 && train::stop_requested()) return static_cast<int>(ExitCode::kInterrupted);
  if (t.failed > 0) return static_cast<int>(ExitCode::kFailedRuns);
  return 0;
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

std::string default_db() {
  const char* env = std::getenv("AMPTUNE_DB");
  return env && *env ? env : "results/amptune.sqlite";
}

int cmd_run(const Invocation& inv) {
  std::string sweep_path, db;
  std::vector<std::string> sets, only;
  int threads = 0, stop_after = -1;
  double stale_after = 60;
  po::options_description desc("amptune run options");
  desc.add_options()("help,h", "show this help")(
      "set", po::value(&sets)->composing(), "override a base key before expansion: key=value (YAML value); repeatable")(
      "only", po::value(&only)->composing(), "train only the cells whose key equals value: key=value; repeatable")(
      "db", po::value(&db)->default_value(default_db()), "results database (env AMPTUNE_DB)")(
      "dry-run", "print the cells (index, config hash, axis values) and train nothing")(
      "threads", po::value(&threads)->default_value(0), "LibTorch threads; 0 = the config's `threads`")(
      "retry-failed", "train failed runs again (they are skipped otherwise)")(
      "stale-after", po::value(&stale_after)->default_value(60.0),
      "seconds without heartbeat after which a running run is taken over (its process died)")(
      "stop-after-epoch", po::value(&stop_after)->default_value(-1),
      "stop each run after this epoch (0-based), leaving it resumable; -1 = train to the end")(
      "quiet,q", "no progress lines");
  po::variables_map vm = parse_args(inv.args, desc, &sweep_path);
  if (wants_help(vm, desc, "usage: amptune run SWEEP.yaml [options]\n\nTrains every cell of the "
                           "sweep; running it again skips finished cells and resumes the rest.\n"))
    return 0;
  if (sweep_path.empty()) throw UsageError("amptune run needs a sweep file: amptune run SWEEP.yaml");
  if (vm.count("quiet")) log::set_quiet(true);

  Sweep sweep = load_sweep(sweep_path, sets);  // validation happens before the database is touched
  std::vector<Cell> cells = filter_cells(sweep.cells, only);
  if (vm.count("dry-run")) {
    Table table({"cell", "hash", "settings"});
    for (auto& c : cells) table.add({std::to_string(c.index), c.hash.substr(0, 8), c.label()});
    table.print(std::cout);
    std::cout << cells.size() << " of " << sweep.cells.size() << " cells of sweep " << sweep.name
              << " (dry run: nothing trained)\n";
    return 0;
  }
  if (cells.empty()) throw UsageError("--only matched no cell of sweep " + sweep.name);

  store::Store store(db);
  const int64_t sweep_id =
      store.ensure_sweep(sweep.name, sweep.description, sweep.yaml_text, sweep.source_path);
  train::RunOptions opts;
  opts.threads = threads;
  opts.progress = !vm.count("quiet");
  opts.progress_tty = opts.progress && ::isatty(STDERR_FILENO);
  opts.command_line = inv.command_line;
  if (stop_after >= 0) opts.stop_after_epoch = stop_after;

  Tally tally;
  for (const Cell& cell : cells) {
    if (train::stop_requested()) break;
    store::RunSpec spec;
    spec.sweep_name = sweep.name;
    spec.cell_index = cell.index;
    spec.label = cell.label();
    spec.config_json = cell.config.canonical_json();
    spec.config_hash = cell.hash;
    spec.axes_json = cell.axes.dump();
    spec.columns = train::run_columns(cell.config);
    store::RunRow run = store.ensure_run(sweep_id, spec);
    if (run.status == store::RunStatus::kDone || run.status == store::RunStatus::kDiverged) {
      log::info("run " + run.name + " [" + run.label + "] is " + store::to_string(run.status) +
                ", skipped");
      ++tally.skipped;
      continue;
    }
    if (run.status == store::RunStatus::kFailed && !vm.count("retry-failed")) {
      log::info("run " + run.name + " failed before (" + run.message +
                "), skipped; use --retry-failed to train it again");
      ++tally.failed;
      continue;
    }
    if (!store.claim_run(run.id, provenance(cell.config, threads, inv.command_line), stale_after,
                         vm.count("retry-failed") > 0)) {
      log::info("run " + run.name + " is being trained by another process, skipped");
      ++tally.skipped;
      continue;
    }
    train_claimed(store, *store.find_run(run.id), opts, tally);
  }
  log::info("sweep " + sweep.name + ": " + std::to_string(tally.done) + " trained, " +
            std::to_string(tally.skipped) + " skipped, " + std::to_string(tally.diverged) +
            " diverged, " + std::to_string(tally.failed) + " failed, " +
            std::to_string(tally.interrupted) + " interrupted");
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
  if (!std::filesystem::exists(db)) throw StoreError("database " + db + " does not exist; pass --db");
  store::Store store(db);
  auto run = store.find_run(run_ref);
  if (!run) throw UsageError("no run '" + run_ref + "' in " + db + " (see amptune list --db " + db + ")");
  if (run->status == store::RunStatus::kDone && from_epoch < 0) {
    std::cout << "run " << run->name << " is already done; use --from-epoch N to train again "
              << "from epoch N\n";
    return 0;
  }
  if (from_epoch >= 0) {  // check before the run is claimed: a typo must not touch the run
    bool found = false;
    std::string have;
    for (auto& e : store.epochs(run->id)) {
      if (!e.checkpoint) continue;
      found = found || e.epoch == from_epoch;
      have += (have.empty() ? "" : ", ") + std::to_string(e.epoch);
    }
    if (!found) {
      throw CheckpointError("run " + run->name + " has no checkpoint of epoch " +
                            std::to_string(from_epoch) + " (saved epochs: " +
                            (have.empty() ? "none" : have) + ")");
    }
  }
  const Config config = Config::from_json(run->config_json, "run " + run->name);
  const auto prov = provenance(config, threads, inv.command_line);
  const bool finished =
      run->status == store::RunStatus::kDone || run->status == store::RunStatus::kDiverged;
  if (finished) {
    store.mark_running(run->id, prov);  // explicit request to train a finished run again
  } else if (!store.claim_run(run->id, prov, stale_after, true)) {
    throw UsageError("run " + run->name + " is being trained by another process (heartbeat " +
                     run->heartbeat_at + "); wait, or pass --stale-after 0 if it died");
  }
  train::RunOptions opts;
  opts.threads = threads;
  opts.progress = !vm.count("quiet");
  opts.progress_tty = opts.progress && ::isatty(STDERR_FILENO);
  opts.command_line = inv.command_line;
  if (from_epoch >= 0) opts.from_epoch = from_epoch;
  if (stop_after >= 0) opts.stop_after_epoch = stop_after;
  Tally tally;
  train_claimed(store, *store.find_run(run->id), opts, tally);
  return exit_code(tally);
}

}  // namespace amptune::cli
