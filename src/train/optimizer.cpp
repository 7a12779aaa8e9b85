#include "train/optimizer.h"

#include <string>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"

namespace amptune::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Config& config,
                                                        std::vector<torch::Tensor> params) {
  const std::string name = config.get_string("optim.name");
  const double lr = config.get_double("optim.lr");
  const double wd = config.get_double("optim.weight_decay");
  if (name == "adam") {
    const auto betas = config.get_double_list("optim.betas");
    if (betas.size() != 2) {
      throw ConfigError("optim.betas must hold two values, got " + std::to_string(betas.size()));
    }
    return std::make_unique<torch::optim::Adam>(
        std::move(params), torch::optim::AdamOptions(lr)
                               .betas({betas[0], betas[1]})
                               .eps(config.get_double("optim.eps"))
                               .weight_decay(wd));
  }
  const double momentum = config.get_double("optim.momentum");
  const bool nesterov = config.get_bool("optim.nesterov");
  if (nesterov && momentum <= 0) {
    throw ConfigError("optim.nesterov needs optim.momentum > 0 (got " + std::to_string(momentum) +
                      ")");
  }
  return std::make_unique<torch::optim::SGD>(
      std::move(params),
      torch::optim::SGDOptions(lr).momentum(momentum).nesterov(nesterov).weight_decay(wd));
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace amptune::train
