// fp16/bf16 emulation: rounding facts, the model boundary calls, and the Engine's step protocol
// (O2 masters, O3 lost updates and underflow, O1 vs O0 on a tiny model).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"

namespace amptune::amp {
namespace {

float fp16(float v) { return round_to_grid(torch::tensor({v}), Dtype::kFp16)[0].item<float>(); }
float bf16(float v) { return round_to_grid(torch::tensor({v}), Dtype::kBf16)[0].item<float>(); }

Policy policy_for(const std::string& level, const std::string& scale = "auto",
                  const std::string& dtype = "fp16") {
  Config c;
  c.set_yaml("amp.opt_level", level, SourceLoc{"t"});
  c.set_yaml("amp.loss_scale", scale, SourceLoc{"t"});
  c.set_yaml("amp.dtype", dtype, SourceLoc{"t"});
  c.set_yaml("amp.backend", level == "O0" ? "auto" : "emulate", SourceLoc{"t"});
  return resolve_policy(Settings::from(c).amp, false);
}

// The fused rounding kernel equals the two tensor conversions bit for bit on every kind of
// float (random bit patterns: normals, subnormals, huge values, infinities, NaNs, -0), across
// vector width, tails and the parallel chunks.
TEST(AmpEmulation, FusedRoundingEqualsTensorConversion) {
  torch::manual_seed(7);
  const int64_t n = 200003;
  torch::Tensor bits = torch::randint(std::numeric_limits<int32_t>::min(),
                                      std::numeric_limits<int32_t>::max(), {n}, torch::kInt);
  torch::Tensor x = bits.view(torch::kFloat);
  // plus values near the fp16 limits and ties
  x.slice(0, 0, 6).copy_(torch::tensor({65519.0f, 65520.0f, 1.0f + std::ldexp(1.0f, -11),
                                        std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), -0.0f}));
  for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
    torch::Tensor got = round_to_grid(x, dtype);
    torch::Tensor want = x.to(scalar_type(dtype)).to(torch::kFloat);
    torch::Tensor both_nan = got.isnan() & want.isnan();
    ASSERT_GT(both_nan.sum().item<int64_t>(), 0);  // the sample holds NaNs
    EXPECT_TRUE(torch::equal(got.isnan(), want.isnan()));
    torch::Tensor same_bits = got.view(torch::kInt).eq(want.view(torch::kInt)) | both_nan;
    EXPECT_EQ(same_bits.sum().item<int64_t>(), n) << "dtype " << static_cast<int>(dtype);
  }
}

// channels_last activations (model.memory_format auto on a CPU) take the fused kernel too: the
// result is the conversion's, element for element, in the input's layout.
TEST(AmpEmulation, FusedRoundingKeepsAChannelsLastLayout) {
  torch::manual_seed(8);
  torch::Tensor x = (torch::randn({3, 5, 7, 9}) * 1000).contiguous(torch::MemoryFormat::ChannelsLast);
  ASSERT_FALSE(x.is_contiguous());
  for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
    torch::Tensor got = round_to_grid(x, dtype);
    EXPECT_TRUE(got.is_contiguous(torch::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::equal(got, x.to(scalar_type(dtype)).to(torch::kFloat)));
    EXPECT_FALSE(torch::equal(got, x));  // values did move onto the grid
  }
}

