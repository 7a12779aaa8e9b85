// The loss scaler's unscale and overflow check over all gradients at once (foreach ops, LibTorch's
// _amp_foreach_non_finite_check_and_unscale_ where unscale_kernel picks it, one read per step)
// against the per-tensor reference it replaced - written out here: g.mul_(1/scale), then
// isfinite(g).all().item() per gradient - bit for bit on awkward gradients, and over training
// loops with planted overflows in emulation and with native bf16 (the CPU's autocast) through the
// amp Engine, whose per-parameter step of before is the reference loop's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "amp/policy.h"
#include "amp/scaler.h"
#include "compat/torch_compat.h"
#include "core/config.h"
#include "core/settings.h"

namespace amptune::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Today's unscale and check before the change, one gradient at a time.
bool reference_unscale(const std::vector<torch::Tensor>& grads, double scale, bool dynamic) {
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / scale;
  bool found = false;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    if (inv != 1.0) g.mul_(inv);
    if (dynamic && !found && !torch::isfinite(g).all().item<bool>()) found = true;
  }
  return found;
}

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& v) {
  std::vector<torch::Tensor> out;
  for (const auto& t : v) out.push_back(t.defined() ? t.clone() : torch::Tensor());
  return out;
}

// Gradients of every dtype the scaler meets (float, half, bfloat16, double), of sizes around the
// vector widths and their tails, one channels_last, one empty, undefined ones, subnormals of
// float and half, values that overflow when multiplied by a factor above 1.
std::vector<torch::Tensor> awkward_grads() {
  torch::manual_seed(11);
  std::vector<torch::Tensor> g;
  for (int64_t n : {1, 7, 8, 17, 33, 1000}) g.push_back(torch::randn({n}) * 1000);
  g.push_back(torch::Tensor());
  g.push_back((torch::randn({2, 3, 5, 7}) * 10).contiguous(torch::MemoryFormat::ChannelsLast));
  g.push_back(torch::empty({0}));
  g.push_back(torch::randn({65}).to(torch::kHalf));
  g.push_back(torch::randn({40}).to(torch::kBFloat16));
  g.push_back(torch::randn({9}, torch::kDouble) * 1e10);
  g.push_back(torch::Tensor());
  // float subnormals, the smallest half subnormal, the largest finite values
  g.push_back(torch::tensor({std::ldexp(1.0f, -149), std::ldexp(3.0f, -140),
                             -std::ldexp(1.0f, -130), 3.0e38f, -3.0e38f, 0.0f, -0.0f}));
  g.push_back(torch::tensor({std::ldexp(1.0f, -24), 65504.0f, -6.0e-8f}).to(torch::kHalf));
  return g;
}

// Plants `bad` at element `at` (counted from the end when negative) of gradient `which`.
void plant(std::vector<torch::Tensor>& g, size_t which, int64_t at, double bad) {
  torch::NoGradGuard no_grad;
  const int64_t n = g[which].numel();
  // Elements in memory order (any dense layout, channels_last included).
  g[which].as_strided({n}, {1}, g[which].storage_offset())[at < 0 ? n + at : at].fill_(bad);
}

TEST(AmpScalerDevice, KernelChoice) {
  const auto cuda = c10::DeviceType::CUDA, cpu = c10::DeviceType::CPU;
  EXPECT_EQ(unscale_kernel(cuda, torch::kFloat, 1.0 / 65536, true), UnscaleKernel::kAmpOp);
  EXPECT_EQ(unscale_kernel(cuda, torch::kFloat, 1.0, true), UnscaleKernel::kAmpOp);
  // A factor above 1 can overflow a finite value, which the fused op (checking the input)
  // would miss; double gradients would be multiplied by float(1/scale), half and bfloat16 ones
  // in float; a static scaler does not check.
  EXPECT_EQ(unscale_kernel(cuda, torch::kFloat, 2.0, true), UnscaleKernel::kForeach);
  EXPECT_EQ(unscale_kernel(cuda, torch::kDouble, 0.5, true), UnscaleKernel::kForeach);
  EXPECT_EQ(unscale_kernel(cuda, torch::kFloat, 0.5, false), UnscaleKernel::kForeach);
  EXPECT_EQ(unscale_kernel(cuda, torch::kHalf, 0.5, true), UnscaleKernel::kPerTensor);
  EXPECT_EQ(unscale_kernel(cuda, torch::kBFloat16, 0.5, false), UnscaleKernel::kPerTensor);
  EXPECT_EQ(unscale_kernel(cpu, torch::kFloat, 0.5, true),
            compat::kCpuAmpUnscale ? UnscaleKernel::kAmpOp : UnscaleKernel::kForeach);
  EXPECT_EQ(unscale_kernel(cpu, torch::kFloat, 4.0, true), UnscaleKernel::kForeach);
  EXPECT_EQ(unscale_kernel(cpu, torch::kHalf, 0.5, true), UnscaleKernel::kForeach);
  EXPECT_EQ(unscale_kernel(cpu, torch::kBFloat16, 0.5, true), UnscaleKernel::kForeach);
}

