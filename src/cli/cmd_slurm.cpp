// `amptune slurm`: writes (and with --submit, submits) the Slurm array job of a sweep's shards and
// the job that merges them. app/run/slurm.h makes the scripts.
#include <filesystem>
#include <iostream>

#include "app/run/slurm.h"
#include "cli/commands.h"
#include "core/error.h"

namespace amptune::cli {

int cmd_slurm(const Invocation& inv) {
  app::SlurmOptions o;
  bool skip_data = false, submit = false;
  Options opts("slurm",
               "usage: amptune slurm SWEEP.yaml [options]\n\n"
               "Writes a Slurm batch script that trains the sweep as an array job of N shards\n"
               "(task K: amptune run SWEEP --shard K/N, into results/<sweep>.shard-K-of-N.sqlite)\n"
               "and a second one, <stem>.merge.sbatch, that merges the shard databases once the\n"
               "array job has ended. --submit submits both (sbatch; the merge job with\n"
               "--dependency=afterany) and prints their job ids. The sweep is checked first.\n"
               "See docs/SLURM.md.\n");
  opts.positional(&o.sweep_path).sweep_selection(&o.sets, &o.only);  // passed on to amptune run
  opts.add()("array", po::value(&o.shards)->default_value(0),
             "N, the number of shards (array tasks); 0 = one per cell, at most 1000")(
      "partition", po::value(&o.partition), "Slurm partition (default: the cluster's)")(
      "time", po::value(&o.time), "time limit of each array task, e.g. 2:00:00 (sbatch --time)")(
      "gpus-per-task", po::value(&o.gpus_per_task)->default_value(0), "GPUs per process")(
      "nodes-per-run", po::value(&o.nodes_per_run)->default_value(1),
      "nodes of one run; with more than one process per run the ranks start through srun "
      "(data-parallel, docs/DISTRIBUTED.md)")("tasks-per-node",
                                              po::value(&o.tasks_per_node)->default_value(1),
                                              "processes of one run per node (e.g. one per GPU)")(
      "cpus-per-task", po::value(&o.cpus_per_task)->default_value(0),
      "CPUs per process; 0 = the cluster's default")(
      "sbatch", po::value(&o.sbatch)->composing(),
      "another sbatch option for both scripts, e.g. --sbatch=--account=proj; repeatable")(
      "into", po::value(&o.into)->default_value(default_db()),
      "the database the merge job merges the shards into")(
      "out", po::value(&o.script), "the array job's script (default: slurm/<sweep>.sbatch)")(
      "skip-data", po::bool_switch(&skip_data),
      "do not check that the data sets open here (a login node without the data)")(
      "submit", po::bool_switch(&submit), "submit both jobs with sbatch and print their ids");
  if (!opts.parse(inv.args)) return 0;
  if (o.sweep_path.empty()) {
    throw UsageError("amptune slurm needs a sweep file: amptune slurm SWEEP.yaml");
  }
  // Checked as `run --dry-run` would; the array tasks check their data-parallel setup themselves.
  const app::Plan plan = app::plan_sweep(o.sweep_path, o.sets, o.only, !skip_data);
  if (o.script.empty()) o.script = "slurm/" + plan.sweep.name + ".sbatch";
  o.workdir = std::filesystem::current_path().string();
  o.binary = std::filesystem::canonical("/proc/self/exe").string();
  o.command_line = inv.command_line;
  const app::SlurmJob job = app::slurm_job(plan, o);
  app::write_slurm_job(job);
  size_t empty = 0;
  for (size_t cells : job.cells) empty += cells == 0;
  std::cout << "wrote " << job.array_path << " (array job: " << plan.cells.size() << " cells of "
            << plan.sweep.name << " in " << job.shards << " shards"
            << (empty ? ", " + std::to_string(empty) + " of them empty" : "") << ") and "
            << job.merge_path << " (merges them into " << o.into << ")\n"
            << "cells per shard:";
  for (size_t k = 0; k < job.cells.size(); ++k) std::cout << " " << k << ":" << job.cells[k];
  std::cout << "\n";
  if (!submit) {
    std::cout << "submit with: jobid=$(sbatch --parsable " << job.array_path
              << ") && sbatch --dependency=afterany:$jobid " << job.merge_path << "\n";
    return 0;
  }
  const app::SubmittedJobs jobs = app::submit_slurm_job(job);
  std::cout << "submitted array job " << jobs.array_job << " and merge job " << jobs.merge_job
            << " (runs after the array job ends)\n";
  return 0;
}

}  // namespace amptune::cli
