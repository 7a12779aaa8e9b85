#include "train/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <new>
#include <string_view>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include "amp/engine.h"
#include "core/files.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/words.h"
#include "data/safetensors.h"
#include "train/optimizer.h"
#include "train/phases.h"

namespace amptune::train {
namespace fs = std::filesystem;
namespace safetensors = data::safetensors;

namespace {
using Named = std::vector<std::pair<std::string, torch::Tensor>>;
using Tensors = std::map<std::string, torch::Tensor>;

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::vector<torch::Tensor> ordered_params(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) params.push_back(p);
  }
  return params;
}

// Which optim.name `optimizer` is (FusedSGD and FusedAdam are these classes too); its word is
// the checkpoint's "optimizer" metadata.
OptimizerName optimizer_kind(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return OptimizerName::kSgd;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return OptimizerName::kAdam;
  throw CheckpointError("cannot save the state of this optimizer type");
}

std::string param_key(size_t i) { return "optim.p" + std::to_string(i) + "."; }

torch::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

// The model's parameters and buffers (defined ones) by state-dict name, buffers marked. The
// tensors are the model's own (handles): loading copies into them.
struct ModelTensor {
  std::string name;
  torch::Tensor tensor;
  bool buffer = false;
};
std::vector<ModelTensor> model_tensors(const torch::nn::Module& model) {
  std::vector<ModelTensor> out;
  for (const auto& p : model.named_parameters(true)) {
    if (p.value().defined()) out.push_back({p.key(), p.value(), false});
  }
  for (const auto& b : model.named_buffers(true)) {
    if (b.value().defined()) out.push_back({b.key(), b.value(), true});
  }
  return out;
}

// ---- Saving: the training state as named tensors (checkpoint.h lists the names).

// Optimizer state in parameter order, so that equal states give equal bytes (LibTorch's own
// Optimizer::save keys entries by memory address and hash order, which differ between processes).
void add_optimizer_state(const torch::optim::Optimizer& optimizer, Named& out) {
  auto& state = const_cast<torch::optim::Optimizer&>(optimizer).state();
  using Map = std::remove_reference_t<decltype(state)>;
  const auto params = ordered_params(optimizer);
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = state.find(optimizer_state_key<Map>(params[i]));
    if (it == state.end()) continue;
    const std::string k = param_key(i);
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      if (sgd->momentum_buffer().defined()) {
        out.emplace_back(k + "momentum_buffer", sgd->momentum_buffer());
      }
    } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
      out.emplace_back(k + "step",
                       torch::scalar_tensor(static_cast<int64_t>(adam->step()), torch::kLong));
      out.emplace_back(k + "exp_avg", adam->exp_avg());
      out.emplace_back(k + "exp_avg_sq", adam->exp_avg_sq());
      if (adam->max_exp_avg_sq().defined()) {
        out.emplace_back(k + "max_exp_avg_sq", adam->max_exp_avg_sq());
      }
    } else {
      throw CheckpointError("cannot save the state of this optimizer type");
    }
  }
}

Named state_tensors(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                    const amp::Engine* amp) {
  Named out;
  for (const auto& t : model_tensors(model)) out.emplace_back("model." + t.name, t.tensor);
  add_optimizer_state(optimizer, out);
  if (amp) {
    const amp::ScalerState& scaler = amp->scaler().state();
    out.emplace_back("amp.loss_scale", torch::scalar_tensor(scaler.loss_scale, torch::kDouble));
    out.emplace_back("amp.unskipped", torch::scalar_tensor(scaler.unskipped, torch::kLong));
    const auto& masters = amp->masters();
    for (size_t i = 0; i < masters.size(); ++i) {
      if (masters[i].defined()) out.emplace_back("amp.master." + std::to_string(i), masters[i]);
    }
    if (const auto& fp8 = amp->fp8()) {  // FP8 scaling state: fp8.<key>.<role>.history / .scale
      for (auto& [name, t] : fp8->to_tensors()) out.emplace_back(name, t);
    }
  }
  out.emplace_back("rng.cpu", cpu_rng_state());
  return out;
}

// ---- Loading: what this run needs, checked against what the file holds before anything changes.

struct Shape {
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> sizes;
};
struct Want {
  Shape shape;
  bool required = true;
};
using Wants = std::map<std::string, Want>;
using Listing = std::map<std::string, Shape>;  // what a file holds

