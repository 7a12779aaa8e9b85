// data.format synthetic: the data set from a config, the resident batch (shape, labels, seed,
// one storage for every batch and epoch, device and layout) and the loader's path over it.
#include <gtest/gtest.h>

#include <set>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/synthetic.h"

namespace amptune::data {
namespace {

Settings synthetic_settings(int64_t samples = 20, int64_t batch = 4, int64_t seed = 3) {
  Config c;
  c.set("data.format", "synthetic");
  c.set("data.image_size", 8);
  c.set("data.synthetic_samples", samples);
  c.set("data.batch_size", batch);
  c.set("model.in_channels", 3);
  c.set("model.num_classes", 5);
  c.set("seed", seed);
  return Settings::from(c);
}

std::shared_ptr<Dataset> synthetic_set(const Settings& s, Split split = Split::kTrain) {
  return make_dataset(s.data, s.rootnet, s.model, split);
}

TEST(Synthetic, MadeFromTheConfig) {
  const Settings s = synthetic_settings();
  auto set = synthetic_set(s);
  ASSERT_NE(dynamic_cast<const SyntheticDataset*>(set.get()), nullptr);
  EXPECT_EQ(set->size(), 20u);
  EXPECT_EQ(set->num_classes(), 5);
  EXPECT_EQ(set->describe(), "synthetic 3x8x8 (5 classes, 20 samples, one resident batch)");
  EXPECT_EQ(to_string(DataFormat::kSynthetic), "synthetic");
}

TEST(Synthetic, RefusesEmptyShapes) {
  Settings s = synthetic_settings();
  s.model.num_classes = 0;
  try {
    (void)synthetic_set(s);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.num_classes"), std::string::npos) << e.what();
  }
}

TEST(Synthetic, BatchShapeAndLabels) {
  const Settings s = synthetic_settings(20, 6);
  Loader loader(synthetic_set(s), loader_options(s.data, s.seed, Split::kTrain, 0));
  EXPECT_EQ(loader.num_batches(), 3);  // 20 / 6, the last partial batch dropped
  std::optional<Batch> b = loader.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->size, 6);
  EXPECT_EQ(b->skipped, 0);
  EXPECT_EQ(b->images.sizes(), (std::vector<int64_t>{6, 3, 8, 8}));
  EXPECT_EQ(b->images.scalar_type(), torch::kFloat32);
  const torch::Tensor labels = b->fields.at("label");
  EXPECT_EQ(labels.sizes(), (std::vector<int64_t>{6}));
  EXPECT_EQ(labels.scalar_type(), torch::kInt64);
  EXPECT_GE(labels.min().item<int64_t>(), 0);
  EXPECT_LT(labels.max().item<int64_t>(), 5);
  // Standard normal pixels: 1152 values, mean near 0 and spread near 1.
  EXPECT_NEAR(b->images.mean().item<double>(), 0.0, 0.15);
  EXPECT_NEAR(b->images.std().item<double>(), 1.0, 0.15);
}

TEST(Synthetic, OneStorageForEveryBatchAndEpoch) {
  const Settings s = synthetic_settings();
  auto set = synthetic_set(s);
  LoaderOptions o = loader_options(s.data, s.seed, Split::kTrain, 0);
  o.workers = 3;  // no thread starts for a synthetic set
  const void* storage = nullptr;
  for (uint64_t epoch : {0u, 1u}) {
    o.epoch = epoch;
    Loader loader(set, o);
    int64_t index = 0;
    while (std::optional<Batch> b = loader.next()) {
      EXPECT_EQ(b->index, index++);
      if (!storage) storage = b->images.data_ptr();
      EXPECT_EQ(b->images.data_ptr(), storage);
    }
    EXPECT_EQ(index, 5);
  }
}

TEST(Synthetic, TheSeedDecides) {
  const Settings s = synthetic_settings();
  auto batch_of = [](const Settings& settings, Split split) {
    Loader loader(synthetic_set(settings, split),
                  loader_options(settings.data, settings.seed, split, 0));
    return *loader.next();
  };
  const Batch a = batch_of(s, Split::kTrain);
  const Batch again = batch_of(s, Split::kTrain);  // another data set, the same seed
  EXPECT_NE(a.images.data_ptr(), again.images.data_ptr());
  EXPECT_TRUE(torch::equal(a.images, again.images));
  EXPECT_TRUE(torch::equal(a.fields.at("label"), again.fields.at("label")));
  const Batch other = batch_of(synthetic_settings(20, 4, 4), Split::kTrain);
  EXPECT_FALSE(torch::equal(a.images, other.images));
  const Batch val = batch_of(s, Split::kVal);  // the evaluation split differs
  EXPECT_FALSE(torch::equal(a.images, val.images));
  // Row r of the batch is the sample get() draws from sample_rng(seed, split salt, r).
  auto set = synthetic_set(s);
  Rng rng = sample_rng(3, 0, 2);
  const Sample row2 = *set->get(17, rng, true);
  EXPECT_TRUE(torch::equal(a.images[2], row2.image));
  EXPECT_TRUE(torch::equal(a.fields.at("label")[2], row2.fields.at("label")));
}

TEST(Synthetic, EvaluationReadsTheWholeSplitAsViews) {
  Settings s = synthetic_settings(10, 4);
  Loader loader(synthetic_set(s, Split::kVal), loader_options(s.data, s.seed, Split::kVal, 0));
  ASSERT_EQ(loader.num_batches(), 3);  // 4 + 4 + 2, nothing dropped
  std::vector<Batch> batches;
  while (std::optional<Batch> b = loader.next()) batches.push_back(*b);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].size, 2);
  EXPECT_EQ(batches[2].images.size(0), 2);
  EXPECT_EQ(batches[2].fields.at("label").size(0), 2);
  EXPECT_EQ(batches[2].images.data_ptr(), batches[0].images.data_ptr());
  EXPECT_TRUE(torch::equal(batches[2].images, batches[0].images.narrow(0, 0, 2)));
}

