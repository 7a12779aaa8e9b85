// RootNet: shapes through the model, soft-argmax, initialisation, loss vectors, state-dict names.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "amp/emulate.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/settings.h"
#include "models/from_config.h"
#include "models/rootnet.h"
#include "models/weights.h"
#include "support/scratch.h"

namespace amptune::models {
namespace {

RootNet tiny_net(uint64_t seed, int depth, double width, int64_t head_channels) {
  torch::manual_seed(seed);
  RootNetOptions o;
  o.backbone_depth = depth;
  o.width = width;
  o.head_channels = head_channels;
  return RootNet(o);
}

TEST(RootNetModel, ShapesAt256) {
  RootNet net = tiny_net(0, 18, 0.25, 16);
  net->eval();
  torch::NoGradGuard ng;
  auto x = torch::randn({2, 3, 256, 256});
  auto c5 = net->backbone()->forward(x);
  EXPECT_EQ(c5.sizes(), (std::vector<int64_t>{2, 128, 8, 8}));
  auto out = net->forward(x, torch::tensor({9976.3063f, 14579.9162f}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3}));
  // x, y inside the 64x64 map.
  EXPECT_TRUE((out.narrow(1, 0, 2) >= 0).all().item<bool>());
  EXPECT_TRUE((out.narrow(1, 0, 2) <= 63).all().item<bool>());
}

TEST(RootNetModel, ConstantLogitsGiveTheMapCentre) {
  auto xy = RootNetImpl::soft_argmax(torch::full({3, 1, 64, 64}, 0.7f));
  EXPECT_TRUE(torch::allclose(xy, torch::full({3, 2}, 31.5f)));
  // A peaked map gives its peak.
  auto logits = torch::full({1, 1, 64, 64}, -1e4f);
  logits[0][0][10][40] = 0;
  auto p = RootNetImpl::soft_argmax(logits);
  EXPECT_NEAR(p[0][0].item<float>(), 40.0f, 1e-4);
  EXPECT_NEAR(p[0][1].item<float>(), 10.0f, 1e-4);
}

TEST(RootNetModel, DepthIsGammaTimesK) {
  RootNet net = tiny_net(1, 18, 0.125, 8);
  net->eval();
  torch::NoGradGuard ng;
  auto x = torch::randn({1, 3, 64, 64});
  auto a = net->forward(x, torch::tensor({1000.0f}));
  auto b = net->forward(x, torch::tensor({3000.0f}));
  EXPECT_NEAR(b[0][2].item<float>(), 3 * a[0][2].item<float>(), 1e-4 * std::abs(b[0][2].item<float>()) + 1e-6);
  EXPECT_NEAR(a[0][0].item<float>(), b[0][0].item<float>(), 1e-6);
}

TEST(RootNetModel, InitAndStateDictNames) {
  RootNet net = tiny_net(2, 50, 0.25, 64);
  auto sd = state_dict(*net);
  for (const char* k : {"backbone.conv1.weight", "backbone.layer4.2.bn3.running_var",
                        "deconv.0.weight", "deconv.1.weight", "deconv.3.weight", "deconv.7.bias",
                        "xy_layer.weight", "xy_layer.bias", "depth_layer.weight",
                        "depth_layer.bias"}) {
    EXPECT_TRUE(sd.count(k)) << k;
  }
  EXPECT_FALSE(sd.count("backbone.fc.weight"));
  EXPECT_FALSE(sd.count("deconv.0.bias"));
  EXPECT_EQ(sd["deconv.0.weight"].sizes(), (std::vector<int64_t>{512, 64, 4, 4}));
  EXPECT_EQ(sd["depth_layer.weight"].sizes(), (std::vector<int64_t>{1, 512, 1, 1}));
  EXPECT_NEAR(sd["deconv.0.weight"].std().item<double>(), 0.001, 0.0002);
  EXPECT_EQ(sd["xy_layer.bias"].item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(sd["deconv.1.weight"], torch::ones({64})));
  EXPECT_TRUE(torch::equal(sd["deconv.1.bias"], torch::zeros({64})));
}

TEST(RootNetModel, EmulatedO1AndO2StayCloseToFp32) {
  RootNet net = tiny_net(4, 18, 0.125, 8);
  net->eval();
  torch::NoGradGuard ng;
  auto x = torch::randn({2, 3, 64, 64});
  auto k = torch::tensor({9976.3063f, 14579.9162f});
  auto fp32 = net->forward(x, k);
  for (const char* level : {"O1", "O2"}) {
    Config c(Schema::builtin());
    c.set("amp.opt_level", level);
    c.set("amp.backend", "emulate");
    amp::ScopedPolicy policy(amp::resolve_policy(Settings::from(c).amp, false));
    auto low = net->forward(x, k);
    EXPECT_FALSE(torch::equal(low, fp32)) << level;
    EXPECT_TRUE(torch::allclose(low, fp32, 1e-2, 1e-2)) << level;
  }
  EXPECT_TRUE(torch::equal(net->forward(x, k), fp32));  // policy gone: plain fp32 again
}

TEST(RootNetModel, LossVectors) {
  auto coord = torch::tensor({{1.0f, 2.0f, 3000.0f}});
  auto target = torch::tensor({{0.0f, 0.0f, 2000.0f}});
  auto vis = torch::ones({1, 1});
  EXPECT_NEAR(rootnet_loss(coord, target, vis, torch::ones({1})).item<double>(), 334.333, 1e-3);
  EXPECT_NEAR(rootnet_loss(coord, target, vis, torch::zeros({1})).item<double>(), 1.0, 1e-6);
  // vis 0 removes the sample's error; the batch mean counts it.
  auto c2 = torch::cat({coord, coord});
  auto t2 = torch::cat({target, target});
  auto v2 = torch::tensor({{1.0f}, {0.0f}});
  EXPECT_NEAR(rootnet_loss(c2, t2, v2, torch::ones({2})).item<double>(), 334.333 / 2, 1e-3);
}

TEST(RootNetModel, OptionsAndBackboneWeights) {
  Config config(Schema::builtin());
  config.set("model.name", "rootnet");
  config.set("model.backbone_depth", 18);
  config.set("model.width", 0.125);
  EXPECT_EQ(rootnet_options(Settings::from(config).model).head_channels, 32);

  // A torchvision-style classifier's weights (with fc.*) load into the backbone.
  torch::manual_seed(3);
  ResNetOptions ro;
  ro.depth = 18;
  ro.width = 0.125;
  ro.num_classes = 10;
  ResNet classifier(ro);
  const std::string path = testing::scratch_dir() + "/rootnet_backbone_r18.pt";
  save_state_dict(*classifier, path);
  config.set("model.backbone_weights", path);
  RootNet net = build_rootnet(Settings::from(config).model);
  EXPECT_TRUE(torch::equal(state_dict(*net)["backbone.conv1.weight"],
                           state_dict(*classifier)["conv1.weight"]));
}

}  // namespace
}  // namespace amptune::models
