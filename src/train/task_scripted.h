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

// The registry's entry for model.name torchscript: it may be a custom task, its BatchNorm is
// its own (no dist.sync_bn), its file model.path is code, and its check refuses a first
// convolution taking other channels than model.in_channels.
ModelEntry torchscript_entry();

}  // namespace amptune::train
