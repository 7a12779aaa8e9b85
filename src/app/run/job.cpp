// app/run/job.h: which processes a run / resume / fork command starts and what each does.
#include "app/run/job.h"

#include "core/error.h"
#include "core/log.h"
#include "dist/cluster.h"
#include "launch/launch.h"
#include "store/store.h"

namespace amptune::app {
namespace {

// `subcommand` args without --nproc: what each local rank runs.
std::vector<std::string> rank_args(const std::string& subcommand,
                                   const std::vector<std::string>& args) {
  std::vector<std::string> out = {"/proc/self/exe", subcommand};
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

}  // namespace

int run_as_job(const JobLaunch& launch, SweepOptions& options, const std::function<int()>& command,
               const std::function<void()>& check) {
  if (!launch.launch) return command();
  const int nproc = launch.nproc;
  if (nproc < 1) throw UsageError("--nproc must be at least 1, got " + std::to_string(nproc));
  const launch::LaunchEnv env = launch::detect_launch();
  if (env.distributed() && (nproc != 1 || launch.workers > 1)) {
    throw UsageError(std::string(nproc != 1 ? "--nproc" : "--workers") +
                     " inside a launched job (" + env.describe() +
                     "): let the launcher start the ranks");
  }
  if (nproc != 1) {
    if (check) check();
    launch::SpawnOptions so;
    so.nproc = nproc;
    so.argv = rank_args(launch.subcommand, launch.args);
    return launch::spawn_local_ranks(so).exit_code;
  }
  const auto cluster = env.distributed() ? dist::Cluster::join(env) : nullptr;
  options.training.cluster = cluster.get();
  if (cluster && !cluster->leader()) return follow_job(options);
  return lead_job(options, command);
}

int job_size(const SweepOptions& options, int nproc) {
  const dist::Cluster* cluster = options.training.cluster;
  return cluster ? cluster->size() : nproc;
}

std::vector<std::string> worker_args(const std::vector<std::string>& args,
                                     const std::string& subcommand) {
  std::vector<std::string> out = {subcommand};
  bool no_progress = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--workers") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--workers=", 0) == 0) continue;
    no_progress = no_progress || args[i] == "--no-progress";
    out.push_back(args[i]);
  }
  if (!no_progress) out.push_back("--no-progress");
  return out;
}

int train_sweep(const Plan& plan, const std::string& db, int workers,
                const std::vector<std::string>& args, const SweepOptions& options) {
  store::Store store(db);
  if (workers > 1) {
    store.ensure_sweep(plan.sweep.name, plan.sweep.description, plan.sweep.yaml_text,
                       plan.sweep.source_path);
    return run_workers(worker_args(args), workers, db, plan.sweep.name);
  }
  const Tally tally = run_sweep(store, plan, options);
  log::info("sweep " + plan.sweep.name + ": " + tally.summary());
  log::info("results: sqlite3 -header -column " + db +
            " \"select * from run_summary where sweep = '" + plan.sweep.name + "'\"");
  return tally.exit_code();
}

}  // namespace amptune::app
