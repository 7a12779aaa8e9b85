// FP8 GEMMs at the built-in boundaries (amp/fp8_gemm.h): a Linear and a Conv2d under amp.fp8
// against a hand computation of Transformer Engine's semantics - operands quantised with the
// slots' scales (delayed: 1, then from the history; current: from the tensor itself), the output
// gradient quantised in E5M2 under hybrid and E4M3 under e4m3, the bias gradient not quantised -
// on an fp32 (O0) and an emulated bf16 (O1) base; native autocast giving the emulation's bits;
// skip_modules and fp32_modules kept out; evaluation recording nothing; the observer.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "amp/emulate.h"
#include "amp/fp8.h"
#include "amp/fp8_gemm.h"
#include "amp/policy.h"
#include "core/error.h"
#include "core/settings.h"
#include "unit/amp/fp8_gemm_util.h"

namespace amptune::amp {
namespace {

torch::Tensor lin(const torch::Tensor& a, const torch::Tensor& w) { return torch::linear(a, w); }

torch::Tensor fq(const torch::Tensor& v, float scale, Fp8Format f) {
  return fp8_quantise(v, scale, f) * (1.0f / scale);
}
float abs_max(const torch::Tensor& t) { return t.abs().max().item<float>(); }
torch::Tensor bf16(const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat); }

void expect_same(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_TRUE(torch::equal(got, want)) << what << ": max difference "
                                       << (got - want).abs().max().item<float>();
}

// The reference gradients of y = op(qx, qw) + b given dL/dy = gy: autograd's own backward of the
// same op fed the quantised gradient gq, and the bias's sum of the unquantised gy.
struct Grads {
  torch::Tensor x, w, b;
};
template <class Op>
Grads reference_grads(const torch::Tensor& qx, const torch::Tensor& qw, const torch::Tensor& gq,
                      const torch::Tensor& gy, const torch::Tensor& b, Op op) {
  auto lx = qx.detach().requires_grad_(true), lw = qw.detach().requires_grad_(true);
  op(lx, lw).backward(gq);
  auto lb = b.detach().requires_grad_(true);
  const auto y0 = op(qx, qw).detach();
  auto shaped = y0.dim() == 4 ? lb.view({1, -1, 1, 1}) : lb;
  ((y0 + shaped) * gy).sum().backward();
  return {lx.grad(), lw.grad(), lb.grad()};
}

// Two delayed-scaling steps of a Linear on an fp32 base: step 1 with scale 1, step 2 with the
// scales of step 1's amaxes; `e4m3` the format of the gradient.
void linear_two_steps(const std::string& format) {
  torch::manual_seed(3);
  Net net;
  Installed run(fp8_policy("O0", {{"amp.fp8.format", format}}), net);
  const Fp8Format gf = format == "hybrid" ? kE5M2 : kE4M3;
  const torch::Tensor x = torch::randn({4, 5}) * 3;
  const torch::Tensor gy = torch::randn({4, 3}) * 1e-3;
  const torch::Tensor w = net.fc->weight.detach(), b = net.fc->bias.detach();
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + ", format " + format);
    net.zero_grad();
    auto xin = x.clone().requires_grad_(true);
    const torch::Tensor y = amp::linear(*net.fc, xin);
    y.backward(gy);
    const float sx = step == 0 ? 1.0f : fp8_scale_from_amax(abs_max(x), kE4M3, 0);
    const float sw = step == 0 ? 1.0f : fp8_scale_from_amax(abs_max(w), kE4M3, 0);
    const float sg = step == 0 ? 1.0f : fp8_scale_from_amax(abs_max(gy), gf, 0);
    const auto qx = fq(x, sx, kE4M3), qw = fq(w, sw, kE4M3), gq = fq(gy, sg, gf);
    expect_same(y, torch::linear(qx, qw) + b, "forward");
    const Grads want = reference_grads(qx, qw, gq, gy, b, lin);
    expect_same(xin.grad(), want.x, "dgrad");
    expect_same(net.fc->weight.grad(), want.w, "wgrad");
    expect_same(net.fc->bias.grad(), want.b, "bias gradient (not quantised)");
    run.state->end_step();
  }
  const auto tensors = run.state->to_tensors();
  EXPECT_EQ(tensors.at("fp8.fc.input.history").numel(), 2);
  EXPECT_EQ(tensors.at("fp8.fc.grad_output.history")[1].item<float>(), abs_max(gy));
  EXPECT_EQ(tensors.size(), 6u);  // input, weight, grad_output: history and scale each
}

