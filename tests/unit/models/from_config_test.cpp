// build_classifier / resnet_options from the run's model.* section (ModelSettings).
#include "models/from_config.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "models/weights.h"
#include "support/scratch.h"
#include "support/tiny_config.h"

namespace amptune::models {
namespace {

ModelSettings model_of(const Config& config) { return Settings::from(config).model; }

TEST(ModelsRegistry, BuildsTheConfiguredResNet) {
  ResNet model = build_classifier(model_of(testing::tiny_config()));
  const ResNetOptions& o = model->options();
  EXPECT_EQ(o.depth, 18);
  EXPECT_EQ(o.num_classes, 4);
  EXPECT_EQ(o.in_channels, 1);
  EXPECT_DOUBLE_EQ(o.width, 0.0625);
  EXPECT_TRUE(o.small_input);
  EXPECT_TRUE(o.include_top);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->forward(torch::randn({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 4}));
}

TEST(ModelsRegistry, DefaultsAreResnet50ForImageNet) {
  const ResNetOptions o = resnet_options(model_of(Config()));
  EXPECT_EQ(o.depth, 50);
  EXPECT_EQ(o.num_classes, 1000);
  EXPECT_EQ(o.in_channels, 3);
  EXPECT_FALSE(o.small_input);
}

TEST(ModelsRegistry, EveryDepthOfTheSchemaIsBuildable) {
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"}) {
    Config config;
    config.set("model.name", name);
    EXPECT_EQ("resnet" + std::to_string(resnet_options(model_of(config)).depth), name);
  }
  Config vgg;
  vgg.set("model.name", "vgg16");
  EXPECT_THROW(resnet_options(model_of(vgg)), ConfigError);
}

TEST(ModelsRegistry, LoadsModelWeights) {
  const testing::ScratchDir dir;
  const std::string file = (dir.path() / "w.pt").string();

  Config config = testing::tiny_config();
  torch::manual_seed(5);
  ResNet source = build_classifier(model_of(config));
  save_state_dict(*source, file);

  config.set("model.weights", file);
  torch::manual_seed(6);
  ResNet loaded = build_classifier(model_of(config));
  EXPECT_TRUE(torch::equal(state_dict(*loaded).at("layer4.1.conv2.weight"),
                           state_dict(*source).at("layer4.1.conv2.weight")));

  config.set("model.num_classes", 5);  // weights no longer fit: the error names file and key
  try {
    build_classifier(model_of(config));
    ADD_FAILURE() << "no ModelError";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("fc.weight: expected [5, 32], got [4, 32]"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amptune::models
