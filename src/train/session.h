// The model, optimizer and mixed precision a run trains and evaluates with, built the same way
// by the trainer (trainer.cpp) and by checkpoint evaluation / export (evaluate.cpp), so a loaded
// checkpoint sees exactly the model it was saved from (O2/O3 weights on their low-precision grid,
// fp32 masters, the run's autocast policy). Internal to src/train (includes torch).
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/settings.h"
#include "models/weights.h"
#include "train/evaluate.h"
#include "train/optimizer.h"
#include "train/precision.h"
#include "train/task.h"

namespace amptune::data {
class Dataset;
}

namespace amptune::train {

// The device the setting `device` (cpu | cuda | auto) selects. Throws ConfigError for cuda
// without one.
inline torch::Device pick_device(DeviceChoice d) {
  if (d == DeviceChoice::kCuda || (d == DeviceChoice::kAuto && torch::cuda::is_available())) {
    if (!torch::cuda::is_available()) {
      throw ConfigError("device is cuda but this LibTorch sees no CUDA device; use device: cpu");
    }
    return torch::Device(torch::kCUDA, 0);
  }
  return torch::Device(torch::kCPU);
}

// DataError unless every one of `world_size` processes gets a batch of `batch_size` samples of
// `train_set` (plan.cpp).
void check_world_size(const data::Dataset& train_set, int64_t batch_size, int world_size);

// Everything a run trains with; rebuilt from scratch when a checkpoint fails to load half-way.
struct Session {
  std::unique_ptr<Task> task;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  Precision* precision = nullptr;  // the run's mixed precision (amp.*), owned by the caller
};

// Copies fp32 values by name into `model`'s parameters and buffers (a fork's start). Throws
// CheckpointError naming `origin` when a name is missing or a shape differs.
inline void copy_values(torch::nn::Module& model, const std::map<std::string, torch::Tensor>& values,
                        const std::string& origin) {
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, torch::Tensor& target) {
    auto it = values.find(name);
    if (it == values.end() || !it->second.sizes().equals(target.sizes())) {
      throw CheckpointError(origin + " has no value of shape " + std::to_string(target.numel()) +
                            " elements for " + name + " (a different model?)");
    }
    target.copy_(it->second);
  };
  for (auto& p : model.named_parameters(true)) copy(p.key(), p.value());
  for (auto& b : model.named_buffers(true)) copy(b.key(), b.value());
}

// Seeds torch with the run's seed, builds and initialises the task's model (make_task of the
// run's `settings`) on `device` (with `initial` values when given: a fork), attaches `precision`
// (which must outlive the session) and builds the optimizer (optim.*) over what it steps.
inline Session build_session(const Settings& settings, const torch::Device& device,
                             Precision& precision,
                             const std::map<std::string, torch::Tensor>* initial = nullptr,
                             const std::string& initial_origin = "") {
  torch::manual_seed(static_cast<uint64_t>(settings.seed));
  Session s;
  s.task = make_task(settings);
  if (initial) copy_values(s.task->module(), *initial, initial_origin);
  s.task->place(device);
  s.precision = &precision;
  // amp: O2/O3 weights go on the low-precision grid; the optimizer steps the fp32 masters.
  s.optimizer = make_optimizer(settings.optim, precision.attach(s.task->module()));
  if (initial) {
    // The masters are the full-precision values themselves, not the copies of the weights just
    // rounded onto the grid (a fork of an O2 run continues its masters' low bits).
    torch::NoGradGuard no_grad;
    const auto& masters = precision.engine().masters();
    size_t i = 0;
    for (const auto& p : s.task->module().named_parameters(/*recurse=*/true)) {
      if (i < masters.size() && masters[i].defined()) masters[i].copy_(initial->at(p.key()));
      ++i;
    }
  }
  return s;
}

// build_session, then the checkpoint of `row` (size, sha256 and config identity verified) loaded
// into it, on `device`. CheckpointError naming the epoch and run (evaluate.cpp).
Session load_session(const RunInput& run, const records::EpochRow& row,
                     const torch::Device& device, Precision& precision);

// The module's weights at full precision by state-dict name, as CPU tensors: the fp32 master of
// each parameter that has one (O2), the parameter otherwise, and every buffer; floating tensors
// as float32, integer buffers (num_batches_tracked) as they are. Copies, not views.
inline std::map<std::string, torch::Tensor> full_precision_state(const torch::nn::Module& module,
                                                                 const amp::Engine& engine) {
  auto exported = [](const torch::Tensor& t) {
    torch::Tensor v = t.detach().to(torch::kCPU);
    return v.is_floating_point() ? v.to(torch::kFloat).clone() : v.clone();
  };
  std::map<std::string, torch::Tensor> values;
  const auto& masters = engine.masters();
  size_t i = 0;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    const bool master = i < masters.size() && masters[i].defined();
    values[p.key()] = exported(master ? masters[i] : p.value());
    ++i;
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) values[b.key()] = exported(b.value());
  return values;
}

// Writes `values` to `out` as the state dict model.weights reads (models/weights.h, atomic):
// `amptune export`, `amptune data plant-weights`.
inline ExportResult write_weights(const std::map<std::string, torch::Tensor>& values,
                                  const std::string& out) {
  models::save_state_dict(values, out);
  ExportResult result;
  result.path = out;
  result.tensors = static_cast<int64_t>(values.size());
  result.bytes = static_cast<int64_t>(std::filesystem::file_size(out));
  return result;
}

}  // namespace amptune::train
