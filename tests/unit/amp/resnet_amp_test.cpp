// The boundary calls in models/resnet.cpp: no effect without a policy or under O0; under
// emulated O1/O2 the logits are on the fp16 grid and close to fp32's, and the forward value and
// every gradient are bitwise those of rounding at every boundary (the roundings the emulation
// skips as redundant, amp/emulate.h, change nothing).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <map>
#include <set>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "core/config.h"
#include "models/resnet.h"
#include "resnet_util.h"

namespace amptune::amp {
namespace {



TEST(AmpResNet, BoundaryCallsFollowThePolicy) {
  auto net = small_resnet();
  net->eval();
  torch::NoGradGuard no_grad;
  auto x = torch::randn({4, 1, 16, 16});
  const auto fp32 = net->forward(x);
  {
    ScopedPolicy o0(emulated("O0"));
    EXPECT_TRUE(torch::equal(net->forward(x), fp32));
  }
  auto r = [](const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); };
  ScopedPolicy o1(emulated("O1"));
  const auto o1_logits = net->forward(x);
  EXPECT_TRUE(torch::equal(o1_logits, r(o1_logits)));
  EXPECT_FALSE(torch::equal(o1_logits, fp32));
  EXPECT_TRUE(torch::allclose(o1_logits, fp32, 2e-2, 2e-2));
}

TEST(AmpResNet, O2ModelWeightsOnTheGridAndBatchNormFp32) {
  auto net = small_resnet();
  Policy p = emulated("O2");
  ScopedPolicy scope(p);
  Engine engine(p, *net);
  auto r = [](const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); };
  for (const auto& item : net->named_parameters()) {
    if (item.key().find("bn") == std::string::npos && item.key().find("downsample.1") == std::string::npos) {
      EXPECT_TRUE(torch::equal(item.value(), r(item.value()))) << item.key();
    }
  }
  int masters = 0;
  for (const auto& m : engine.masters()) masters += m.defined();
  int bn = 0;
  for (const auto& item : net->named_parameters()) {
    bn += item.key().find("bn") != std::string::npos ||
          item.key().find("downsample.1") != std::string::npos;
  }
  EXPECT_EQ(masters + bn, static_cast<int>(net->parameters().size()));
  // As with apex, the first steps at 65536 may overflow in fp16 (the fc gradient sums over the
  // batch); each overflow halves the scale until the gradients fit.
  auto x = torch::randn({4, 1, 16, 16});
  auto y = torch::randint(0, 10, {4});
  int overflows = 0;
  bool overflow = true;
  for (int i = 0; i < 12 && overflow; ++i) {
    engine.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    engine.scale_loss(loss).backward();
    overflow = engine.unscale_and_check();
    overflows += overflow;
    engine.finish_step(overflow);
  }
  EXPECT_FALSE(overflow);
  EXPECT_EQ(engine.scaler().scale(), 65536.0 / (1 << overflows) * 1);
  for (const auto& p : engine.optimizer_params()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
}


// ---- the emulated ResNet-18 against rounding at every boundary -----------------------------

namespace nn = torch::nn;

// x.to(kHalf).to(kFloat) is differentiable and its backward rounds the gradient the same way.
torch::Tensor r(const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); }

// The emulation's rules written out for a BasicBlock ResNet without any skipping: every conv
// input, weight and output, BatchNorm and residual output rounded (O1, O2), the O2 input
// rounded on entry. `fp32_convs`: convolutions kept in fp32 (amp.fp32_modules): no rounding
// inside, output cast back under O2 only, and under O1 their BatchNorm's output stays fp32.
struct Reference {
  std::map<std::string, nn::Module*> modules;
  std::set<std::string> fp32_convs;
  bool o2 = false;