TEST(Synthetic, MadeInTheLoadersLayout) {
  const Settings s = synthetic_settings();
  LoaderOptions o = loader_options(s.data, s.seed, Split::kTrain, 0);
  o.memory_format = torch::MemoryFormat::ChannelsLast;
  auto set = synthetic_set(s);
  Loader loader(set, o);
  const Batch b = *loader.next();
  EXPECT_TRUE(b.images.device().is_cpu());
  EXPECT_TRUE(b.images.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(b.images.is_contiguous());
  // The same values as the NCHW batch, in another layout and another storage.
  Loader nchw(set, loader_options(s.data, s.seed, Split::kTrain, 0));
  const Batch c = *nchw.next();
  EXPECT_TRUE(c.images.is_contiguous());
  EXPECT_NE(b.images.data_ptr(), c.images.data_ptr());
  EXPECT_TRUE(torch::equal(b.images, c.images));
}

TEST(Synthetic, MadeOnTheLoadersDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Settings s = synthetic_settings();
  auto set = synthetic_set(s);
  Loader on_cpu(set, loader_options(s.data, s.seed, Split::kTrain, 0));
  const Batch c = *on_cpu.next();
  LoaderOptions o = loader_options(s.data, s.seed, Split::kTrain, 0);
  o.device = torch::Device(torch::kCUDA, 0);
  o.memory_format = torch::MemoryFormat::ChannelsLast;
  Loader on_gpu(set, o);
  const Batch g = *on_gpu.next();
  EXPECT_TRUE(g.images.is_cuda());
  EXPECT_TRUE(g.fields.at("label").is_cuda());
  EXPECT_TRUE(g.images.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(g.images.cpu(), c.images));
  EXPECT_TRUE(torch::equal(g.fields.at("label").cpu(), c.fields.at("label")));
  EXPECT_EQ(on_gpu.next()->images.data_ptr(), g.images.data_ptr());
}

}  // namespace
}  // namespace amptune::data
