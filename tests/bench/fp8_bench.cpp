// Not a test: what FP8 emulation's rounding costs on the CPU against the bf16 and fp16 rounding
// it sits beside (amp/fp8.h round_to_fp8, fp8_quantise, fp8_amax + fp8_fake_quantise;
// amp/emulate.h round_to_grid), on one activation-sized tensor, side by side in one process: the
// kinds alternate in rounds so that load from other processes hits all of them; median time per
// call and the ratio to bf16.
// Usage: amp_fp8_bench [millions_of_values=16] [rounds=9] [threads=2]
// Figures and the command to build and run it: docs/PERFORMANCE.md "FP8 emulation".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "amp/emulate.h"
#include "amp/fp8.h"

namespace {
using Clock = std::chrono::steady_clock;
using amptune::amp::Fp8Format;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = (argc > 1 ? std::atoll(argv[1]) : 16) * 1000000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  torch::set_num_threads(argc > 3 ? std::atoi(argv[3]) : 2);
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({n}) * 3;
  struct Kind {
    std::string name;
    std::function<torch::Tensor()> run;
    std::vector<double> ms;
  };
  std::vector<Kind> kinds = {
      {"bf16 round_to_grid", [&] { return amptune::amp::round_to_grid(x, amptune::Dtype::kBf16); },
       {}},
      {"fp16 round_to_grid", [&] { return amptune::amp::round_to_grid(x, amptune::Dtype::kFp16); },
       {}},
      {"e4m3 round_to_fp8", [&] { return amptune::amp::round_to_fp8(x, Fp8Format::kE4M3); }, {}},
      {"e5m2 round_to_fp8", [&] { return amptune::amp::round_to_fp8(x, Fp8Format::kE5M2); }, {}},
      {"e4m3 fp8_quantise (x * scale)",
       [&] { return amptune::amp::fp8_quantise(x, 37.5f, Fp8Format::kE4M3); }, {}},
      {"e4m3 amax + quantise + dequantise",
       [&] {
         const float amax = amptune::amp::fp8_amax(x);
         const float s = amptune::amp::fp8_scale_from_amax(amax, Fp8Format::kE4M3, 0);
         return amptune::amp::fp8_fake_quantise(x, s, Fp8Format::kE4M3);
       },
       {}},
  };
  for (int r = 0; r < rounds; ++r) {
    for (auto& k : kinds) {
      const auto t0 = Clock::now();
      const torch::Tensor y = k.run();
      k.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (y.numel() != n) return 1;
    }
  }
  const double base = median(kinds[0].ms);
  std::printf("%lld values, %d rounds, %d threads (median ms per call, ratio to bf16)\n",
              static_cast<long long>(n), rounds, torch::get_num_threads());
  for (const auto& k : kinds) {
    std::printf("%-36s %8.2f ms  %5.2fx\n", k.name.c_str(), median(k.ms), median(k.ms) / base);
  }
  return 0;
}
