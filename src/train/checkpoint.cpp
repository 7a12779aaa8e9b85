#include "train/checkpoint.h"
#include "train/optimizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include "amp/engine.h"
#include "core/error.h"
#include "core/hash.h"

namespace amptune::train {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  throw CheckpointError(what + " " + path + ": " + std::strerror(errno) +
                        " (check free disk space and permissions)");
}
// Where the module's tensors live (its first parameter or buffer; the CPU when it has none).
torch::Device module_device(const torch::nn::Module& model) {
  for (const auto& p : model.parameters(true)) return p.device();
  for (const auto& b : model.buffers(true)) return b.device();
  return torch::Device(torch::kCPU);
}

std::vector<torch::Tensor> ordered_params(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) params.push_back(p);
  }
  return params;
}

// Optimizer state in parameter order, so that equal states give equal bytes (LibTorch's own
// Optimizer::save keys entries by memory address and hash order, which differ between processes).
void save_optimizer(const torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& out) {
  auto& state = const_cast<torch::optim::Optimizer&>(optimizer).state();
  using Map = std::remove_reference_t<decltype(state)>;
  const auto params = ordered_params(optimizer);
  int64_t saved = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = state.find(optimizer_state_key<Map>(params[i]));
    if (it == state.end()) continue;
    const std::string k = "p" + std::to_string(i) + ".";
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      out.write(k + "momentum_buffer", sgd->momentum_buffer(), /*is_buffer=*/true);
    } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
      out.write(k + "step", c10::IValue(static_cast<int64_t>(adam->step())));
      out.write(k + "exp_avg", adam->exp_avg(), true);
      out.write(k + "exp_avg_sq", adam->exp_avg_sq(), true);
      if (adam->max_exp_avg_sq().defined()) out.write(k + "max_exp_avg_sq", adam->max_exp_avg_sq(), true);
    } else {
      throw CheckpointError("cannot save the state of this optimizer type");
    }
    ++saved;
  }
  out.write("count", c10::IValue(saved));
}

void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& in,
                    const std::string& path) {
  auto& state = optimizer.state();
  using Map = std::remove_reference_t<decltype(state)>;
  state.clear();
  const auto params = ordered_params(optimizer);
  const bool is_sgd = dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr;
  int64_t loaded = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string k = "p" + std::to_string(i) + ".";
    torch::Tensor t;
    if (is_sgd) {
      if (!in.try_read(k + "momentum_buffer", t, true)) continue;
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(t.to(params[i].device()));
      state[optimizer_state_key<Map>(params[i])] = std::move(st);
    } else {
      c10::IValue step;
      if (!in.try_read(k + "step", step)) continue;
      auto st = std::make_unique<torch::optim::AdamParamState>();
      st->step(step.toInt());
      // A fresh tensor per read: InputArchive::read into a defined tensor calls set_() on it,
      // which would alias exp_avg and exp_avg_sq.
      torch::Tensor avg, avg_sq;
      in.read(k + "exp_avg", avg, true);
      st->exp_avg(avg.to(params[i].device()));
      in.read(k + "exp_avg_sq", avg_sq, true);
      st->exp_avg_sq(avg_sq.to(params[i].device()));
      torch::Tensor m;
      if (in.try_read(k + "max_exp_avg_sq", m, true)) st->max_exp_avg_sq(m.to(params[i].device()));
      state[optimizer_state_key<Map>(params[i])] = std::move(st);
    }
    ++loaded;
  }
  c10::IValue count;
  in.read("count", count);
  if (count.toInt() != loaded) {
    throw CheckpointError("checkpoint " + path + " holds optimizer state for " +
                          std::to_string(count.toInt()) + " parameters, " +
                          std::to_string(loaded) + " match this optimizer (another optim.name?)");
  }
}

}  // namespace

