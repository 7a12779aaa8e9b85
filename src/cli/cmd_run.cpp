// `amptune run`, `amptune resume`, `amptune fork`: options and output; app/run/runner.h does the
// work.
#include <torch/version.h>
#include <unistd.h>

#include <iostream>
#include <optional>

#include "app/views/inspect.h"
#include "app/run/job.h"
#include "app/run/runner.h"
#include "app/views/table.h"
#include "cli/commands.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "core/version.h"

namespace amptune::cli {

app::SweepOptions sweep_options(const Options& opts, const TrainingFlags& flags,
                                const Invocation& inv) {
  app::SweepOptions o;
  o.training.threads = flags.threads;
  o.training.progress = !opts.is_quiet() && !flags.no_progress;
  o.training.progress_tty = o.training.progress && ::isatty(STDERR_FILENO);
  o.training.command_line = inv.command_line;
  if (flags.stop_after >= 0) o.training.stop_after_epoch = flags.stop_after;
  app::set_peak_flops(flags.peak_flops, o.training);
  o.provenance.amptune_version = kVersion;
  o.provenance.git_commit = kGitCommit;
  o.provenance.git_dirty = kGitDirty;
  o.provenance.torch_version = TORCH_VERSION;
  o.provenance.allocator = allocator_name();
  o.provenance.blas = blas_name();
  if (const std::string advice = blas_advice(o.provenance.blas, cpu_flags()); !advice.empty()) {
    log::warn(advice);
  }
  o.on_result = [](const records::RunRow&, const train::RunResult& result) {
    if (result.outcome == train::Outcome::kDone) std::cout << result.summary_json << std::endl;
  };
  return o;
}

void add_training_options(Options& opts, TrainingFlags* flags, const char* stop_help) {
  opts.threads(&flags->threads);
  opts.add()("stop-after-epoch", po::value(&flags->stop_after)->default_value(-1), stop_help)(
      "nproc", po::value(&flags->nproc)->default_value(1),
      "data-parallel training with N processes on this machine (as torchrun --standalone "
      "--nproc_per_node N); torchrun and srun launches need no option (docs/DISTRIBUTED.md)")(
      "peak-flops", optional_value(&flags->peak_flops),
      "peak FLOP/s of one device for the runs' MFU when detection is wrong (e.g. 3.2e11; "
      "else AMPTUNE_PEAK_FLOPS, else detected: docs/PERFORMANCE.md \"MFU\")");
}

namespace {

// What `subcommand` starts (app/run/job.h): ranks with --nproc, a rank's part in a launched job.
app::JobLaunch job_launch(const std::string& subcommand, const Invocation& inv, int nproc,
                          int workers = 1, bool launch = true) {
  return app::JobLaunch{subcommand, inv.args, nproc, workers, launch};
}

void print_dry_run(const app::Plan& plan) {
  // The run's identity (its name's hash) when the data were read; the config hash otherwise.
  const bool data = plan.fingerprints.size() == plan.cells.size();
  app::Table table({"cell", data ? "run" : "config", "settings"});
  for (size_t i = 0; i < plan.cells.size(); ++i) {
    const Cell& c = plan.cells[i];
    const std::string hash = data ? run_identity(c.hash, plan.fingerprints[i]) : c.hash;
    table.add({std::to_string(c.index), hash.substr(0, 8), c.label()});
  }
  table.print(std::cout);
  if (plan.shard) {
    std::cout << "cells per shard:";
    for (size_t k = 0; k < plan.shard_sizes.size(); ++k) {
      std::cout << " " << k << ":" << plan.shard_sizes[k];
    }
    std::cout << "\nshard " << plan.shard->text() << ": ";
  }
  std::cout << plan.cells.size() << " of " << plan.sweep.cells.size() << " cells of sweep "
            << plan.sweep.name << " checked (dry run: nothing trained or written)\n";
  if (!plan.forks.empty())
    std::cout << "plus " << plan.forks.size() << " forks declared under forks:\n";
}

// What `amptune run` is asked, beyond the options every training command takes.
struct RunFlags {
  std::string sweep_path, db;
  bool db_given = false;  // --db named: no shard database name in its place
  std::vector<std::string> sets, only;
  double stale_after = app::kDefaultStaleAfterSeconds;
  bool dry_run = false, skip_data = false, retry_failed = false, no_prune = false;
  int workers = 1;
  std::optional<std::string> shard;
  TrainingFlags training;
};

void add_run_options(Options& opts, RunFlags* f) {
  opts.positional(&f->sweep_path)
      .db(&f->db, &f->db_given)
      .quiet()
      .sweep_selection(&f->sets, &f->only)
      .stale_after(&f->stale_after);
  opts.add()("dry-run", po::bool_switch(&f->dry_run),
             "check and print the cells (index, config hash, axis values); train nothing. A "
             "TorchScript model.path is loaded to check it, and loading one runs its code")(
      "skip-data", po::bool_switch(&f->skip_data),
      "with --dry-run: do not check that the data sets open (planning on a machine "
      "without the data)")(
      "workers", po::value(&f->workers)->default_value(1),
      "worker processes training cells of the sweep at the same time (each claims cells)")(
      "retry-failed", po::bool_switch(&f->retry_failed),
      "train failed runs again (they are skipped otherwise)")(
      "no-prune", po::bool_switch(&f->no_prune),
      "switch the sweep's prune: rule off: no cell is stopped early, and pruned cells continue "
      "from their newest checkpoint (docs/PRUNING.md)")(
      "no-progress", po::bool_switch(&f->training.no_progress),
      "no per-step progress lines (epoch lines stay)")(
      "shard", optional_value(&f->shard),
      "K/N: train only shard K (0-based) of N of the cells, into "
      "results/<sweep>.shard-K-of-N.sqlite unless --db; auto: K/N of a Slurm array job; "
      "auto/N: K from Slurm or Kubernetes' JOB_COMPLETION_INDEX (docs/SLURM.md)");
  add_training_options(opts, &f->training,
                       "stop each run after this epoch (0-based), leaving it resumable; -1 = "
                       "train to the end");
}

}  // namespace

int cmd_run(const Invocation& inv) {
  RunFlags f;
  Options opts("run",
               "usage: amptune run SWEEP.yaml [options]\n\nTrains every cell of the sweep, then "
               "its forks; running it again skips finished runs and resumes the rest. Every cell "
               "is checked (config, amp policy, cast points, data) before anything is written.");
  add_run_options(opts, &f);
  if (!opts.parse(inv.args)) return 0;
  if (f.sweep_path.empty())
    throw UsageError("amptune run needs a sweep file: amptune run SWEEP.yaml");
  if (f.workers < 1) {
    throw UsageError("--workers must be at least 1, got " + std::to_string(f.workers));
  }
  const int nproc = f.training.nproc;
  if (nproc != 1 && f.workers > 1) {
    throw UsageError(
        "--nproc and --workers do not go together: one sweep is either shared by "
        "workers or trained by one parallel job");
  }
  app::SweepOptions options = sweep_options(opts, f.training, inv);
  options.retry_failed = f.retry_failed;
  options.no_prune = f.no_prune;
  options.stale_after = f.stale_after;
  if (f.skip_data && !f.dry_run)
    throw UsageError("--skip-data goes with --dry-run: a run needs its data");
  // Everything is checked before the database is touched: an invalid sweep writes nothing.
  // (A dry run with --nproc N checks what the N processes will need.)
  auto plan_it = [&](int world_size) {
    return app::plan_sweep(f.sweep_path, f.sets, f.only, !f.skip_data, world_size,
                           f.shard ? std::optional(app::parse_shard(*f.shard)) : std::nullopt);
  };
  const app::JobLaunch launch = job_launch("run", inv, nproc, f.workers, !f.dry_run);
  return app::run_as_job(
      launch, options,
      [&] {
        const app::Plan plan = plan_it(app::job_size(options, nproc));
        if (plan.shard && !f.db_given) {
          f.db = app::shard_db_path(plan.sweep.name, *plan.shard);  // one database per shard
        }
        if (f.dry_run) {
          print_dry_run(plan);
          return 0;
        }
        return app::train_sweep(plan, f.db, f.workers, inv.args, options);
      },
      [&] { (void)plan_it(nproc); });
}

int cmd_resume(const Invocation& inv) {
  std::string run_ref, db;
  int from_epoch = -1;
  TrainingFlags training;
  double stale_after = app::kDefaultStaleAfterSeconds;
  Options opts("resume",
               "usage: amptune resume RUN [options]\n\nRUN is a run id or name (amptune list). "
               "Continues from the newest valid checkpoint.");
  opts.run(&run_ref).db(&db).quiet().stale_after(&stale_after);
  opts.add()("from-epoch", po::value(&from_epoch)->default_value(-1),
             "continue after this epoch's checkpoint (later epochs are discarded); -1 = newest "
             "valid");
  add_training_options(opts, &training,
                       "stop after this epoch (0-based), leaving the run resumable");
  if (!opts.parse(inv.args)) return 0;
  app::SweepOptions options = sweep_options(opts, training, inv);
  options.stale_after = stale_after;
  return app::run_as_job(job_launch("resume", inv, training.nproc), options, [&] {
    store::Store store = app::open_existing(db);
    const records::RunRow run = app::find_run(store, run_ref);
    const app::Tally tally = app::resume_run(
        store, run, from_epoch >= 0 ? std::optional<int>(from_epoch) : std::nullopt, options);
    if (!tally.note.empty()) std::cout << log::printable(tally.note) << "\n";
    return tally.exit_code();
  });
}

int cmd_fork(const Invocation& inv) {
  std::string run_ref, db, name;
  std::vector<std::string> sets;
  int epoch = -1;
  bool reset_optimizer = false;
  TrainingFlags training;
  Options opts("fork",
               "usage: amptune fork RUN --epoch N [--set key=value]... [options]\n\nA new run "
               "that starts from RUN's checkpoint of epoch N with the changed settings and trains "
               "to the end of its schedule. Running the same fork again continues it.");
  opts.run(&run_ref).db(&db).quiet();
  opts.add()("epoch", po::value(&epoch)->default_value(-1),
             "the parent's epoch whose checkpoint the fork starts from (required)")(
      "set", po::value(&sets)->composing(),
      "a changed setting: key=value (YAML value); repeatable")(
      "name", po::value(&name), "label of the fork (default: the parent's label and the changes)")(
      "reset-optimizer", po::bool_switch(&reset_optimizer),
      "take only the weights: optimizer state and loss scaler start fresh");
  add_training_options(opts, &training,
                       "stop after this epoch (0-based), leaving the fork resumable");
  if (!opts.parse(inv.args)) return 0;
  if (epoch < 0) throw UsageError("amptune fork needs --epoch N: the parent's epoch to start from");
  app::SweepOptions options = sweep_options(opts, training, inv);
  return app::run_as_job(job_launch("fork", inv, training.nproc), options, [&] {
    store::Store store = app::open_existing(db);
    const records::RunRow parent = app::find_run(store, run_ref);
    std::vector<std::pair<std::string, nlohmann::json>> overrides;
    for (const std::string& text : sets) {
      auto [key, value] = split_assignment(text);
      Config probe;  // set_yaml does the lookup, YAML parse and coercion for the key
      probe.set_yaml(key, value, SourceLoc{"--set " + text});
      overrides.emplace_back(key, probe.at(key));
    }
    const app::Tally tally =
        app::fork_run(store, parent, epoch, overrides, reset_optimizer, name, options);
    if (!tally.note.empty()) std::cout << log::printable(tally.note) << "\n";
    return tally.exit_code();
  });
}

}  // namespace amptune::cli
