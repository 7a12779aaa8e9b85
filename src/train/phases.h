// The training of one run as named phases, in the order train() (train/trainer.cpp) calls them,
// over the run's settings (core/settings.h), resolved once per run (train/run_input.h):
//
//   set_up            threads, device, process group, amp policy (resolved once) and precision,
//                     model + optimizer, data
//   restore           resume from the newest valid checkpoint, or a fork's start from its parent's;
//                     in a data-parallel job the leader's state is then sent to every rank
//   evaluate_initial  the initial weights (an evaluation-only run's one epoch, eval_initial)
//   train_epoch       the steps of one epoch (loss scaler, gradient averaging, profile)
//   evaluate_epoch    the evaluation split after the epoch
//   record_epoch      the checkpoint and the epoch's row, through the Recorder
//   finish            the end-of-run summary
//
// A phase that ends the run early (a signal, a takeover, a divergence, a stop asked for) throws
// RunStopped; every other error is an exception of core/error.h. Every database write and every
// file the run keeps goes through the Recorder (train/recorder.h). Internal to src/train and its
// tests (includes torch).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/settings.h"
#include "data/loader.h"
#include "train/recorder.h"
#include "train/trainer.h"
#include "train/schedule.h"
#include "train/session.h"

namespace amptune::data {
class Dataset;
}
namespace amptune::dist {
class GradReducer;
class ProcessGroup;
}
namespace amptune::models {
class ScopedBatchNormSync;
}

namespace amptune::train {

class StepProfiler;

// A run that ends before its schedule does: the outcome and why.
class RunStopped : public std::runtime_error {
 public:
  RunStopped(Outcome outcome, const std::string& message)
      : std::runtime_error(message), outcome(outcome) {}
  Outcome outcome;
};

// Where training starts: the epoch loaded (-1: from scratch), the optimizer steps done,
// whether the loss scaler starts fresh (its initial scale is recorded), whether the weights
// are the run's initial ones (from scratch or a fork's start, not a resumed checkpoint of its
// own: schedule.eval_initial evaluates them), and the inf/NaN losses in a row the steps so far
// ended with (train/divergence.h; the metric nonfinite_streak of the epoch loaded).
struct Start {
  int64_t epoch = -1;
  int64_t global_step = 0;
  bool fresh_scaler = true;
  bool initial = true;
  int64_t nonfinite_streak = 0;
};

// Loads the newest valid checkpoint the recorder knows (at most options.from_epoch) into
// `session` (rebuilt from the run's `settings` when a load fails half-way), or a fork's parent's
// checkpoint when the run has none (restore.cpp). Later epochs are forgotten. Any
// CheckpointError (missing, corrupt, malformed, mismatched) falls back to the previous
// checkpoint, except LegacyCheckpointError (an old-format file without the opt-in), which stops
// with nothing deleted, and an explicit from_epoch, which must load.
Start restore_run(Recorder& recorder, const RunInput& run, const torch::Device& device,
                  const RunOptions& options, Session& session);

class RunTraining {
 public:
  RunTraining(Recorder& recorder, const RunInput& run, const RunOptions& options);
  ~RunTraining();
  RunTraining(const RunTraining&) = delete;
  RunTraining& operator=(const RunTraining&) = delete;

  void set_up();
  void restore();
  void evaluate_initial();
  records::EpochRecord train_epoch(int64_t epoch);
  void evaluate_epoch(int64_t epoch, records::EpochRecord& record);
  void record_epoch(int64_t epoch, records::EpochRecord& record);
  std::string finish();

  // The epochs still to train: first_epoch() .. epochs() - 1.
  int64_t first_epoch() const { return start_.epoch + 1; }
  int64_t epochs() const { return epochs_; }
  const Settings& settings() const { return settings_; }
  Session& session() { return session_; }

 private:
  // The evaluation split under the run's precision, every rank's shard combined.
  std::map<std::string, double> evaluate(int64_t epoch);
  // One training step of this process alone on `batch`: its loss.
  double local_step(const data::Batch& batch, int64_t epoch, int64_t step_index,
                    records::EpochTimes& times, std::chrono::steady_clock::time_point& phase_start);
  // Data-parallel: gradients averaged between backward and the amp check; the ranks agree on
  // overflow, a non-finite loss and a stop. `n`: this rank's samples (0: all corrupt). Returns
  // the mean loss over every rank's samples (NaN when not finite).
  double parallel_step(const data::Batch& batch, int64_t n, int64_t epoch, int64_t step_index,
                       records::EpochTimes& times,
                       std::chrono::steady_clock::time_point& phase_start);
  // The epoch's figures over every rank (img/s summed, each rank's slowest and fastest).
  void combine_over_ranks(records::EpochRecord& record, int64_t steps, double step_seconds);
  // Throws RunStopped when the recorder holds a stop request.
  void stop_if_asked(int64_t epoch);
  // The leader's starting state (weights, optimizer, scaler, RNG) on every rank.
  void share_start();
  // The run's training FLOPs per sample and its devices' peak, recorded (the leader: rank 0).
  void record_work();
  // Where a synthetic data set's resident batch is made: the run's device, the model's layout.
  void place_batches(data::LoaderOptions& options) const;
  // After restore (which may rebuild the session): gradient averaging and synchronised
  // BatchNorm over the session's tensors, the profiler, the run's opening log lines.
  void prepare_steps();

  Recorder& recorder_;
  const RunInput run_;
  const RunOptions options_;
  const std::chrono::steady_clock::time_point began_;

  const Settings& settings_;  // run_.settings(): the run's config as typed sections
  int threads_ = 1;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<dist::ProcessGroup> group_;  // null for one process
  int world_ = 1, rank_ = 0;
  std::unique_ptr<Precision> precision_;  // before session_: the session points at it
  Session session_;
  Start start_;
  std::shared_ptr<data::Dataset> train_set_, val_set_;
  int64_t epochs_ = 0, batch_size_ = 0, eval_steps_ = 0, skip_steps_ = 0, checkpoint_every_ = 1;
  bool eval_only_ = false;
  std::optional<Schedule> schedule_;
  std::unique_ptr<dist::GradReducer> reducer_;  // after group_: it holds a reference
  std::unique_ptr<models::ScopedBatchNormSync> sync_bn_;
  std::vector<torch::Tensor> buffers_;
  data::LoaderOptions train_opts_, val_opts_;
  std::unique_ptr<StepProfiler> profiler_;
  std::optional<std::pair<int, int64_t>> fault_;  // AMPTUNE_FAULT_OVERFLOW
  int64_t global_step_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  bool stepped_here_ = false;       // this run's first step taken: its start-up is recorded
  double comm_seconds_ = 0;         // this epoch's time in cross-rank communication
  std::string setup_error_;         // a rank's set-up failure, shared before anyone trains
  std::vector<std::string> shown_metrics_;  // in the log lines: the model's headline metrics
  records::RunWork work_;                     // record_work's (rank 0), for the summary line
};

}  // namespace amptune::train
