// The entry points of a run's training, start to finish or from a checkpoint, alone or as a rank
// of a data-parallel job (the loop itself: train/phases.h). No torch in this header: the app and
// CLI layers include it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "records/records.h"
#include "train/recorder.h"
#include "train/run_input.h"

namespace amptune::dist {
class Cluster;
}

namespace amptune::train {

struct RunOptions {
  std::optional<int> from_epoch;  // resume from this epoch's checkpoint (default: newest valid)
  bool fresh = false;             // ignore checkpoints, start at epoch 0
  int threads = 0;                // > 0 overrides the config's `threads`
  bool progress = true;           // progress of the training steps on stderr
  bool progress_tty = false;      // redraw a progress line (a terminal); plain lines otherwise
  std::string command_line;
  // How often the run row's heartbeat is refreshed (by a thread of its own, whatever training
  // does meanwhile; every recorded epoch refreshes it too). Keep --stale-after well above it.
  double heartbeat_seconds = 2;
  // Stop (run back to pending) once this epoch (0-based) is recorded; for staged runs and tests.
  std::optional<int> stop_after_epoch;
  // Data-parallel training (docs/DISTRIBUTED.md): the processes of the job, or null for one.
  // Every rank must be given the same options (torchrun, srun and --nproc start the same
  // command line everywhere).
  dist::Cluster* cluster = nullptr;
  // One device's peak FLOP/s when detection is wrong (--peak-flops, AMPTUNE_PEAK_FLOPS: named in
  // peak_flops_by); unset: detected (train/peak.h).
  std::optional<double> peak_flops;
  std::string peak_flops_by;
};

struct RunResult {
  Outcome outcome = Outcome::kFailed;
  std::string message;
  std::string summary_json;  // the end-of-run JSON line (empty unless done)
};

// Trains `run` to the end of its schedule in the phases of train/phases.h, recording through
// `recorder` (train/recorder.h) and stopping early when it holds a stop request. Errors inside
// training are caught and reported as kFailed with a message; the recorder is told how the run
// ended before this returns.
RunResult train_run(Recorder& recorder, const RunInput& run, const RunOptions& options);

// The leader of a data-parallel job (rank 0) tells the other ranks that `run` is next (they get
// it from next_run and call follow_run); it then trains it with train_run, and hands them its
// restored state from there. app::train_claimed_run (app/run/store_recorder.h) does both.
void lead_run(dist::Cluster& cluster, const RunInput& run);

// The other ranks of a data-parallel job: the next run the leader trains (nullopt when the
// leader has finished; its exit code is then in *leader_exit), and its training without a
// store. Throws RankLostError when the leader is gone.
std::optional<RunInput> next_run(dist::Cluster& cluster, int* leader_exit);
RunResult follow_run(const RunInput& run, const RunOptions& options);
// The leader's last word to the others: no more runs; `exit_code` is its own.
void end_runs(dist::Cluster& cluster, int exit_code);

// Cooperative stop (SIGINT/SIGTERM): the trainer stops at the next step, the epoch in flight is
// lost, the run goes back to pending.
void request_stop();
bool stop_requested();

}  // namespace amptune::train
