// ResNet structure, initialisation and equivalence with torchvision (fixtures made by
// tools/make_model_fixtures.py from torchvision's own module classes).
#include "models/resnet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/weights.h"

namespace amptune::models {
namespace {

const std::string kFixtures = std::string(AMPTUNE_FIXTURE_DIR) + "/models/";

std::string shape_of(const torch::Tensor& t) {
  if (t.dim() == 0) return "-";
  std::string out;
  for (int64_t i = 0; i < t.dim(); ++i) out += (i ? "," : "") + std::to_string(t.size(i));
  return out;
}

ResNetOptions options_for(int depth, int64_t classes = 1000) {
  ResNetOptions o;
  o.depth = depth;
  o.num_classes = classes;
  return o;
}

TEST(ModelsResNet, ParameterCountsMatchTorchvision) {
  const std::vector<std::pair<int, int64_t>> expected = {
      {18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}, {152, 60192808}};
  for (const auto& [depth, count] : expected) {
    ResNet model(options_for(depth));
    EXPECT_EQ(count_parameters(*model), count) << "resnet" << depth;
  }
}

TEST(ModelsResNet, Resnet50KeysAndShapesEqualTorchvision) {
  std::ifstream in(kFixtures + "resnet50_keys.txt");
  ASSERT_TRUE(in) << "missing fixture resnet50_keys.txt";
  std::map<std::string, std::string> expected;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, shape;
    fields >> name >> shape;
    expected[name] = shape;
  }
  ASSERT_EQ(expected.size(), 320u);

  ResNet model(options_for(50));
  std::map<std::string, std::string> actual;
  for (const auto& [name, tensor] : state_dict(*model)) actual[name] = shape_of(tensor);
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(actual.at("layer1.0.downsample.1.num_batches_tracked"), "-");
  EXPECT_EQ(actual.at("layer2.0.conv2.weight"), "128,128,3,3");  // v1.5: stride on the 3x3
}

TEST(ModelsResNet, BasicBlockHasNoDownsampleWhenShapeIsKept) {
  ResNet model(options_for(18));
  const auto sd = state_dict(*model);
  EXPECT_EQ(sd.count("layer1.0.downsample.0.weight"), 0u);
  EXPECT_EQ(sd.count("layer2.0.downsample.0.weight"), 1u);
  EXPECT_EQ(sd.count("layer2.1.downsample.0.weight"), 0u);
  EXPECT_EQ(sd.count("layer1.1.conv3.weight"), 0u);
  EXPECT_EQ(model->feature_channels(), 512);
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, double tol,
                  const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double diff = (actual - expected).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what << ": max abs difference " << diff;
}

void check_equivalence(const std::string& net, const ResNetOptions& options) {
  ResNet model(options);
  load_state_dict(*model, kFixtures + net + "_weights.pt");
  const auto io = read_state_dict(kFixtures + net + "_io.pt");
  const torch::Tensor x = io.at("input");

  torch::NoGradGuard no_grad;
  model->eval();
  expect_close(model->forward(x), io.at("eval_logits"), 1e-4, net + " eval");
  model->train();
  expect_close(model->forward(x), io.at("train_logits"), 1e-4, net + " train");
}

TEST(ModelsResNet, MatchesTorchvisionBasicBlockNetwork) {
  ResNetOptions o = options_for(18, 10);
  o.width = 0.0625;
  check_equivalence("resnet18_w0.0625", o);
}

TEST(ModelsResNet, MatchesTorchvisionBottleneckNetworkWithSmallInput) {
  ResNetOptions o = options_for(50, 10);
  o.width = 0.03125;
  o.in_channels = 1;
  o.small_input = true;
  check_equivalence("resnet50_w0.03125_small", o);
}

TEST(ModelsResNet, LoadedWeightsChangeTheOutput) {
  // Guards the equivalence tests: random init must not reproduce the fixture's logits.
  ResNetOptions o = options_for(18, 10);
  o.width = 0.0625;
  ResNet model(o);
  model->eval();
  const auto io = read_state_dict(kFixtures + "resnet18_w0.0625_io.pt");
  torch::NoGradGuard no_grad;
  const double diff =
      (model->forward(io.at("input")) - io.at("eval_logits")).abs().max().item<double>();
  EXPECT_GT(diff, 1e-2);
}

TEST(ModelsResNet, SmallInputClassifierShape) {
  ResNetOptions o = options_for(18, 10);
  o.in_channels = 1;
  o.small_input = true;
  o.width = 0.25;
  ResNet model(o);
  EXPECT_EQ(shape_of(state_dict(*model).at("conv1.weight")), "16,1,3,3");
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(torch::randn({3, 1, 28, 28}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 10}));
  // 28 -> 28 (stem) -> 14 -> 7 -> 4 (layer2..4)
  EXPECT_EQ(model->forward_features(torch::randn({1, 1, 28, 28})).sizes(),
            (std::vector<int64_t>{1, 128, 4, 4}));
}

