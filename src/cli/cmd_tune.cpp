// `amptune tune`: options and output; app/tune/tune.h does the search.
#include <cmath>
#include <filesystem>
#include <iostream>

#include "app/views/inspect.h"
#include "app/run/job.h"
#include "app/views/table.h"
#include "app/tune/tune.h"
#include "app/tune/tune_slurm.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::cli {
namespace {

std::string value_text(double v) { return std::isfinite(v) ? app::significant(v, 4) : "-"; }

std::string run_name(const app::TuneOutcome& out, int64_t id) {
  auto it = out.runs.find(id);
  return it == out.runs.end() ? "run " + std::to_string(id) : it->second.name;
}

// The change as "key=value key=value".
std::string change_text(const std::string& change_json) {
  std::string out;
  const nlohmann::json change = nlohmann::json::parse(change_json);
  for (const auto& [key, value] : change.items()) {
    out += (out.empty() ? "" : " ") + key + "=" + app::flow_yaml(value);
  }
  return out;
}

void print_path(const app::TuneOutcome& out, std::ostream& os) {
  const records::TuneSearchRow& s = out.search;
  os << "reference " << run_name(out, s.reference_run_id) << ", start "
     << run_name(out, s.start_run_id) << "; metric " << s.metric << " ("
     << (s.higher_is_better ? "higher" : "lower") << " is better)\n";
  for (const records::TuneRoundRow& r : out.rounds) {
    os << "\nround " << r.round << " (" << records::to_string(r.kind) << ") from "
       << run_name(out, r.start_run_id);
    if (!r.note.empty()) os << " (" << r.note << ")";
    if (r.fork_epoch >= 0)
      os << ", candidates fork from epoch " << r.fork_epoch;
    else
      os << ", candidates train from scratch";
    if (r.diagnosis_epoch) {
      os << "; diagnosis at "
         << (*r.diagnosis_epoch >= 0 ? "epoch " + std::to_string(*r.diagnosis_epoch)
                                     : std::string("the initial weights"));
    }
    os << "\n";
    app::Table table({"move", "change", "from", "run", "rung", s.metric, "reference", "outcome"});
    for (const records::TuneCandidateRow& c : out.candidates) {
      if (c.round != r.round) continue;
      table.add({c.move ? to_string(*c.move) : "", change_text(c.change_json),
                 c.advice_rule ? records::to_string(*c.advice_rule) + " " + c.advice_module
                 : r.kind == records::TuneRoundKind::kSearch
                     ? "move order"
                     : records::to_string(r.kind),  // union, bisect, confirm, reference
                 run_name(out, c.run_id), c.rung >= 0 ? std::to_string(c.rung) : "-",
                 value_text(c.value), value_text(c.reference_value),
                 records::to_string(c.outcome) + (c.run_id != s.answer_run_id ? ""
                                                  : s.status == records::TuneStatus::kAnswered
                                                      ? " (answer)"
                                                      : " (closest)")});
    }
    table.print(os);
  }
}

// The search's Slurm tasks (--slurm): those in flight, one line each, and how many ended.
void print_jobs(const app::TuneOutcome& out, std::ostream& os) {
  if (out.jobs.empty()) return;
  app::Table table({"job", "run", "epoch", "attempt", "state", "log"});
  size_t ended = 0;
  for (const records::TuneJobRow& j : out.jobs) {
    if (!j.ended_at.empty()) {
      ++ended;
      continue;
    }
    table.add({j.job_id + "_" + std::to_string(j.task), run_name(out, j.run_id),
               std::to_string(j.epoch), std::to_string(j.attempt), log::printable(j.state),
               log::printable(j.log_path)});
  }
  os << "\nSlurm tasks: " << out.jobs.size() - ended << " in flight, " << ended
     << " ended and merged\n";
  if (ended < out.jobs.size()) table.print(os);
}

void print_outcome(const app::TuneOutcome& out, const std::string& db, std::ostream& os) {
  const records::TuneSearchRow& s = out.search;
  print_path(out, os);
  print_jobs(out, os);
  os << "\n";
  if (s.status == records::TuneStatus::kSearching) {
    os << "the search is not finished; run the command again to continue it\n";
  } else if (s.status == records::TuneStatus::kAnswered) {
    os << "answer: " << run_name(out, s.answer_run_id) << ", " << s.metric << " "
       << value_text(s.answer_value) << " against the reference's " << value_text(s.reference_value)
       << " (" << s.note << ")\n";
    os << "paste into base:\n";
    std::string yaml = s.answer_yaml.empty() ? "{}  # the base itself\n" : s.answer_yaml;
    size_t at = 0;
    while (at < yaml.size()) {
      const size_t end = yaml.find('\n', at);
      os << "  " << yaml.substr(at, end - at) << "\n";
      at = end == std::string::npos ? yaml.size() : end + 1;
    }
  } else {
    os << "no answer: " << s.note << "\n";
    if (s.answer_run_id) {
      os << "closest: " << run_name(out, s.answer_run_id) << ", " << s.metric << " "
         << value_text(s.answer_value) << " against the reference's "
         << value_text(s.reference_value) << "\n";
    }
  }
  if (s.status != records::TuneStatus::kSearching) {
    os << "epochs: " << s.epochs_spent << " trained by the search; the full grid of the moves it "
       << "tried: " << s.grid_epochs << "\n";
  }
  os << "path: sqlite3 -header -column " << db << " \"SELECT * FROM tune_path WHERE sweep = '"
     << log::printable(s.sweep_name) << "'\"\n";
}

void print_plan(const app::TunePlan& plan, std::ostream& os) {
  const TuneBlock& b = plan.block;
  std::vector<std::string> keys;
  for (const KeySpec& spec : plan.base.schema().keys()) keys.push_back(spec.key);
  auto block = [&](const char* what, const Config& config) {
    const std::string yaml = app::changed_yaml(config, plan.base, keys);
    os << what << (yaml.empty() ? " the base\n" : ":\n");
    size_t at = 0;
    while (at < yaml.size()) {
      const size_t end = yaml.find('\n', at);
      os << "  " << yaml.substr(at, end - at) << "\n";
      at = end + 1;
    }
  };
  block("reference", plan.reference);
  block("start", plan.start);
  os << "metric " << plan.metric << " (" << (plan.tolerance.higher_is_better ? "higher" : "lower")
     << " is better), tolerance "
     << (b.tolerance_abs > 0 ? "abs " + app::significant(b.tolerance_abs, 6)
                             : "rel " + app::significant(b.tolerance_rel, 6))
     << "; moves " << app::moves_yaml(b.moves) << "; fork_from "
     << (b.fork_from ? std::to_string(*b.fork_from) : std::string("auto")) << "\n";
  os << plan.epochs << " epochs per run; budget " << plan.budget << " epochs; halving eta " << b.eta
     << ", first rung " << b.min_epochs << " epochs past the fork; objective "
     << to_string(b.objective) << "\n";
  os << "sweep " << plan.sweep.name << " checked (dry run: nothing trained or written)\n";
}

// --slurm and the options of its jobs (app/tune/tune_slurm.h).
void add_slurm_options(Options& opts, bool* slurm, app::TuneSlurmOptions* o) {
  opts.add()("slurm", po::bool_switch(slurm),
             "train each step's runs as one Slurm array job (a task per run, in a database of "
             "its own, merged back); the search waits here (docs/TUNE.md \"On a cluster\")")(
      "partition", po::value(&o->partition), "with --slurm: the partition (default: the "
      "cluster's)")("time", po::value(&o->time),
                    "with --slurm: time limit of each task, e.g. 2:00:00 (sbatch --time)")(
      "nodes-per-run", po::value(&o->nodes_per_run)->default_value(1),
      "with --slurm: nodes of one run; with more than one process per run the ranks start "
      "through srun (docs/DISTRIBUTED.md)")(
      "tasks-per-node", po::value(&o->tasks_per_node)->default_value(1),
      "with --slurm: processes of one run per node (e.g. one per GPU)")(
      "gpus-per-task", po::value(&o->gpus_per_task)->default_value(0),
      "with --slurm: GPUs per process")("cpus-per-task",
                                        po::value(&o->cpus_per_task)->default_value(0),
                                        "with --slurm: CPUs per process; 0 = the cluster's")(
      "max-jobs", po::value(&o->max_jobs)->default_value(0),
      "with --slurm: array tasks running at once (sbatch --array=...%K); 0 = no limit")(
      "sbatch-arg", po::value(&o->sbatch)->composing(),
      "with --slurm: another sbatch option, e.g. --sbatch-arg=--account=proj; repeatable")(
      "jobs-dir", po::value(&o->jobs_dir),
      "with --slurm: where the tasks' databases, scripts and logs go, on a file system the "
      "nodes share (default: <db dir>/tune-jobs/<db stem>)")(
      "poll-seconds", po::value(&o->poll_seconds)->default_value(5),
      "with --slurm: seconds between two looks at the jobs (squeue, sacct)");
}

bool used_slurm_options(const app::TuneSlurmOptions& o) {
  const app::TuneSlurmOptions unset;
  return o.partition != unset.partition || o.time != unset.time ||
         o.nodes_per_run != unset.nodes_per_run || o.tasks_per_node != unset.tasks_per_node ||
         o.gpus_per_task != unset.gpus_per_task || o.cpus_per_task != unset.cpus_per_task ||
         o.max_jobs != unset.max_jobs || !o.sbatch.empty() || !o.jobs_dir.empty();
}

// Refuses what `tune` cannot do with these options (UsageError).
void check_tune_options(const std::string& sweep_path, const std::vector<std::string>& only,
                        const TrainingFlags& training, int workers, bool slurm,
                        const app::TuneSlurmOptions& on_slurm) {
  if (sweep_path.empty())
    throw UsageError("amptune tune needs a sweep file: amptune tune SWEEP.yaml");
  if (!only.empty())
    throw UsageError("amptune tune searches from the base: --only has no cells to select");
  if (training.stop_after >= 0)
    throw UsageError("amptune tune decides where each run stops: no --stop-after-epoch");
  if (workers < 1) throw UsageError("--workers must be at least 1, got " + std::to_string(workers));
  if (training.nproc != 1 && workers > 1) {
    throw UsageError("--nproc and --workers do not go together");
  }
  if (slurm && (workers > 1 || training.nproc != 1)) {
    throw UsageError("--slurm trains each run as a Slurm task: no --workers or --nproc (a run's "
                     "processes: --nodes-per-run, --tasks-per-node)");
  }
  if (!slurm && used_slurm_options(on_slurm)) {
    throw UsageError("--partition, --time, --gpus-per-task, --nodes-per-run, --tasks-per-node, "
                     "--cpus-per-task, --max-jobs, --sbatch-arg and --jobs-dir go with --slurm");
  }
}

// --status: the newest search of the sweep, or a line saying there is none.
int print_status(const std::string& sweep_path, const std::vector<std::string>& sets,
                 const std::string& db, const std::vector<std::string>& emit) {
  const Sweep sweep = load_sweep(sweep_path, sets);
  const auto out = app::tune_status(db, sweep.name);
  if (!out) {
    std::cout << "sweep " << sweep.name << " has no tune search in " << db << "\n";
    if (!emit.empty()) throw Error(ExitCode::kFailedRuns, "--emit: no search, nothing written");
    return 0;
  }
  print_outcome(*out, db, std::cout);
  return emit_tune_answer(emit, db, *out, 0);
}

}  // namespace

