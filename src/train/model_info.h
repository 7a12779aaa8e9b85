// How the runs of a registered model (train/task.h, the table in train/tasks.cpp) are judged:
// the primary metric they are ranked by and the headline metrics a reader wants beside it. No
// torch in this header: the query side (app/report) includes it.
#pragma once

#include <string>
#include <vector>

namespace amptune {
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
