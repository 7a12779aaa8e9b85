// data.format tensors (data/dataset.h make_tensors_dataset): shards written with the
// safetensors writer read back row by row, batches of named fields without images, and one
// refusal per malformed split, each naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/safetensors.h"
#include "data_util.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;
using amptune::testing::scratch_dir;
using amptune::testing::write_file;
using testing_util::data_error_of;
using Named = std::vector<std::pair<std::string, torch::Tensor>>;

void write_shard(const std::string& path, const Named& tensors) {
  write_file(path, safetensors::serialize(tensors, {}));
}

// Tensors of `n` rows, one of each dtype a data set is likely to hold, from `seed`.
Named columns(int64_t n, int seed) {
  torch::manual_seed(seed);
  return {
      {"x", torch::randn({n, 3, 2})},
      {"label", torch::randint(0, 10, {n}, torch::kLong)},
      {"half", torch::randn({n, 4}).to(torch::kHalf)},
      {"brain", torch::randn({n}).to(torch::kBFloat16)},
      {"mask", torch::randint(0, 2, {n, 2}).to(torch::kBool)},
      {"pixels", torch::randint(0, 256, {n, 5}, torch::kByte)},
      {"weight", torch::randn({n}, torch::kDouble)},
      {"index", torch::randint(-9, 9, {n, 1}, torch::kInt)},
  };
}

// The rows of `a` followed by those of `b`, by name.
std::map<std::string, torch::Tensor> concatenated(const Named& a, const Named& b) {
  std::map<std::string, torch::Tensor> all;
  for (size_t i = 0; i < a.size(); ++i) all[a[i].first] = torch::cat({a[i].second, b[i].second});
  return all;
}

// A split of two shards (5 and 3 rows) written out of name order, beside files that are not
// shards: a hidden one, another extension, a folder of the shards' extension.
struct TwoShards {
  std::string root = scratch_dir();
  Named first = columns(5, 1), second = columns(3, 2);
  TwoShards() {
    write_shard(root + "/train/shard-00001.safetensors", second);
    write_shard(root + "/train/shard-00000.safetensors", first);
    write_shard(root + "/train/.partial.safetensors", columns(2, 3));
    write_file(root + "/train/notes.txt", "not a shard");
    fs::create_directories(root + "/train/folder.safetensors");
  }
};

TEST(TensorsDataset, TwoShardsReadBackRowByRowAsWritten) {
  const TwoShards split;
  const auto data = make_tensors_dataset(split.root, "train");
  ASSERT_EQ(data->size(), 8u);
  EXPECT_EQ(data->num_classes(), 0);
  EXPECT_NE(data->describe().find("8 samples in 2 shard(s)"), std::string::npos)
      << data->describe();
  EXPECT_NE(data->describe().find("x F32 [3, 2]"), std::string::npos) << data->describe();
  const auto all = concatenated(split.first, split.second);
  Rng rng = sample_rng(0, 0, 0);
  for (size_t i = 0; i < data->size(); ++i) {
    SCOPED_TRACE(i);
    const std::optional<Sample> s = data->get(i, rng, true);
    ASSERT_TRUE(s);
    EXPECT_FALSE(s->image.defined());
    ASSERT_EQ(s->fields.size(), all.size());
    for (const auto& [name, t] : all) {
      const torch::Tensor& row = s->fields.at(name);
      EXPECT_EQ(row.scalar_type(), t.scalar_type()) << name;
      EXPECT_TRUE(torch::equal(row, t[static_cast<int64_t>(i)])) << name;
    }
  }
  EXPECT_NE(data_error_of([&] { data->get(8, rng, false); }).find("out of range"),
            std::string::npos);
  EXPECT_EQ(tensors_shard_files(split.root, "train"),
            (std::vector<std::string>{split.root + "/train/shard-00000.safetensors",
                                      split.root + "/train/shard-00001.safetensors"}));

  // make_dataset takes data.format tensors with data.train_split / data.val_split, whatever
  // model.in_channels (no transform).
  Config c;
  c.set("data.format", "tensors");
  c.set("data.root", split.root);
  c.set("data.val_split", "train");
  Settings settings = Settings::from(c);
  settings.model.in_channels = 7;
  EXPECT_EQ(make_dataset(settings.data, settings.rootnet, settings.model, Split::kVal)->size(), 8u);
}