TEST(Fp8Gemm, LinearOnAnFp32BaseIsTransformerEnginesRecipeHybrid) { linear_two_steps("hybrid"); }
TEST(Fp8Gemm, LinearOnAnFp32BaseIsTransformerEnginesRecipeE4M3) { linear_two_steps("e4m3"); }

TEST(Fp8Gemm, TheGradientFormatMatters) {
  std::map<std::string, torch::Tensor> wgrad;
  for (const std::string format : {"hybrid", "e4m3"}) {
    torch::manual_seed(3);
    Net net;
    Installed run(fp8_policy("O0", {{"amp.fp8.format", format}}), net);
    amp::linear(*net.fc, torch::randn({4, 5})).backward(torch::randn({4, 3}) * 0.3);
    wgrad[format] = net.fc->weight.grad().clone();
  }
  EXPECT_FALSE(torch::equal(wgrad["hybrid"], wgrad["e4m3"]));
}

TEST(Fp8Gemm, CurrentScalingQuantisesWithTheTensorsOwnAmax) {
  torch::manual_seed(4);
  Net net;
  Installed run(fp8_policy("O0", {{"amp.fp8.recipe", "current"}, {"amp.fp8.margin", "1"}}), net);
  const torch::Tensor x = torch::randn({4, 5}) * 1e-3, gy = torch::randn({4, 3}) * 50;
  net.zero_grad();
  const torch::Tensor y = amp::linear(*net.fc, x);
  y.backward(gy);
  const torch::Tensor w = net.fc->weight.detach();
  const auto qx = fq(x, fp8_scale_from_amax(abs_max(x), kE4M3, 1), kE4M3);
  const auto qw = fq(w, fp8_scale_from_amax(abs_max(w), kE4M3, 1), kE4M3);
  const auto gq = fq(gy, fp8_scale_from_amax(abs_max(gy), kE5M2, 1), kE5M2);
  expect_same(y, torch::linear(qx, qw) + net.fc->bias.detach(), "forward");
  const Grads want = reference_grads(qx, qw, gq, gy, net.fc->bias.detach(), lin);
  expect_same(net.fc->weight.grad(), want.w, "wgrad");
  // Scale 1 would have flushed x: not the same.
  EXPECT_FALSE(torch::equal(qx, fq(x, 1.0f, kE4M3)));
}

TEST(Fp8Gemm, Conv2dSecondDelayedStep) {
  torch::manual_seed(5);
  Net net;
  Installed run(fp8_policy("O0"), net);
  const torch::Tensor x = torch::randn({2, 2, 5, 5}) * 0.05, gy = torch::randn({2, 3, 5, 5});
  const auto conv = [](const torch::Tensor& a, const torch::Tensor& w) {
    return torch::conv2d(a, w, {}, 1, 1);
  };
  amp::conv2d(*net.conv, x).backward(gy);  // step 1 fills the histories
  run.state->end_step();
  net.zero_grad();
  auto xin = x.clone().requires_grad_(true);
  const torch::Tensor y = amp::conv2d(*net.conv, xin);
  y.backward(gy);
  const torch::Tensor w = net.conv->weight.detach(), b = net.conv->bias.detach();
  const auto qx = fq(x, fp8_scale_from_amax(abs_max(x), kE4M3, 0), kE4M3);
  const auto qw = fq(w, fp8_scale_from_amax(abs_max(w), kE4M3, 0), kE4M3);
  const auto gq = fq(gy, fp8_scale_from_amax(abs_max(gy), kE5M2, 0), kE5M2);
  expect_same(y, conv(qx, qw) + b.view({1, -1, 1, 1}), "forward");
  const Grads want = reference_grads(qx, qw, gq, gy, b, conv);
  expect_same(xin.grad(), want.x, "dgrad");
  expect_same(net.conv->weight.grad(), want.w, "wgrad");
  expect_same(net.conv->bias.grad(), want.b, "bias gradient");
}

