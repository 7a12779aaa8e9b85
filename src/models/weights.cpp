// State-dict files shared with Python: torch::pickle_{load,save} of a plain dict str -> Tensor,
// the same zip container that torch.save/torch.load use.
#include "models/weights.h"

#include <fcntl.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include "core/error.h"

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

void write_atomically(const std::vector<char>& bytes, const std::string& path) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  // A file of this name is a temp of an earlier process with this pid (gone) or something
  // planted: removed (a link itself, never its target), then made anew, never through a link.
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ModelError("cannot create " + tmp + " to save weights: " + errno_text() +
                     " (check that the directory exists and is writable)");
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw ModelError("cannot write " + tmp + ": " + why + " (disk full?)");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw ModelError("cannot flush " + tmp + ": " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw ModelError("cannot rename " + tmp + " to " + path + ": " + why);
  }
  // Make the rename itself durable.
  const auto slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

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
  write_atomically(bytes, path);
}

}  // namespace

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  save_ordered(ordered_state(module), path);
}

void save_state_dict(const std::map<std::string, torch::Tensor>& tensors, const std::string& path) {
  save_ordered({tensors.begin(), tensors.end()}, path);
}

}  // namespace amptune::models