// Every scale (an inexact inverse, a power of two, 1, below 1 so the factor exceeds 1), both
// modes, with nothing planted and with inf / -inf / NaN planted at the first, a middle and the
// last element of gradients of every dtype: values and answer bit for bit the reference's.
TEST(AmpScalerDevice, EqualsPerTensorReferenceOnAwkwardGradients) {
  struct Plant {
    size_t which;
    int64_t at;
  };
  const std::vector<Plant> places = {{0, 0},  {5, 500}, {5, -1}, {7, -1},
                                     {9, 31}, {10, -1}, {11, 0}, {3, 8}};
  for (double scale : {3.0, 65536.0, 1.0, 0.25}) {
    for (bool dynamic : {true, false}) {
      ScalerOptions o;
      o.dynamic = dynamic;
      o.init_scale = scale;
      LossScaler s(o);
      ASSERT_EQ(s.scale(), scale);
      std::vector<double> bads = {0.0, kInf, -kInf, std::nan("")};
      for (double bad : bads) {
        for (size_t p = 0; p < (bad == 0.0 ? 1 : places.size()); ++p) {
          for (bool combine : {false, true}) {
            auto want = awkward_grads();
            if (bad != 0.0) plant(want, places[p].which, places[p].at, bad);
            auto got = clones(want);
            const bool f_want = reference_unscale(want, scale, dynamic);
            const bool f_got = s.unscale_and_check(got, combine);
            const std::string what = "scale " + std::to_string(scale) + " dynamic " +
                                     std::to_string(dynamic) + " bad " + std::to_string(bad) +
                                     " at " + std::to_string(p) + " combine " +
                                     std::to_string(combine);
            EXPECT_EQ(f_got, f_want) << what;
            EXPECT_EQ(f_want, dynamic && (bad != 0.0 || scale < 1)) << what;
            for (size_t i = 0; i < want.size(); ++i) {
              EXPECT_TRUE(same_bits(got[i], want[i])) << what << " gradient " << i;
            }
          }
        }
      }
    }
  }
}

TEST(AmpScalerDevice, NothingToUnscale) {
  LossScaler s(ScalerOptions{});
  EXPECT_FALSE(s.unscale_and_check({}, false));
  EXPECT_FALSE(s.unscale_and_check({torch::Tensor(), torch::Tensor()}, true));
  EXPECT_FALSE(s.unscale_and_check({torch::empty({0})}, false));
}

// The fused op itself on CUDA (the gpu check): equal to the reference there too.
TEST(AmpScalerDevice, CudaEqualsPerTensorReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  LossScaler s(ScalerOptions{});
  s.load_state({3.0, 0});
  for (bool with_inf : {false, true}) {
    auto want = awkward_grads();
    for (auto& t : want) {
      if (t.defined()) t = t.to(torch::kCUDA);
    }
    if (with_inf) plant(want, 9, 3, kInf);
    auto got = clones(want);
    EXPECT_EQ(s.unscale_and_check(got, false), reference_unscale(want, 3.0, true));
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(same_bits(got[i].defined() ? got[i].cpu() : got[i],
                            want[i].defined() ? want[i].cpu() : want[i]))
          << i;
    }
  }
}

// ---- training loops through the Engine -------------------------------------------------------