Shape shape_of(const torch::Tensor& t) { return Shape{t.scalar_type(), t.sizes().vec()}; }

std::string describe(const Shape& s) {
  std::string text = std::string(c10::toString(s.dtype)) + " [";
  for (size_t i = 0; i < s.sizes.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(s.sizes[i]);
  }
  return text + "]";
}

// What a mismatch of tensor `name` most likely means.
std::string hint(const std::string& name) {
  if (starts_with(name, "model.")) return " (saved from another model?)";
  if (starts_with(name, "optim.")) return " (another optim.name?)";
  if (starts_with(name, "amp.")) return " (another amp.opt_level or amp.master_weights?)";
  return "";
}

// Per-parameter optimizer state, all optional (a parameter without a gradient has none).
void want_optimizer(const torch::optim::Optimizer& optimizer, Wants& wants) {
  const auto params = ordered_params(optimizer);
  const bool sgd = optimizer_kind(optimizer) == OptimizerName::kSgd;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string k = param_key(i);
    if (sgd) {
      wants[k + "momentum_buffer"] = Want{shape_of(params[i]), false};
      continue;
    }
    wants[k + "step"] = Want{Shape{torch::kLong, {}}, false};
    for (const char* s : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
      wants[k + s] = Want{shape_of(params[i]), false};
    }
  }
}

// `with_amp`: the file holds amp state, which is then needed whole.
Wants wanted(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
             const amp::Engine* amp, bool with_amp) {
  Wants wants;
  for (const auto& t : model_tensors(model)) wants["model." + t.name] = Want{shape_of(t.tensor)};
  want_optimizer(optimizer, wants);
  if (amp && with_amp) {
    wants["amp.loss_scale"] = Want{Shape{torch::kDouble, {}}};
    wants["amp.unskipped"] = Want{Shape{torch::kLong, {}}};
    const auto& masters = amp->masters();
    for (size_t i = 0; i < masters.size(); ++i) {
      if (!masters[i].defined()) continue;
      wants["amp.master." + std::to_string(i)] = Want{shape_of(masters[i])};
    }
  }
  wants["rng.cpu"] = Want{shape_of(cpu_rng_state())};
  return wants;
}

// The names of `found` that the run takes. Throws CheckpointError naming `origin` for a tensor it
// needs and `found` lacks, one it does not have (amp.* is ignored when `amp` is null), one of
// another dtype or shape, and for part of a parameter's Adam state.
std::vector<std::string> check_listing(const Listing& found, const torch::nn::Module& model,
                                       const torch::optim::Optimizer& optimizer,
                                       const amp::Engine* amp, const std::string& origin) {
  const bool with_amp = std::any_of(found.begin(), found.end(),
                                    [](const auto& f) { return starts_with(f.first, "amp."); });
  if (amp && !with_amp && amp->has_state()) {
    throw CheckpointError("checkpoint " + origin +
                          " holds no mixed-precision state (written before amp support?)");
  }
  const Wants wants = wanted(model, optimizer, amp, with_amp);
  std::vector<std::string> take;
  for (const auto& [name, shape] : found) {
    // FP8 scaling state: an FP8 run takes it (amp::Fp8State::load checks it); a run without FP8
    // (a fork of an FP8 run) leaves it.
    if (starts_with(name, "fp8.")) {
      if (amp && amp->fp8()) take.push_back(name);
      continue;
    }
    const auto it = wants.find(name);
    if (it == wants.end()) {
      if (!amp && starts_with(name, "amp.")) continue;
      throw CheckpointError("checkpoint " + origin + " holds tensor " +
                            log::clipped(name, log::kQuotedBytes) +
                            ", which this run does not have" + hint(name));
    }
    if (shape.dtype != it->second.shape.dtype || shape.sizes != it->second.shape.sizes) {
      throw CheckpointError("checkpoint " + origin + ": tensor " + name + " is " + describe(shape) +
                            ", this run's is " + describe(it->second.shape) + hint(name));
    }
    take.push_back(name);
  }
  for (const auto& [name, want] : wants) {
    if (want.required && !found.count(name)) {
      throw CheckpointError("checkpoint " + origin + " lacks tensor " + name + hint(name));
    }
    // An Adam state comes whole: step, exp_avg and exp_avg_sq (max_exp_avg_sq: amsgrad).
    if (!starts_with(name, "optim.") || name.size() < 5 ||
        name.substr(name.size() - 5) != ".step") {
      continue;
    }
    const std::string k = name.substr(0, name.size() - 4);
    int have = 0;
    for (const char* s : {"step", "exp_avg", "exp_avg_sq"}) have += found.count(k + s) > 0;
    if ((have > 0 || found.count(k + "max_exp_avg_sq")) && have != 3) {
      throw CheckpointError("checkpoint " + origin + " holds part of the Adam state of " +
                            k.substr(0, k.size() - 1));
    }
  }
  return take;
}

