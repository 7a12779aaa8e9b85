#include "train/optimizer.h"

#include <cmath>
#include <string>

#include <torch/torch.h>

#include "core/error.h"
#include "core/settings.h"

namespace amptune::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimSettings& optim,
                                                        std::vector<torch::Tensor> params) {
  return make_optimizer(optim, std::move(params), optim.fused);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimSettings& optim,
                                                        std::vector<torch::Tensor> params,
                                                        bool fused) {
  const double lr = optim.lr;
  const double wd = optim.weight_decay;
  if (optim.name == OptimizerName::kAdam) {
    const auto& betas = optim.betas;
    if (betas.size() != 2) {
      throw ConfigError("optim.betas must hold two values, got " + std::to_string(betas.size()));
    }
    const auto options = torch::optim::AdamOptions(lr)
                             .betas({betas[0], betas[1]})
                             .eps(optim.eps)
                             .weight_decay(wd);
    if (fused) return std::make_unique<FusedAdam>(std::move(params), options);
    return std::make_unique<torch::optim::Adam>(std::move(params), options);
  }
  const double momentum = optim.momentum;
  const bool nesterov = optim.nesterov;
  if (nesterov && momentum <= 0) {
    throw ConfigError("optim.nesterov needs optim.momentum > 0 (got " + std::to_string(momentum) +
                      ")");
  }
  const auto options =
      torch::optim::SGDOptions(lr).momentum(momentum).nesterov(nesterov).weight_decay(wd);
  if (fused) return std::make_unique<FusedSGD>(std::move(params), options);
  return std::make_unique<torch::optim::SGD>(std::move(params), options);
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

bool is_fused(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const FusedSGD*>(&optimizer) != nullptr ||
         dynamic_cast<const FusedAdam*>(&optimizer) != nullptr;
}

namespace {

// The parameters of `group` that have a gradient, and those gradients (in group order).
void with_grad(torch::optim::OptimizerParamGroup& group, std::vector<torch::Tensor>& params,
               std::vector<torch::Tensor>& grads) {
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    if (p.grad().is_sparse()) {
      throw ConfigError(
          "the fused optimizer does not support sparse gradients; use the unfused one "
          "(optim.fused false) for this model");
    }
    params.push_back(p);
    grads.push_back(p.grad());
  }
}

// The gradient the update uses, grads + weight_decay * params, with the gradients themselves
// untouched: `grads` as they are when weight_decay is 0 and the caller does not write to the
// result (`writable` false), otherwise written into scratch tensors (by the out= form of the
// same kernel the unfused optimizers call, one pass, no allocation).
std::vector<torch::Tensor> decayed_grads(FusedScratch& scratch,
                                         const std::vector<torch::Tensor>& params,
                                         const std::vector<torch::Tensor>& grads,
                                         double weight_decay, bool writable) {
  if (weight_decay == 0 && !writable) return grads;
  std::vector<torch::Tensor> d = scratch.like(params, 0);
  for (size_t i = 0; i < d.size(); ++i) {
    if (weight_decay != 0) {
      at::add_out(d[i], grads[i], params[i], weight_decay);
    } else {
      d[i].copy_(grads[i]);
    }
  }
  return d;
}

// The loss of `closure` evaluated with gradients enabled (undefined without a closure), as the
// base classes do before their update.
torch::Tensor evaluate(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

}  // namespace

std::vector<torch::Tensor> FusedScratch::like(const std::vector<torch::Tensor>& params,
                                              int slot) {
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (const auto& p : params) {
    auto& t = tensors_[{p.unsafeGetTensorImpl(), slot}];
    if (!t.defined() || t.sizes() != p.sizes() || t.dtype() != p.dtype() ||
        t.device() != p.device()) {
      t = torch::empty_like(p, torch::MemoryFormat::Preserve);
    }
    out.push_back(t);
  }
  return out;
}

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  const torch::Tensor loss = evaluate(closure);
  using Map = std::remove_reference_t<decltype(state_)>;
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    const double weight_decay = options.weight_decay();
    const double momentum = options.momentum();
    const double dampening = options.dampening();
    std::vector<torch::Tensor> params, grads;
    with_grad(group, params, grads);
    if (params.empty()) continue;

    std::vector<torch::Tensor> d_p = decayed_grads(scratch_, params, grads, weight_decay,
                                                    /*writable=*/momentum != 0 && options.nesterov());
    if (momentum != 0) {
      std::vector<torch::Tensor> bufs(params.size());
      std::vector<torch::Tensor> old_bufs, old_d_p;  // parameters that had a buffer already
      for (size_t i = 0; i < params.size(); ++i) {
        const auto key = optimizer_state_key<Map>(params[i]);
        auto it = state_.find(key);
        if (it == state_.end()) {
          bufs[i] = torch::clone(d_p[i]).detach();
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(bufs[i]);
          state_[key] = std::move(state);
        } else {
          bufs[i] = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
          old_bufs.push_back(bufs[i]);
          old_d_p.push_back(d_p[i]);
        }
      }
      if (!old_bufs.empty()) {
        at::_foreach_mul_(old_bufs, momentum);
        at::_foreach_add_(old_bufs, old_d_p, 1 - dampening);
      }
      if (options.nesterov()) {
        at::_foreach_add_(d_p, bufs, momentum);
      } else {
        d_p = std::move(bufs);
      }
    }
    at::_foreach_add_(params, d_p, -1 * options.lr());
  }
  return loss;
}

torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  const torch::Tensor loss = evaluate(closure);
  using Map = std::remove_reference_t<decltype(state_)>;
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    const bool amsgrad = options.amsgrad();
    std::vector<torch::Tensor> params, grads;
    with_grad(group, params, grads);
    if (params.empty()) continue;

    const size_t n = params.size();
    std::vector<torch::Tensor> exp_avgs(n), exp_avg_sqs(n), max_exp_avg_sqs;
    std::vector<at::Scalar> bias_correction2_sqrt(n), neg_step_size(n);
    for (size_t i = 0; i < n; ++i) {
      const auto key = optimizer_state_key<Map>(params[i]);
      auto it = state_.find(key);
      if (it == state_.end()) {  // state initialisation as in torch::optim::Adam
        auto state = std::make_unique<torch::optim::AdamParamState>();
        state->step(0);
        state->exp_avg(torch::zeros_like(params[i], torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(params[i], torch::MemoryFormat::Preserve));
        if (amsgrad) {
          state->max_exp_avg_sq(torch::zeros_like(params[i], torch::MemoryFormat::Preserve));
        }
        state_[key] = std::move(state);
        it = state_.find(key);
      }
      auto& state = static_cast<torch::optim::AdamParamState&>(*it->second);
      state.step(state.step() + 1);
      const double bias_correction1 = 1 - std::pow(beta1, state.step());
      const double bias_correction2 = 1 - std::pow(beta2, state.step());
      bias_correction2_sqrt[i] = std::sqrt(bias_correction2);
      neg_step_size[i] = -(options.lr() / bias_correction1);
      exp_avgs[i] = state.exp_avg();
      exp_avg_sqs[i] = state.exp_avg_sq();
      if (amsgrad) {
        if (!state.max_exp_avg_sq().defined()) {  // amsgrad switched on after the state was made
          state.max_exp_avg_sq(torch::zeros_like(params[i], torch::MemoryFormat::Preserve));
        }
        max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      }
    }

    const std::vector<torch::Tensor> g =
        decayed_grads(scratch_, params, grads, options.weight_decay(), false);
    // Decay the first and second moment running averages.
    at::_foreach_mul_(exp_avgs, beta1);
    at::_foreach_add_(exp_avgs, g, 1 - beta1);
    at::_foreach_mul_(exp_avg_sqs, beta2);
    at::_foreach_addcmul_(exp_avg_sqs, g, g, 1 - beta2);
    if (amsgrad) at::_foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs);
    std::vector<torch::Tensor> denom = scratch_.like(params, 1);
    for (size_t i = 0; i < n; ++i) {  // out= into scratch: no allocation, one pass
      at::sqrt_out(denom[i], amsgrad ? max_exp_avg_sqs[i] : exp_avg_sqs[i]);
    }
    at::_foreach_div_(denom, at::ArrayRef<at::Scalar>(bias_correction2_sqrt));
    at::_foreach_add_(denom, options.eps());
    at::_foreach_addcdiv_(params, exp_avgs, denom, at::ArrayRef<at::Scalar>(neg_step_size));
  }
  return loss;
}

}  // namespace amptune::train
