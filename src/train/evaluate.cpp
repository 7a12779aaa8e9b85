// `amptune eval` / `amptune export`: rebuild a run's model as the trainer does, load a saved
// checkpoint (size, sha256 and config identity verified), then evaluate it or write its weights.
#include "train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "models/weights.h"
#include "train/checkpoint.h"
#include "train/plan.h"
#include "train/session.h"

namespace amptune::train {
namespace {

std::string saved_epochs(const std::vector<records::EpochRow>& rows) {
  std::string have;
  for (auto& r : rows) {
    if (r.checkpoint) have += (have.empty() ? "" : ", ") + std::to_string(r.epoch);
  }
  return have.empty() ? "none" : have;
}

// Why `now` (this evaluation's metrics) must not silently replace the metrics stored in `row`:
// they were computed on a set of another size (val_samples), or, when the stored row does not
// say, with another number of batches. Empty when storing is safe (nothing to replace, or the
// same set).
std::string other_set(const records::EpochRow& row, const std::map<std::string, double>& now,
                      bool same_batches) {
  bool replaces = false;
  for (const auto& [name, value] : now) {
    replaces = replaces || (name != "val_samples" && row.metrics.count(name) > 0);
  }
  if (!replaces) return "";
  const auto before = row.metrics.find("val_samples");
  const auto after = now.find("val_samples");
  if (before != row.metrics.end() && after != now.end()) {
    if (before->second == after->second) return "";
    return "its stored metrics were computed on " + std::to_string(std::llround(before->second)) +
           " samples, this evaluation on " + std::to_string(std::llround(after->second));
  }
  if (same_batches) return "";
  return "its stored metrics were computed on the batches training evaluated "
         "(schedule.eval_step_per_epoch), this evaluation on another number";
}

}  // namespace

Session load_session(const RunInput& run, const records::EpochRow& row,
                     const torch::Device& device, Precision& precision) {
  Session session = build_session(run.settings(), device, precision);
  try {
    load_checkpoint(row, session.task->module(), *session.optimizer, owner_hashes(run),
                    &precision.engine());
  } catch (const CheckpointError& e) {
    throw CheckpointError("epoch " + std::to_string(row.epoch) + " of run " + run.name + ": " +
                          e.what());
  }
  session.task->place(device);
  return session;
}

std::vector<int> checkpoint_epochs(const RunInput& run,
                                   const std::vector<records::EpochRow>& rows,
                                   const EvalOptions& options) {
  std::vector<int> epochs;
  for (auto& r : rows) {
    if (r.checkpoint) epochs.push_back(r.epoch);
  }
  if (epochs.empty()) refuse_evaluation_only(run, "to evaluate");
  if (options.epoch) {
    if (std::find(epochs.begin(), epochs.end(), *options.epoch) == epochs.end()) {
      throw CheckpointError("run " + run.name + " has no checkpoint of epoch " +
                            std::to_string(*options.epoch) + " (saved epochs: " +
                            saved_epochs(rows) + ")");
    }
    return {*options.epoch};
  }
  if (epochs.empty()) {
    throw CheckpointError("run " + run.name + " has no saved checkpoint (" +
                          std::to_string(rows.size()) +
                          " epochs recorded; retention or a failed run may have removed them)");
  }
  if (!options.all) return {epochs.back()};
  return epochs;
}

struct CheckpointEvaluator::State {
  State(const RunInput& r, const EvalOptions& o)
      : run(r),
        options(o),
        settings(run.settings()),
        device(pick_device(settings.device)),
        // this thread's amp policy while evaluating
        precision(amp::resolve_policy(settings.amp, device.is_cuda())),
        val_set(data::make_dataset(settings.data, settings.rootnet, settings.model,
                                   data::Split::kVal)) {
    // The set training evaluated: its first eval_step_per_epoch batches (0: it did not evaluate).
    const int64_t eval_steps = settings.schedule.eval_step_per_epoch;
    training_batches = eval_steps == 0 ? -1 : eval_steps;
    batches = options.max_batches.value_or(training_batches);
  }

  const RunInput run;
  const EvalOptions options;
  const Settings& settings;  // run.settings()
  const torch::Device device;
  Precision precision;
  std::shared_ptr<data::Dataset> val_set;
  int64_t training_batches = -1;
  int64_t batches = -1;
};

CheckpointEvaluator::CheckpointEvaluator(const RunInput& run, const EvalOptions& options) {
  torch::set_num_threads(resolve_threads(run.settings(), options.threads));
  state_ = std::make_unique<State>(run, options);
}

CheckpointEvaluator::~CheckpointEvaluator() = default;

std::string CheckpointEvaluator::describe() const { return state_->val_set->describe(); }

EpochEvaluation CheckpointEvaluator::evaluate(const records::EpochRow& row) {
  State& s = *state_;
  EpochEvaluation result;
  result.epoch = row.epoch;
  const auto start = std::chrono::steady_clock::now();
  try {
    if (!row.checkpoint) {
      throw CheckpointError("the checkpoint of epoch " + std::to_string(row.epoch) + " of run " +
                            s.run.name + " was deleted while evaluating");
    }
    Session session = load_session(s.run, row, s.device, s.precision);
    // The same loader as training-time evaluation (trainer.cpp).
    data::LoaderOptions opts = data::loader_options(s.settings.data, s.settings.seed,
                                                    data::Split::kVal,
                                                    static_cast<uint64_t>(row.epoch));
    opts.epoch = static_cast<uint64_t>(row.epoch);
    opts.max_batches = s.batches;
    opts.device = s.device;  // data.format synthetic: as training's (trainer.cpp place_batches)
    opts.memory_format = session.task->memory_format();
    data::Loader loader(s.val_set, opts);
    session.task->module().eval();
    {
      auto autocast = s.precision.autocast();
      const auto fp8 = s.precision.evaluation();  // FP8 scales in force, no amax recorded
      result.metrics = session.task->evaluate(loader, s.device);
    }
    result.not_recorded = other_set(row, result.metrics, s.batches == s.training_batches);
  } catch (const CheckpointError& e) {
    result.error = e.what();
    result.metrics.clear();
    log::warn(result.error);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

ExportResult export_checkpoint(const RunInput& run, const records::EpochRow& row,
                               const std::string& out) {
  if (!row.checkpoint) {
    throw CheckpointError("run " + run.name + " has no checkpoint of epoch " +
                          std::to_string(row.epoch));
  }
  const Settings& settings = run.settings();
  const torch::Device device = pick_device(settings.device);
  Precision precision(amp::resolve_policy(settings.amp, device.is_cuda()));
  Session session = load_session(run, row, device, precision);

  return write_weights(full_precision_state(session.task->module(), precision.engine()), out);
}

}  // namespace amptune::train
