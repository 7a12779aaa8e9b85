// Model construction from the run configuration (keys model.* in schemas/config.yaml).
#pragma once

#include <string>

#include "core/config.h"
#include "models/resnet.h"

namespace amptune::models {

struct ModelInfo {
  std::string primary_metric;  // metric name the run is judged by ("acc1")
  bool higher_is_better;
};

// ResNetOptions from model.name (resnet18|34|50|101|152), model.num_classes, model.in_channels,
// model.width, model.small_input; include_top = true. Throws ConfigError for an unknown name.
ResNetOptions resnet_options(const Config& config);

// Builds the classifier named by model.name and, when model.weights is not empty, loads that
// state dict (ModelError on a mismatch, naming the file and keys).
ResNet build_classifier(const Config& config);

// resnet*: {"acc1", true}. Throws ConfigError for an unknown model name.
ModelInfo model_info(const std::string& model_name);

}  // namespace amptune::models
