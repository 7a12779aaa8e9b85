// A run's data fingerprint (train/plan.h data_fingerprint) for data.format tensors: every shard
// by name and content, never the path, never the files beside the shards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include "core/config.h"
#include "core/settings.h"
#include "data/safetensors.h"
#include "support/scratch.h"
#include "train/plan.h"

namespace amptune::train {
namespace {

namespace fs = std::filesystem;
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

}  // namespace
}  // namespace amptune::train