  template <class M>
  M& get(const std::string& name) {
    return *modules.at(name)->as<M>();
  }
  torch::Tensor conv_bn(const std::string& conv_name, const std::string& bn_name,
                        const torch::Tensor& x) {
    auto& c = get<nn::Conv2dImpl>(conv_name);
    const int64_t pad = (*c.options.kernel_size())[0] / 2;
    const bool fp32 = fp32_convs.count(conv_name) > 0;
    torch::Tensor y;
    if (fp32) {
      y = c.forward(x);
      if (o2) y = r(y);
    } else {
      y = r(torch::conv2d(r(x), r(c.weight), {}, c.options.stride(), pad));
    }
    torch::Tensor z = get<nn::BatchNorm2dImpl>(bn_name).forward(y);
    return fp32 && !o2 ? z : r(z);
  }
  torch::Tensor block(const std::string& p, const torch::Tensor& x) {
    const bool down = modules.count(p + "downsample.0") > 0;
    torch::Tensor identity = down ? conv_bn(p + "downsample.0", p + "downsample.1", x) : x;
    torch::Tensor out = torch::relu(conv_bn(p + "conv1", p + "bn1", x));
    out = conv_bn(p + "conv2", p + "bn2", out);
    return torch::relu(r(out + identity));
  }
  torch::Tensor forward(const torch::Tensor& in) {
    torch::Tensor x = torch::relu(conv_bn("conv1", "bn1", o2 ? r(in) : in));
    for (int s = 1; s <= 4; ++s) {
      for (int b = 0; b < 2; ++b) {
        x = block("layer" + std::to_string(s) + "." + std::to_string(b) + ".", x);
      }
    }
    x = r(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
    auto& fc = get<nn::LinearImpl>("fc");
    return r(torch::linear(r(x), r(fc.weight), r(fc.bias)));
  }
};

// Logits, input gradient and every parameter gradient of one training step of `net` on x.
std::vector<torch::Tensor> step(const std::function<torch::Tensor(const torch::Tensor&)>& fwd,
                                nn::Module& net, const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor in = x.clone().requires_grad_(true);
  torch::Tensor logits = fwd(in);
  // A scaled loss, as the trainer's: small gradients land on fp16 subnormals and ties.
  (torch::nn::functional::cross_entropy(logits, y) * 1024).backward();
  std::vector<torch::Tensor> out{logits.detach(), in.grad()};
  for (const auto& p : net.parameters()) out.push_back(p.grad());
  return out;
}

void expect_as_reference(const std::string& level, const std::vector<std::string>& fp32_convs,
                         bool channels_last) {
  SCOPED_TRACE(level + (fp32_convs.empty() ? "" : " fp32 " + fp32_convs[0]) +
               (channels_last ? " channels_last" : ""));
  auto net = small_resnet();
  auto ref_net = small_resnet();  // the same seed: the same weights
  torch::manual_seed(11);
  auto x = torch::randn({6, 1, 12, 12}) * 4;
  auto y = torch::randint(0, 10, {6});
  if (channels_last) {
    torch::NoGradGuard g;
    x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    for (auto* m : {&net, &ref_net}) {
      for (auto& p : (*m)->parameters()) {
        if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
      }
    }
  }
  const Policy p = emulated(level, fp32_convs);
  Reference ref;
  ref.o2 = level == "O2";
  ref.fp32_convs.insert(fp32_convs.begin(), fp32_convs.end());
  for (const auto& m : ref_net->named_modules("", false)) ref.modules[m.key()] = m.value().get();
  // O2 keeps the weights on the grid (Engine): the same for the reference's copy.
  Engine engine(p, *net);
  Engine ref_engine(p, *ref_net);
  std::vector<torch::Tensor> got;
  {
    ScopedPolicy scope(p);
    ScopedModules modules(engine.modules());
    got = step([&](const torch::Tensor& in) { return net->forward(in); }, *net, x, y);
  }
  const auto want =
      step([&](const torch::Tensor& in) { return ref.forward(in); }, *ref_net, x, y);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined() && want[i].defined()) << i;
    EXPECT_TRUE(torch::equal(got[i], want[i])) << "tensor " << i << " (0 logits, 1 input grad)";
  }
}

TEST(AmpResNet, GradientsAreBitwiseThoseOfRoundingEveryBoundary) {
  expect_as_reference("O1", {}, false);
  expect_as_reference("O2", {}, false);
  expect_as_reference("O1", {}, true);
  expect_as_reference("O2", {}, true);
  // A conv in fp32 hands back an unrounded input gradient: the BatchNorm before it (through the
  // relu) must round it itself.
  expect_as_reference("O1", {"layer1.0.conv2"}, false);
  expect_as_reference("O2", {"layer1.0.conv2"}, false);
  expect_as_reference("O1", {"layer2.0.conv1"}, true);
}

}  // namespace
}  // namespace amptune::amp
