// Weight import/export in the format PyTorch users have: a plain dict {name: tensor} written by
// Python's torch.save(dict(model.state_dict())) (tools/convert_torchvision.py converts other
// .pth layouts). Names are those of named_parameters() + named_buffers() (recursive), i.e.
// torchvision's state-dict names for models/resnet.h.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace amptune::models {

struct LoadOptions {
  // Keys that start with one of these are neither loaded nor required, in the file and in the
  // module (a module tensor so skipped keeps its value): {"fc."} loads ImageNet weights into a
  // backbone built with include_top = false, or into a classifier with another num_classes.
  std::vector<std::string> skip_prefixes;
};

// Reads a state dict file into name -> tensor (CPU). Throws ModelError naming the file when it
// cannot be read, is not a pickled dict of str -> Tensor (e.g. an OrderedDict: re-save it with
// torch.save(dict(sd)) or tools/convert_torchvision.py).
std::map<std::string, torch::Tensor> read_state_dict(const std::string& path);

// The module's parameters and buffers by dotted name (tensors are shared, not copied).
std::map<std::string, torch::Tensor> state_dict(const torch::nn::Module& module);

// Copies `tensors` into the module's parameters and buffers under NoGradGuard, converting dtype
// (and device) to the module's. Keys must match exactly: throws ModelError listing missing keys,
// unexpected keys, and mis-shaped keys (name, expected shape, got shape), naming `origin`; the
// module is left unchanged when it throws.
void load_state_dict(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors,
                     const std::string& origin, const LoadOptions& options = {});
// read_state_dict(path) + the above.
void load_state_dict(torch::nn::Module& module, const std::string& path,
                     const LoadOptions& options = {});

// Writes the module's state dict as a plain dict that Python's torch.load(path) returns as
// {name: tensor} (tensors moved to CPU, contiguous). Atomic (core/files.h write_file_atomic);
// throws EnvironmentError naming the path on an I/O failure, ModelError when the tensors cannot
// be serialised.
void save_state_dict(const torch::nn::Module& module, const std::string& path);
void save_state_dict(const std::map<std::string, torch::Tensor>& tensors, const std::string& path);

}  // namespace amptune::models
