// Where a run's training starts: its newest valid checkpoint, or a fork's parent's (the
// restore phase of train/phases.h).
#include <algorithm>
#include <cmath>
#include <mutex>

#include <torch/torch.h>

#include "amp/policy.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/settings.h"
#include "train/checkpoint.h"
#include "train/phases.h"
#include "train/precision.h"
#include "train/session.h"

namespace amptune::train {
namespace {

// The inf/NaN losses in a row at the end of epoch `row` of run `run_name` (the metric
// nonfinite_streak, train/divergence.h); 0 for an epoch recorded before the metric existed.
int64_t recorded_streak(const records::EpochRow& row, const std::string& run_name) {
  const auto it = row.metrics.find("nonfinite_streak");
  if (it == row.metrics.end()) return 0;
  const double v = it->second;
  if (!(v >= 0 && v <= static_cast<double>(row.global_step) && v == std::floor(v))) {
    throw StoreError("run " + run_name + " epoch " + std::to_string(row.epoch) +
                     ": metric nonfinite_streak is " + std::to_string(v) +
                     "; expected a whole number from 0 to the epoch's global_step (" +
                     std::to_string(row.global_step) + "), the inf/NaN losses in a row at the "
                     "end of the epoch; continue from another epoch (amptune resume " + run_name +
                     " --from-epoch N, amptune fork " + run_name + " --epoch N)");
  }
  return static_cast<int64_t>(v);
}

// A fork's start (docs/DATABASE.md "Forks"): the parent's checkpoint of parent_epoch is loaded
// into a session built from the PARENT's config (so the file verifies and O2 masters load), then
// its full-precision weights (fp32 masters where the parent had them) and buffers seed a session
// of the fork's config. Unless reset_optimizer, the optimizer state carries over, and the loss
// scaler's state when both runs scale dynamically, and the FP8 amax histories when the fork
// runs FP8 (empty after a parent without it); the RNG continues from the parent's.
Start start_from_parent(Recorder& recorder, const RunInput& run, const torch::Device& device,
                        Session& session) {
  const records::ForkOrigin& fork = *run.fork;
  auto parent = recorder.find_run(fork.parent_run_id);
  if (!parent) throw CheckpointError("fork " + run.name + ": its parent run " +
                                     std::to_string(fork.parent_run_id) + " is gone");
  std::optional<records::EpochRow> row;
  for (auto& r : recorder.epochs_of(parent->id)) {
    if (r.epoch == fork.parent_epoch) row = r;
  }
  if (!row || !row->checkpoint) {
    throw CheckpointError("fork " + run.name + " starts from the checkpoint of epoch " +
                          std::to_string(fork.parent_epoch) + " of run " + parent->name +
                          ", which " + (row ? "was deleted (retention)" : "is not recorded yet") +
                          "; train the parent that far (amptune resume " + parent->name + ")");
  }
  const Settings& parent_settings = parent->settings();
  std::map<std::string, torch::Tensor> values;
  torch::Tensor rng;
  std::optional<amp::ScalerState> scaler;
  std::unique_ptr<torch::optim::Optimizer> parent_optimizer;
  std::map<std::string, torch::Tensor> fp8;  // the parent's FP8 scaling state (none: no FP8)
  {
    // This thread's amp policy until the end.
    Precision parent_precision(amp::resolve_policy(parent_settings.amp, device.is_cuda()));
    Session ps = build_session(parent_settings, device, parent_precision);
    load_checkpoint(*row, ps.task->module(), *ps.optimizer, owner_hashes(*parent),
                    &parent_precision.engine());
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    values = full_precision_state(ps.task->module(), parent_precision.engine());
    if (!fork.reset_optimizer && parent_precision.policy().dynamic_scale) {
      scaler = parent_precision.engine().scaler().state();
    }
    if (!fork.reset_optimizer) parent_optimizer = std::move(ps.optimizer);
    if (!fork.reset_optimizer && parent_precision.engine().fp8()) {
      fp8 = parent_precision.engine().fp8()->to_tensors();
    }
  }
  const std::string origin = "checkpoint " + row->checkpoint->path + " of run " + parent->name;
  session = build_session(run.settings(), device, *session.precision, &values, origin);
  Start start;
  start.epoch = fork.parent_epoch;
  start.global_step = row->global_step;
  start.nonfinite_streak = recorded_streak(*row, parent->name);  // the loss curve goes on
  if (parent_optimizer) copy_optimizer_state(*parent_optimizer, *session.optimizer);
  if (scaler && session.precision->policy().dynamic_scale) {
    session.precision->engine().scaler().load_state(*scaler);
    start.fresh_scaler = false;
  }  // otherwise a fresh scaler: its initial scale is recorded at the fork's first step
  // The amax histories go on under the fork's FP8 recipe (empty after a parent without FP8).
  if (const auto& state = session.precision->engine().fp8()) state->load(fp8, origin);
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
  log::info("fork " + run.name + ": starting after epoch " + std::to_string(start.epoch) +
            " of " + parent->name + (fork.reset_optimizer ? " (weights only)" : "") +
            (fork.changes.empty() ? "" : "; changed " + fork.changes));
  return start;
}

}  // namespace

Start restore_run(Recorder& recorder, const RunInput& run, const torch::Device& device,
                  const RunOptions& options, Session& session) {
  const Settings& settings = run.settings();
  std::vector<records::EpochRow> rows = recorder.epochs();
  auto from_scratch = [&]() {
    if (run.fork) return start_from_parent(recorder, run, device, session);
    return Start{};
  };
  // An evaluation-only run saved no checkpoint: running it again evaluates again.
  if (options.fresh || rows.empty() || settings.schedule.epochs == 0) {
    if (!rows.empty()) recorder.forget_after(-1);
    return from_scratch();
  }
  if (options.from_epoch) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const auto& r) { return r.epoch == *options.from_epoch; });
    if (it == rows.end() || !it->checkpoint) {
      std::string have;
      for (auto& r : rows) {
        if (r.checkpoint) have += (have.empty() ? "" : ", ") + std::to_string(r.epoch);
      }
      throw CheckpointError("run " + run.name + " has no checkpoint of epoch " +
                            std::to_string(*options.from_epoch) + " (saved epochs: " +
                            (have.empty() ? "none" : have) + ")");
    }
  }
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    if (!it->checkpoint) continue;
    if (options.from_epoch && it->epoch > *options.from_epoch) continue;
    const int64_t streak = recorded_streak(*it, run.name);  // before anything is forgotten
    try {
      auto meta = load_checkpoint(*it, session.task->module(), *session.optimizer,
                                  owner_hashes(run), &session.precision->engine());
      session.task->place(device);
      recorder.forget_after(it->epoch);
      log::info("run " + run.name + ": continuing after epoch " + std::to_string(meta.epoch) +
                " (" + it->checkpoint->path + ")");
      return Start{meta.epoch, meta.global_step, false, false, streak};
    } catch (const LegacyCheckpointError&) {
      throw;  // not damage: the user's decision (checkpoint.h), nothing is deleted
    } catch (const CheckpointError& e) {
      if (options.from_epoch) throw;
      log::warn(std::string(e.what()) + "; falling back to the previous checkpoint");
      session = build_session(settings, device, *session.precision);  // undo a half-done load
    }
  }
  log::warn("run " + run.name + ": no valid checkpoint left, starting again from " +
            (run.fork ? "its parent's checkpoint" : "epoch 0"));
  recorder.forget_after(-1);
  return from_scratch();
}


}  // namespace amptune::train