// Shards written by Python's safetensors (tests/fixtures/data/make_tensors_fixtures.py, the
// layout safetensors.torch.save_file writes) read as Python wrote them.
TEST(TensorsDataset, ShardsWrittenByPythonsSafetensorsRead) {
  const auto data = make_tensors_dataset(testing_util::fixture("tensors"), "train");
  ASSERT_EQ(data->size(), 7u);
  Rng rng = sample_rng(0, 0, 0);
  for (int64_t i = 0; i < 7; ++i) {
    SCOPED_TRACE(i);
    const auto f = data->get(static_cast<size_t>(i), rng, false)->fields;
    const float x0 = static_cast<float>(3 * i) / 4;
    EXPECT_TRUE(torch::equal(f.at("x"), torch::tensor({x0, x0 + 0.25f, x0 + 0.5f})));
    EXPECT_TRUE(torch::equal(f.at("y"), torch::tensor(i - 3)));
    EXPECT_TRUE(torch::equal(f.at("h"), torch::tensor({i / 2.0, -i * 1.0}).to(torch::kHalf)));
    EXPECT_TRUE(torch::equal(f.at("m"), torch::tensor(i % 2 == 1)));
    EXPECT_TRUE(torch::equal(f.at("u"), torch::tensor(200 + i).to(torch::kByte)));
    EXPECT_TRUE(torch::equal(f.at("d"), torch::tensor(i * 0.1, torch::kDouble)));
    EXPECT_TRUE(torch::equal(f.at("k"), torch::tensor({i, -i}).to(torch::kInt)));
  }
}

TEST(TensorsDataset, TheLoaderStacksFieldsAndMakesNoImages) {
  const TwoShards split;
  const auto data = make_tensors_dataset(split.root, "train");
  const auto all = concatenated(split.first, split.second);
  LoaderOptions o;
  o.batch_size = 3;
  o.drop_last = false;
  o.seed = 4;
  std::vector<std::vector<Batch>> runs;
  for (const int workers : {0, 2}) {
    o.workers = workers;
    Loader loader(data, o);
    EXPECT_EQ(loader.num_batches(), 3);
    std::vector<Batch> batches;
    while (std::optional<Batch> b = loader.next()) batches.push_back(std::move(*b));
    runs.push_back(std::move(batches));
  }
  const std::vector<int64_t> order = epoch_order(8, 4, 0, true);
  for (const std::vector<Batch>& batches : runs) {
    ASSERT_EQ(batches.size(), 3u);
    for (const Batch& b : batches) {
      SCOPED_TRACE(b.index);
      EXPECT_FALSE(b.images.defined());
      const int64_t begin = b.index * 3, end = std::min<int64_t>(begin + 3, 8);
      EXPECT_EQ(b.size, end - begin);
      const torch::Tensor rows =
          torch::tensor(std::vector<int64_t>(order.begin() + begin, order.begin() + end));
      ASSERT_EQ(b.fields.size(), all.size());
      for (const auto& [name, t] : all) {
        EXPECT_TRUE(torch::equal(b.fields.at(name), t.index_select(0, rows))) << name;
      }
    }
  }
}

// The message of the DataError make_tensors_dataset(root, "train") throws.
std::string refusal(const std::string& root) {
  return data_error_of([&] { make_tensors_dataset(root, "train"); });
}

// Asserts that `what` names `file` and says `why`.
void expect_names(const std::string& what, const std::string& file, const std::string& why) {
  EXPECT_NE(what.find(file), std::string::npos) << what;
  EXPECT_NE(what.find(why), std::string::npos) << what;
}

TEST(TensorsDataset, AMissingOrEmptySplitFolderIsRefused) {
  const std::string root = scratch_dir();
  expect_names(refusal(root + "/nope"), root + "/nope", "is not a directory");
  expect_names(refusal(root), root + "/train", "does not exist");
  write_file(root + "/train/notes.txt", "no shard here");
  expect_names(refusal(root), root + "/train", "no .safetensors file in");
}

TEST(TensorsDataset, AMalformedShardIsADataErrorNamingIt) {
  const std::string root = scratch_dir();
  const std::string a = root + "/train/a.safetensors", b = root + "/train/b.safetensors";
  write_shard(a, columns(4, 1));
  const std::string bytes = safetensors::serialize(columns(4, 2), {});
  write_file(b, bytes.substr(0, bytes.size() - 3));
  expect_names(refusal(root), b, "truncated?");
  write_file(b, "");
  expect_names(refusal(root), b, "0 bytes, too short for a safetensors header");
  write_file(b, std::string("\xe8\x03\0\0\0\0\0\0", 8) + "junk");  // a header of 1000 bytes
  expect_names(refusal(root), b, "header length 1000 exceeds the 4 bytes that follow");
  write_file(b, std::string(8, '\0') + "junk");
  expect_names(refusal(root), b, "header is not valid JSON");
  write_shard(b, {});
  expect_names(refusal(root), b, "holds no tensor");
}

TEST(TensorsDataset, ShardsThatDisagreeAreRefusedNamingFileAndTensor) {
  const std::string root = scratch_dir();
  const std::string a = root + "/train/a.safetensors", b = root + "/train/b.safetensors";
  write_shard(a, {{"x", torch::zeros({4, 3})}, {"y", torch::zeros({4}, torch::kLong)}});
  write_shard(b, {{"x", torch::zeros({2, 3})}});
  expect_names(refusal(root), b, "lacks tensor \"y\", which the first shard " + a + " holds");
  write_shard(b, {{"x", torch::zeros({2, 3})},
                  {"y", torch::zeros({2}, torch::kLong)},
                  {"z", torch::zeros({2})}});
  expect_names(refusal(root), b, "holds tensor \"z\", which the first shard " + a + " does not");
  write_shard(b,
              {{"x", torch::zeros({2, 3}, torch::kHalf)}, {"y", torch::zeros({2}, torch::kLong)}});
  expect_names(refusal(root), b, "tensor \"x\" is F16, in the first shard " + a + " F32");
  write_shard(b, {{"x", torch::zeros({2, 4})}, {"y", torch::zeros({2}, torch::kLong)}});
  expect_names(refusal(root), b,
               "tensor \"x\" has rows of shape [4], in the first shard " + a + " [3]");
}

