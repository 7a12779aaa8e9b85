// `amptune tune --slurm` (docs/TUNE.md "On a cluster"): the search's executor whose training is
// Slurm array jobs. The search (app/tune/tune_search.h) does not change; each of its steps that
// trains (train_to: runs to an epoch) becomes one array job:
//
//   1. every run to train gets a database of its own, <jobs dir>/s<search>-e<epoch>-.../task-K
//      .sqlite, with its rows and its fork ancestors' copied in (Store::copy_runs; when the
//      sweep names checkpoint.dir, the run's checkpoint.dir there is <checkpoint.dir>/tune-jobs/
//      <job dir>/task-K, each database's own folder on the shared file system);
//   2. one script (written with the one atomic writer, every value quoted: app/run/slurm.h) whose
//      task K runs `amptune resume RUN --db TASK_DB --stop-after-epoch EPOCH`, through srun when
//      a run has several processes, as `amptune slurm`'s tasks run `amptune run`; sbatch submits
//      it, and its tasks are recorded (table tune_jobs) before anything else happens;
//   3. the search waits (squeue / sacct every poll_seconds, app/tune/slurm_jobs.h; a signal ends
//      the wait within a tenth of a second and leaves the jobs running), then merges the task
//      databases into the results database with `amptune merge`'s checks (Store::merge: they are
//      input from elsewhere);
//   4. a run that did not get to its epoch (a task that failed, was cancelled, timed out, lost its
//      node) is reported with its job state, its log and its message, and submitted once more
//      (attempt 2); after that it is failed, and the search goes on without it.
//
// A search process killed and started again replays its steps (tune_search.h "Resuming is
// replaying"): a step whose tasks are recorded waits for them instead of submitting, merges
// those that ended, and trains nothing twice. Diagnoses and the objective's count run in the
// search's process. No torch in this header.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "app/tune/tune_executor.h"

namespace amptune::app {

struct TuneSlurmOptions {
  std::string partition, time;      // "" = the cluster's defaults
  int nodes_per_run = 1;            // nodes of one run (one array task)
  int tasks_per_node = 1;           // processes (ranks) of one run per node
  int gpus_per_task = 0;            // per process; 0 = none asked for
  int cpus_per_task = 0;            // 0 = the cluster's default
  int max_jobs = 0;                 // array tasks running at once (--array=...%K); 0 = no limit
  std::vector<std::string> sbatch;  // more sbatch options ("--account=x")
  std::string jobs_dir;             // task databases, scripts, logs; "" = default_jobs_dir(db)
  std::string binary;               // absolute path of amptune
  std::string workdir;              // absolute; the tasks run there
  std::string command_line;         // for the scripts' header
  double poll_seconds = 5;          // between two looks at the jobs
};

// A run's array task is submitted at most this many times for one step (the key of tune_jobs
// bounds it across restarts).
constexpr int kTuneJobAttempts = 2;

// <db dir>/tune-jobs/<db stem>: where the task databases and logs of `db`'s searches go.
std::string default_jobs_dir(const std::string& db);

// Refuses (UsageError) options a script cannot hold: counts below 1 (below 0 for GPUs, CPUs and
// max_jobs), a value with a line break, an --sbatch value that is not an option; and a poll
// interval outside (0, 3600] seconds.
void check_tune_slurm_options(const TuneSlurmOptions& options);

class SlurmTuneExecutor : public StoreExecutor {
 public:
  SlurmTuneExecutor(store::Store& store, const TunePlan& plan, const SweepOptions& options,
                    TuneSlurmOptions slurm);

  // One array job for the runs of `ids` that have not recorded `epoch` (or ended), waited for
  // and merged back; the tasks of an earlier process of this search are waited for instead.
  // False when a signal stopped the wait (the jobs go on; the search continues when run again).
  bool train_to(const std::vector<int64_t>& ids, int epoch) override;
  records::TuneSearchRow open_search(const records::TuneSearchRow& row) override;

 private:
  // Copies each run into its task database and submits the array job; returns its tasks as
  // recorded. `runs`: run id and attempt.
  std::vector<records::TuneJobRow> submit(const std::vector<std::pair<int64_t, int>>& runs,
                                          int epoch);
  // Waits until every task of `jobs` has ended (their state set); false when a signal came.
  bool wait(std::vector<records::TuneJobRow>& jobs);
  // Merges the task databases of `jobs` into the results database; marks them ended (not when
  // a signal came meanwhile: they are merged again when the search goes on).
  void merge_back(std::vector<records::TuneJobRow>& jobs);
  // What a task that did not get its run to the epoch left: state, message, log.
  std::string failure(const records::TuneJobRow& job) const;

  TuneSlurmOptions slurm_;
  int64_t search_id_ = 0;
  std::set<int64_t> given_up_;  // runs marked failed by this process
};

}  // namespace amptune::app
