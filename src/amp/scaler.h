// apex's LossScaler (apex/amp/scaler.py) with its exact semantics.
//
// Dynamic: starts at init_scale (min(2^16, max_scale)); after each backward the gradients are
// unscaled (x 1/scale) and checked for inf/NaN. Overflow: the step is skipped, scale =
// max(min_scale, scale / 2) (no lower bound when min_scale is 0), clean-step counter = 0.
// Otherwise the counter grows and at growth_interval: scale = min(max_scale, scale * 2),
// counter = 0. Static: never checks, never skips (an inf reaches the weights); the counter still
// counts, as in apex. State saved with checkpoints: {loss_scale, unskipped}.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/words.h"  // ScaleReason

namespace amptune::amp {

struct ScalerOptions {
  bool dynamic = true;
  double init_scale = 65536.0;  // dynamic: min(this, max_scale); static: the scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0;  // 0 = none
  double max_scale = 16777216.0;
};

struct ScalerState {
  double loss_scale = 1.0;
  int64_t unskipped = 0;
};

// A change of the scale, for the loss_scale_events table.
struct ScaleChange {
  double scale = 0;    // the new scale
  ScaleReason reason = ScaleReason::kOverflow;  // kOverflow | kGrowth
};

class LossScaler {
 public:
  explicit LossScaler(const ScalerOptions& options);

  double scale() const { return state_.loss_scale; }
  bool dynamic() const { return options_.dynamic; }
  const ScalerState& state() const { return state_; }
  void load_state(const ScalerState& state) { state_ = state; }

  // Unscales `grads` in place (x 1/scale in fp32; undefined tensors are skipped) and returns
  // whether any is inf/NaN. A static scaler does not look (returns false). combine: the grads of
  // one dtype are concatenated into one flat buffer, unscaled and checked there with one op each
  // and copied back: bitwise the same values and answer as per-tensor.
  bool unscale_and_check(const std::vector<torch::Tensor>& grads, bool combine) const;

  // apex update_scale after the overflow decision of one step; returns the change when the scale
  // changed. Returns whether the step must be skipped through `skip`.
  std::optional<ScaleChange> update(bool overflow, bool* skip = nullptr);

 private:
  ScalerOptions options_;
  ScalerState state_;
};

}  // namespace amptune::amp
