// `amptune data plant-weights`: the seeded initial weights of a run's model, some scaled.
#include "train/planted_weights.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "models/weights.h"
#include "train/session.h"

namespace amptune::train {
namespace {

constexpr size_t kNearNames = 8;  // names listed when one is unknown

size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// The names to show beside an unknown `name`: the closest by edit distance (suggest_among), then
// those sharing the longest prefix with it ("layer3.0.conv.weight" -> layer3.0.conv1.weight,
// layer3.0.conv2.weight), at most kNearNames.
std::string near_names(const std::string& name, const std::vector<std::string>& names) {
  std::vector<std::string> near;
  if (std::string close = suggest_among(name, names); !close.empty()) near.push_back(close);
  size_t longest = 0;
  for (const auto& n : names) longest = std::max(longest, common_prefix(name, n));
  for (const auto& n : names) {
    if (near.size() >= kNearNames) break;
    if (common_prefix(name, n) == longest && std::find(near.begin(), near.end(), n) == near.end()) {
      near.push_back(n);
    }
  }
  std::string out;
  for (const auto& n : near) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The floating tensor `scale` names (or its slice "NAME[K]" along the first dimension),
// multiplied in place. ConfigError as plant_weights says.
void apply_scale(std::map<std::string, torch::Tensor>& state, const WeightScale& scale,
                 const std::vector<std::string>& names) {
  const std::string what = "--scale " + scale.name;
  static const std::regex kSlice(R"((.*)\[([0-9]{1,9})\])");
  std::smatch slice;
  const bool sliced = std::regex_match(scale.name, slice, kSlice);
  const std::string name = sliced ? slice[1].str() : scale.name;
  auto it = state.find(name);
  if (it == state.end()) {
    throw ConfigError(what + ": the model has no parameter or buffer of this name; near names: " +
                      near_names(name, names) +
                      " (all of them: amptune diagnose lists the "
                      "modules; a tensor's name is its module's name + .weight, .bias, ...)");
  }
  torch::Tensor& t = it->second;
  if (!t.is_floating_point()) {
    throw ConfigError(what + ": " + scale.name + " holds integers (a counter), not weights");
  }
  if (!std::isfinite(scale.factor)) throw ConfigError(what + ": the factor must be finite");
  torch::Tensor scaled = t * scale.factor;
  if (sliced) {
    const int64_t k = std::stoll(slice[2].str());
    if (t.dim() < 1 || k >= t.size(0)) {
      throw ConfigError(what + ": " + name + " has " +
                        std::to_string(t.dim() < 1 ? 0 : t.size(0)) +
                        " slices along its first dimension; K counts from 0");
    }
    scaled = t.clone();
    scaled[k] = t[k] * scale.factor;
  }
  if (!torch::isfinite(scaled).all().item<bool>()) {
    throw ConfigError(what + "=" + std::to_string(scale.factor) + ": the scaled " + scale.name +
                      " is not finite in fp32 (largest value " +
                      std::to_string(t.abs().max().item<double>()) + ")");
  }
  t = scaled;
}

}  // namespace

ExportResult plant_weights(const Config& config, const std::vector<WeightScale>& scales,
                           const std::string& out) {
  Config seeded = config;
  seeded.set("model.weights", "");  // the seeded initialisation, not a file's values
  seeded.set("model.backbone_weights", "");
  const Settings settings = Settings::from(seeded);
  torch::NoGradGuard no_grad;
  torch::manual_seed(static_cast<uint64_t>(settings.seed));  // as build_session (session.h)
  const std::unique_ptr<Task> task = make_task(settings);
  std::map<std::string, torch::Tensor> state;
  std::vector<std::string> names;
  for (const auto& [name, t] : models::state_dict(task->module())) {
    state.emplace(name, t.detach().clone());
    names.push_back(name);
  }
  std::set<std::string> seen;
  for (const WeightScale& scale : scales) {
    if (!seen.insert(scale.name).second) {
      throw ConfigError("--scale " + scale.name + " is given twice; give each tensor one factor");
    }
    apply_scale(state, scale, names);
  }
  return write_weights(state, out);
}

}  // namespace amptune::train
