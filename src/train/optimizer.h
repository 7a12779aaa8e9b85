// Optimizers from the config (optim.*).
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

namespace amptune {
struct OptimSettings;
}

namespace amptune::train {

// SGD (momentum, nesterov, weight decay) or Adam (betas, eps, weight decay) over `params`.
// Throws ConfigError for inconsistent settings (nesterov without momentum, betas not a pair).
// The two-argument form takes optim.fused; `fused` true builds FusedSGD / FusedAdam with the
// same options, false the torch::optim classes.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimSettings& optim,
                                                        std::vector<torch::Tensor> params);
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimSettings& optim,
                                                        std::vector<torch::Tensor> params,
                                                        bool fused);
// Sets the learning rate of every parameter group.
void set_lr(torch::optim::Optimizer& optimizer, double lr);
// True for FusedSGD and FusedAdam.
bool is_fused(const torch::optim::Optimizer& optimizer);

// Tensors that the fused steps reuse from step to step for their list-wide temporaries, one per
// parameter and slot (same shape, dtype and device; contents undefined until written). Holding
// freshly allocated temporaries for a whole list at once makes the CPU allocator hand the memory
// back and page-fault it in again every step, which made a fused SGD step 5-15x slower than the
// unfused one on the quickstart model. Costs one (SGD) or two (Adam) parameter-sized buffers.
class FusedScratch {
 public:
  std::vector<torch::Tensor> like(const std::vector<torch::Tensor>& params, int slot);

 private:
  std::map<std::pair<const void*, int>, torch::Tensor> tensors_;
};

// Multi-tensor SGD: the same optimizer as torch::optim::SGD (param groups, SGDOptions including
// dampening, SGDParamState with the momentum buffer, keyed as the base class keys it), whose
// step() updates all parameters of a group with one at::_foreach_* call per operation instead of
// one loop iteration per parameter, in the order of torch's Python _multi_tensor_sgd. Parameters
// without a gradient are skipped; a parameter's first step sets its momentum buffer to a detached
// clone of its (weight-decayed) gradient. Gradients are never modified. Results equal the unfused
// SGD's bit for bit on the CPU (the same per-tensor kernels, scalars and order;
// train_optimizer_test); state, state_dict and amptune checkpoints are interchangeable with it
// (the object is a torch::optim::SGD). Sparse gradients are refused with a ConfigError.
class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  FusedScratch scratch_;
};

// Multi-tensor Adam (coupled L2 weight decay, optional amsgrad), the same way: a
// torch::optim::Adam whose step() follows torch's Python _multi_tensor_adam (non-capturable
// branch). AdamParamState (step, exp_avg, exp_avg_sq, max_exp_avg_sq) is created as the base
// class creates it; bias corrections are per parameter, so parameters that skipped steps
// (no gradient) stay exact. Bit for bit torch::optim::Adam's on the CPU, as FusedSGD.
class FusedAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  FusedScratch scratch_;
};

// The optimizer state map's key for a parameter: LibTorch 1.13 keys by the TensorImpl address
// printed as a string, 2.x by the address itself. `Map` is the type of Optimizer::state().
template <typename Map>
typename Map::key_type optimizer_state_key(const torch::Tensor& param) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << param.unsafeGetTensorImpl();
    return s.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace amptune::train
