// How `run`, `resume` and `fork` take part in data-parallel training (docs/DISTRIBUTED.md) and
// how `run --workers N` shares a sweep: which processes start, and which of them does what. The
// CLI parses its options into a JobLaunch and hands over the command's work as a function.
// No torch here (launch/launch.h and dist/cluster.h are torch-free).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "app/run/runner.h"

namespace amptune::app {

struct JobLaunch {
  std::string subcommand;         // "run", "resume" or "fork"
  std::vector<std::string> args;  // its arguments after the subcommand (the ranks get them
                                  // without --nproc)
  int nproc = 1;                  // --nproc: local ranks to start
  int workers = 1;                // --workers (run): checked against a launched job
  bool launch = true;             // false (a dry run): `command` runs alone
};

// `--nproc N` (N != 1): starts N local ranks of this command (launch::spawn_local_ranks) and returns
// their exit code. A rank of a launched job (torchrun, srun, --nproc) other than rank 0 trains the
// runs rank 0 announces (follow_job). Rank 0, or a lone process, runs `command` with
// options.training.cluster set (null alone; lead_job). `check`, when given, runs in this process
// before --nproc starts any rank, so what it refuses is said once, by one process. Throws
// ConfigError for an incomplete launch environment, UsageError for --nproc < 1, or --nproc or
// --workers inside a launched job.
int run_as_job(const JobLaunch& launch, SweepOptions& options, const std::function<int()>& command,
               const std::function<void()>& check = nullptr);

// The processes that train each run: the launched job's (options.training.cluster set by
// run_as_job), else `nproc`.
int job_size(const SweepOptions& options, int nproc);

// The arguments of a worker process of `run --workers N` (or `tune`: `subcommand`) whose
// arguments were `args`: the same
// command line without --workers, with --no-progress (workers share one stderr) unless it is
// there already.
std::vector<std::string> worker_args(const std::vector<std::string>& args,
                                     const std::string& subcommand = "run");

// `amptune run` once planned (and not a dry run): with `workers` > 1, records the sweep in the
// database `db` and runs the workers (run_workers with worker_args(args)); otherwise trains the
// plan in this process (run_sweep) and logs the tally and the query that shows the results.
// Returns the exit code.
int train_sweep(const Plan& plan, const std::string& db, int workers,
                const std::vector<std::string>& args, const SweepOptions& options);

}  // namespace amptune::app
