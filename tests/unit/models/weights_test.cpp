// State-dict import/export: exact key matching, error messages, round trips (Python
// readability: python_interop_test.cpp).
#include "models/weights.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "models/resnet.h"
#include "unit/models/weights_util.h"

namespace amptune::models {
namespace {

namespace fs = std::filesystem;

TEST_F(ModelsWeights, RoundTripRestoresEveryTensor) {
  torch::manual_seed(1);
  ResNet a(tiny());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : state_dict(*a)) {
      if (t.is_floating_point()) t.uniform_(-1, 1);
    }
    state_dict(*a).at("bn1.num_batches_tracked").fill_(42);
  }
  const std::string file = path("a.pt");
  save_state_dict(*a, file);
  torch::manual_seed(2);
  ResNet b(tiny());
  load_state_dict(*b, file);
  const auto sa = state_dict(*a), sb = state_dict(*b);
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [name, t] : sa) {
    EXPECT_TRUE(torch::equal(t, sb.at(name))) << name;
    EXPECT_EQ(t.dtype(), sb.at(name).dtype()) << name;
  }
  EXPECT_EQ(sb.at("bn1.num_batches_tracked").item<int64_t>(), 42);
  // Nothing but the file itself is left in the directory (the temp file was renamed).
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "a.pt");
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(ModelsWeights, SaveOverwritesAnExistingFile) {
  const std::string file = path("w.pt");
  { std::ofstream(file) << "old contents"; }
  ResNet a(tiny());
  save_state_dict(*a, file);
  EXPECT_EQ(read_state_dict(file).size(), state_dict(*a).size());
}

TEST_F(ModelsWeights, MissingKeyIsNamed) {
  ResNet model(tiny());
  auto sd = state_dict(*model);
  sd.erase("layer2.0.downsample.1.running_var");
  const std::string file = path("missing.pt");
  save_state_dict(sd, file);
  const std::string msg = model_error([&] { load_state_dict(*model, file); });
  EXPECT_NE(msg.find("missing keys (1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer2.0.downsample.1.running_var"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
}

TEST_F(ModelsWeights, UnexpectedKeyIsNamed) {
  ResNet model(tiny());
  auto sd = state_dict(*model);
  sd["head.extra.weight"] = torch::zeros({3});
  const std::string file = path("unexpected.pt");
  save_state_dict(sd, file);
  const std::string msg = model_error([&] { load_state_dict(*model, file); });
  EXPECT_NE(msg.find("unexpected keys (1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("head.extra.weight"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("missing keys"), std::string::npos) << msg;
}

TEST_F(ModelsWeights, WrongShapeIsNamedWithBothShapes) {
  ResNet model(tiny());
  auto sd = state_dict(*model);
  sd["fc.weight"] = torch::zeros({9, 32});
  const std::string file = path("shape.pt");
  save_state_dict(sd, file);
  const torch::Tensor before = state_dict(*model).at("conv1.weight").clone();
  const std::string msg = model_error([&] { load_state_dict(*model, file); });
  EXPECT_NE(msg.find("fc.weight: expected [7, 32], got [9, 32]"), std::string::npos) << msg;
  // Nothing was copied.
  EXPECT_TRUE(torch::equal(before, state_dict(*model).at("conv1.weight")));
}

TEST_F(ModelsWeights, LoadConvertsDtype) {
  ResNet model(tiny());
  std::map<std::string, torch::Tensor> sd;
  for (const auto& [name, t] : state_dict(*model)) {
    sd[name] = t.is_floating_point() ? torch::full(t.sizes(), 0.5, torch::kFloat64) : t.clone();
  }
  const std::string file = path("double.pt");
  save_state_dict(sd, file);
  load_state_dict(*model, file);
  const torch::Tensor w = state_dict(*model).at("layer1.0.conv1.weight");
  EXPECT_EQ(w.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(w.eq(0.5).all().item<bool>());
  EXPECT_TRUE(w.requires_grad());
}

TEST_F(ModelsWeights, SkipPrefixesLoadsAClassifierIntoABackbone) {
  ResNetOptions with_top = tiny(50);
  ResNet classifier(with_top);
  const std::string file = path("classifier.pt");
  save_state_dict(*classifier, file);

  ResNetOptions no_top = with_top;
  no_top.include_top = false;
  ResNet backbone(no_top);
  const std::string msg = model_error([&] { load_state_dict(*backbone, file); });
  EXPECT_NE(msg.find("fc.bias"), std::string::npos) << msg;

  load_state_dict(*backbone, file, LoadOptions{{"fc."}});
  EXPECT_TRUE(torch::equal(state_dict(*backbone).at("layer4.2.conv3.weight"),
                           state_dict(*classifier).at("layer4.2.conv3.weight")));
}

TEST_F(ModelsWeights, UnreadableFilesAreModelErrors) {
  ResNet model(tiny());
  std::string msg = model_error([&] { load_state_dict(*model, path("nope.pt")); });
  EXPECT_NE(msg.find("nope.pt"), std::string::npos) << msg;

  const std::string garbage = path("garbage.pt");
  { std::ofstream(garbage) << "this is not a pickle"; }
  msg = model_error([&] { load_state_dict(*model, garbage); });
  EXPECT_NE(msg.find("garbage.pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("convert_torchvision.py"), std::string::npos) << msg;

  const std::string tensor_file = path("tensor.pt");
  {
    const auto bytes = torch::pickle_save(torch::IValue(torch::ones({2})));
    std::ofstream(tensor_file, std::ios::binary).write(bytes.data(), bytes.size());
  }
  msg = model_error([&] { load_state_dict(*model, tensor_file); });
  EXPECT_NE(msg.find("not a dict"), std::string::npos) << msg;
}

TEST_F(ModelsWeights, SaveMakesMissingFoldersAndNamesAnUnwritablePath) {
  ResNet model(tiny());
  save_state_dict(*model, path("new/dir/w.pt"));  // as checkpoints: the folders are made
  EXPECT_EQ(read_state_dict(path("new/dir/w.pt")).size(), model->named_parameters().size() +
                                                            model->named_buffers().size());
  // Below a regular file nothing can be made: an EnvironmentError (exit 9) naming the path.
  try {
    save_state_dict(*model, path("new/dir/w.pt/x.pt"));
    ADD_FAILURE() << "no error";
  } catch (const EnvironmentError& e) {
    EXPECT_NE(std::string(e.what()).find("new/dir/w.pt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amptune::models