// A checkpoint's contents, read and checked, not yet applied.
struct Contents {
  CheckpointMeta meta;
  Tensors tensors;  // CPU copies of every tensor the run takes
};

void check_owner(const CheckpointMeta& meta, const std::vector<std::string>& owners,
                 const std::string& origin) {
  if (owners.empty() || std::find(owners.begin(), owners.end(), meta.config_hash) != owners.end()) {
    return;
  }
  throw CheckpointError("checkpoint " + origin + " belongs to config " +
                        meta.config_hash.substr(0, 8) + ", not to this run's " +
                        owners.front().substr(0, 8));
}

std::string meta_field(const std::map<std::string, std::string>& metadata, const std::string& key,
                       const std::string& origin) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) {
    throw CheckpointError("checkpoint " + origin + " lacks __metadata__." + key +
                          " (not an amptune checkpoint?)");
  }
  return it->second;
}

int64_t meta_int(const std::map<std::string, std::string>& metadata, const std::string& key,
                 const std::string& origin) {
  const std::string text = meta_field(metadata, key, origin);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw CheckpointError("checkpoint " + origin + ": __metadata__." + key +
                          " is not an integer: \"" + log::clipped(text, log::kQuotedBytes) + "\"");
  }
  return value;
}

Contents read_safetensors(std::string_view bytes, const std::string& origin,
                          const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                          const std::vector<std::string>& owners, const amp::Engine* amp) {
  const safetensors::View view(bytes, "checkpoint " + origin,
                               safetensors::Source::kCheckpoint);
  const auto& metadata = view.metadata();
  Contents c;
  c.meta.format = meta_field(metadata, "format", origin);
  if (c.meta.format != CheckpointMeta().format) {
    throw CheckpointError("checkpoint " + origin + " is of format \"" +
                          log::clipped(c.meta.format, log::kQuotedBytes) +
                          "\", this amptune reads " + CheckpointMeta().format +
                          " (written by a newer amptune?)");
  }
  c.meta.epoch = meta_int(metadata, "epoch", origin);
  c.meta.global_step = meta_int(metadata, "global_step", origin);
  c.meta.config_hash = meta_field(metadata, "config_hash", origin);
  check_owner(c.meta, owners, origin);
  const std::string kind = meta_field(metadata, "optimizer", origin);
  if (parse_optimizer_name(kind) != optimizer_kind(optimizer)) {
    throw CheckpointError("checkpoint " + origin + " holds the state of optimizer " +
                          log::clipped(kind, log::kQuotedBytes) + ", this run uses " +
                          to_string(optimizer_kind(optimizer)) + " (another optim.name?)");
  }
  Listing found;
  for (const auto& [name, e] : view.entries()) found[name] = Shape{e.dtype, e.shape};
  for (const auto& name : check_listing(found, model, optimizer, amp, origin)) {
    c.tensors[name] = view.copy(name);
  }
  return c;
}

// ---- The old format: LibTorch (TorchScript) archives of earlier releases, read on opt-in only.

bool is_legacy(std::string_view bytes) {
  return bytes.size() >= 4 && bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4);  // zip
}

// Module::save nests each submodule's archive under its name: "layer1.0.conv1.weight" is tensor
// "weight" of the archives layer1 / 0 / conv1.
bool read_nested(torch::serialize::InputArchive& root, const std::string& name, bool buffer,
                 torch::Tensor& out) {
  std::deque<torch::serialize::InputArchive> path;
  torch::serialize::InputArchive* at = &root;
  size_t start = 0;
  for (size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1) {
    path.emplace_back();
    if (!at->try_read(name.substr(start, dot - start), path.back())) return false;
    at = &path.back();
  }
  return at->try_read(name.substr(start), out, buffer);
}

