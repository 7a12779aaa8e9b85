// A trainable task: a model, its training loss on a batch, and its evaluation metrics. The
// trainer is generic over tasks; each model family adds one (classification for ResNet;
// RootNet adds its own) and registers it in make_task().
#pragma once

#include <map>
#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "data/loader.h"

namespace amptune {
class Config;
}

namespace amptune::train {

class Task {
 public:
  virtual ~Task() = default;
  virtual torch::nn::Module& module() = 0;
  // Forward + loss of one training batch (mean over the batch).
  virtual torch::Tensor train_loss(const data::Batch& batch, const torch::Device& device) = 0;
  // Metrics over the whole evaluation loader (model already in eval mode, no grad needed).
  virtual std::map<std::string, double> evaluate(data::Loader& loader,
                                                 const torch::Device& device) = 0;
};

// The task for config's model.name; builds and initialises the model (torch's RNG must be
// seeded by the caller). Throws ConfigError for an unknown model.
std::unique_ptr<Task> make_task(const Config& config);

}  // namespace amptune::train
