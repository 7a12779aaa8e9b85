// A TorchScript model (models/scripted.h) against the built-in model it was exported from:
// torchvision's narrow ResNet-18 scripted in Python (tests/fixtures/torchscript/, made by
// tools/make_torchscript_fixtures.py) given amptune's resnet18 weights trains 20 steps with the
// same losses under O0 and, with the same overflows and skipped steps, under emulated O1 and O2;
// its module paths are what amp.fp32_modules names; bad files get a ModelError naming them.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "amp/op_emulation.h"
#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "models/resnet.h"
#include "models/scripted.h"
#include "models/weights.h"
#include "support/errors.h"
#include "support/scratch.h"

namespace amptune::models {
namespace {

const std::string kFixtures = std::string(AMPTUNE_FIXTURE_DIR) + "/torchscript/";

amp::Policy policy(const std::string& level, const std::vector<std::string>& fp32 = {}) {
  Config c;
  c.set_yaml("amp.opt_level", level, SourceLoc{"t"});
  c.set_yaml("amp.backend", level == "O0" ? "auto" : "emulate", SourceLoc{"t"});
  c.set("amp.fp32_modules", fp32);
  return amp::resolve_policy(Settings::from(c).amp, false);
}

// The tiny configuration of tests/support/tiny_config.h: 4 classes of 1-channel 12x12 images.
ResNet builtin() {
  ResNetOptions o;
  o.depth = 18;
  o.num_classes = 4;
  o.in_channels = 1;
  o.width = 0.0625;
  o.small_input = true;
  torch::manual_seed(11);
  return ResNet(o);
}

// The scripted network with the built-in one's weights.
ScriptedModel scripted(const ResNet& like, const std::string& file = "resnet18_tiny_script.pt") {
  ScriptedModel model(kFixtures + file);
  load_state_dict(*model, state_dict(*like), "the built-in resnet18's weights");
  return model;
}

struct Step {
  double loss = 0;
  bool overflow = false;
};

// apex's step protocol over 20 steps: forward, scaled backward, unscale and check, SGD
// step or skip, scaler update.
template <class Net>
std::vector<Step> train_steps(Net& net, const amp::Policy& p) {
  amp::ScopedPolicy scope(p);
  amp::Engine engine(p, *net);
  amp::ScopedModules modules(engine.modules());
  amp::ScopedLowStorage low(engine.low_precision_tensors());
  torch::optim::SGD sgd(engine.optimizer_params(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::manual_seed(3);
  // Two batches in turn: 20 steps learn them.
  const torch::Tensor x = torch::randn({2, 8, 1, 12, 12}) * 2;
  const torch::Tensor y = torch::randint(0, 4, {2, 8});
  std::vector<Step> steps;
  net->train();
  for (int64_t i = 0; i < 20; ++i) {
    engine.zero_grad();
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(net->forward(x[i % 2]), y[i % 2]);
    engine.scale_loss(loss).backward();
    const bool overflow = engine.unscale_and_check();
    if (!overflow) sgd.step();
    engine.finish_step(overflow);
    steps.push_back({loss.item<double>(), overflow});
  }
  return steps;
}

void expect_same_training(const std::string& level, double tolerance,
                          const std::string& file = "resnet18_tiny_script.pt") {
  ResNet reference = builtin();
  ScriptedModel model = scripted(reference, file);
  const auto expected = train_steps(reference, policy(level));
  const auto got = train_steps(model, policy(level));
  int overflows = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(got[i].loss, expected[i].loss, tolerance) << level << " step " << i;
    EXPECT_EQ(got[i].overflow, expected[i].overflow) << level << " step " << i;
    overflows += expected[i].overflow;
  }
  // The losses moved: the steps trained something.
  EXPECT_LT(expected.back().loss, expected.front().loss) << level;
  if (level != "O0") {
    EXPECT_GT(overflows, 0) << level << ": the dynamic scale's first steps";
  }
}

TEST(ScriptedModel, NamesAndTensorsAreTheScriptedModules) {
  ResNet reference = builtin();
  ScriptedModel model = scripted(reference);
  const auto expected = state_dict(*reference);
  const auto got = state_dict(*model);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [name, t] : expected) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(torch::equal(got.at(name), t)) << name;
  }
  const auto names = amp::ModuleMap(*model, {}).names();
  EXPECT_NE(std::find(names.begin(), names.end(), "layer2.0.downsample.0"), names.end());
  EXPECT_EQ(model->named_modules()["layer1.0.bn1"]->name(),
            "__torch__.torch.nn.modules.batchnorm.BatchNorm2d");
}

TEST(ScriptedModel, SameLossesAsTheBuiltInModelUnderO0) { expect_same_training("O0", 1e-5); }

TEST(ScriptedModel, SameLossesAndOverflowsUnderEmulatedO1) { expect_same_training("O1", 1e-3); }

TEST(ScriptedModel, SameLossesAndOverflowsUnderEmulatedO2) { expect_same_training("O2", 1e-3); }

TEST(ScriptedModel, TracedModelTrainsLikeTheBuiltInOneToo) {
  expect_same_training("O1", 1e-3, "resnet18_tiny_trace.pt");
}

TEST(ScriptedModel, EmulatedO1RoundsWhatTheDeviceWouldHoldInFp16) {
  ResNet reference = builtin();
  ScriptedModel model = scripted(reference);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({4, 1, 12, 12});
  const torch::Tensor fp32 = model->forward(x);
  amp::ScopedPolicy o1(policy("O1"));
  const torch::Tensor logits = model->forward(x);
  EXPECT_TRUE(torch::equal(logits, logits.to(torch::kHalf).to(torch::kFloat)));
  EXPECT_FALSE(torch::equal(logits, fp32));
  reference->eval();
  EXPECT_TRUE(torch::allclose(logits, reference->forward(x), 1e-5, 1e-6));
}

TEST(ScriptedModel, Fp32ModulesByPathAndBatchNormByType) {
  ResNet reference = builtin();
  ScriptedModel model = scripted(reference);
  amp::Policy o2 = policy("O2", {"layer1.*"});
  amp::ScopedPolicy scope(o2);
  amp::Engine engine(o2, *model);
  const auto params = model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].key();
    const bool fp32 = name.rfind("layer1.", 0) == 0 || name.find("bn") != std::string::npos ||
                      name.find("downsample.1") != std::string::npos;
    EXPECT_EQ(engine.low_precision_mask()[i], !fp32) << name;
  }
  const std::string message = testing::message_of<ConfigError>(
      [&] { amp::ModuleMap(*model, {"layer9.*"}); });
  EXPECT_NE(message.find("amp.fp32_modules: 'layer9.*' matches no module"), std::string::npos)
      << message;
}

