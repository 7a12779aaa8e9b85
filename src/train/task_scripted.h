// model.name torchscript: the user's own network from model.path (models/scripted.h), as a
// classifier (model.task classification: the classification task of every classifier,
// tasks.cpp) or with its own loss and metrics (model.task custom; docs/MODELS.md "Your own
// model"): batches are the named tensors of data.format tensors, training_loss(batch) is the
// loss, eval_batch(batch) gives each metric's sum over the batch; a metric is the sum over the
// evaluated set divided by its samples, its direction the module's higher_is_better.
#pragma once

#include <memory>
#include <vector>

#include "train/task.h"

namespace amptune::train {

// The registry's entry for model.name torchscript.
ModelEntry torchscript_entry();

// A scripted classifier (model.name torchscript, model.task classification) whose first layer is
// a Conv2d taking other channels than model.in_channels: ConfigError naming model.in_channels
// and the value to set (read from the convolution's weight), instead of LibTorch's message in
// the first step. Nothing for other models, or when the first layer is not a Conv2d.
void check_scripted_input_channels(const Settings& settings);

}  // namespace amptune::train