int cmd_tune(const Invocation& inv) {
  std::string sweep_path, db;
  std::vector<std::string> sets, only;
  int workers = 1;
  bool dry = false, status = false, as_worker = false;
  TrainingFlags training;
  double stale_after = app::kDefaultStaleAfterSeconds;
  Options opts("tune",
               "usage: amptune tune SWEEP.yaml [options]\n\nSearches for the lowest-precision "
               "setting whose metric stays within the sweep's tune: block's tolerance of the "
               "reference (docs/TUNE.md): trains the reference and the start, diagnoses the "
               "start, forks one candidate per move, stops losing candidates early, repeats "
               "from the best, bisects fp32 modules, and prints the answer as keys for base:. "
               "Every step is stored; running it again continues the search. With --slurm "
               "each step's runs train as one Slurm array job (a task per run, in a database "
               "of its own, merged back when the job ends); a search started again waits for "
               "the jobs it had submitted.");
  opts.positional(&sweep_path)
      .db(&db)
      .quiet()
      .sweep_selection(&sets, &only)
      .stale_after(&stale_after);
  opts.add()("dry-run", po::bool_switch(&dry),
             "check the tune: block and print the plan; train and write nothing")(
      "status", po::bool_switch(&status),
      "print the newest search of the sweep from the database (its decision path and "
      "answer); train nothing")(
      "workers", po::value(&workers)->default_value(1),
      "processes running the search together: each trains the candidates it claims")(
      "no-progress", po::bool_switch(&training.no_progress),
      "no per-step progress lines (epoch lines stay)")(
      "as-worker", po::bool_switch(&as_worker),
      "(set by --workers for its processes) print no summary at the end");
  add_training_options(opts, &training, "not used by tune");
  bool slurm = false;
  app::TuneSlurmOptions on_slurm;
  add_slurm_options(opts, &slurm, &on_slurm);
  std::vector<std::string> emit;
  add_emit_option(opts, &emit);
  if (!opts.parse(inv.args)) return 0;
  check_tune_options(sweep_path, only, training, workers, slurm, on_slurm);
  check_emit_option(emit, dry);
  if (status) return print_status(sweep_path, sets, db, emit);
  app::SweepOptions options = sweep_options(opts, training, inv);
  options.stale_after = stale_after;
  const app::JobLaunch launch{"tune", inv.args, training.nproc, workers, !dry};
  return app::run_as_job(
      launch, options,
      [&] {
        const app::TunePlan plan = app::plan_tune(sweep_path, sets);
        if (dry) {
          print_plan(plan, std::cout);
          return 0;
        }
        std::vector<std::string> args;
        if (workers > 1) {
          args = app::worker_args(inv.args, "tune");
          args.push_back("--as-worker");
        }
        if (slurm) {
          on_slurm.binary = std::filesystem::canonical("/proc/self/exe").string();
          on_slurm.workdir = std::filesystem::current_path().string();
          on_slurm.command_line = inv.command_line;
          app::check_tune_slurm_options(on_slurm);
        }
        const app::TuneCommand done =
            app::tune_database(db, plan, options, workers, args, slurm ? &on_slurm : nullptr);
        if (!done.outcome || as_worker) return done.exit_code;
        print_outcome(*done.outcome, db, std::cout);
        return emit_tune_answer(emit, db, *done.outcome, done.exit_code);
      },
      [&] { (void)app::plan_tune(sweep_path, sets); });
}

}  // namespace amptune::cli
