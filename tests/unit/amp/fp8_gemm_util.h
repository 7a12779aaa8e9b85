// What the FP8 GEMM tests (fp8_gemm_test.cpp, fp8_scaled_mm_test.cpp) share: a model with a
// Linear and a Conv2d, an FP8 policy from config keys, and what a run installs around its
// forward passes.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "amp/emulate.h"
#include "amp/fp8.h"
#include "amp/fp8_gemm.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/settings.h"

namespace amptune::amp {

inline constexpr Fp8Format kE4M3 = Fp8Format::kE4M3;
inline constexpr Fp8Format kE5M2 = Fp8Format::kE5M2;

// fc: Linear(5, 3), conv: Conv2d(2, 3, 3) with padding 1.
struct Net : torch::nn::Module {
  Net()
      : fc(register_module("fc", torch::nn::Linear(5, 3))),
        conv(register_module("conv",
                             torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 3, 3).padding(1)))) {}
  torch::nn::Linear fc;
  torch::nn::Conv2d conv;
};

// A CPU policy of amp.opt_level `level` (bf16 base) with amp.fp8.enabled and `keys` set.
inline Policy fp8_policy(const std::string& level,
                         const std::map<std::string, std::string>& keys = {},
                         const std::string& backend = "emulate") {
  Config c;
  const SourceLoc here{"test"};
  c.set_yaml("amp.opt_level", level, here);
  c.set_yaml("amp.dtype", "bf16", here);
  c.set_yaml("amp.backend", level == "O0" ? "auto" : backend, here);
  c.set_yaml("amp.fp8.enabled", "true", here);
  for (const auto& [k, v] : keys) c.set_yaml(k, v, here);
  return resolve_policy(Settings::from(c).amp, false, cpu_caps_from_flags(""));
}

// What a run installs around its forward passes.
struct Installed {
  Installed(const Policy& p, const torch::nn::Module& model, bool record = true)
      : policy(p),
        state(std::make_shared<Fp8State>(fp8_scaling(p.fp8))),
        modules(std::make_shared<const ModuleMap>(model, p.fp32_modules, p.fp8.skip_modules)),
        policy_scope(policy),
        modules_scope(modules),
        fp8_scope(state, record) {}
  Policy policy;
  std::shared_ptr<Fp8State> state;
  std::shared_ptr<const ModuleMap> modules;
  ScopedPolicy policy_scope;
  ScopedModules modules_scope;
  ScopedFp8 fp8_scope;
};

}  // namespace amptune::amp
