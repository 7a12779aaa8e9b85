// How the runs of a registered model (train/task.h, the table in train/tasks.cpp) are judged:
// the primary metric they are ranked by and the headline metrics a reader wants beside it; what
// the model can take (its capabilities), which the checks of a run ask instead of its name. No
// torch in this header: the query side (app/report) and the sweep runner include it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace amptune {
struct ModelSettings;
struct Settings;
}

namespace amptune::train {

// The metric the views and `compare` rank a run by.
struct ModelInfo {
  std::string primary_metric;  // "acc1", "mrpe", ...
  bool higher_is_better = true;
};

// A per-epoch metric a model's runs record, and its direction.
struct MetricDef {
  std::string name;
  bool higher_is_better = true;
};

// What a registered model can take beyond what every model takes: validate_config
// (train/plan.h) refuses a run's key that its model cannot take by these, never by the model's
// name, so a new model says what it takes in its registry entry.
struct ModelCapabilities {
  // casts.int32: its data path has the int32 cast points (train/casts.h; RootNet's).
  bool takes_casts = false;
  // model.task custom: its own loss and metrics on batches of named tensors (data.format
  // tensors; a TorchScript file's training_loss / eval_batch).
  bool custom_task = false;
  // data.format synthetic: it classifies images, so random images with class labels train it
  // (the ResNets, a TorchScript classifier); RootNet's samples carry other fields.
  bool classifies_images = true;
  // dist.sync_bn: its BatchNorm layers are amptune's (models/batchnorm.h), which synchronise
  // over ranks; false when they are the model's own code (a TorchScript file).
  bool sync_bn = true;
  // Its file (file_key) is code that runs when it is loaded (a TorchScript file): the runner
  // says so before it loads one to check it.
  bool loads_code = false;
  // A file the model reads besides model.weights, part of a run's data fingerprint: its model.*
  // key and the member of ModelSettings holding the path (model.backbone_weights for RootNet,
  // model.path for a TorchScript file). Key "" and member null for none.
  std::string file_key;
  std::string ModelSettings::*file = nullptr;
};

// The capabilities of the registered model named `model_name`; unset for a name that is not
// registered (model_info's ConfigError names the registered ones).
std::optional<ModelCapabilities> model_capabilities(const std::string& model_name);

// The per-epoch metrics a run of `settings` records (its model's evaluation metrics, then
// train_loss, which every run records), with their directions: what a sweep's prune: rule may
// compare. ConfigError naming the registered models for an unknown model.name.
std::vector<MetricDef> recorded_metrics(const Settings& settings);

// The registered model's info for a run's `settings` (its model.name and the rest): e.g. acc1
// for ResNets, mrpe for RootNet, and ap_root_25 for RootNet tested on MuPoTS. ConfigError naming
// the registered models for an unknown model.name.
ModelInfo model_info(const Settings& settings);

// The metrics a model's papers report, which `amptune report` shows beside the primary metric
// when the runs recorded them: acc1, acc5 for ResNets; mrpe, ap_root_25 for RootNet. Empty for a
// name that is not registered (a database written by another build).
const std::vector<std::string>& headline_metrics(const std::string& model_name);

}  // namespace amptune::train