TEST(ScriptedModel, ObserverSeesEachModuleCallByPath) {
  ResNet reference = builtin();
  ScriptedModel model = scripted(reference);
  auto modules = std::make_shared<const amp::ModuleMap>(*model, std::vector<std::string>{});
  amp::ScopedModules scope(modules);
  std::vector<std::string> seen;
  amp::ScopedObserver observer([&](const std::string& name, const torch::Tensor& in,
                                   const torch::Tensor& out) {
    seen.push_back(name);
    EXPECT_TRUE(in.defined()) << name;
    EXPECT_TRUE(out.defined()) << name;
  });
  torch::NoGradGuard no_grad;
  model->forward(torch::randn({2, 1, 12, 12}));
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), "conv1");
  EXPECT_EQ(seen.back(), "");  // the whole model, last
  EXPECT_NE(std::find(seen.begin(), seen.end(), "layer3.1.conv2"), seen.end());
  // children before their parent
  const auto child = std::find(seen.begin(), seen.end(), "layer1.0.conv1");
  const auto parent = std::find(seen.begin(), seen.end(), "layer1.0");
  EXPECT_LT(child, parent);
}

TEST(ScriptedModel, BadFilesAreModelErrorsNamingTheFile) {
  testing::ScratchDir dir;
  const std::string text = dir.write("weights.pt", "not a zip archive at all");
  std::string m = testing::message_of<ModelError>([&] { ScriptedModel model(text); });
  EXPECT_NE(m.find(text), std::string::npos) << m;
  EXPECT_NE(m.find("is not a TorchScript archive"), std::string::npos) << m;

  m = testing::message_of<ModelError>([&] { ScriptedModel model((dir.path() / "none.pt").string()); });
  EXPECT_NE(m.find("is missing"), std::string::npos) << m;

  m = testing::message_of<ModelError>(
      [&] { ScriptedModel model(kFixtures + "newer_version.pt"); });
  EXPECT_NE(m.find("was saved by a newer PyTorch"), std::string::npos) << m;
}

