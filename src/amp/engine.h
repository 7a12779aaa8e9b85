// The trainer's side of mixed precision for one model: puts the weights where the policy wants
// them (O2/O3: on the low-precision grid or cast; BatchNorm fp32 under keep_batchnorm_fp32), owns
// the fp32 master weights and the loss scaler, and runs apex's step protocol:
//
//   zero_grad(); loss = forward (under AutocastGuard); scale_loss(loss).backward();
//   overflow = unscale_and_check();  if (!overflow) optimizer.step();  finish_step(overflow);
//
// finish_step copies masters back into the model (rounded onto the grid), keeps O3 weights and
// BatchNorm statistics on the grid, and updates the scaler. masters() and the scaler's state are
// what a checkpoint carries (train/checkpoint.h) so a resumed run continues bitwise.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "amp/emulate.h"
#include "amp/fp8.h"
#include "amp/policy.h"
#include "amp/scaler.h"

namespace amptune::amp {

ScalerOptions scaler_options(const Policy& policy);

// The torch.nn class of a TorchScript model's module: "BatchNorm2d" for a module named
// "__torch__.torch.nn.modules.batchnorm.BatchNorm2d" (or a mangled "...___torch_mangle_3.
// BatchNorm2d"; models/scripted.h names each mirror module by its class's qualified name); ""
// for any other module.
std::string torch_nn_class(const torch::nn::Module& module);

class Engine {
 public:
  // Prepares `model` (already on its device) for `policy`; `model` must outlive the engine.
  // Throws ConfigError for an amp.fp32_modules glob that matches no module.
  Engine(const Policy& policy, torch::nn::Module& model);

  // The model's modules by name, with the amp.fp32_modules marks (install with ScopedModules
  // around forward passes).
  const std::shared_ptr<const ModuleMap>& modules() const { return modules_; }
  // The FP8 scaling state (amp.fp8.enabled; install with ScopedFp8 around forward passes, end
  // its step after each optimizer step, skipped or not); null without FP8.
  const std::shared_ptr<Fp8State>& fp8() const { return fp8_; }

  const Policy& policy() const { return policy_; }
  LossScaler& scaler() { return scaler_; }
  const LossScaler& scaler() const { return scaler_; }

  // What the optimizer steps, in the model's parameter order: the fp32 master of each
  // low-precision parameter under master_weights, the model parameter otherwise.
  std::vector<torch::Tensor> optimizer_params() const;
  // Clears the gradients of the model parameters and of the masters.
  void zero_grad();
  // loss x scale (a no-op multiply is skipped for scale 1).
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  // After backward: low-precision gradients rounded onto the grid, copied into the masters'
  // gradients, unscaled and (dynamic scale) checked. Returns true on inf/NaN (skip the step).
  bool unscale_and_check();
  // After optimizer.step() (or its skip): masters -> model, grid upkeep, scaler update. Returns
  // the scale change, if any.
  std::optional<ScaleChange> finish_step(bool overflow);

  // The parameters held in low precision (on the grid / cast), in model order.
  const std::vector<bool>& low_precision_mask() const { return low_; }
  // Every tensor held in low precision: those parameters and the buffers cast with them (a
  // graph's ops read them as low-precision inputs, amp/op_emulation.h ScopedLowStorage).
  std::vector<torch::Tensor> low_precision_tensors() const;
  const std::vector<torch::Tensor>& masters() const { return masters_; }  // undefined: none

  // Whether a checkpoint must carry amp state to restore this engine: it has masters or scales
  // dynamically (an fp32 run's checkpoint without amp state restores a static O0/O1 engine).
  bool has_state() const;
  // Restores a checkpoint's amp state: the scaler's, and `masters` (one per parameter, defined
  // exactly where masters() is, of the same shape) copied into the masters. Throws
  // CheckpointError naming `origin` when the masters do not match (another amp.opt_level or
  // amp.master_weights); nothing is changed then.
  void load_state(const ScalerState& scaler, const std::vector<torch::Tensor>& masters,
                  const std::string& origin);

 private:
  // Rounds the low-precision parameters and buffers onto the grid; `masters_copied`: those with
  // a master were just set from it, rounded, and are left as they are.
  void keep_on_grid(bool masters_copied);

  Policy policy_;
  torch::nn::Module& model_;
  std::shared_ptr<const ModuleMap> modules_;
  std::shared_ptr<Fp8State> fp8_;
  LossScaler scaler_;
  std::vector<torch::Tensor> params_;   // model parameters in order
  std::vector<bool> low_;               // params_[i] is low precision
  std::vector<torch::Tensor> masters_;  // fp32 master of params_[i] (undefined when none)
  std::vector<torch::Tensor> low_buffers_;  // BatchNorm statistics held in low precision
};

}  // namespace amptune::amp