// O1 bf16 (emulated): the operands are the bf16 values O1 gives the GEMM, quantised; the output
// and the gradients handed back are rounded onto bf16 as without FP8.
TEST(Fp8Gemm, LinearOnAnEmulatedBf16Base) {
  torch::manual_seed(6);
  Net net;
  Installed run(fp8_policy("O1"), net);
  const torch::Tensor x = torch::randn({4, 5}) * 7, gy = torch::randn({4, 3}) * 1e-2;
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    net.zero_grad();
    auto xin = x.clone().requires_grad_(true);
    const torch::Tensor y = amp::linear(*net.fc, xin);
    y.backward(gy);
    const torch::Tensor bx = bf16(x), bw = bf16(net.fc->weight.detach()),
                        bb = bf16(net.fc->bias.detach()), bg = bf16(gy);
    const float sx = step == 0 ? 1.0f : fp8_scale_from_amax(abs_max(bx), kE4M3, 0);
    const float sw = step == 0 ? 1.0f : fp8_scale_from_amax(abs_max(bw), kE4M3, 0);
    const float sg = step == 0 ? 1.0f : fp8_scale_from_amax(abs_max(bg), kE5M2, 0);
    const auto qx = fq(bx, sx, kE4M3), qw = fq(bw, sw, kE4M3), gq = fq(bg, sg, kE5M2);
    expect_same(y, bf16(torch::linear(qx, qw) + bb), "forward");
    const Grads want = reference_grads(qx, qw, gq, bg, bb, lin);
    expect_same(xin.grad(), bf16(want.x), "dgrad");
    expect_same(net.fc->weight.grad(), bf16(want.w), "wgrad");
    expect_same(net.fc->bias.grad(), bf16(want.b), "bias gradient");
    run.state->end_step();
  }
}

// Native O1 (CPU bf16 autocast): the FP8 op runs in fp32 with autocast off and its output is cast
// to bf16 - the emulation's values.
TEST(Fp8Gemm, NativeAutocastGivesTheEmulatedValues) {
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> out;
  for (const std::string backend : {"emulate", "native"}) {
    torch::manual_seed(7);
    Net net;
    Installed run(fp8_policy("O1", {}, backend), net);
    const torch::Tensor x = torch::randn({4, 5}) * 7;
    torch::Tensor y;
    {
      AutocastGuard autocast(run.policy);
      y = amp::linear(*net.fc, x);
    }
    y.to(torch::kFloat).backward(torch::ones({4, 3}) * 0.01);
    out[backend] = {y.to(torch::kFloat), net.fc->weight.grad().to(torch::kFloat)};
  }
  EXPECT_EQ(out["native"].first.scalar_type(), torch::kFloat);
  expect_same(out["native"].first, out["emulate"].first, "forward");
  expect_same(out["native"].second, out["emulate"].second, "wgrad");
}

