// Slurm job states as `amptune tune --slurm` reads them (app/tune/tune_slurm.h): the words of
// squeue and sacct parsed into one enum, and the query of an array job's tasks. Parsing is pure
// (unit-tested on recorded outputs, tests/unit/app/slurm_jobs_test.cpp); the query runs the
// client commands.
//
//   squeue -h -r -t all -j 123 -o '%i|%T'                          123_0|RUNNING
//                                                                 123_[1-3%2]|PENDING
//   sacct -j 123 -X -n -P -o JobID,State,ExitCode                 123_0|COMPLETED|0:0
//                                                                 123_1|CANCELLED by 1000|0:15
//
// squeue knows the jobs the controller holds (queued, running, and ended ones for MinJobAge,
// 300 s by default); sacct, where accounting is on, knows them for good. The executor judges a
// task by its database once the task has ended; a state only says when that is, and why not.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace amptune::app {

// The states Slurm documents (squeue(1) "JOB STATE CODES", sacct(1)); kOther for any other word.
enum class JobState {
  kPending,
  kConfiguring,
  kRunning,
  kSuspended,
  kCompleting,
  kRequeued,
  kResizing,
  kCompleted,
  kFailed,
  kCancelled,
  kTimeout,
  kNodeFail,
  kPreempted,
  kOutOfMemory,
  kBootFail,
  kDeadline,
  kRevoked,
  kSpecialExit,
  kOther
};

// `word` as squeue or sacct print it: "RUNNING", "CANCELLED by 1000", "CANCELLED+" (sacct's
// truncation mark), "OUT_OF_MEMORY", "OOM"; case and surrounding blanks ignored.
JobState parse_job_state(const std::string& word);
// Whether a job in `state` has ended for good: its processes are gone and it will not run again
// unless submitted again (COMPLETING has not: its epilog still runs; REQUEUED will run again).
bool job_ended(JobState state);

// One array task's line.
struct TaskState {
  std::string job_id;  // the array job's id ("123")
  int task = -1;       // the array task; -1: a job that is no array
  JobState state = JobState::kOther;
  std::string word;  // as Slurm printed it ("CANCELLED by 1000")
};

// Lines "JOBID|STATE[|...]" of squeue -o '%i|%T' or sacct -P -o JobID,State,...: one entry per
// task, pending ranges ("123_[1-3,7%2]") expanded; job steps ("123_0.batch"), blank lines and
// heterogeneous job components skipped. Throws EnvironmentError naming the line for one that is
// not of that form.
std::vector<TaskState> parse_job_lines(const std::string& text);

// What the cluster says of array job `job_id` now: its tasks' states by index. `gone` when neither
// squeue nor sacct knows the job any more (ended long ago with accounting off): the caller judges
// its tasks by what they left. `error`: a client that could not be asked (the controller not
// answering): try again later. The commands' output goes to files under `scratch_dir`.
struct JobQuery {
  std::map<int, TaskState> tasks;
  bool gone = false;
  std::string error;
};
JobQuery query_job(const std::string& job_id, const std::string& scratch_dir);

}  // namespace amptune::app
