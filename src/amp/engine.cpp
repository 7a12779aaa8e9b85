#include "amp/engine.h"

#include <algorithm>
#include <set>

#include <torch/torch.h>

#include "amp/emulate.h"
#include "amp/fp8_gemm.h"
#include "compat/torch_compat.h"
#include "core/error.h"

namespace amptune::amp {
namespace {

// A BatchNorm module: LibTorch's, or a TorchScript model's torch.nn one.
bool is_batchnorm(torch::nn::Module& m) {
  if (m.as<torch::nn::BatchNorm1d>() || m.as<torch::nn::BatchNorm2d>() ||
      m.as<torch::nn::BatchNorm3d>()) {
    return true;
  }
  const std::string cls = torch_nn_class(m);
  return cls == "BatchNorm1d" || cls == "BatchNorm2d" || cls == "BatchNorm3d" ||
         cls == "SyncBatchNorm";
}

}  // namespace

std::string torch_nn_class(const torch::nn::Module& module) {
  const std::string& name = module.name();
  if (name.find("torch.nn.modules.") == std::string::npos) return "";
  return name.substr(name.rfind('.') + 1);
}

ScalerOptions scaler_options(const Policy& policy) {
  ScalerOptions o;
  o.dynamic = policy.dynamic_scale;
  o.init_scale = policy.dynamic_scale ? policy.init_scale : policy.static_scale;
  o.growth_interval = policy.growth_interval;
  o.min_scale = policy.min_scale;
  o.max_scale = policy.max_scale;
  return o;
}

Engine::Engine(const Policy& policy, torch::nn::Module& model)
    : policy_(policy),
      model_(model),
      modules_(std::make_shared<const ModuleMap>(model, policy.fp32_modules,
                                                 policy.fp8.skip_modules)),
      fp8_(policy.fp8.enabled ? std::make_shared<Fp8State>(fp8_scaling(policy.fp8)) : nullptr),
      scaler_(scaler_options(policy)) {
  torch::NoGradGuard no_grad;
  // BatchNorm tensors that stay fp32 under keep_batchnorm_fp32.
  std::set<const void*> bn_params, bn_buffers;
  auto note_batchnorm = [&](torch::nn::Module& m) {
    if (!is_batchnorm(m)) return;
    for (auto& p : m.parameters(false)) bn_params.insert(p.unsafeGetTensorImpl());
    for (auto& b : m.buffers(false)) bn_buffers.insert(b.unsafeGetTensorImpl());
  };
  note_batchnorm(model);  // (modules(true) needs a shared_ptr-held model)
  for (auto& m : model.modules(/*include_self=*/false)) note_batchnorm(*m);
  params_ = model.parameters(/*recurse=*/true);
  if (policy.fp8.enabled && policy.fp8.scaled_mm) {
    check_scaled_mm(params_.empty() ? torch::Device(torch::kCPU) : params_.front().device());
  }
  low_.assign(params_.size(), false);
  masters_.assign(params_.size(), torch::Tensor());
  if (!policy.cast_model) return;

  const bool native = policy.backend == Backend::kNative;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool bn = bn_params.count(params_[i].unsafeGetTensorImpl()) > 0;
    low_[i] = !(bn && policy.keep_batchnorm_fp32) && !modules_->fp32_tensor(params_[i]) &&
              params_[i].is_floating_point();
  }
  for (auto& b : model.buffers(true)) {
    if (!b.is_floating_point() || modules_->fp32_tensor(b)) continue;
    if (bn_buffers.count(b.unsafeGetTensorImpl()) && policy.keep_batchnorm_fp32) continue;
    low_buffers_.push_back(b);
  }
  if (native) {
    // Real low-precision storage: cast in place so the tensors the module holds stay the same.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (low_[i]) params_[i].set_data(params_[i].data().to(scalar_type(policy.dtype)));
    }
    for (auto& b : low_buffers_) b.set_data(b.data().to(scalar_type(policy.dtype)));
  } else {
    keep_on_grid(/*masters_copied=*/false);
  }
  if (policy.master_weights) {
    // apex: masters are fp32 copies of the (already cast) model weights.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!low_[i]) continue;
      masters_[i] = params_[i].detach().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
      masters_[i].set_requires_grad(true);
    }
  }
}

