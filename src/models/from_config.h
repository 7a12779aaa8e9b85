// Model construction from the run's model.* section (ModelSettings, core/settings.h; keys in
// schemas/config.yaml). Which model.name trains which model and task, and how its runs are
// judged: train/task.h (registered_models).
#pragma once

#include <string>

#include "core/settings.h"
#include "models/resnet.h"
#include "models/rootnet.h"

namespace amptune::models {

// ResNetOptions from model.name (resnet18|34|50|101|152), model.num_classes, model.in_channels,
// model.width, model.small_input; include_top = true. Throws ConfigError for an unknown name.
ResNetOptions resnet_options(const ModelSettings& model);

// Builds the classifier named by model.name and, when model.weights is not empty, loads that
// state dict (ModelError on a mismatch, naming the file and keys).
ResNet build_classifier(const ModelSettings& model);

// RootNetOptions from model.backbone_depth, model.width (head_channels = max(1, lround(256 *
// width))) and model.in_channels.
RootNetOptions rootnet_options(const ModelSettings& model);
// Builds RootNet; loads model.backbone_weights (a torchvision ResNet state dict, fc.* ignored)
// into the backbone, then model.weights (a whole RootNet state dict) when set. ModelError on a
// mismatch.
RootNet build_rootnet(const ModelSettings& model);

}  // namespace amptune::models