// The old optimizer archive ("p<i>.<field>", "count") under the new names.
void read_legacy_optimizer(torch::serialize::InputArchive& in, size_t params, Tensors& out,
                           const std::string& origin) {
  int64_t states = 0;
  for (size_t i = 0; i < params; ++i) {
    const std::string k = "p" + std::to_string(i) + ".";
    bool any = false;
    for (const char* s : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
      torch::Tensor t;
      if (!in.try_read(k + s, t, /*is_buffer=*/true)) continue;
      out[param_key(i) + s] = t;
      any = true;
    }
    c10::IValue step;
    if (in.try_read(k + "step", step)) {
      out[param_key(i) + "step"] = torch::scalar_tensor(step.toInt(), torch::kLong);
      any = true;
    }
    states += any;
  }
  c10::IValue count;
  in.read("count", count);
  if (count.toInt() != states) {
    throw CheckpointError("checkpoint " + origin + " holds optimizer state for " +
                          std::to_string(count.toInt()) + " parameters, " + std::to_string(states) +
                          " match this optimizer (another optim.name?)");
  }
}

// The old amp archive ("amp.loss_scale", "amp.unskipped", "amp.masters", "amp.master.<i>").
void read_legacy_amp(torch::serialize::InputArchive& archive, const amp::Engine& amp, Tensors& out,
                     const std::string& origin) {
  torch::serialize::InputArchive in;
  c10::IValue scale, unskipped, count;
  if (!archive.try_read("amp", in) || !in.try_read("amp.loss_scale", scale) ||
      !in.try_read("amp.unskipped", unskipped) || !in.try_read("amp.masters", count)) {
    return;
  }
  out["amp.loss_scale"] = torch::scalar_tensor(scale.toDouble(), torch::kDouble);
  out["amp.unskipped"] = torch::scalar_tensor(unskipped.toInt(), torch::kLong);
  int64_t n = 0;
  for (size_t i = 0; i < amp.masters().size(); ++i) {
    torch::Tensor t;
    if (!in.try_read("amp.master." + std::to_string(i), t, /*is_buffer=*/true)) continue;
    out["amp.master." + std::to_string(i)] = t;
    ++n;
  }
  if (n != count.toInt()) {
    throw CheckpointError("checkpoint " + origin + " holds " + std::to_string(count.toInt()) +
                          " master weights, " + std::to_string(n) +
                          " of them for this run's parameters (another amp.opt_level?)");
  }
}

Contents read_legacy(std::string_view bytes, const std::string& origin,
                     const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                     const std::vector<std::string>& owners, const amp::Engine* amp) {
  const char* trust = std::getenv(kTrustLegacyEnv);
  if (!trust || std::string_view(trust) != "1") {
    throw LegacyCheckpointError("checkpoint " + origin +
                                " is in the old TorchScript format, which can run code when "
                                "loaded; set " +
                                kTrustLegacyEnv + "=1 if it comes from your own amptune");
  }
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
  Contents c;
  c10::IValue v;
  archive.read("meta.format", v);
  c.meta.format = v.toStringRef();
  archive.read("meta.epoch", v);
  c.meta.epoch = v.toInt();
  archive.read("meta.global_step", v);
  c.meta.global_step = v.toInt();
  archive.read("meta.config_hash", v);
  c.meta.config_hash = v.toStringRef();
  check_owner(c.meta, owners, origin);

  Tensors read;
  torch::serialize::InputArchive model_archive, optim_archive;
  archive.read("model", model_archive);
  for (const auto& t : model_tensors(model)) {
    torch::Tensor value;
    if (read_nested(model_archive, t.name, t.buffer, value)) read["model." + t.name] = value;
  }
  archive.read("optimizer", optim_archive);
  read_legacy_optimizer(optim_archive, ordered_params(optimizer).size(), read, origin);
  if (amp) read_legacy_amp(archive, *amp, read, origin);
  archive.read("rng.cpu", read["rng.cpu"]);
  Listing found;
  for (const auto& [name, t] : read) found[name] = shape_of(t);
  for (const auto& name : check_listing(found, model, optimizer, amp, origin)) {
    c.tensors[name] = read[name];
  }
  return c;
}

// ---- Applying checked contents.

