// Not a test: step time of the fused (multi-tensor) optimizers against LibTorch's SGD / Adam on
// the quickstart model's parameter set (ResNet-18 width 0.25, 3x3 stem, 1 input channel, 10
// classes), side by side in one process. Only optimizer.step() is timed, with fixed random
// gradients; fused and unfused alternate in rounds so that load from other processes hits both.
// Usage: train_optimizer_bench [steps_per_round=50] [rounds=10] [threads=2]
// Figures and the command to build and run it: docs/PERFORMANCE.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "core/settings.h"
#include "models/from_config.h"
#include "support/tiny_config.h"
#include "train/optimizer.h"

namespace {
using amptune::Config;
using Clock = std::chrono::steady_clock;

// experiments/quickstart.yaml's model: the tests' tiny ResNet-18 at width 0.25 with 10 classes.
Config quickstart(const std::string& optim) {
  Config c = amptune::testing::tiny_config();
  c.set("model.num_classes", 10);
  c.set("model.width", 0.25);
  c.set("optim.name", optim);
  c.set("optim.lr", optim == "sgd" ? 0.1 : 1e-3);
  c.set("optim.nesterov", true);
  c.set("optim.weight_decay", 5e-4);
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 50;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 10;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  torch::set_num_threads(threads);
  std::printf("optimizer step time, quickstart model, %d rounds x %d steps, %d threads\n", rounds,
              steps, threads);
  std::printf("%-6s %8s %8s %14s %14s %8s\n", "optim", "tensors", "params", "unfused us", "fused us",
              "ratio");
  for (const std::string name : {"sgd", "adam"}) {
    const Config config = quickstart(name);
    const amptune::Settings settings = amptune::Settings::from(config);
    const amptune::OptimSettings& optim = settings.optim;
    torch::manual_seed(0);
    auto model_u = amptune::models::build_classifier(settings.model);
    auto model_f = amptune::models::build_classifier(settings.model);
    int64_t numel = 0;
    for (auto& p : model_u->parameters()) numel += p.numel();
    std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;
    for (auto* model : {&model_u, &model_f}) {
      for (auto& p : (*model)->parameters()) p.mutable_grad() = torch::randn_like(p) * 1e-2;
    }
    opts.push_back(amptune::train::make_optimizer(optim, model_u->parameters(), false));
    opts.push_back(amptune::train::make_optimizer(optim, model_f->parameters(), true));
    for (auto& opt : opts) {
      for (int i = 0; i < 10; ++i) opt->step();  // warm-up: state allocated, caches hot
    }
    std::vector<double> us[2];
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const auto t0 = Clock::now();
        for (int i = 0; i < steps; ++i) opts[k]->step();
        const std::chrono::duration<double, std::micro> dt = Clock::now() - t0;
        us[k].push_back(dt.count() / steps);
      }
    }
    const double u = median(us[0]), f = median(us[1]);
    std::printf("%-6s %8zu %8lld %14.1f %14.1f %8.2f\n", name.c_str(), model_u->parameters().size(),
                static_cast<long long>(numel), u, f, f / u);
  }
  return 0;
}