struct Mlp : torch::nn::Module {
  Mlp() {
    torch::manual_seed(4);
    a = register_module("a", torch::nn::Linear(12, 24));
    b = register_module("b", torch::nn::Linear(24, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return linear(*b, torch::relu(linear(*a, model_input(x))));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

Policy policy(const std::string& level, const std::string& dtype, const std::string& backend) {
  Config c;
  c.set_yaml("amp.opt_level", level, SourceLoc{"t"});
  c.set_yaml("amp.dtype", dtype, SourceLoc{"t"});
  c.set_yaml("amp.backend", backend, SourceLoc{"t"});
  c.set_yaml("amp.loss_scale", "dynamic", SourceLoc{"t"});
  c.set_yaml("amp.growth_interval", "3", SourceLoc{"t"});
  return resolve_policy(Settings::from(c).amp, false);
}

// The engine's step before the change, for the reference loop: low-precision gradients rounded
// onto the grid (emulation), converted into fresh master gradients, the reference unscale.
bool reference_engine_unscale(Engine& engine, torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  const Policy& p = engine.policy();
  const bool emulate = p.cast_model && p.backend == Backend::kEmulate;
  auto params = model.parameters();
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (emulate && engine.low_precision_mask()[i]) g.copy_(round_to_grid(g, p.dtype));
    torch::Tensor m = engine.masters()[i];
    if (m.defined()) {
      m.mutable_grad() = g.to(torch::kFloat, false, true);
      grads.push_back(m.grad());
    } else {
      grads.push_back(g);
    }
  }
  return reference_unscale(grads, engine.scaler().scale(), engine.scaler().dynamic());
}

struct Trajectory {
  std::vector<float> losses;
  std::vector<double> scales;
  std::vector<int> overflow_steps;
  std::vector<torch::Tensor> weights;
};

// 40 SGD steps with the loss multiplied by 1e38 at planted steps (and the scale's growth every
// 3 clean steps overflowing again by itself in fp16); `reference` takes the per-tensor step.
Trajectory train(const Policy& p, bool reference) {
  Mlp m;
  ScopedPolicy scope(p);
  Engine engine(p, m);
  torch::optim::SGD opt(engine.optimizer_params(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const std::set<int> planted = {2, 3, 11, 25};
  Trajectory t;
  torch::manual_seed(9);
  for (int step = 0; step < 40; ++step) {
    const torch::Tensor x = torch::randn({16, 12}) * 4;
    const torch::Tensor y = torch::randint(0, 3, {16});
    engine.zero_grad();
    torch::Tensor loss;
    {
      AutocastGuard autocast(p);
      loss = torch::cross_entropy_loss(fp32_op(m.forward(x)).to(torch::kFloat), y);
    }
    if (planted.count(step)) loss = loss * 1e38;
    engine.scale_loss(loss).backward();
    const bool overflow =
        reference ? reference_engine_unscale(engine, m) : engine.unscale_and_check();
    if (!overflow) opt.step();
    engine.finish_step(overflow);
    t.losses.push_back(loss.item<float>());
    t.scales.push_back(engine.scaler().scale());
    if (overflow) t.overflow_steps.push_back(step);
  }
  for (const auto& w : m.parameters()) t.weights.push_back(w.detach().clone());
  return t;
}

void expect_same(const Trajectory& a, const Trajectory& b, const std::string& what) {
  EXPECT_EQ(a.overflow_steps, b.overflow_steps) << what;
  EXPECT_EQ(a.scales, b.scales) << what;
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_TRUE(std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)) == 0) << what << " " << i;
  }
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_TRUE(same_bits(a.weights[i], b.weights[i])) << what << " weight " << i;
  }
}

TEST(AmpScalerDevice, TrainingWithPlantedOverflowsEqualsPerTensorReference) {
  struct Cell {
    const char *level, *dtype, *backend;
  };
  std::vector<Cell> cells = {{"O1", "fp16", "emulate"},
                             {"O2", "fp16", "emulate"},
                             {"O3", "fp16", "emulate"},
                             {"O2", "bf16", "emulate"}};
  // Native bf16 where this CPU runs it (oneDNN's bf16 kernels: not under the suite's
  // ONEDNN_MAX_CPU_ISA=AVX2; run the executable without it on such a CPU).
  if (detect_cpu().bf16()) {
    cells.push_back({"O1", "bf16", "native"});
  } else {
    std::printf("native bf16 left out: %s\n", detect_cpu().isa_limit.empty()
                                                  ? "no bf16 instructions"
                                                  : detect_cpu().isa_limit.c_str());
  }
  for (const Cell& c : cells) {
    const Policy p = policy(c.level, c.dtype, c.backend);
    const std::string what = std::string(c.level) + " " + c.dtype + " " + c.backend;
    const Trajectory want = train(p, true);
    const Trajectory got = train(p, false);
    expect_same(got, want, what);
    // The loop did meet the rule: the planted overflows were skipped and the scale grew back.
    for (int s : {2, 3, 11, 25}) {
      EXPECT_NE(std::find(want.overflow_steps.begin(), want.overflow_steps.end(), s),
                want.overflow_steps.end())
          << what << " step " << s;
    }
    EXPECT_GT(*std::max_element(want.scales.begin(), want.scales.end()), want.scales[3]) << what;
  }
}

}  // namespace
}  // namespace amptune::amp
