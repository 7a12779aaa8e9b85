// A run's data fingerprint (train/plan.h data_fingerprint) for data.format tensors: every shard
// by name and content, never the path, never the files beside the shards. The checks of a run
// ask its model's capabilities (train/model_info.h), never its name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "data/safetensors.h"
#include "support/errors.h"
#include "support/scratch.h"
#include "train/model_info.h"
#include "train/plan.h"
#include "train/task.h"

namespace amptune::train {
namespace {

namespace fs = std::filesystem;
using testing::message_of;
using testing::scratch_dir;
using testing::write_file;

std::string fingerprint_of(const std::string& root) {
  Config c;
  c.set("data.format", "tensors");
  c.set("data.root", root);
  c.set("data.val_split", "train");
  return data_fingerprint(Settings::from(c));
}

// Changing a byte in the middle of a shard (past the 64 KiB a folder's fingerprint samples of
// each file), adding a shard or renaming one changes the identity; the same shards at another
// path, or a file that is not a shard beside them, do not.
TEST(TrainPlan, TheFingerprintOfTensorsDataCoversEveryShard) {
  const std::string dir = scratch_dir();
  const std::string a = dir + "/a";
  for (int k = 0; k < 2; ++k) {  // 160 KB each
    write_file(a + "/train/shard-0000" + std::to_string(k) + ".safetensors",
               data::safetensors::serialize({{"x", torch::full({200, 200}, float(k))}}, {}));
  }
  const std::string base = fingerprint_of(a);
  EXPECT_EQ(base.size(), 64u);
  auto copy_of_a = [&](const std::string& name) {
    fs::copy(a, dir + "/" + name, fs::copy_options::recursive);
    return dir + "/" + name;
  };
  EXPECT_EQ(fingerprint_of(copy_of_a("same")), base);

  const std::string changed = copy_of_a("changed");
  {
    std::fstream f(changed + "/train/shard-00001.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100'000);
    f.put('\x7f');
  }
  EXPECT_NE(fingerprint_of(changed), base);

  const std::string more = copy_of_a("more");
  fs::copy_file(more + "/train/shard-00000.safetensors", more + "/train/shard-00002.safetensors");
  EXPECT_NE(fingerprint_of(more), base);

  const std::string renamed = copy_of_a("renamed");
  fs::rename(renamed + "/train/shard-00001.safetensors", renamed + "/train/shard-1.safetensors");
  EXPECT_NE(fingerprint_of(renamed), base);

  const std::string beside = copy_of_a("beside");
  write_file(beside + "/train/README.txt", "not a shard");
  EXPECT_EQ(fingerprint_of(beside), base);
}

// The built-in models' capabilities: RootNet takes cast points and reads its backbone's
// weights; a TorchScript file may be a custom task, is code, and its BatchNorm is its own; a
// ResNet takes none of these; an unknown name has none.
TEST(TrainPlan, TheRegistryEntriesSayWhatTheirModelsTake) {
  const auto rootnet = model_capabilities("rootnet");
  ASSERT_TRUE(rootnet);
  EXPECT_TRUE(rootnet->takes_casts);
  EXPECT_EQ(rootnet->file_key, "model.backbone_weights");
  EXPECT_TRUE(rootnet->sync_bn);
  const auto scripted = model_capabilities("torchscript");
  ASSERT_TRUE(scripted);
  EXPECT_TRUE(scripted->custom_task && scripted->loads_code);
  EXPECT_FALSE(scripted->sync_bn || scripted->takes_casts);
  EXPECT_EQ(scripted->file_key, "model.path");
  const auto resnet = model_capabilities("resnet18");
  ASSERT_TRUE(resnet);
  EXPECT_FALSE(resnet->takes_casts || resnet->custom_task || resnet->loads_code || resnet->file);
  EXPECT_FALSE(model_capabilities("resnet19"));
}

// A model registered with a capability gets the keys it allows, whatever its name; without it
// they are refused naming the key.
TEST(TrainPlan, ARunsKeysAreCheckedAgainstItsModelsCapabilities) {
  ModelEntry with_casts = classifier("plan_test_casts", nullptr);
  with_casts.capabilities.takes_casts = true;
  register_model(with_casts);
  ModelEntry own_batchnorm = classifier("plan_test_own_bn", nullptr);
  own_batchnorm.capabilities.sync_bn = false;
  register_model(own_batchnorm);
  auto config = [](const std::string& model) {
    Config c;
    c.set("model.name", model);
    return c;
  };
  Config casts = config("plan_test_casts");
  casts.set("casts.int32", nlohmann::json::array({"k_value"}));
  EXPECT_NO_THROW(validate_config(casts));
  casts.set("model.name", "resnet18");
  const std::string refused = message_of<ConfigError>([&] { validate_config(casts); });
  EXPECT_EQ(refused.rfind("casts.int32: ", 0), 0u) << refused;
  Config sync = config("plan_test_own_bn");
  sync.set("dist.sync_bn", true);
  const std::string unsynced = message_of<ConfigError>([&] { validate_config(sync); });
  EXPECT_EQ(unsynced.rfind("dist.sync_bn: ", 0), 0u) << unsynced;
  sync.set("model.name", "plan_test_casts");
  EXPECT_NO_THROW(validate_config(sync));
}

// The file a model reads besides model.weights is part of the fingerprint by its capability:
// another file under model.backbone_weights is another identity for a model that reads it, the
// same for one that does not.
TEST(TrainPlan, TheFingerprintCoversTheFileTheModelSaysItReads) {
  ModelEntry reads = classifier("plan_test_reads_backbone", nullptr);
  reads.capabilities.file_key = "model.backbone_weights";
  reads.capabilities.file = &ModelSettings::backbone_weights;
  register_model(reads);
  const std::string dir = scratch_dir();
  write_file(dir + "/a.bin", "one");
  write_file(dir + "/b.bin", "two");
  auto fingerprint = [&](const std::string& model, const std::string& file) {
    Config c;
    c.set("model.name", model);
    c.set("model.backbone_weights", dir + "/" + file);
    c.set("schedule.epochs", 0);  // no data read: only the model's files
    c.set("schedule.eval_step_per_epoch", 0);
    return data_fingerprint(Settings::from(c));
  };
  EXPECT_NE(fingerprint("plan_test_reads_backbone", "a.bin"),
            fingerprint("plan_test_reads_backbone", "b.bin"));
  EXPECT_EQ(fingerprint("resnet18", "a.bin"), fingerprint("resnet18", "b.bin"));
}

}  // namespace
}  // namespace amptune::train
