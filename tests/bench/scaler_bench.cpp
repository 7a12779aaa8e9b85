// Not a test: the loss scaler's unscale and overflow check of one step's gradients on the CPU,
// LossScaler::unscale_and_check (all gradients at once, one read) against the per-tensor loop it
// replaced (g.mul_(1/scale); isfinite(g).all().item() per gradient), side by side in one process:
// the two alternate in rounds so that load from other processes hits both; median time per step.
// Gradient sets: the quickstart model's (ResNet-18 width 0.25, 62 tensors) and ResNet-50's at
// 1000 classes (161 tensors, 25.6 M values), random, scale 65536.
// Usage: amp_scaler_bench [steps_per_round=20] [rounds=8] [threads=2]
// Figures and the command to build and run it: docs/PERFORMANCE.md "Loss scaler on the device".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "amp/scaler.h"
#include "core/config.h"
#include "core/settings.h"
#include "models/from_config.h"
#include "support/tiny_config.h"

namespace {
using Clock = std::chrono::steady_clock;

bool reference_unscale(const std::vector<torch::Tensor>& grads, double scale) {
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / scale;
  bool found = false;
  for (const auto& g : grads) {
    if (inv != 1.0) g.mul_(inv);
    if (!found && !torch::isfinite(g).all().item<bool>()) found = true;
  }
  return found;
}

std::vector<torch::Tensor> gradients_of(const std::string& model, double width, int64_t classes) {
  amptune::Config c = amptune::testing::tiny_config();
  c.set("model.name", model);
  c.set("model.width", width);
  c.set("model.num_classes", classes);
  if (model == "resnet50") {
    c.set("model.in_channels", 3);
    c.set("model.small_input", false);
  }
  torch::manual_seed(0);
  auto net = amptune::models::build_classifier(amptune::Settings::from(c).model);
  std::vector<torch::Tensor> grads;
  for (const auto& p : net->parameters()) grads.push_back(torch::randn(p.sizes()) * 1000);
  return grads;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 8;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  torch::set_num_threads(threads);
  std::printf("unscale + check per step, CPU, %d rounds x %d steps, %d threads\n", rounds, steps,
              threads);
  std::printf("%-22s %8s %10s %14s %14s %8s\n", "gradients", "tensors", "values", "per-tensor us",
              "all-at-once us", "ratio");
  amptune::amp::LossScaler scaler(amptune::amp::ScalerOptions{});
  for (const auto& [name, model, width, classes] :
       {std::make_tuple("quickstart resnet18", "resnet18", 0.25, int64_t{10}),
        std::make_tuple("resnet50", "resnet50", 1.0, int64_t{1000})}) {
    const std::vector<torch::Tensor> original = gradients_of(model, width, classes);
    int64_t values = 0;
    for (const auto& g : original) values += g.numel();
    std::vector<torch::Tensor> work;
    for (const auto& g : original) work.push_back(g.clone());
    auto timed = [&](bool reference) {
      double us = 0;
      for (int s = 0; s < steps; ++s) {
        const auto start = Clock::now();
        const bool found = reference ? reference_unscale(work, scaler.scale())
                                     : scaler.unscale_and_check(work, false);
        us += std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        if (found) std::abort();
        // The same values each step (the factor 1/2^16 is exact): multiplied back, untimed.
        for (auto& g : work) g.mul_(scaler.scale());
      }
      return us / steps;
    };
    std::vector<double> ref_us, new_us;
    for (int r = 0; r < rounds; ++r) {
      ref_us.push_back(timed(true));
      new_us.push_back(timed(false));
    }
    const double a = median(ref_us), b = median(new_us);
    std::printf("%-22s %8zu %10lld %14.0f %14.0f %8.2f\n", name, original.size(),
                static_cast<long long>(values), a, b, b / a);
  }
  return 0;
}
