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

std::string saved_epochs(const std::vector<store::EpochRow>& rows) {
  std::string have;
  for (auto& r : rows) {
    if (r.checkpoint) have += (have.empty() ? "" : ", ") + std::to_string(r.epoch);
  }
  return have.empty() ? "none" : have;
}

const store::EpochRow& row_of(const std::vector<store::EpochRow>& rows, int epoch) {
  for (auto& r : rows) {
    if (r.epoch == epoch) return r;
  }
  throw CheckpointError("internal: epoch " + std::to_string(epoch) + " vanished");
}

// Why `now` (this evaluation's metrics) must not silently replace the metrics stored in `row`:
// they were computed on a set of another size (val_samples), or, when the stored row does not
// say, with another number of batches. Empty when storing is safe (nothing to replace, or the
// same set).
std::string other_set(const store::EpochRow& row, const std::map<std::string, double>& now,
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

Session load_session(const Settings& settings, const store::RunRow& run,
                     const store::EpochRow& row, const torch::Device& device,
                     Precision& precision) {
  Session session = build_session(settings, device, precision);
  try {
    load_checkpoint(*row.checkpoint, session.task->module(), *session.optimizer, owner_hashes(run),
                    &precision.engine());
  } catch (const CheckpointError& e) {
    throw CheckpointError("epoch " + std::to_string(row.epoch) + " of run " + run.name + ": " +
                          e.what());
  }
  session.task->place(device);
  return session;
}

std::vector<int> checkpoint_epochs(const store::Store& store, const store::RunRow& run,
                                   const EvalOptions& options) {
  const auto rows = store.epochs(run.id);
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

std::vector<EpochEvaluation> evaluate_checkpoints(store::Store& store, const store::RunRow& run,
                                                  const EvalOptions& options) {
  const std::vector<int> epochs = checkpoint_epochs(store, run, options);
  const Settings settings =
      Settings::from(Config::from_json(run.config_json, "run " + run.name));
  torch::set_num_threads(resolve_threads(settings, options.threads));
  const torch::Device device = pick_device(settings.device);
  // this thread's amp policy while evaluating
  Precision precision(amp::resolve_policy(settings.amp, device.is_cuda()));
  auto val_set = data::make_dataset(settings.data, settings.rootnet, settings.model.in_channels,
                                    data::Split::kVal);
  log::info("run " + run.name + ": evaluating " + std::to_string(epochs.size()) +
            " checkpoint(s) on " + val_set->describe());

  // The set training evaluated: its first eval_step_per_epoch batches (0: it did not evaluate).
  const int64_t eval_steps = settings.schedule.eval_step_per_epoch;
  const int64_t training_batches = eval_steps == 0 ? -1 : eval_steps;
  const int64_t batches = options.max_batches.value_or(training_batches);

  std::vector<EpochEvaluation> results;
  for (const int epoch : epochs) {
    EpochEvaluation result;
    result.epoch = epoch;
    const auto start = std::chrono::steady_clock::now();
    try {
      const auto rows = store.epochs(run.id);  // re-read: retention may have run meanwhile
      const store::EpochRow& row = row_of(rows, epoch);
      if (!row.checkpoint) {
        throw CheckpointError("the checkpoint of epoch " + std::to_string(epoch) + " of run " +
                              run.name + " was deleted while evaluating");
      }
      Session session = load_session(settings, run, row, device, precision);
      // The same loader as training-time evaluation (trainer.cpp).
      data::LoaderOptions opts = data::loader_options(settings.data, settings.seed,
                                                      data::Split::kVal,
                                                      static_cast<uint64_t>(epoch));
      opts.epoch = static_cast<uint64_t>(epoch);
      opts.max_batches = batches;
      data::Loader loader(val_set, opts);
      session.task->module().eval();
      {
        auto autocast = precision.autocast();
        result.metrics = session.task->evaluate(loader, device);
      }
      result.not_recorded = other_set(row, result.metrics, batches == training_batches);
      if (result.not_recorded.empty() || options.replace) {
        result.not_recorded.clear();
        store.record_metrics(run.id, epoch, result.metrics);
      }
    } catch (const CheckpointError& e) {
      result.error = e.what();
      result.metrics.clear();
      log::warn(result.error);
    }
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    results.push_back(std::move(result));
  }
  return results;
}

ExportResult export_checkpoint(store::Store& store, const store::RunRow& run, int epoch,
                               const std::string& out) {
  EvalOptions select;
  select.epoch = epoch;
  checkpoint_epochs(store, run, select);  // throws naming the saved epochs
  const auto rows = store.epochs(run.id);
  const Settings settings =
      Settings::from(Config::from_json(run.config_json, "run " + run.name));
  const torch::Device device = pick_device(settings.device);
  Precision precision(amp::resolve_policy(settings.amp, device.is_cuda()));
  Session session = load_session(settings, run, row_of(rows, epoch), device, precision);

  const auto values = full_precision_state(session.task->module(), precision.engine());
  models::save_state_dict(values, out);
  ExportResult result;
  result.path = out;
  result.tensors = static_cast<int64_t>(values.size());
  result.bytes = static_cast<int64_t>(std::filesystem::file_size(out));
  return result;
}

}  // namespace amptune::train
