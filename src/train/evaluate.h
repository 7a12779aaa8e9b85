// Evaluation and export of saved checkpoints (`amptune eval`, `amptune export`; the commands'
// database side is app/artifacts/checkpoint_commands.h). The model is built exactly as the trainer
// builds it (train/session.h: seed, task, amp policy, masters), so O2/O3 runs evaluate with their
// low-precision weights under the run's autocast / emulation policy, as training-time evaluation
// did. No torch in this header: the app layer includes it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "records/records.h"
#include "train/run_input.h"

namespace amptune::train {

struct EvalOptions {
  std::optional<int> epoch;   // evaluate this epoch's checkpoint
  bool all = false;           // every kept checkpoint (ignored when `epoch` is set)
                              // neither: the newest kept checkpoint
  int threads = 0;            // > 0 overrides the config's `threads`
  // Evaluation batches; -1 = the whole evaluation split. Unset: the set training evaluated
  // (schedule.eval_step_per_epoch; the whole split when training did not evaluate), so the
  // stored training-time metrics are reproduced.
  std::optional<int64_t> max_batches;
  // Store metrics although the epoch's metrics were computed on another set (another
  // val_samples count) at training time; without it such an evaluation is printed, not stored.
  bool replace = false;
};

struct EpochEvaluation {
  int epoch = 0;
  std::map<std::string, double> metrics;  // as Task::evaluate returned them (empty on error)
  std::string error;                      // why this checkpoint could not be evaluated
  // Evaluated, but not stored: the stored metrics of this epoch were computed on another set
  // (this says which sizes); EvalOptions::replace stores them anyway.
  std::string not_recorded;
  double seconds = 0;
};

// The checkpoints `options` selects among `rows` (run `run`'s epoch rows), ascending. Throws
// CheckpointError naming the run and its saved epochs when the asked epoch has no kept
// checkpoint, or the run has none at all.
std::vector<int> checkpoint_epochs(const RunInput& run,
                                   const std::vector<records::EpochRow>& rows,
                                   const EvalOptions& options);

// Evaluates checkpoints of one run on its configured evaluation split (data val split; RootNet:
// the test set): the data set, device and amp policy are set up once, each checkpoint loads into
// a model built as the trainer builds it. Reads only the checkpoint files.
class CheckpointEvaluator {
 public:
  CheckpointEvaluator(const RunInput& run, const EvalOptions& options);
  ~CheckpointEvaluator();
  CheckpointEvaluator(const CheckpointEvaluator&) = delete;
  CheckpointEvaluator& operator=(const CheckpointEvaluator&) = delete;

  // The evaluation split, as the data set describes itself ("... 1000 samples").
  std::string describe() const;
  // The metrics of `row`'s checkpoint (as Task::evaluate returns them) and, in not_recorded, why
  // they must not replace the metrics stored in `row` (computed on another set: val_samples says
  // how many samples a set held; "" when storing is safe). A checkpoint that is missing or
  // corrupt (CheckpointError naming file and epoch) is reported in `error`, nothing thrown.
  EpochEvaluation evaluate(const records::EpochRow& row);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct ExportResult {
  std::string path;
  int64_t tensors = 0;  // parameters + buffers written
  int64_t bytes = 0;    // size of the written file
};

// Writes the weights of `run`'s checkpoint in `row` (one of its epoch rows) to `out` as a plain
// {name: tensor} dict that Python's torch.load reads, with torchvision's state-dict names
// (models/weights.h): parameters at full precision (the fp32 masters of O2 runs; floating tensors
// as float32), BatchNorm buffers including num_batches_tracked (int64). Atomic (temp file +
// rename). Throws CheckpointError as load_checkpoint does (or when `row` has no checkpoint),
// ModelError when `out` cannot be written.
ExportResult export_checkpoint(const RunInput& run, const records::EpochRow& row,
                               const std::string& out);

}  // namespace amptune::train