TEST(Fp8Gemm, SkippedAndFp32ModulesRunNoFp8) {
  torch::manual_seed(8);
  Net net;
  const torch::Tensor x = torch::randn({4, 5}) * 3;
  torch::Tensor plain, plain_fp32;
  {
    ScopedPolicy o1(fp8_policy("O1", {{"amp.fp8.enabled", "false"}}));
    plain = amp::linear(*net.fc, x);
  }
  plain_fp32 = net.fc->forward(x);
  {
    Installed run(fp8_policy("O1", {{"amp.fp8.skip_modules", "[fc]"}}), net);
    expect_same(amp::linear(*net.fc, x), plain, "skip_modules: the base precision");
    amp::conv2d(*net.conv, torch::randn({1, 2, 4, 4}));  // not skipped
    const auto tensors = run.state->to_tensors();
    EXPECT_EQ(tensors.count("fp8.fc.input.history"), 0u);
    EXPECT_EQ(tensors.count("fp8.conv.input.history"), 1u);
  }
  {
    Installed run(fp8_policy("O1", {{"amp.fp32_modules", "[fc]"}}), net);
    expect_same(amp::linear(*net.fc, x), plain_fp32, "fp32_modules: fp32");
    EXPECT_TRUE(run.state->to_tensors().empty());
  }
  try {
    Installed run(fp8_policy("O0", {{"amp.fp8.skip_modules", "[nothing*]"}}), net);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("amp.fp8.skip_modules"), std::string::npos) << e.what();
  }
}

TEST(Fp8Gemm, EvaluationRecordsNoAmax) {
  torch::manual_seed(9);
  Net net;
  Installed run(fp8_policy("O0"), net);
  amp::linear(*net.fc, torch::randn({4, 5}));  // training: recorded
  run.state->end_step();
  const auto before = run.state->to_tensors();
  {
    ScopedFp8 eval(run.state, /*record=*/false);
    torch::NoGradGuard no_grad;
    const torch::Tensor x = torch::randn({4, 5}) * 100;
    const torch::Tensor y = amp::linear(*net.fc, x);
    const float sx = fp8_scale_from_amax(before.at("fp8.fc.input.history")[0].item<float>(),
                                         kE4M3, 0);
    const float sw = run.state->slot("fc", Fp8Role::kWeight, kE4M3)->scale();
    expect_same(y, torch::linear(fq(x, sx, kE4M3), fq(net.fc->weight.detach(), sw, kE4M3)) +
                       net.fc->bias.detach(),
                "evaluation at the scales in force");
  }
  for (float a : run.state->step_amaxes()) EXPECT_EQ(a, 0.0f);
}

TEST(Fp8Gemm, ObserverSeesEveryQuantisation) {
  torch::manual_seed(10);
  Net net;
  Installed run(fp8_policy("O0", {{"amp.fp8.format", "e4m3"}}), net);
  std::vector<std::string> seen;
  run.state->set_observer(std::make_shared<const Fp8Observer>(
      [&](const std::string& key, Fp8Role role, const torch::Tensor& v, float scale,
          Fp8Format format) {
        seen.push_back(key + "." + to_string(role) + ":" + to_string(format));
        EXPECT_GT(v.numel(), 0);
        EXPECT_EQ(scale, 1.0f);
      }));
  amp::linear(*net.fc, torch::randn({4, 5})).sum().backward();
  EXPECT_EQ(seen, (std::vector<std::string>{"fc.input:e4m3", "fc.weight:e4m3",
                                            "fc.grad_output:e4m3"}));
}

TEST(Fp8Gemm, NoStateInstalledIsAnError) {
  Net net;
  const Policy p = fp8_policy("O0");
  ScopedPolicy policy(p);
  ScopedModules modules(std::make_shared<const ModuleMap>(net, p.fp32_modules));
  EXPECT_THROW(amp::linear(*net.fc, torch::randn({1, 5})), std::logic_error);
}

TEST(Fp8Gemm, PolicyRefusesOutOfBoundsAndSummarises) {
  AmpSettings s;
  s.fp8.enabled = true;
  s.fp8.margin = 65;
  EXPECT_THROW(resolve_policy(s, false), ConfigError);
  s.fp8.margin = 2;
  s.fp8.amax_history_len = 0;
  EXPECT_THROW(resolve_policy(s, false), ConfigError);
  s.fp8.amax_history_len = 16;
  const Policy p = resolve_policy(s, false);
  EXPECT_EQ(p.fp8.summary(), "fp8 hybrid, delayed scaling (margin 2, amax history 16, max)");
  s.fp8.enabled = false;
  EXPECT_EQ(resolve_policy(s, false).fp8.summary(), "");
}

}  // namespace
}  // namespace amptune::amp
