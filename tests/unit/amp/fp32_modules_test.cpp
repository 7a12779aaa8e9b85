// amp.fp32_modules (amp/emulate.h ModuleMap / ModuleCall): names as torchvision writes them, marks
// inherited from ancestors, unknown globs refused, marked modules computing in fp32 (a whole
// model marked gives O0's results bitwise), O2 parameters of marked modules kept off the grid,
// and the observer seeing every module in execution order.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "core/config.h"
#include "core/error.h"
#include "models/resnet.h"
#include "resnet_util.h"

namespace amptune::amp {
namespace {



bool on_grid(const torch::Tensor& t) {
  return torch::equal(t, t.to(torch::kHalf).to(torch::kFloat));
}

TEST(Fp32Modules, NamesAndInheritedMarks) {
  auto net = small_resnet();
  ModuleMap map(*net, {"layer2", "layer1.0.bn*"});
  const auto names = map.names();
  EXPECT_EQ(names.front(), "");
  EXPECT_NE(std::find(names.begin(), names.end(), "layer1.0.conv1"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layer2.0.downsample.0"), names.end());
  auto mark = [&](const std::string& name) {
    for (const auto& m : net->named_modules("", false)) {
      if (m.key() == name) return map.find(*m.value())->fp32;
    }
    ADD_FAILURE() << "no module " << name;
    return false;
  };
  EXPECT_TRUE(mark("layer2"));
  EXPECT_TRUE(mark("layer2.1.conv2"));  // an ancestor matches
  EXPECT_TRUE(mark("layer2.0.downsample.1"));
  EXPECT_TRUE(mark("layer1.0.bn1"));
  EXPECT_TRUE(mark("layer1.0.bn2"));
  EXPECT_FALSE(mark("layer1.0.conv1"));
  EXPECT_FALSE(mark("layer3"));
  EXPECT_FALSE(map.find(*net)->fp32);
}

TEST(Fp32Modules, GlobMatchingNothingIsAConfigErrorNamingTheKey) {
  auto net = small_resnet();
  try {
    ModuleMap map(*net, {"layer1.*", "layer9*"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("amp.fp32_modules"), std::string::npos) << what;
    EXPECT_NE(what.find("layer9*"), std::string::npos) << what;
    EXPECT_NE(what.find("conv1"), std::string::npos) << what;  // examples of real names
  }
}

TEST(Fp32Modules, WholeModelMarkedEqualsFp32Bitwise) {
  auto net = small_resnet();
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({4, 1, 16, 16});
  const auto fp32 = net->forward(x);
  for (const char* level : {"O1", "O2"}) {
    Policy p = emulated(level, {"*"});
    ScopedPolicy scope(p);
    Engine engine(p, *net);  // O2: marked parameters stay fp32 (not rounded)
    ScopedModules modules(engine.modules());
    EXPECT_TRUE(torch::equal(net->forward(x), fp32)) << level;
  }
}

TEST(Fp32Modules, MarkedModulesComputeInFp32AndO2KeepsTheirWeightsOffTheGrid) {
  auto net = small_resnet();
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({4, 1, 16, 16});
  Policy p = emulated("O2", {"fc"});
  ScopedPolicy scope(p);
  Engine engine(p, *net);
  ScopedModules modules(engine.modules());
  EXPECT_FALSE(on_grid(net->named_parameters()["fc.weight"]));  // fp32, as before
  EXPECT_TRUE(on_grid(net->named_parameters()["conv1.weight"]));
  std::vector<std::pair<std::string, torch::Tensor>> seen;
  ScopedObserver observer([&](const std::string& name, const torch::Tensor&,
                              const torch::Tensor& y) { seen.emplace_back(name, y.clone()); });
  const auto logits = net->forward(x);
  ASSERT_FALSE(seen.empty());
  // Execution order: children before their parent, the whole model last.
  EXPECT_EQ(seen.front().first, "conv1");
  EXPECT_EQ(seen[1].first, "bn1");
  EXPECT_EQ(seen.back().first, "");
  EXPECT_EQ(seen[seen.size() - 2].first, "fc");
  auto index = [&](const std::string& name) {
    for (size_t i = 0; i < seen.size(); ++i) {
      if (seen[i].first == name) return i;
    }
    return seen.size();
  };
  EXPECT_LT(index("layer1.0.conv1"), index("layer1.0"));
  EXPECT_LT(index("layer1.0"), index("layer1"));
  // fc computes in fp32 from its (fp16) input; its output is cast back to the model's type
  // under O2, so it is on the grid - but it is not the fp16 computation's result.
  EXPECT_TRUE(on_grid(seen[index("fc")].second));
  EXPECT_TRUE(on_grid(seen[index("layer4")].second));
}

TEST(Fp32Modules, O1MarkedConvKeepsItsBatchNormOutputFp32) {
  auto net = small_resnet();
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({4, 1, 16, 16}) * 100;
  Policy p = emulated("O1", {"conv1"});
  ScopedPolicy scope(p);
  Engine engine(p, *net);
  ScopedModules modules(engine.modules());
  std::map<std::string, torch::Tensor> seen, inputs;
  ScopedObserver observer(
      [&](const std::string& name, const torch::Tensor& in, const torch::Tensor& y) {
        seen.emplace(name, y.clone());
        inputs.emplace(name, in.clone());
      });
  net->forward(x);
  // The observer sees what each module was given (diagnose: was it already inf?).
  EXPECT_TRUE(inputs.at("conv1").equal(x));
  EXPECT_TRUE(inputs.at("bn1").equal(seen.at("conv1")));
  EXPECT_FALSE(on_grid(seen.at("conv1")));  // fp32 output (O1 leaves it fp32)
  EXPECT_FALSE(on_grid(seen.at("bn1")));    // BatchNorm follows its fp32 input
  EXPECT_TRUE(on_grid(seen.at("layer1.0.conv1")));
}

}  // namespace
}  // namespace amptune::amp
