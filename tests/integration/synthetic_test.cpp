// data.format synthetic through the binary: a tiny classifier cell trains and evaluates on the
// resident batch with no data files, the same seed gives the same losses, and a model that does
// not classify images is refused naming data.format.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {

// A one-cell sweep of `model` on synthetic data in a fresh scratch dir (tag `tag`): 64 samples of
// 3 x 12 x 12, batch 16 (4 steps an epoch), two epochs, the whole evaluation split.
TinySweep synthetic_sweep(const std::string& tag, const std::string& model) {
  TinySweep f;
  f.dir = scratch_dir(tag);
  f.db = f.dir + "/results/amptune.sqlite";
  f.yaml = f.dir + "/sweep.yaml";
  std::filesystem::create_directories(f.dir + "/results");
  write_file(f.yaml,
             "name: synth\n"
             "base:\n"
             "  model: " + model + "\n"
             "  data: {format: synthetic, image_size: 12, synthetic_samples: 64, batch_size: 16,\n"
             "         workers: 2}\n"
             "  optim: {name: sgd, lr: 0.05}\n"
             "  schedule: {epochs: 2, eval_step_per_epoch: -1, skip_steps: 1}\n"
             "  threads: 1\n");
  return f;
}

const char* const kTinyResNet =
    "{name: resnet18, num_classes: 4, in_channels: 3, width: 0.0625, small_input: true}";

std::vector<records::EpochRow> train(const std::string& tag) {
  const TinySweep f = synthetic_sweep(tag, kTinyResNet);
  const Result r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  const auto runs = s.runs("synth");
  EXPECT_EQ(runs.size(), 1u);
  if (runs.empty()) return {};
  EXPECT_EQ(runs[0].status, records::RunStatus::kDone);
  return s.epochs(runs[0].id);
}

TEST(SyntheticCli, ACellTrainsAndEvaluatesWithoutDataFiles) {
  const auto epochs = train("a");
  ASSERT_EQ(epochs.size(), 2u);
  for (const auto& e : epochs) {
    EXPECT_TRUE(std::isfinite(e.train_loss)) << "epoch " << e.epoch;
    EXPECT_EQ(e.metrics.at("train_images"), 64) << "epoch " << e.epoch;
    EXPECT_GT(e.train_fps_mean, 0);
    ASSERT_TRUE(e.metrics.count("train_fps_elapsed")) << "epoch " << e.epoch;
    EXPECT_GT(e.metrics.at("train_fps_elapsed"), 0);
    ASSERT_TRUE(e.metrics.count("acc1")) << "epoch " << e.epoch;
    EXPECT_GE(e.metrics.at("acc1"), 0);
    EXPECT_LE(e.metrics.at("acc1"), 100);
    EXPECT_TRUE(std::isfinite(e.metrics.at("val_loss")));
  }
  // Every step trains the same 16 samples: the model memorises them.
  EXPECT_LT(epochs[1].train_loss, epochs[0].train_loss);
  // The same seed draws the same batch: another database trains the same losses, bit for bit.
  const auto again = train("b");
  ASSERT_EQ(again.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again[i].train_loss, epochs[i].train_loss) << "epoch " << i + 1;
    EXPECT_EQ(again[i].metrics.at("val_loss"), epochs[i].metrics.at("val_loss"));
  }
}

TEST(SyntheticCli, RootNetIsRefusedNamingDataFormat) {
  const TinySweep f =
      synthetic_sweep("rootnet", "{name: rootnet, backbone_depth: 18, width: 0.0625}");
  const Result r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;  // ConfigError
  EXPECT_NE(r.err.find("data.format: synthetic"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model rootnet"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace amptune::testing