void copy_optimizer_state(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  torch::serialize::OutputArchive out;
  save_optimizer(from, out);
  std::ostringstream bytes;
  out.save_to(bytes);
  const std::string data = bytes.str();
  torch::serialize::InputArchive in;
  in.load_from(data.data(), data.size());
  load_optimizer(to, in, "the parent's optimizer state");
  const auto a = ordered_params(from), b = ordered_params(to);
  if (a.size() != b.size()) {
    throw CheckpointError("the parent's optimizer steps " + std::to_string(a.size()) +
                          " parameters, the fork's " + std::to_string(b.size()));
  }
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) {
    throw CheckpointError("cannot create directory " + target.parent_path().string() + ": " +
                          ec.message());
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io("cannot create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      fail_io("cannot write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail_io("cannot flush", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail_io("cannot rename into", path);
  }
  int dfd = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string checkpoint_bytes(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                             const CheckpointMeta& meta, const amp::Engine* amp) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optim_archive;
  model.save(model_archive);
  save_optimizer(optimizer, optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  if (amp) {
    torch::serialize::OutputArchive amp_archive;
    amp->save(amp_archive);
    archive.write("amp", amp_archive);
  }
  archive.write("meta.format", c10::IValue(meta.format));
  archive.write("meta.epoch", c10::IValue(meta.epoch));
  archive.write("meta.global_step", c10::IValue(meta.global_step));
  archive.write("meta.config_hash", c10::IValue(meta.config_hash));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng.cpu", gen.get_state());
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

store::CheckpointFile save_checkpoint(const std::string& path, const torch::nn::Module& model,
                                      const torch::optim::Optimizer& optimizer,
                                      const CheckpointMeta& meta, const amp::Engine* amp) {
  const std::string bytes = checkpoint_bytes(model, optimizer, meta, amp);
  write_file_atomic(path, bytes);
  return store::CheckpointFile{path, static_cast<int64_t>(bytes.size()), sha256_hex(bytes)};
}

std::vector<std::string> owner_hashes(const store::RunRow& run) {
  std::vector<std::string> owners{run.config_hash};
  if (!run.legacy_config_hash.empty()) owners.push_back(run.legacy_config_hash);
  return owners;
}

CheckpointMeta load_checkpoint_bytes(const std::string& bytes, const std::string& path,
                                     torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                     const std::vector<std::string>& owners, amp::Engine* amp) {
  CheckpointMeta meta;
  try {
    // Every tensor is read onto the CPU, whatever device wrote it (a checkpoint of a GPU run
    // opens on a machine without CUDA); the model goes back to its device before the optimizer
    // state is placed next to its parameters.
    const torch::Device device = module_device(model);
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
    c10::IValue v;
    archive.read("meta.format", v);
    meta.format = v.toStringRef();
    archive.read("meta.epoch", v);
    meta.epoch = v.toInt();
    archive.read("meta.global_step", v);
    meta.global_step = v.toInt();
    archive.read("meta.config_hash", v);
    meta.config_hash = v.toStringRef();
    if (!owners.empty() &&
        std::find(owners.begin(), owners.end(), meta.config_hash) == owners.end()) {
      throw CheckpointError("checkpoint " + path + " belongs to config " +
                            meta.config_hash.substr(0, 8) + ", not to this run's " +
                            owners.front().substr(0, 8));
    }
    torch::serialize::InputArchive model_archive, optim_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optim_archive);
    model.load(model_archive);
    model.to(device);
    load_optimizer(optimizer, optim_archive, path);
    if (amp) {
      torch::serialize::InputArchive amp_archive;
      if (archive.try_read("amp", amp_archive)) {
        amp->load(amp_archive, path);
      } else {
        torch::serialize::InputArchive empty;
        amp->load(empty, path);  // refuses unless this run has no amp state to restore
      }
    }
    torch::Tensor rng;
    archive.read("rng.cpu", rng);
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  } catch (const CheckpointError&) {
    throw;
  } catch (const c10::Error& e) {
    throw CheckpointError("checkpoint " + path + " cannot be read: " + e.what_without_backtrace());
  }
  return meta;
}

CheckpointMeta load_checkpoint(const store::CheckpointFile& expected, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer,
                               const std::vector<std::string>& owners, amp::Engine* amp) {
  const std::string& path = expected.path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("checkpoint " + path + " is missing or unreadable");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (expected.bytes > 0 && static_cast<int64_t>(bytes.size()) != expected.bytes) {
    throw CheckpointError("checkpoint " + path + " has " + std::to_string(bytes.size()) +
                          " bytes, the database recorded " + std::to_string(expected.bytes) +
                          " (truncated or replaced)");
  }
  if (!expected.sha256.empty() && sha256_hex(bytes) != expected.sha256) {
    throw CheckpointError("checkpoint " + path + " does not match its recorded sha256 (corrupt)");
  }
  return load_checkpoint_bytes(bytes, path, model, optimizer, owners, amp);
}

}  // namespace amptune::train
