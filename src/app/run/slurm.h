// `amptune slurm`: the batch scripts that train a sweep's shards (app/run/shard.h) as one Slurm
// array job, and merge their databases in a second job that waits for it
// (--dependency=afterany), with `--submit` their submission through sbatch. docs/SLURM.md.
//
// The array job: task K (0..N-1) runs `amptune run SWEEP --shard $SLURM_ARRAY_TASK_ID/N`, which
// trains shard K into results/<sweep>.shard-K-of-N.sqlite (checkpoints under
// results/checkpoints/<sweep>.shard-K-of-N/). A run of several processes (nodes_per_run x
// tasks_per_node > 1) starts its ranks through srun, whose environment amptune reads
// (launch/launch.h). Re-submitting the array continues every shard from its database, as `run`
// does on one machine; `sbatch --array=K SCRIPT` re-runs shard K alone.
// The merge job: `amptune merge` of the shard databases that exist into `into`.
#pragma once

#include <string>
#include <vector>

#include "app/run/runner.h"

namespace amptune::app {

// What every script amptune writes for Slurm shares (this file's jobs, `tune --slurm`'s,
// app/tune/tune_slurm.h): values quoted or refused, one writer, one reading of sbatch's answer.
// `text` as one bash word: single-quoted, a single quote as '\''.
std::string shell_quote(const std::string& text);
// A value written into a script line that cannot be quoted (a #SBATCH directive, a comment):
// UsageError naming `what` when it holds a line break or another control character.
void require_one_line(const std::string& what, const std::string& value);
// `text` written whole (core/files.h write_file_atomic), then made executable. Throws
// EnvironmentError naming the file.
void write_executable(const std::string& path, const std::string& text);
// The job id `sbatch --parsable SCRIPT` printed ("123" or "123;cluster"); EnvironmentError naming
// `script` when it is not one.
std::string parsable_job_id(const std::string& printed, const std::string& script);

struct SlurmOptions {
  std::string sweep_path;               // as on the command line, relative to workdir
  std::vector<std::string> sets, only;  // passed on to every `amptune run`
  int shards = 0;                       // N; 0 = one per cell, at most kMaxDefaultShards
  std::string partition, time;          // "" = the cluster's defaults
  int gpus_per_task = 0;                // 0 = none asked for
  int nodes_per_run = 1;                // nodes of one array task (one run's ranks)
  int tasks_per_node = 1;               // processes (ranks) per node
  int cpus_per_task = 0;                // 0 = the cluster's default
  std::vector<std::string> sbatch;      // more sbatch options ("--account=x"), in both scripts
  std::string into;                     // the database the merge job writes
  std::string script;                   // path of the array job's script
  std::string binary;                   // absolute path of amptune
  std::string workdir;                  // absolute; both jobs run there
  std::string command_line;             // how the scripts were made, for their header
};

// Slurm's default MaxArraySize is 1001 (task ids 0..1000).
constexpr int kMaxDefaultShards = 1000;

struct SlurmJob {
  int shards = 0;
  std::vector<size_t> cells;           // planned cells per shard
  std::string array_path, merge_path;  // merge_path: next to array_path, "<stem>.merge.sbatch"
  std::string array_script, merge_script;
};

// The two scripts for `plan` (planned without --shard: every cell --only selected). Throws
// UsageError for a shard count or run size below 1, or options that would break the script
// (a newline in a value).
SlurmJob slurm_job(const Plan& plan, const SlurmOptions& options);

// Writes both scripts (executable), creating their directory. Throws EnvironmentError naming the
// file that cannot be written.
void write_slurm_job(const SlurmJob& job);

struct SubmittedJobs {
  std::string array_job, merge_job;  // Slurm job ids
};
// `sbatch --parsable` of the array job, then of the merge job with
// --dependency=afterany:<array job>. Throws EnvironmentError when sbatch is missing or fails (its
// message is on stderr), naming what was submitted already.
SubmittedJobs submit_slurm_job(const SlurmJob& job);

}  // namespace amptune::app