TEST(AmpEmulation, Fp16Facts) {
  EXPECT_EQ(fp16(1e-8f), 0.0f);  // below half the smallest subnormal: flushed
  EXPECT_TRUE(std::isinf(fp16(70000.0f)));
  EXPECT_EQ(fp16(65504.0f), 65504.0f);
  EXPECT_EQ(fp16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16(65520.0f)));                 // rounds past the largest
  EXPECT_EQ(fp16(1.0f + std::ldexp(1.0f, -11)), 1.0f);      // tie to even
  EXPECT_EQ(fp16(1.0f + std::ldexp(1.0f, -10)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(fp16(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(fp16(std::ldexp(1.4f, -24)), std::ldexp(1.0f, -24));  // subnormal precision
  EXPECT_EQ(fp16(std::ldexp(1.0f, -25)), 0.0f);
  EXPECT_EQ(fp16(-0.1f), -0.0999755859375f);
}

TEST(AmpEmulation, LossScalingRescuesASmallGradient) {
  const float g = 1e-8f;
  EXPECT_EQ(fp16(g), 0.0f);
  const float scaled = fp16(g * 65536.0f);  // 6.55e-4: a normal fp16 number
  const float unscaled = scaled / 65536.0f;
  EXPECT_GT(unscaled, 0.0f);
  EXPECT_NEAR(unscaled, g, g * std::ldexp(1.0f, -11));
}

TEST(AmpEmulation, Bf16Facts) {
  EXPECT_EQ(bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // tie to even
  EXPECT_EQ(bf16(1.0f + std::ldexp(1.0f, -7)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bf16(3.14159265f), 3.140625f);
  EXPECT_EQ(bf16(70000.0f), 70144.0f);  // fp32's range: no overflow
  EXPECT_EQ(bf16(1e-8f), 1.0011717677116394e-08f);  // 8 mantissa bits
  EXPECT_GT(bf16(1e-30f), 0.0f);
}

TEST(AmpEmulation, RoundThroughRoundsValueAndGradient) {
  auto x = torch::tensor({1.0f + std::ldexp(1.0f, -11), 70000.0f}).requires_grad_(true);
  auto y = round_through(x, Dtype::kFp16);
  EXPECT_EQ(y[0].item<float>(), 1.0f);
  EXPECT_TRUE(std::isinf(y[1].item<float>()));
  (y[0] * 1e-8f).backward();
  EXPECT_EQ(x.grad()[0].item<float>(), 0.0f);  // the gradient flushes too
}

TEST(AmpEmulation, EmulatedOpsEqualRoundedOutputs) {
  torch::manual_seed(1);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 4, 3).padding(1).stride(2));
  torch::nn::ConvTranspose2d deconv(torch::nn::ConvTranspose2dOptions(4, 2, 4).stride(2).padding(1));
  torch::nn::Linear lin(6, 5);
  auto x = torch::randn({2, 3, 9, 9}) * 3;
  auto v = torch::randn({4, 6});
  auto r = [](const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); };

  // No policy and O0: exactly the fp32 modules.
  EXPECT_TRUE(torch::equal(conv2d(*conv, x), conv->forward(x)));
  {
    ScopedPolicy o0(policy_for("O0"));
    EXPECT_TRUE(torch::equal(linear(*lin, v), lin->forward(v)));
    EXPECT_FALSE(emulating());
  }
  ScopedPolicy o1(policy_for("O1"));
  ASSERT_TRUE(emulating());
  torch::NoGradGuard no_grad;
  auto c = conv2d(*conv, x);
  auto expect_c = r(torch::conv2d(r(x), r(conv->weight), r(conv->bias), 2, 1));
  EXPECT_TRUE(torch::equal(c, expect_c));
  EXPECT_TRUE(torch::equal(c, r(c)));  // every element on the fp16 grid
  EXPECT_FALSE(torch::equal(c, conv->forward(x)));
  auto d = conv_transpose2d(*deconv, c);
  EXPECT_TRUE(torch::equal(
      d, r(torch::conv_transpose2d(r(c), r(deconv->weight), r(deconv->bias), 2, 1))));
  auto l = linear(*lin, v);
  EXPECT_TRUE(torch::equal(l, r(torch::linear(r(v), r(lin->weight), r(lin->bias)))));
  // O1: ops in their input's dtype are rounded, fp32-list ops are not.
  auto sm = torch::softmax(v, 1);
  EXPECT_TRUE(torch::equal(input_dtype_op(sm), r(sm)));
  EXPECT_TRUE(torch::equal(fp32_op(sm), sm));
  EXPECT_TRUE(torch::equal(model_input(v), v));  // O1 does not cast the model input
  {
    ScopedPolicy o2(policy_for("O2"));
    EXPECT_TRUE(torch::equal(fp32_op(sm), r(sm)));  // no per-op casts under O2
    EXPECT_TRUE(torch::equal(model_input(v), r(v)));
  }
  {
    ScopedPolicy bf(policy_for("O1", "auto", "bf16"));
    auto b = linear(*lin, v);
    EXPECT_TRUE(torch::equal(b, b.to(torch::kBFloat16).to(torch::kFloat)));
  }
}

// w (one weight, 1.0) times a constant input; loss = out * c, so d loss / d w = c.
struct OneWeight : torch::nn::Module {
  OneWeight() {
    lin = register_module("lin", torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
    torch::NoGradGuard g;
    lin->weight.fill_(1.0);
  }
  torch::Tensor forward(const torch::Tensor& x) { return linear(*lin, model_input(x)); }
  torch::nn::Linear lin{nullptr};
};

// Runs `steps` SGD steps (lr 1) of loss = w * c under `policy`; returns the engine's results.
struct Trained {
  float weight;
  float master;  // NaN without masters
  float last_grad;
  int64_t skipped = 0;
};
Trained train_one_weight(const Policy& policy, float c, int steps) {
  OneWeight m;
  ScopedPolicy scope(policy);
  Engine engine(policy, m);
  torch::optim::SGD opt(engine.optimizer_params(), torch::optim::SGDOptions(1.0));
  Trained t{};
  for (int i = 0; i < steps; ++i) {
    engine.zero_grad();
    auto loss = fp32_op(m.forward(torch::ones({1, 1}))).sum() * c;
    engine.scale_loss(loss).backward();
    const bool overflow = engine.unscale_and_check();
    if (!overflow) opt.step();
    bool skip = false;
    (void)skip;
    if (overflow) ++t.skipped;
    engine.finish_step(overflow);
  }
  t.weight = m.lin->weight.item<float>();
  t.master = engine.masters()[0].defined() ? engine.masters()[0].item<float>() : std::nanf("");
  t.last_grad = engine.optimizer_params()[0].grad().item<float>();
  return t;
}

TEST(AmpEngine, O2MastersKeepSmallUpdatesThatO3Loses) {
  const float update = 1e-7f;
  auto o3 = train_one_weight(policy_for("O3"), update, 3000);
  EXPECT_EQ(o3.weight, 1.0f);   // 1 - 1e-7 rounds back to 1 every step
  EXPECT_GT(o3.last_grad, 0.0f);  // the gradient itself was not lost (subnormal in fp16)
  // fp32 itself steps 1 - 1e-7 to 1 - 2^-23 (2 fp32 ulps below 1): that is the O0 reference.
  float fp32_weight = 1.0f;
  for (int i = 0; i < 3000; ++i) fp32_weight -= update;
  auto o0 = train_one_weight(policy_for("O0"), update, 3000);
  EXPECT_EQ(o0.weight, fp32_weight);
  auto o2 = train_one_weight(policy_for("O2"), update, 3000);
  EXPECT_LT(o2.master, 1.0f - 2.5e-4f);  // the master accumulated the small updates
  EXPECT_NEAR(o2.master, fp32_weight, (1.0f - fp32_weight) * 0.01f);
  EXPECT_EQ(o2.weight, 1.0f - std::ldexp(1.0f, -11));  // the model copy moved one fp16 step
  EXPECT_EQ(o2.skipped, 0);
}

TEST(AmpEngine, O3StaticOneUnderflowsWhileDynamicScalingKeepsTheGradient) {
  auto o3 = train_one_weight(policy_for("O3", "1"), 1e-9f, 3);
  EXPECT_EQ(o3.last_grad, 0.0f);  // 1e-9 flushes in fp16: no update at all
  EXPECT_EQ(o3.weight, 1.0f);
  auto o3d = train_one_weight(policy_for("O3", "dynamic"), 1e-9f, 1);
  EXPECT_NEAR(o3d.last_grad, 1e-9f, 1e-9f * 1e-3f);
}

TEST(AmpEngine, OverflowSkipsTheStepAndBacksOff) {
  // Gradient 1 x 65536 = 65536 > 65504: inf in fp16 on the first step, fine at 32768.
  auto t = train_one_weight(policy_for("O2"), 1.0f, 2);
  EXPECT_EQ(t.skipped, 1);
  EXPECT_EQ(t.master, 0.0f);  // one step of -1 taken after the skip
}

// A tiny conv net with the boundary calls, as models/resnet.cpp makes them.
struct TinyNet : torch::nn::Module {
  TinyNet() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = model_input(x);
    x = input_dtype_op(torch::relu(input_dtype_op(bn->forward(conv2d(*conv, x)))));
    x = input_dtype_op(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
    return model_output(linear(*fc, x));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

std::vector<double> tiny_losses(const Policy& policy, bool combine = false) {
  torch::manual_seed(7);
  TinyNet net;
  auto x = torch::randn({8, 1, 6, 6});
  auto y = torch::randint(0, 3, {8});
  Policy p = policy;
  p.combine_grad = combine;
  ScopedPolicy scope(p);
  Engine engine(p, net);
  torch::optim::SGD opt(engine.optimizer_params(), torch::optim::SGDOptions(0.1).momentum(0.9));
  std::vector<double> losses;
  for (int i = 0; i < 6; ++i) {
    engine.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net.forward(x), y);
    losses.push_back(loss.item<double>());
    engine.scale_loss(loss).backward();
    const bool overflow = engine.unscale_and_check();
    if (!overflow) opt.step();
    engine.finish_step(overflow);
  }
  return losses;
}

TEST(AmpEngine, O1EmulatedIsCloseToO0ButNotIdentical) {
  auto o0 = tiny_losses(policy_for("O0"));
  auto o1 = tiny_losses(policy_for("O1"));
  ASSERT_EQ(o0.size(), o1.size());
  bool differs = false;
  for (size_t i = 0; i < o0.size(); ++i) {
    EXPECT_NEAR(o1[i], o0[i], 5e-3 * std::max(1.0, std::fabs(o0[i]))) << i;
    differs = differs || o1[i] != o0[i];
  }
  EXPECT_TRUE(differs);
  EXPECT_LT(o0.back(), o0.front());  // it trains
}

TEST(AmpEngine, CombineGradGivesBitwiseTheSameTraining) {
  for (const char* level : {"O1", "O2", "O3"}) {
    auto a = tiny_losses(policy_for(level, "dynamic"), false);
    auto b = tiny_losses(policy_for(level, "dynamic"), true);
    EXPECT_EQ(a, b) << level;
  }
}

TEST(AmpEngine, O2KeepsBatchNormFp32AndWeightsOnTheGrid) {
  torch::manual_seed(2);
  TinyNet net;
  Engine engine(policy_for("O2"), net);
  auto r = [](const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); };
  EXPECT_TRUE(torch::equal(net.conv->weight, r(net.conv->weight)));
  EXPECT_TRUE(torch::equal(net.fc->bias, r(net.fc->bias)));
  const auto& mask = engine.low_precision_mask();
  auto params = net.parameters();
  int fp32 = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!mask[i]) {
      ++fp32;
      EXPECT_FALSE(engine.masters()[i].defined());
    } else {
      EXPECT_TRUE(engine.masters()[i].defined());
    }
  }
  EXPECT_EQ(fp32, 2);  // bn.weight, bn.bias
  TinyNet net3;
  Engine o3(policy_for("O3"), net3);
  for (bool low : o3.low_precision_mask()) EXPECT_TRUE(low);
}

TEST(AmpEngine, LoadStateRestoresMastersAndScalerAndRefusesMismatches) {
  torch::manual_seed(2);
  TinyNet a, b;
  Policy p = policy_for("O2");
  Engine ea(p, a), eb(p, b);
  EXPECT_TRUE(ea.has_state());
  ea.scaler().load_state({1024.0, 17});
  torch::NoGradGuard g;
  ea.masters()[0].add_(0.25);
  eb.load_state(ea.scaler().state(), ea.masters(), "test");
  EXPECT_EQ(eb.scaler().scale(), 1024.0);
  EXPECT_EQ(eb.scaler().state().unskipped, 17);
  int masters = 0;
  for (size_t i = 0; i < ea.masters().size(); ++i) {
    if (!ea.masters()[i].defined()) continue;
    EXPECT_TRUE(torch::equal(ea.masters()[i], eb.masters()[i]));
    EXPECT_NE(ea.masters()[i].data_ptr(), eb.masters()[i].data_ptr());  // copied, not shared
    ++masters;
  }
  EXPECT_GT(masters, 0);
  // An O3 engine (no masters) refuses O2 masters, and an O2 engine a list that lacks one; the
  // scaler is left as it was.
  TinyNet c;
  Engine ec(policy_for("O3", "dynamic"), c);
  const double before = ec.scaler().scale();
  EXPECT_THROW(ec.load_state({8.0, 1}, ea.masters(), "test"), CheckpointError);
  EXPECT_EQ(ec.scaler().scale(), before);
  std::vector<torch::Tensor> short_list = ea.masters();
  for (auto& m : short_list) {
    if (m.defined()) {
      m = torch::Tensor();
      break;
    }
  }
  EXPECT_THROW(eb.load_state({8.0, 1}, short_list, "test"), CheckpointError);
  EXPECT_EQ(eb.scaler().scale(), 1024.0);
  // Static O1 without masters needs no saved state; dynamic does.
  TinyNet d;
  EXPECT_FALSE(Engine(policy_for("O1", "128"), d).has_state());
}

}  // namespace
}  // namespace amptune::amp
