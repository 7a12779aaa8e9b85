#include "amp/scaler.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include <torch/torch.h>

#include "compat/torch_compat.h"
#include "core/error.h"

namespace amptune::amp {

LossScaler::LossScaler(const ScalerOptions& options) : options_(options) {
  if (!(options.init_scale > 0) || !(options.max_scale > 0) || options.growth_interval < 1) {
    throw ConfigError("loss scaler needs a positive scale, max_scale and growth_interval");
  }
  state_.loss_scale =
      options.dynamic ? std::min(options.max_scale, options.init_scale) : options.init_scale;
}

UnscaleKernel unscale_kernel(c10::DeviceType device, c10::ScalarType dtype, double inv_scale,
                             bool check) {
  const bool cuda = device == c10::DeviceType::CUDA;
  const bool has_op = cuda || (device == c10::DeviceType::CPU && compat::kCpuAmpUnscale);
  if (check && has_op && dtype == c10::ScalarType::Float && inv_scale <= 1.0) {
    return UnscaleKernel::kAmpOp;
  }
  const bool reduced = dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
  return cuda && reduced ? UnscaleKernel::kPerTensor : UnscaleKernel::kForeach;
}

namespace {

// Gradients by (device type, device index, dtype): each group one foreach list.
using Groups = std::map<std::tuple<int, int, int>, std::vector<torch::Tensor>>;

Groups group_gradients(const std::vector<torch::Tensor>& grads) {
  Groups groups;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    groups[{static_cast<int>(g.device().type()), static_cast<int>(g.device().index()),
            static_cast<int>(g.scalar_type())}]
        .push_back(g);
  }
  return groups;
}

// Unscales one group (one device and dtype) in place by `inv`; when `check`, appends to
// `all_finite` 0-dim bool tensors on the group's device, all true exactly when every value of
// the group is finite. Nothing is read back to the host here.
void unscale_group(const std::vector<torch::Tensor>& group, double inv, bool check,
                   std::vector<torch::Tensor>& all_finite) {
  const torch::Tensor& first = group.front();
  if (unscale_kernel(first.device().type(), first.scalar_type(), inv, check) ==
      UnscaleKernel::kAmpOp) {
    const auto options = torch::TensorOptions().dtype(torch::kFloat).device(first.device());
    torch::Tensor found = torch::zeros({1}, options);
    // float(inv): the factor mul_(inv) applies to a float tensor.
    const torch::Tensor inv_scale = torch::full({1}, inv, options);
    at::_amp_foreach_non_finite_check_and_unscale_(group, found, inv_scale);
    all_finite.push_back(found.squeeze(0).eq(0));
    return;
  }
  if (inv != 1.0) {
    if (unscale_kernel(first.device().type(), first.scalar_type(), inv, check) ==
        UnscaleKernel::kPerTensor) {
      for (const auto& g : group) g.mul_(inv);
    } else {
      at::_foreach_mul_(group, inv);
    }
  }
  if (!check) return;
  for (const auto& g : group) all_finite.push_back(torch::isfinite(g).all());
}

}  // namespace

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& grads, bool combine) const {
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / state_.loss_scale;
  const bool check = options_.dynamic;
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> all_finite;  // by device
  for (auto& [key, group] : group_gradients(grads)) {
    auto& flags = all_finite[{std::get<0>(key), std::get<1>(key)}];
    if (!combine) {
      unscale_group(group, inv, check, flags);
      continue;
    }
    // One flat buffer per dtype and device: one unscale and one check, then copied back.
    std::vector<torch::Tensor> flat_parts;
    flat_parts.reserve(group.size());
    for (const auto& g : group) flat_parts.push_back(g.reshape({-1}));
    const torch::Tensor flat = torch::cat(flat_parts);
    unscale_group({flat}, inv, check, flags);
    int64_t offset = 0;
    for (const auto& g : group) {
      g.copy_(flat.narrow(0, offset, g.numel()).view(g.sizes()));
      offset += g.numel();
    }
  }
  bool found = false;
  for (const auto& [device, flags] : all_finite) {
    // The one read of the step (per device): every group's flags reduced where they are.
    if (!flags.empty() && !torch::stack(flags).all().item<bool>()) found = true;
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
