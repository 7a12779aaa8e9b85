// Not a test: one Linear's training step (forward and backward, its three GEMMs) on one device,
// side by side in one process - fp32 and bf16 without FP8, and under amp.fp8 (fp32 base, current
// scaling, hybrid) with the GEMMs emulated on fp32 kernels and through torch._scaled_mm
// (amp.fp8.gemm) - the kinds alternating in rounds so that load hits all of them; median ms per
// step and the ratio to bf16. Then how far scaled_mm's output and gradients are from the
// emulation's (max |difference| / max |emulated|, one step from the same weights and data).
// Usage: amp_fp8_gemm_bench [device=cpu] [m=1024] [k=1024] [n=1024] [rounds=9] [threads=2]
// Figures and the command: docs/PERFORMANCE.md "FP8 GEMMs through _scaled_mm".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "amp/emulate.h"
#include "amp/fp8_gemm.h"
#include "amp/policy.h"
#include "compat/torch_compat.h"
#include "core/config.h"
#include "core/settings.h"

namespace {
using Clock = std::chrono::steady_clock;
namespace amp = amptune::amp;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Net : torch::nn::Module {
  Net(int64_t k, int64_t n) : fc(register_module("fc", torch::nn::Linear(k, n))) {}
  torch::nn::Linear fc;
};

amp::Policy fp8_policy(const std::string& gemm, bool cuda) {
  amptune::Config c;
  const amptune::SourceLoc here{"bench"};
  c.set_yaml("amp.fp8.enabled", "true", here);
  c.set_yaml("amp.fp8.recipe", "current", here);
  c.set_yaml("amp.fp8.gemm", gemm, here);
  return amp::resolve_policy(amptune::Settings::from(c).amp, cuda);
}

// One FP8 step of net under `policy` with a fresh scaling state: {y, dx, dw}.
std::vector<torch::Tensor> fp8_step(Net& net, const amp::Policy& policy, const torch::Tensor& x,
                                    const torch::Tensor& gy) {
  amp::ScopedPolicy policy_scope(policy);
  amp::ScopedModules modules(std::make_shared<const amp::ModuleMap>(net, policy.fp32_modules,
                                                                    policy.fp8.skip_modules));
  amp::ScopedFp8 fp8(std::make_shared<amp::Fp8State>(amp::fp8_scaling(policy.fp8)));
  net.zero_grad();
  auto xin = x.detach().requires_grad_(true);
  const torch::Tensor y = amp::linear(*net.fc, xin);
  y.backward(gy);
  return {y.detach(), xin.grad(), net.fc->weight.grad()};
}

}  // namespace

int main(int argc, char** argv) {
  const torch::Device device(argc > 1 ? argv[1] : "cpu");
  const int64_t m = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t k = argc > 3 ? std::atoll(argv[3]) : 1024;
  const int64_t n = argc > 4 ? std::atoll(argv[4]) : 1024;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 9;
  torch::set_num_threads(argc > 6 ? std::atoi(argv[6]) : 2);
  torch::manual_seed(0);
  Net net(k, n);
  net.to(device);
  const auto opts = torch::TensorOptions().device(device);
  const torch::Tensor x = torch::randn({m, k}, opts), gy = torch::randn({m, n}, opts) * 1e-3;
  const torch::Tensor w16 = net.fc->weight.detach().to(torch::kBFloat16).requires_grad_(true);
  const bool cuda = device.is_cuda();
  const amp::Policy emulated = fp8_policy("emulate", cuda);
  const amp::Policy scaled = fp8_policy("scaled_mm", cuda);
  bool have_scaled_mm = true;
  try {
    amp::check_scaled_mm(device);
  } catch (const std::exception& e) {
    std::printf("no scaled_mm kind: %s\n", e.what());
    have_scaled_mm = false;
  }

  struct Kind {
    std::string name;
    std::function<void()> run;
    std::vector<double> ms;
  };
  std::vector<Kind> kinds = {
      {"bf16 linear (no FP8)",
       [&] {
         auto xin = x.to(torch::kBFloat16).requires_grad_(true);
         torch::linear(xin, w16).backward(gy.to(torch::kBFloat16));
       },
       {}},
      {"fp32 linear (no FP8)",
       [&] {
         net.zero_grad();
         torch::linear(x.detach().requires_grad_(true), net.fc->weight).backward(gy);
       },
       {}},
      {"FP8 emulated", [&] { fp8_step(net, emulated, x, gy); }, {}},
  };
  if (have_scaled_mm) kinds.push_back({"FP8 scaled_mm", [&] { fp8_step(net, scaled, x, gy); }, {}});
  for (int r = -1; r < rounds; ++r) {  // round -1 warms up
    for (auto& kind : kinds) {
      if (cuda) torch::cuda::synchronize();
      const auto t0 = Clock::now();
      kind.run();
      if (cuda) torch::cuda::synchronize();
      if (r >= 0) {
        kind.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    }
  }
  const double base = median(kinds[0].ms);
  std::printf("Linear %lld x %lld -> %lld on %s, %d rounds, %d threads (median ms per step, "
              "ratio to bf16)\n",
              static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n),
              device.str().c_str(), rounds, torch::get_num_threads());
  for (const auto& kind : kinds) {
    std::printf("%-24s %9.3f ms  %6.2fx\n", kind.name.c_str(), median(kind.ms),
                median(kind.ms) / base);
  }
  if (!have_scaled_mm) return 0;
  const auto a = fp8_step(net, scaled, x, gy), b = fp8_step(net, emulated, x, gy);
  const char* names[] = {"output", "dgrad", "wgrad"};
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    const double scale = b[i].abs().max().item<double>();
    std::printf("scaled_mm vs emulated %-6s max |difference| / max |emulated| = %.3g\n", names[i],
                scale > 0 ? diff / scale : diff);
  }
  return 0;
}
