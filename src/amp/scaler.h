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

// How unscale_and_check treats the gradients of one device and dtype, each bitwise the
// reference g.mul_(1/scale) (C++'s mul_ with a double Scalar):
// kAmpOp - LibTorch's fused at::_amp_foreach_non_finite_check_and_unscale_ (one pass that reads,
//   checks and writes; on CUDA, and on the CPU where compat::kCpuAmpUnscale), for float
//   gradients when checking: it multiplies by float(1/scale), as mul_ does for float (for half
//   and bfloat16 it computes in float where LibTorch 2.11's CPU mul_ with a Scalar rounds the
//   factor to the tensor's type: tests/unit/amp/scaler_device_test.cpp found them apart); it
//   checks the value before the multiply, the same answer when 1/scale <= 1 (a finite value
//   times a factor <= 1 stays finite), so a scale below 1 takes another kernel;
// kForeach - at::_foreach_mul_ by the double 1/scale (skipped when it is 1; on the CPU a loop of
//   the same mul_), then isfinite(g).all() per gradient kept on the device;
// kPerTensor - half / bfloat16 on CUDA: g.mul_(1/scale) itself per gradient (whether CUDA's
//   multi-tensor kernel converts the factor as mul_ does is not established), flags as kForeach.
// None reads a value back; unscale_and_check reads the reduced flags once per device.
enum class UnscaleKernel { kAmpOp, kForeach, kPerTensor };
UnscaleKernel unscale_kernel(c10::DeviceType device, c10::ScalarType dtype, double inv_scale,
                             bool check);

class LossScaler {
 public:
  explicit LossScaler(const ScalerOptions& options);

  double scale() const { return state_.loss_scale; }
  bool dynamic() const { return options_.dynamic; }
  const ScalerState& state() const { return state_; }
  void load_state(const ScalerState& state) { state_ = state; }

  // Unscales `grads` in place (each x 1/scale as its own mul_(1/scale) would: the double
  // converted to the tensor's compute type; undefined tensors are skipped) and returns whether
  // any is inf/NaN. A static scaler does not look (returns false). The work stays on the
  // gradients' device: per (device, dtype) group one unscale_kernel pass over the whole list,
  // the groups' flags reduced there, and one read of the answer per device (one host
  // synchronisation per step on a GPU). combine: the grads of one dtype and device are first
  // concatenated into one flat buffer, unscaled and checked there and copied back. Values and
  // answer bitwise those of the per-tensor g.mul_(1/scale); isfinite(g).all() loop.
  bool unscale_and_check(const std::vector<torch::Tensor>& grads, bool combine) const;

  // apex update_scale after the overflow decision of one step; returns the change when the scale
  // changed. Returns whether the step must be skipped through `skip`.
  std::optional<ScaleChange> update(bool overflow, bool* skip = nullptr);

 private:
  ScalerOptions options_;
  ScalerState state_;
};

}  // namespace amptune::amp
