// State-dict files shared with Python: torch::pickle_{load,save} of a plain dict str -> Tensor,
// the same zip container that torch.save/torch.load use.
#include "models/weights.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/files.h"

namespace amptune::models {
namespace {

constexpr size_t kMaxListed = 20;  // keys listed per category in a mismatch message

std::string shape_str(c10::IntArrayRef sizes) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << "]";
  return out.str();
}

void append_list(std::ostringstream& msg, const char* title,
                 const std::vector<std::string>& items) {
  if (items.empty()) return;
  msg << "\n  " << title << " (" << items.size() << "):";
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) msg << "\n    " << items[i];
  if (items.size() > kMaxListed) msg << "\n    ... and " << items.size() - kMaxListed << " more";
}

bool has_prefix(const std::string& key, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes) {
    if (key.compare(0, p.size(), p) == 0) return true;
  }
  return false;
}

// Parameters and buffers in PyTorch's state_dict order (per module: parameters, buffers).
std::vector<std::pair<std::string, torch::Tensor>> ordered_state(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      out.emplace_back(prefix + p.key(), p.value());
    }
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) {
      out.emplace_back(prefix + b.key(), b.value());
    }
  }
  return out;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::map<std::string, torch::Tensor> read_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ModelError("cannot open weights file " + path + ": " + errno_text() +
                     " (check model.weights)");
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ModelError("cannot read weights file " + path + ": " + errno_text());

  const char* hint =
      " (expected a plain dict saved by Python's torch.save(dict(model.state_dict())); convert "
      "other .pth files with tools/convert_torchvision.py)";
  torch::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw ModelError("cannot load weights file " + path + ": " + e.what_without_backtrace() + hint);
  }
  if (!value.isGenericDict()) {
    throw ModelError("weights file " + path + " holds a " + value.tagKind() + ", not a dict" +
                     hint);
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      throw ModelError("weights file " + path + " has a key of type " + entry.key().tagKind() +
                       "; all keys must be str" + hint);
    }
    const std::string key = entry.key().toStringRef();
    if (!entry.value().isTensor()) {
      throw ModelError("weights file " + path + ": value of '" + key + "' is a " +
                       entry.value().tagKind() + ", not a Tensor" + hint);
    }
    out.emplace(key, entry.value().toTensor());
  }
  return out;
}

std::map<std::string, torch::Tensor> state_dict(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (auto& item : ordered_state(module)) out.emplace(std::move(item));
  return out;
}

void load_state_dict(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors,
                     const std::string& origin, const LoadOptions& options) {
  const std::map<std::string, torch::Tensor> own = state_dict(module);
  std::vector<std::string> missing, unexpected, misshaped;
  for (const auto& [key, target] : own) {
    if (has_prefix(key, options.skip_prefixes)) continue;
    auto it = tensors.find(key);
    if (it == tensors.end()) {
      missing.push_back(key);
    } else if (!it->second.sizes().equals(target.sizes())) {
      misshaped.push_back(key + ": expected " + shape_str(target.sizes()) + ", got " +
                          shape_str(it->second.sizes()));
    }
  }
  for (const auto& [key, tensor] : tensors) {
    if (!own.count(key) && !has_prefix(key, options.skip_prefixes)) unexpected.push_back(key);
  }
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::ostringstream msg;
    msg << "weights in " << origin << " do not match the model (" << own.size()
        << " tensors expected, " << tensors.size() << " in the file):";
    append_list(msg, "missing keys", missing);
    append_list(msg, "unexpected keys", unexpected);
    append_list(msg, "mis-shaped keys", misshaped);
    msg << "\n  check model.name/model.width/model.num_classes/model.in_channels/"
           "model.small_input against the weights, or convert them with "
           "tools/convert_torchvision.py";
    throw ModelError(msg.str());
  }
  torch::NoGradGuard no_grad;
  try {
    for (const auto& [key, target] : own) {
      if (has_prefix(key, options.skip_prefixes)) continue;
      auto target_copy = target;  // shares storage with the module's tensor
      target_copy.copy_(tensors.at(key));
    }
  } catch (const c10::Error& e) {
    throw ModelError("cannot copy weights from " + origin + ": " + e.what_without_backtrace());
  }
}

void load_state_dict(torch::nn::Module& module, const std::string& path,
                     const LoadOptions& options) {
  load_state_dict(module, read_state_dict(path), path, options);
}

namespace {

void save_ordered(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                  const std::string& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, tensor] : tensors) {
    // clone(): a compact CPU copy, so a view does not drag its whole storage into the file.
    dict.insert(key, tensor.detach().to(torch::kCPU).clone(at::MemoryFormat::Contiguous));
  }
  std::vector<char> bytes;
  try {
    bytes = torch::pickle_save(torch::IValue(dict));
  } catch (const c10::Error& e) {
    throw ModelError("cannot serialise weights for " + path + ": " + e.what_without_backtrace());
  }
  write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

}  // namespace

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  save_ordered(ordered_state(module), path);
}

void save_state_dict(const std::map<std::string, torch::Tensor>& tensors, const std::string& path) {
  save_ordered({tensors.begin(), tensors.end()}, path);
}

}  // namespace amptune::models
