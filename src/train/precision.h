// Mixed precision inside the training loop (docs/AMP.md): the run's amp policy, its Engine
// (masters, loss scaler), apex's step protocol and the per-epoch loss-scale record. Included by
// trainer.cpp only (header-only, so it adds no translation unit).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "amp/fp8_gemm.h"
#include "amp/op_emulation.h"
#include "amp/policy.h"
#include "records/records.h"
#include "train/divergence.h"

namespace amptune::train {

class Precision {
 public:
  // `policy`: the run's amp.* resolved for its device (amp::resolve_policy), once per run; it is
  // this thread's policy (amp::ScopedPolicy) while the Precision lives.
  explicit Precision(amp::Policy policy) : policy_(std::move(policy)), scope_(policy_) {}

  const amp::Policy& policy() const { return policy_; }
  amp::Engine& engine() { return *engine_; }

  // Prepares the model (on its device) and returns what the optimizer must step. Called again
  // when a session is rebuilt.
  std::vector<torch::Tensor> attach(torch::nn::Module& model) {
    fp8_scope_.reset();  // scopes end in the reverse order of their start
    low_storage_scope_.reset();
    modules_scope_.reset();
    engine_ = std::make_unique<amp::Engine>(policy_, model);
    // The module names and amp.fp32_modules marks for this thread's forward passes, and the
    // tensors held in low precision (read by a TorchScript model's ops, amp/op_emulation.h).
    modules_scope_ = std::make_unique<amp::ScopedModules>(engine_->modules());
    low_storage_scope_ = std::make_unique<amp::ScopedLowStorage>(engine_->low_precision_tensors());
    // The FP8 scaling state (amp.fp8.enabled) for this thread's forward passes.
    if (engine_->fp8()) fp8_scope_ = std::make_unique<amp::ScopedFp8>(engine_->fp8());
    return engine_->optimizer_params();
  }

  // Around an evaluation's forward passes: FP8 quantises with the scales in force and records
  // no amax (null without FP8).
  std::unique_ptr<amp::ScopedFp8> evaluation() const {
    if (!engine_->fp8()) return nullptr;
    return std::make_unique<amp::ScopedFp8>(engine_->fp8(), /*record=*/false);
  }

  // Native autocast around a forward pass (a no-op unless O1 native); clears the cast cache.
  amp::AutocastGuard autocast() const { return amp::AutocastGuard(policy_); }

  void zero_grad() { engine_->zero_grad(); }

  // Every training step's loss, in step order (DivergenceWatch, train/divergence.h): an inf/NaN
  // loss with a dynamic scale is one more overflow (the backward gives non-finite gradients and
  // the step is skipped), with a static scale the run diverged. Returns the divergence message,
  // or "" to carry on.
  std::string check_loss(double loss_value) {
    return watch_.observe(loss_value, !policy_.dynamic_scale);
  }
  // The run continues a streak of `streak` inf/NaN losses (the nonfinite_streak of the epoch it
  // resumes or forks from); before its first step.
  void continue_streak(int64_t streak) { watch_ = DivergenceWatch(streak); }

  // scale -> backward -> `after_backward` (data-parallel training averages the gradients over
  // the ranks there) -> (masters) unscale/check. Returns whether this process found inf/NaN.
  bool backward(const torch::Tensor& loss, const std::function<void()>& after_backward = {}) {
    const double used = engine_->scaler().scale();
    scale_min_ = std::min(scale_min_, used);
    scale_max_ = std::max(scale_max_, used);
    engine_->scale_loss(loss).backward();
    if (after_backward) after_backward();
    return engine_->unscale_and_check();
  }

  // Step or skip (`overflow`: what every rank agreed) -> copy back -> scaler update -> the FP8
  // amaxes of the step enter their histories (skipped or not, as Transformer Engine's), after
  // `reduce_fp8` (data-parallel training takes every rank's maximum there).
  // `global_step` is the count of steps after this one. Returns whether the optimizer stepped.
  bool step(bool overflow, torch::optim::Optimizer& optimizer, int64_t global_step,
            const std::function<void(amp::Fp8State&)>& reduce_fp8 = {}) {
    if (!overflow) optimizer.step();
    auto change = engine_->finish_step(overflow);
    if (const auto& fp8 = engine_->fp8()) {
      if (reduce_fp8) reduce_fp8(*fp8);
      fp8->end_step();
    }
    const bool skipped = overflow && policy_.dynamic_scale;
    overflow_steps_ += overflow;
    skipped_steps_ += skipped;
    if (change) events_.push_back({global_step, change->scale, change->reason});
    return !skipped;
  }

  // Call before an epoch's first step; `fresh` = training starts at step 0 (records the
  // initial scale).
  void begin_epoch(bool fresh, int64_t global_step) {
    events_.clear();
    overflow_steps_ = skipped_steps_ = 0;
    scale_min_ = scale_max_ = engine_->scaler().scale();
    if (fresh) events_.push_back({global_step, engine_->scaler().scale(), ScaleReason::kInit});
  }

  // Adds loss_scale (end), loss_scale_min/max, skipped_steps, overflow_steps (dynamic only: a
  // static scale never checks), nonfinite_streak (the inf/NaN losses in a row at the epoch's end,
  // counting earlier epochs and the run it continues) and the scale events to the epoch's record.
  void end_epoch(records::EpochRecord& record) const {
    const double end = engine_->scaler().scale();
    record.metrics["loss_scale"] = end;
    record.metrics["loss_scale_min"] = std::min(scale_min_, end);
    record.metrics["loss_scale_max"] = std::max(scale_max_, end);
    record.metrics["skipped_steps"] = static_cast<double>(skipped_steps_);
    if (policy_.dynamic_scale) record.metrics["overflow_steps"] = static_cast<double>(overflow_steps_);
    record.metrics["nonfinite_streak"] = static_cast<double>(watch_.streak());
    record.scale_events = events_;
  }

  int64_t skipped_steps() const { return skipped_steps_; }

 private:
  amp::Policy policy_;
  amp::ScopedPolicy scope_;  // this thread's policy while the run trains
  std::unique_ptr<amp::Engine> engine_;
  std::unique_ptr<amp::ScopedModules> modules_scope_;
  std::unique_ptr<amp::ScopedLowStorage> low_storage_scope_;
  std::unique_ptr<amp::ScopedFp8> fp8_scope_;
  std::vector<records::ScaleEvent> events_;
  DivergenceWatch watch_;
  int64_t overflow_steps_ = 0, skipped_steps_ = 0;
  double scale_min_ = 0, scale_max_ = 0;
};

}  // namespace amptune::train
