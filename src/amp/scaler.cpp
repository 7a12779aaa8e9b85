#include "amp/scaler.h"

#include <algorithm>
#include <map>

#include <torch/torch.h>

#include "core/error.h"

namespace amptune::amp {

LossScaler::LossScaler(const ScalerOptions& options) : options_(options) {
  if (!(options.init_scale > 0) || !(options.max_scale > 0) || options.growth_interval < 1) {
    throw ConfigError("loss scaler needs a positive scale, max_scale and growth_interval");
  }
  state_.loss_scale =
      options.dynamic ? std::min(options.max_scale, options.init_scale) : options.init_scale;
}

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& grads, bool combine) const {
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / state_.loss_scale;
  bool found = false;
  if (!combine) {
    for (const auto& g : grads) {
      if (!g.defined()) continue;
      if (inv != 1.0) g.mul_(inv);
      if (options_.dynamic && !found && !torch::isfinite(g).all().item<bool>()) found = true;
    }
    return found;
  }
  // One flat buffer per dtype (and device): one multiply and one check each.
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> groups;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    groups[{static_cast<int>(g.scalar_type()), static_cast<int>(g.device().type())}].push_back(g);
  }
  for (auto& [key, list] : groups) {
    std::vector<torch::Tensor> flat_parts;
    flat_parts.reserve(list.size());
    for (const auto& g : list) flat_parts.push_back(g.reshape({-1}));
    torch::Tensor flat = torch::cat(flat_parts);
    if (inv != 1.0) flat.mul_(inv);
    if (options_.dynamic && !found && !torch::isfinite(flat).all().item<bool>()) found = true;
    int64_t offset = 0;
    for (const auto& g : list) {
      g.copy_(flat.narrow(0, offset, g.numel()).view(g.sizes()));
      offset += g.numel();
    }
  }
  return found;
}

std::optional<ScaleChange> LossScaler::update(bool overflow, bool* skip) {
  const double before = state_.loss_scale;
  ScaleReason reason = ScaleReason::kOverflow;
  bool should_skip = false;
  if (overflow && options_.dynamic) {
    should_skip = true;
    state_.loss_scale = state_.loss_scale * options_.backoff_factor;
    if (options_.min_scale > 0) state_.loss_scale = std::max(options_.min_scale, state_.loss_scale);
    state_.unskipped = 0;
    reason = ScaleReason::kOverflow;
  } else {
    state_.unskipped += 1;
  }
  if (state_.unskipped == options_.growth_interval && options_.dynamic) {
    state_.loss_scale = std::min(options_.max_scale, state_.loss_scale * options_.growth_factor);
    state_.unskipped = 0;
    reason = ScaleReason::kGrowth;
  }
  if (skip) *skip = should_skip;
  if (state_.loss_scale != before) return ScaleChange{state_.loss_scale, reason};
  return std::nullopt;
}

}  // namespace amptune::amp