// Replaces the optimizer's state with the `tensors` named optim.p<i>.* (copied next to their
// parameters).
void set_optimizer_state(torch::optim::Optimizer& optimizer, const Tensors& tensors) {
  auto& state = optimizer.state();
  using Map = std::remove_reference_t<decltype(state)>;
  state.clear();
  const auto params = ordered_params(optimizer);
  const bool sgd = optimizer_kind(optimizer) == OptimizerName::kSgd;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string k = param_key(i);
    auto get = [&](const char* field) {
      const auto it = tensors.find(k + field);
      return it == tensors.end() ? torch::Tensor()
                                 : it->second.to(params[i].device(), /*non_blocking=*/false,
                                                 /*copy=*/true);
    };
    if (sgd) {
      torch::Tensor buffer = get("momentum_buffer");
      if (!buffer.defined()) continue;
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(buffer);
      state[optimizer_state_key<Map>(params[i])] = std::move(st);
      continue;
    }
    const auto step = tensors.find(k + "step");
    if (step == tensors.end()) continue;
    auto st = std::make_unique<torch::optim::AdamParamState>();
    st->step(step->second.item<int64_t>());
    st->exp_avg(get("exp_avg"));
    st->exp_avg_sq(get("exp_avg_sq"));
    if (torch::Tensor m = get("max_exp_avg_sq"); m.defined()) st->max_exp_avg_sq(m);
    state[optimizer_state_key<Map>(params[i])] = std::move(st);
  }
}

// A tensor that check_listing required, so `tensors` holds it.
const torch::Tensor& required(const Tensors& tensors, const std::string& name) {
  return tensors.at(name);
}

void apply(const Contents& c, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
           amp::Engine* amp, const std::string& origin) {
  torch::NoGradGuard no_grad;
  if (amp && amp->fp8()) {  // first: it checks the tensors before it changes anything
    std::map<std::string, torch::Tensor> fp8;
    for (const auto& [name, t] : c.tensors) {
      if (starts_with(name, "fp8.")) fp8.emplace(name, t);
    }
    amp->fp8()->load(fp8, "checkpoint " + origin);  // none (a non-FP8 parent): empty histories
  }
  for (auto& t : model_tensors(model)) t.tensor.copy_(required(c.tensors, "model." + t.name));
  set_optimizer_state(optimizer, c.tensors);
  const auto scale = c.tensors.find("amp.loss_scale");
  if (amp && scale != c.tensors.end()) {
    std::vector<torch::Tensor> masters(amp->masters().size());
    for (size_t i = 0; i < masters.size(); ++i) {
      const auto it = c.tensors.find("amp.master." + std::to_string(i));
      if (it != c.tensors.end()) masters[i] = it->second;
    }
    amp->load_state(amp::ScalerState{scale->second.item<double>(),
                                     required(c.tensors, "amp.unskipped").item<int64_t>()},
                    masters, origin);
  }
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(required(c.tensors, "rng.cpu"));
}

// The position a file names must be the one its database row records: a file copied over
// another's (another run's, an older epoch's) or written by hand must not move training to an
// epoch or step the database does not know, nor to a negative one.
void check_position(const CheckpointMeta& meta, const records::EpochRow& row,
                    const std::string& origin) {
  if (meta.epoch == row.epoch && meta.global_step == row.global_step && meta.epoch >= 0 &&
      meta.global_step >= 0) {
    return;
  }
  throw CheckpointError("checkpoint " + origin + " says it ends epoch " +
                        std::to_string(meta.epoch) + " at step " +
                        std::to_string(meta.global_step) + ", its database row epoch " +
                        std::to_string(row.epoch) + " at step " + std::to_string(row.global_step) +
                        " (a file of another epoch or run copied in its place?)");
}

// Reads, checks (against `row` when given) and applies; every failure on the way is a
// CheckpointError naming `origin`, but for a stop, which ends the run as interrupted.
CheckpointMeta load_from(std::string_view bytes, const std::string& origin,
                         const records::EpochRow* row, torch::nn::Module& model,
                         torch::optim::Optimizer& optimizer, const std::vector<std::string>& owners,
                         amp::Engine* amp) {
  const std::string what = "checkpoint " + origin + " cannot be read: ";
  try {
    const Contents c = is_legacy(bytes)
                           ? read_legacy(bytes, origin, model, optimizer, owners, amp)
                           : read_safetensors(bytes, origin, model, optimizer, owners, amp);
    if (row) check_position(c.meta, *row, origin);
    apply(c, model, optimizer, amp, origin);
    return c.meta;
  } catch (const Error&) {
    throw;
  } catch (const RunStopped&) {
    throw;
  } catch (const safetensors::Stopped& e) {  // the data layer's stop, which knows no RunStopped
    throw RunStopped(Outcome::kInterrupted, e.what());
  } catch (const c10::Error& e) {
    throw CheckpointError(what + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw CheckpointError(what + "out of memory while loading it");
  } catch (const std::exception& e) {
    throw CheckpointError(what + e.what());
  }
}

}  // namespace