TEST(TensorsDataset, TensorsWithoutOneRowPerSampleAreRefused) {
  const std::string root = scratch_dir();
  const std::string a = root + "/train/a.safetensors";
  write_shard(a, {{"x", torch::zeros({4, 3})}, {"y", torch::zeros({5}, torch::kLong)}});
  expect_names(refusal(root), a, "tensor \"y\" has 5 rows (first dimension), tensor \"x\" 4");
  write_shard(a, {{"x", torch::zeros({4, 3})}, {"y", torch::scalar_tensor(1)}});
  expect_names(refusal(root), a, "tensor \"y\" has no dimension (a scalar)");
  write_shard(a, {{"x", torch::zeros({4, 0})}});
  expect_names(refusal(root), a, "tensor \"x\" of shape [4, 0] has rows that hold no element");
  write_shard(a, {{"x", torch::zeros({0, 3})}});
  write_shard(root + "/train/b.safetensors", {{"x", torch::zeros({0, 3})}});
  expect_names(refusal(root), root + "/train", "holds no sample");
}

// A BOOL byte other than 0 or 1 is found in the row that holds it, when it is read.
TEST(TensorsDataset, ABoolThatIsNeitherZeroNorOneIsRefusedWhereItIsRead) {
  const std::string root = scratch_dir();
  const std::string header = R"({"m":{"dtype":"BOOL","shape":[2,1],"data_offsets":[0,2]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  write_file(root + "/train/m.safetensors", bytes + header + std::string("\x01\x07", 2));
  const auto data = make_tensors_dataset(root, "train");
  Rng rng = sample_rng(0, 0, 0);
  EXPECT_TRUE(data->get(0, rng, false)->fields.at("m").item<bool>());
  expect_names(data_error_of([&] { data->get(1, rng, false); }), root + "/train/m.safetensors",
               "tensor \"m\" row 1 holds a BOOL that is neither 0 nor 1");
}

// docs/SECURITY.md "Data": a split holds at most kMaxTensorShards shards (each stays mapped),
// refused when listed, before any is opened (the files here are empty).
TEST(TensorsDataset, MoreShardsThanTheBoundAreRefusedBeforeAnyIsOpened) {
  const std::string root = scratch_dir();
  fs::create_directories(root + "/train");
  for (size_t i = 0; i <= kMaxTensorShards; ++i) {
    std::ofstream(root + "/train/s" + std::to_string(i) + ".safetensors").close();
  }
  expect_names(refusal(root), root + "/train",
               "holds 10001 .safetensors files, more than the 10000 a split may have");
  fs::remove(root + "/train/s0.safetensors");
  expect_names(refusal(root), root + "/train/s1.safetensors", "too short");  // at the bound
}

// issue 46 item 10: a 4 KB sparse shard declaring 10^8 rows cost 1.75 GB for a 2-step run (the
// epoch's int64 order built whole, then copied for the shard); the order is now read per
// position, so a short run over a huge split costs what its batches touch.
TEST(TensorsDataset, AShardOfAHundredMillionRowsLoadsTwoBatchesInBoundedMemory) {
  const std::string root = scratch_dir();
  const std::string path = root + "/train/shard-00000.safetensors";
  const int64_t rows = 100000000;
  std::string header = R"({"x":{"dtype":"U8","shape":[)" + std::to_string(rows) +
                       R"(,1],"data_offsets":[0,)" + std::to_string(rows) + "]}}";
  while (header.size() % 8) header += ' ';
  std::string bytes(8, '\0');
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>((header.size() >> (8 * k)) & 0xFF);
  write_file(path, bytes + header);
  fs::resize_file(path, 8 + header.size() + static_cast<uint64_t>(rows));  // sparse zeros
  int64_t grew = 0;
  int64_t loaded = 0;
  grew = testing_util::peak_rss_growth_mb([&] {
    const auto data = make_tensors_dataset(root, "train");
    ASSERT_EQ(data->size(), static_cast<size_t>(rows));
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = 0;
    o.max_batches = 2;
    o.seed = 3;
    for (const int world : {1, 2}) {
      o.world = world;
      Loader loader(data, o);
      while (std::optional<Batch> b = loader.next()) loaded += b->size;
    }
  });
  EXPECT_EQ(loaded, 16);
  EXPECT_LT(grew, 100) << "MB (the order alone was 800 MB)";
}

}  // namespace
}  // namespace amptune::data
