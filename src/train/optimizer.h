// Optimizers from the config (optim.*).
#pragma once

#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

namespace amptune {
class Config;
}

namespace amptune::train {

// SGD (momentum, nesterov, weight decay) or Adam (betas, eps, weight decay) over `params`.
// Throws ConfigError for inconsistent settings (nesterov without momentum, betas not a pair).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Config& config,
                                                        std::vector<torch::Tensor> params);
// Sets the learning rate of every parameter group.
void set_lr(torch::optim::Optimizer& optimizer, double lr);

}  // namespace amptune::train