void copy_optimizer_state(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  const OptimizerName kind = optimizer_kind(from);
  if (kind != optimizer_kind(to)) {
    throw CheckpointError("the parent's optimizer is " + to_string(kind) + ", the fork's " +
                          to_string(optimizer_kind(to)));
  }
  const auto a = ordered_params(from), b = ordered_params(to);
  if (a.size() != b.size()) {
    throw CheckpointError("the parent's optimizer steps " + std::to_string(a.size()) +
                          " parameters, the fork's " + std::to_string(b.size()));
  }
  Named state;
  add_optimizer_state(from, state);
  Wants wants;
  want_optimizer(to, wants);
  for (const auto& [name, t] : state) {
    // The dtype stays the parent's (an O3 parent's fp16 momentum carries over as it is).
    if (t.sizes().vec() != wants.at(name).shape.sizes) {
      throw CheckpointError("the parent's optimizer state " + name + " is " +
                            describe(shape_of(t)) + ", the fork's parameter " +
                            describe(wants.at(name).shape));
    }
  }
  set_optimizer_state(to, Tensors(state.begin(), state.end()));
}

std::string checkpoint_bytes(const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                             const amp::Engine* amp) {
  const std::map<std::string, std::string> metadata{
      {"format", meta.format},
      {"epoch", std::to_string(meta.epoch)},
      {"global_step", std::to_string(meta.global_step)},
      {"config_hash", meta.config_hash},
      {"optimizer", to_string(optimizer_kind(optimizer))}};
  return safetensors::serialize(state_tensors(model, optimizer, amp), metadata);
}

records::CheckpointFile save_checkpoint(const std::string& path, const torch::nn::Module& model,
                                      const torch::optim::Optimizer& optimizer,
                                      const CheckpointMeta& meta, const amp::Engine* amp) {
  const std::string bytes = checkpoint_bytes(model, optimizer, meta, amp);
  write_file_atomic(path, bytes);
  return records::CheckpointFile{path, static_cast<int64_t>(bytes.size()), sha256_hex(bytes)};
}

std::vector<std::string> owner_hashes(const RunInput& run) {
  std::vector<std::string> owners{run.config_hash};
  if (!run.legacy_config_hash.empty()) owners.push_back(run.legacy_config_hash);
  return owners;
}

CheckpointMeta load_checkpoint_bytes(const std::string& bytes, const std::string& origin,
                                     torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                     const std::vector<std::string>& owners, amp::Engine* amp) {
  return load_from(bytes, origin, nullptr, model, optimizer, owners, amp);
}

CheckpointMeta load_checkpoint(const records::EpochRow& row, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer,
                               const std::vector<std::string>& owners, amp::Engine* amp) {
  if (!row.checkpoint) {
    throw CheckpointError("epoch " + std::to_string(row.epoch) + " has no checkpoint recorded");
  }
  const records::CheckpointFile& expected = *row.checkpoint;
  const std::string& path = expected.path;
  const safetensors::MappedFile file(path, "checkpoint " + path,
                                     safetensors::Source::kCheckpoint);
  const std::string_view bytes = file.bytes();
  if (expected.bytes > 0 && static_cast<int64_t>(bytes.size()) != expected.bytes) {
    throw CheckpointError("checkpoint " + path + " has " + std::to_string(bytes.size()) +
                          " bytes, the database recorded " + std::to_string(expected.bytes) +
                          " (truncated or replaced)");
  }
  if (!expected.sha256.empty() && sha256_hex(bytes) != expected.sha256) {
    throw CheckpointError("checkpoint " + path + " does not match its recorded sha256 (corrupt)");
  }
  return load_from(bytes, path, &row, model, optimizer, owners, amp);
}

}  // namespace amptune::train
