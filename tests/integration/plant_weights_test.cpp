// `amptune data plant-weights` with the real binary: the file it writes is the seeded initial
// weights of the sweep's model (as `amptune export` of a run that did not move them shows) with
// the named tensor scaled, and a run loads it as model.weights; bad names and factors are refused
// with exit code 3 (near names listed) and nothing written.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

#include "integration/harness.h"
#include "models/weights.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

constexpr const char* kPlanted = "layer2.0.conv1.weight";

TinySweep tiny_sweep(const std::string& tag) {
  TinyOptions o = quick_tiny("");
  o.dir_tag = tag;
  return make_tiny_sweep(o);
}

// The parameters a run of `f` (with `sets`) starts from, through `amptune export` of its epoch
// 0 trained at a learning rate of 0, which leaves them where they started (BatchNorm's running
// statistics move; they are left out).
std::map<std::string, torch::Tensor> initial_parameters(const TinySweep& f,
                                                        const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"run", f.yaml, "--db", f.db, "-q", "--set", "optim.lr=0"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  auto r = run_amptune(args, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string out = f.dir + "/exported.pt";
  r = run_amptune({"export", "1", "--epoch", "0", "--out", out, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto values = models::read_state_dict(out);
  for (auto it = values.begin(); it != values.end();) {  // buffers moved while it trained
    const std::string& name = it->first;
    const bool buffer = name.find("running_") != std::string::npos ||
                        name.find("num_batches_tracked") != std::string::npos;
    it = buffer ? values.erase(it) : std::next(it);
  }
  return values;
}

TEST(PlantWeights, TheSeededInitWithTheNamedTensorScaledLoadsAsModelWeights) {
  const TinySweep f = tiny_sweep("plant");
  auto r = run_amptune({"data", "plant-weights", f.yaml, "--scale", std::string(kPlanted) + "=3000",
                        "--out", "planted.pt"},
                       f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::string(kPlanted) + " x 3000"), std::string::npos) << r.out;
  const auto planted = models::read_state_dict(f.dir + "/planted.pt");

  const auto init = initial_parameters(f, {});
  ASSERT_GT(init.size(), 20u);
  for (const auto& [name, value] : init) {
    ASSERT_TRUE(planted.count(name)) << name;
    const torch::Tensor want = name == kPlanted ? value * 3000.0 : value;
    EXPECT_TRUE(planted.at(name).equal(want)) << name;
  }
  // Buffers as a fresh model has them.
  EXPECT_TRUE(planted.at("bn1.running_var").equal(torch::ones_like(planted.at("bn1.running_var"))));
  EXPECT_EQ(planted.at("bn1.num_batches_tracked").item<int64_t>(), 0);

  // One slice: the first output filter of conv1 only (a few huge values of a tensor).
  r = run_amptune({"data", "plant-weights", f.yaml, "--scale", "conv1.weight[0]=1000", "--out",
                   "slice.pt"},
                  f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto slice = models::read_state_dict(f.dir + "/slice.pt");
  const torch::Tensor conv1 = init.at("conv1.weight");
  EXPECT_TRUE(slice.at("conv1.weight")[0].equal(conv1[0] * 1000.0));
  EXPECT_TRUE(slice.at("conv1.weight").slice(0, 1).equal(conv1.slice(0, 1)));
  EXPECT_TRUE(slice.at("fc.weight").equal(init.at("fc.weight")));

  // A run given the file as model.weights (a path relative to the working directory) starts there.
  const TinySweep g = tiny_sweep("load");
  fs::copy_file(f.dir + "/planted.pt", g.dir + "/planted.pt");
  const auto loaded = initial_parameters(g, {"model.weights=planted.pt"});
  for (const auto& [name, value] : loaded) EXPECT_TRUE(planted.at(name).equal(value)) << name;
}

TEST(PlantWeights, RefusesWhatItCannotPlantAndWritesNothing) {
  const TinySweep f = tiny_sweep("refuse");
  const std::string out = f.dir + "/planted.pt";
  write_file(out, "the previous file");
  auto plant = [&](const std::vector<std::string>& scales) {
    std::vector<std::string> args = {"data", "plant-weights", f.yaml, "--out", out};
    for (const auto& s : scales) args.insert(args.end(), {"--scale", s});
    return run_amptune(args, f.dir);
  };
  auto r = plant({"layer2.0.conv.weight=2"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("--scale layer2.0.conv.weight: the model has no parameter or buffer"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("near names: layer2.0.conv1.weight, layer2.0.conv2.weight"),
            std::string::npos)
      << r.err;
  r = plant({"conv1.weight=1e39"});  // finite as a factor, not in fp32 once multiplied
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("is not finite in fp32"), std::string::npos) << r.err;
  r = plant({"bn1.num_batches_tracked=2"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("holds integers"), std::string::npos) << r.err;
  r = plant({"conv1.weight[4]=2"});  // conv1 has 4 output filters at this width: 0..3
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("--scale conv1.weight[4]: conv1.weight has 4 slices"), std::string::npos)
      << r.err;
  r = plant({"conv1.weight=2", "conv1.weight=3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("given twice"), std::string::npos) << r.err;
  r = plant({"conv1.weight"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--scale takes NAME=FACTOR"), std::string::npos) << r.err;
  r = plant({"conv1.weight=lots"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(read_file(out), "the previous file");
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(f.dir)) files += e.is_regular_file();
  r = plant({"conv1.weight=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_file(out), "the previous file");
  std::size_t after = 0;
  for (const auto& e : fs::directory_iterator(f.dir)) after += e.is_regular_file();
  EXPECT_EQ(after, files);  // replaced in place: no temp file left beside it
}

}  // namespace
}  // namespace amptune::testing
