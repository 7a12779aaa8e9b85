// Shared by the amp tests on a ResNet: an emulated policy of an opt level (with
// amp.fp32_modules) and a small seeded ResNet-18.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "amp/policy.h"
#include "core/config.h"
#include "core/settings.h"
#include "models/resnet.h"

namespace amptune::amp {

inline Policy emulated(const std::string& level, const std::vector<std::string>& fp32 = {}) {
  Config c;
  c.set_yaml("amp.opt_level", level, SourceLoc{"t"});
  c.set_yaml("amp.backend", level == "O0" ? "auto" : "emulate", SourceLoc{"t"});
  c.set("amp.fp32_modules", fp32);
  return resolve_policy(Settings::from(c).amp, false);
}

inline models::ResNet small_resnet() {
  models::ResNetOptions o;
  o.depth = 18;
  o.num_classes = 10;
  o.in_channels = 1;
  o.width = 0.125;
  o.small_input = true;
  torch::manual_seed(5);
  return models::ResNet(o);
}

}  // namespace amptune::amp