void Engine::keep_on_grid(bool masters_copied) {
  if (!policy_.cast_model || policy_.backend != Backend::kEmulate) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    // A parameter just copied from its rounded master is on the grid (rounding is idempotent).
    if (masters_copied && masters_[i].defined()) continue;
    if (low_[i]) params_[i].copy_(round_to_grid(params_[i], policy_.dtype));
  }
  for (auto& b : low_buffers_) b.copy_(round_to_grid(b, policy_.dtype));
}

std::vector<torch::Tensor> Engine::optimizer_params() const {
  std::vector<torch::Tensor> out;
  out.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back(masters_[i].defined() ? masters_[i] : params_[i]);
  }
  return out;
}

std::vector<torch::Tensor> Engine::low_precision_tensors() const {
  std::vector<torch::Tensor> out = low_buffers_;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (low_[i]) out.push_back(params_[i]);
  }
  return out;
}

void Engine::zero_grad() {
  std::vector<torch::Tensor> grads;
  for (auto* list : {&params_, &masters_}) {
    for (auto& p : *list) {
      if (!p.defined() || !p.grad().defined()) continue;
      p.mutable_grad().detach_();
      grads.push_back(p.grad());
    }
  }
  if (!grads.empty()) at::_foreach_zero_(grads);  // one multi-tensor pass on CUDA
}

torch::Tensor Engine::scale_loss(const torch::Tensor& loss) const {
  const double s = scaler_.scale();
  return s == 1.0 ? loss : loss.to(torch::kFloat) * s;
}

bool Engine::unscale_and_check() {
  torch::NoGradGuard no_grad;
  const bool emulate = policy_.cast_model && policy_.backend == Backend::kEmulate;
  std::vector<torch::Tensor> grads;
  grads.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    // A low-precision parameter's gradient is low precision (those of conv/linear weights
    // already are; BatchNorm's under O3 are rounded here).
    if (emulate && low_[i]) g.copy_(round_to_grid(g, policy_.dtype));
    if (masters_[i].defined()) {
      // Into the master's gradient of the last step where it has one (the same values as a
      // fresh conversion; no allocation per step).
      torch::Tensor& master_grad = masters_[i].mutable_grad();
      if (master_grad.defined() && master_grad.sizes() == g.sizes()) {
        master_grad.copy_(g);
      } else {
        master_grad = g.to(torch::kFloat, false, /*copy=*/true);
      }
      grads.push_back(master_grad);
    } else {
      grads.push_back(g);
    }
  }
  return scaler_.unscale_and_check(grads, policy_.combine_grad);
}

std::optional<ScaleChange> Engine::finish_step(bool overflow) {
  torch::NoGradGuard no_grad;
  bool skip = false;
  auto change = scaler_.update(overflow, &skip);
  if (!skip) {
    std::vector<torch::Tensor> low, high;  // native: model parameters and their masters
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!masters_[i].defined()) continue;
      if (policy_.backend == Backend::kEmulate) {
        params_[i].copy_(round_to_grid(masters_[i], policy_.dtype));
      } else {
        low.push_back(params_[i]);
        high.push_back(masters_[i]);
      }
    }
    compat::foreach_copy(low, high);  // converts to the low-precision type, as copy_ does
  }
  // O3 weights stepped in fp32 storage; BatchNorm statistics updated in forward.
  keep_on_grid(/*masters_copied=*/!skip);
  return change;
}

bool Engine::has_state() const {
  return scaler_.dynamic() ||
         std::any_of(masters_.begin(), masters_.end(), [](const auto& m) { return m.defined(); });
}

void Engine::load_state(const ScalerState& scaler, const std::vector<torch::Tensor>& masters,
                        const std::string& origin) {
  const auto count = [](const std::vector<torch::Tensor>& v) {
    return std::count_if(v.begin(), v.end(), [](const auto& t) { return t.defined(); });
  };
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (!masters_[i].defined()) continue;
    if (i >= masters.size() || !masters[i].defined() || masters[i].sizes() != masters_[i].sizes()) {
      throw CheckpointError("checkpoint " + origin + " lacks the fp32 master of parameter " +
                            std::to_string(i) + " (saved with another amp.opt_level?)");
    }
  }
  if (count(masters) != count(masters_)) {
    throw CheckpointError("checkpoint " + origin + " holds " + std::to_string(count(masters)) +
                          " master weights, this run has " + std::to_string(count(masters_)) +
                          " (another amp.opt_level or amp.master_weights?)");
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].defined()) masters_[i].copy_(masters[i]);
  }
  scaler_.load_state(scaler);
}

}  // namespace amptune::amp
