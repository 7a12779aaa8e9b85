// FP8 on every built-in model (amp/fp8_gemm.h through the boundaries the models call): every
// convolution, deconvolution and Linear of ResNet and RootNet gets its three slots (input,
// weight, grad_output) and nothing else does; FP8 changes the numbers; a model kept out entirely
// (skip_modules "*") gives the base precision's bits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "amp/fp8_gemm.h"
#include "models/rootnet.h"
#include "resnet_util.h"

namespace amptune::amp {
namespace {

Policy fp8(const std::string& level, const std::string& skip = "[]", bool enabled = true) {
  Config c;
  c.set_yaml("amp.opt_level", level, SourceLoc{"t"});
  c.set_yaml("amp.dtype", "bf16", SourceLoc{"t"});
  c.set_yaml("amp.backend", level == "O0" ? "auto" : "emulate", SourceLoc{"t"});
  c.set_yaml("amp.fp8.enabled", enabled ? "true" : "false", SourceLoc{"t"});
  c.set_yaml("amp.fp8.skip_modules", skip, SourceLoc{"t"});
  return resolve_policy(Settings::from(c).amp, false);
}

// The names of the modules that hold a GEMM (Conv2d, ConvTranspose2d, Linear).
std::set<std::string> gemm_modules(const torch::nn::Module& model) {
  std::set<std::string> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const torch::nn::Module& m = *item.value();
    if (dynamic_cast<const torch::nn::Conv2dImpl*>(&m) ||
        dynamic_cast<const torch::nn::ConvTranspose2dImpl*>(&m) ||
        dynamic_cast<const torch::nn::LinearImpl*>(&m)) {
      out.insert(item.key());
    }
  }
  return out;
}

// One forward and backward of `run` under `policy` with the Engine's state installed; returns the
// slot keys the state holds and the loss.
template <class Run>
std::pair<std::set<std::string>, double> step(torch::nn::Module& model, const Policy& policy,
                                              Run run) {
  Engine engine(policy, model);
  ScopedPolicy scope(policy);
  ScopedModules modules(engine.modules());
  std::unique_ptr<ScopedFp8> state;
  if (engine.fp8()) state = std::make_unique<ScopedFp8>(engine.fp8());
  const torch::Tensor loss = run();
  loss.backward();
  std::set<std::string> keys;
  if (engine.fp8()) {
    for (const auto& [name, t] : engine.fp8()->to_tensors()) {
      const std::string slot = name.substr(4, name.rfind('.') - 4);  // <key>.<role>
      const std::string role = slot.substr(slot.rfind('.') + 1);
      if (role == "grad_output" && name.find(".history") != std::string::npos) {
        keys.insert(slot.substr(0, slot.rfind('.')));
      }
      EXPECT_TRUE(role == "input" || role == "weight" || role == "grad_output") << name;
    }
  }
  return {keys, loss.item<double>()};
}

TEST(Fp8Models, EveryConvAndLinearOfResNetIsAnFp8Gemm) {
  for (const std::string level : {"O0", "O1", "O2"}) {
    SCOPED_TRACE(level);
    torch::manual_seed(1);
    const torch::Tensor x = torch::randn({2, 1, 12, 12});
    auto net = small_resnet();
    const auto run = [&] { return net->forward(x).pow(2).mean(); };
    const auto [keys, loss] = step(*net, fp8(level), run);
    EXPECT_EQ(keys, gemm_modules(*net));
    auto plain_net = small_resnet();
    const auto [none, plain] = step(*plain_net, fp8(level, "[]", false), [&] {
      return plain_net->forward(x).pow(2).mean();
    });
    EXPECT_TRUE(none.empty());
    EXPECT_NE(loss, plain) << "FP8 changes the numbers";
    auto skipped_net = small_resnet();
    const auto [skipped, same] = step(*skipped_net, fp8(level, "['*']"), [&] {
      return skipped_net->forward(x).pow(2).mean();
    });
    EXPECT_TRUE(skipped.empty());
    EXPECT_EQ(same, plain) << "every module skipped: the base precision's bits";
  }
}

TEST(Fp8Models, EveryConvDeconvAndHeadOfRootNetIsAnFp8Gemm) {
  models::RootNetOptions o;
  o.backbone_depth = 18;
  o.width = 0.0625;
  o.head_channels = 8;
  o.in_channels = 3;
  torch::manual_seed(2);
  models::RootNet net(o);
  const torch::Tensor image = torch::randn({2, 3, 32, 32}), k = torch::rand({2}) * 1000 + 500;
  const auto [keys, loss] =
      step(*net, fp8("O1"), [&] { return net->forward(image, k).abs().mean(); });
  EXPECT_EQ(keys, gemm_modules(*net));
  EXPECT_TRUE(keys.count("deconv.0") && keys.count("xy_layer") && keys.count("depth_layer"));
  EXPECT_TRUE(std::isfinite(loss));
}

}  // namespace
}  // namespace amptune::amp