TEST(ModelsResNet, WithoutTopReturnsLayer4Map) {
  ResNetOptions o = options_for(50);
  o.width = 0.25;
  o.include_top = false;
  ResNet model(o);
  EXPECT_EQ(model->feature_channels(), 512);
  const auto sd = state_dict(*model);
  EXPECT_EQ(sd.count("fc.weight"), 0u);
  EXPECT_EQ(sd.count("fc.bias"), 0u);
  torch::NoGradGuard no_grad;
  model->eval();
  EXPECT_EQ(model->forward(torch::randn({2, 3, 256, 256})).sizes(),
            (std::vector<int64_t>{2, 2048 / 4, 8, 8}));
}

TEST(ModelsResNet, InitialisationFollowsTorchvision) {
  torch::manual_seed(0);
  ResNet model(options_for(50));
  const auto sd = state_dict(*model);
  // kaiming_normal_(fan_out, relu): std = sqrt(2 / (out_channels * k * k)).
  const torch::Tensor w = sd.at("layer4.0.conv2.weight");  // 512x512x3x3, 2.4M samples
  const double expected_std = std::sqrt(2.0 / (512.0 * 9.0));
  EXPECT_NEAR(w.std().item<double>(), expected_std, 0.02 * expected_std);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.02 * expected_std);
  const torch::Tensor stem = sd.at("conv1.weight");
  EXPECT_NEAR(stem.std().item<double>(), std::sqrt(2.0 / (64.0 * 49.0)),
              0.05 * std::sqrt(2.0 / (64.0 * 49.0)));
  // BatchNorm weight 1, bias 0, fresh running stats.
  EXPECT_TRUE(sd.at("layer3.2.bn3.weight").eq(1).all().item<bool>());
  EXPECT_TRUE(sd.at("layer3.2.bn3.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(sd.at("bn1.running_var").eq(1).all().item<bool>());
  // Linear default: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in 2048.
  const double bound = 1.0 / std::sqrt(2048.0);
  EXPECT_LE(sd.at("fc.weight").abs().max().item<double>(), bound);
  EXPECT_GT(sd.at("fc.weight").abs().max().item<double>(), 0.9 * bound);
  EXPECT_LE(sd.at("fc.bias").abs().max().item<double>(), bound);
}

TEST(ModelsResNet, WidthScalesEveryStage) {
  EXPECT_EQ(resnet_channels(64, 1.0), 64);
  EXPECT_EQ(resnet_channels(512, 0.25), 128);
  EXPECT_EQ(resnet_channels(64, 0.0078125), 1);  // never below one channel
  ResNetOptions o = options_for(34, 5);
  o.width = 0.5;
  ResNet model(o);
  const auto sd = state_dict(*model);
  EXPECT_EQ(shape_of(sd.at("conv1.weight")), "32,3,7,7");
  EXPECT_EQ(shape_of(sd.at("layer3.5.conv2.weight")), "128,128,3,3");
  EXPECT_EQ(shape_of(sd.at("fc.weight")), "5,256");
}

TEST(ModelsResNet, RejectsBadOptions) {
  EXPECT_THROW(ResNet(options_for(20)), ModelError);
  ResNetOptions o = options_for(18);
  o.num_classes = 0;
  EXPECT_THROW(ResNet{o}, ModelError);
  EXPECT_THROW(resnet_stage_blocks(42), ModelError);
}

}  // namespace
}  // namespace amptune::models