TEST(ScriptedModel, WrongOutputShapeForAClassifierIsNamed) {
  ScriptedModel model(kFixtures + "wrong_output_shape.pt");
  model->expect_logits();
  const std::string m =
      testing::message_of<ModelError>([&] { model->forward(torch::randn({2, 1, 12, 12})); });
  EXPECT_NE(m.find("forward returned a tensor of shape [2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[batch, classes]"), std::string::npos) << m;
}

// A TorchScript file written here, without Python: a module with one parameter, `code` for its
// methods and, unless `directions` is none, the attribute higher_is_better.
std::string script_file(const testing::ScratchDir& dir, const std::string& code,
                        const torch::IValue& directions) {
  torch::jit::Module m("Custom");
  m.register_parameter("w", torch::ones({2}), false);
  if (directions.isGenericDict()) {
    m.register_attribute("higher_is_better",
                         c10::DictType::create(c10::StringType::get(), c10::BoolType::get()),
                         directions);
  } else if (!directions.isNone()) {
    m.register_attribute("higher_is_better", c10::IntType::get(), directions);
  }
  m.define(code);
  const std::string path = (dir.path() / "custom.pt").string();
  m.save(path);
  return path;
}

TEST(ScriptedModel, WhatACustomTasksMethodsReturnIsChecked) {
  testing::ScratchDir dir;
  c10::Dict<std::string, bool> directions;
  directions.insert("mse", false);
  const std::string code = R"(
def forward(self, x: Tensor):
    return (x, x)
def training_loss(self, batch: Dict[str, Tensor]):
    return batch["x"] * self.w
def eval_batch(self, batch: Dict[str, Tensor]):
    return batch["x"]
)";
  ScriptedModel model(script_file(dir, code, directions));
  EXPECT_EQ(model->metric_directions(), (std::vector<std::pair<std::string, bool>>{{"mse", false}}));
  const std::map<std::string, torch::Tensor> batch = {{"x", torch::ones({2})}};
  std::string m = testing::message_of<ModelError>([&] { model->forward(torch::ones({2})); });
  EXPECT_NE(m.find("forward returned a Tuple, not a tensor"), std::string::npos) << m;
  m = testing::message_of<ModelError>([&] { model->training_loss(batch); });
  EXPECT_NE(m.find("training_loss must return a tensor of one element"), std::string::npos) << m;
  EXPECT_NE(m.find("shape [2]"), std::string::npos) << m;
  m = testing::message_of<ModelError>([&] { model->eval_batch(batch); });
  EXPECT_NE(m.find("eval_batch must return Dict[str, Tensor], it returned a Tensor"),
            std::string::npos)
      << m;
}

TEST(ScriptedModel, ACustomTaskNeedsItsMetricDirections) {
  testing::ScratchDir dir;
  const std::string code = "def forward(self, x: Tensor):\n    return x\n";
  ScriptedModel none(script_file(dir, code, torch::IValue()));
  std::string m = testing::message_of<ModelError>([&] { none->metric_directions(); });
  EXPECT_NE(m.find("needs the attribute higher_is_better: Dict[str, bool]"), std::string::npos)
      << m;
  EXPECT_NE(m.find("it has none"), std::string::npos) << m;
  ScriptedModel wrong(script_file(dir, code, torch::IValue(int64_t{1})));
  m = testing::message_of<ModelError>([&] { wrong->metric_directions(); });
  EXPECT_NE(m.find("it is a Int"), std::string::npos) << m;
  ScriptedModel empty(script_file(dir, code, c10::Dict<std::string, bool>()));
  m = testing::message_of<ModelError>([&] { empty->metric_directions(); });
  EXPECT_NE(m.find("it is empty"), std::string::npos) << m;
}

}  // namespace
}  // namespace amptune::models
