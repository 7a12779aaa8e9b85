// The boundary calls in models/resnet.cpp: no effect without a policy or under O0; under
// emulated O1/O2 the logits are on the fp16 grid and close to fp32's.
#include <gtest/gtest.h>

#include <torch/torch.h>

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

}  // namespace
}  // namespace amptune::amp
