// IDX reader (fixtures and, when installed, the real Fashion-MNIST), the IDX data set, config
// plumbing and sample_rng.
#include <gtest/gtest.h>

#include <filesystem>

#include <zlib.h>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data_util.h"

namespace amptune::data {
namespace {

using testing_util::data_error_of;
using testing_util::fixture;

// The pixel formula of tests/fixtures/data/make_idx_fixtures.py.
int fixture_pixel(int i, int y, int x) { return std::min(255, 10 + 6 * i + 12 * y + 20 * x + 15 * (i % 3)); }

TEST(IdxReader, ReadsGzipFixture) {
  const IdxData d = read_idx(fixture("idx"), "train");
  EXPECT_EQ(d.count, 30);
  EXPECT_EQ(d.rows, 8);
  EXPECT_EQ(d.cols, 8);
  EXPECT_EQ(d.num_classes, 3);
  ASSERT_EQ(d.pixels.size(), 30u * 64u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(d.labels[i], i % 3);
    EXPECT_EQ(d.image(i)[3 * 8 + 5], fixture_pixel(i, 3, 5));
  }
  EXPECT_NE(d.images_path.find(".gz"), std::string::npos);
  EXPECT_EQ(read_idx(fixture("idx"), "t10k").count, 24);
}

TEST(IdxReader, ReadsPlainFixture) {
  const IdxData d = read_idx(fixture("idx_plain"), "train");
  EXPECT_EQ(d.count, 5);
  EXPECT_EQ(d.rows, 4);
  EXPECT_EQ(d.cols, 6);
  EXPECT_EQ(d.image(4)[2 * 6 + 1], fixture_pixel(4, 2, 1));
}

TEST(IdxReader, BadMagicNamesFileAndExpectation) {
  const std::string msg = data_error_of([] { read_idx(fixture("idx_bad_magic"), "train"); });
  EXPECT_NE(msg.find("idx_bad_magic/train-images-idx3-ubyte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2051"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2049"), std::string::npos) << msg;
}

TEST(IdxReader, TruncatedFilesAreClearErrors) {
  std::string msg = data_error_of([] { read_idx(fixture("idx_truncated"), "train"); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 images of 4x6"), std::string::npos) << msg;
  msg = data_error_of([] { read_idx(fixture("idx_badgz"), "train"); });
  EXPECT_NE(msg.find("idx_badgz/train-images-idx3-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(IdxReader, CountMismatchAndMissingFiles) {
  std::string msg = data_error_of([] { read_idx(fixture("idx_mismatch"), "train"); });
  EXPECT_NE(msg.find("5 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 labels"), std::string::npos) << msg;
  msg = data_error_of([] { read_idx(fixture("idx"), "val"); });
  EXPECT_NE(msg.find("val-images-idx3-ubyte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("t10k"), std::string::npos) << msg;  // the hint for Fashion-MNIST
  msg = data_error_of([] { read_idx(fixture("no_such_dir"), "train"); });
  EXPECT_NE(msg.find("no_such_dir"), std::string::npos) << msg;
}

// A gzip file of `header` followed by `zeros` zero bytes (deflate packs 1 MB of them in ~1 KB).
void write_gzip(const std::string& path, const std::vector<uint8_t>& header, size_t zeros) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  gzFile f = gzopen(path.c_str(), "wb1");
  ASSERT_NE(f, nullptr) << path;
  gzwrite(f, header.data(), static_cast<unsigned>(header.size()));
  const std::vector<uint8_t> chunk(1 << 20, 0);
  for (size_t done = 0; done < zeros; done += chunk.size()) {
    gzwrite(f, chunk.data(), static_cast<unsigned>(std::min(chunk.size(), zeros - done)));
  }
  gzclose(f);
}

std::vector<uint8_t> idx3_header(uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> h;
  for (uint32_t v : {2051u, count, rows, cols}) {
    for (int k = 0; k < 4; ++k) h.push_back(static_cast<uint8_t>(v >> (24 - 8 * k)));
  }
  return h;
}

// issue 46 item 10: a 1 MB .gz inflated to 2.3 GB before its header was compared (a 2 MB one
// ended in std::bad_alloc, on --dry-run too). The header is read first and nothing is inflated
// past the size it declares; a size the file cannot hold is refused before any allocation.
TEST(IdxReader, GzipBombsStopAtTheDeclaredSize) {
  const std::string root = amptune::testing::scratch_dir();
  const std::vector<uint8_t> labels{0, 0, 8, 1, 0, 0, 0, 2, 3, 4};  // 2 labels
  testing_util::write_bytes(root + "/train-labels-idx1-ubyte", labels);
  // Two 28x28 images declared, 192 MB of zeros behind them (a 190 KB file).
  write_gzip(root + "/train-images-idx3-ubyte.gz", idx3_header(2, 28, 28), size_t{192} << 20);
  std::string msg;
  int64_t grew = testing_util::peak_rss_growth_mb(
      [&] { msg = data_error_of([&] { read_idx(root, "train"); }); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz has trailing bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 images of 28x28 = 1584 bytes"), std::string::npos) << msg;
  EXPECT_LT(grew, 40) << "MB";

  // A header declaring 4 x 10^9 bytes in a file of a few hundred: refused from the header.
  write_gzip(root + "/train-images-idx3-ubyte.gz", idx3_header(1000000, 2000, 2), 4096);
  grew = testing_util::peak_rss_growth_mb(
      [&] { msg = data_error_of([&] { read_idx(root, "train"); }); });
  EXPECT_NE(msg.find("is truncated: header says 1000000 images of 2000x2"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("more than a gzip file of"), std::string::npos) << msg;
  EXPECT_LT(grew, 40) << "MB";
}

TEST(IdxReader, RealFashionMnistWhenInstalled) {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root + "/train-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (Debian package dataset-fashion-mnist)";
  }
  const IdxData train = read_idx(root, "train");
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(train.rows, 28);
  EXPECT_EQ(train.cols, 28);
  EXPECT_EQ(train.num_classes, 10);
  EXPECT_EQ(train.labels[0], 9);  // ankle boot
  EXPECT_EQ(train.labels[1], 0);
  const IdxData test = read_idx(root, "t10k");
  EXPECT_EQ(test.count, 10000);
  EXPECT_EQ(test.labels[0], 9);
}

TransformOptions grey_options() {
  TransformOptions o;
  o.channels = 1;
  o.mean = {0.5};
  o.std = {0.25};
  return o;
}

TEST(IdxDataset, SamplesAreNormalisedWithLabels) {
  auto ds = make_idx_dataset(fixture("idx"), "train", grey_options());
  ASSERT_EQ(ds->size(), 30u);
  EXPECT_EQ(ds->num_classes(), 3);
  Rng rng = sample_rng(0, 0, 7);
  std::optional<Sample> s = ds->get(7, rng, /*train=*/false);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->image.sizes(), (std::vector<int64_t>{1, 8, 8}));
  EXPECT_EQ(s->image.scalar_type(), torch::kFloat32);
  const float want = static_cast<float>((fixture_pixel(7, 2, 3) / 255.0 - 0.5) / 0.25);
  EXPECT_NEAR(s->image[0][2][3].item<float>(), want, 1e-5);
  const torch::Tensor label = s->fields.at("label");
  EXPECT_EQ(label.dim(), 0);
  EXPECT_EQ(label.scalar_type(), torch::kInt64);
  EXPECT_EQ(label.item<int64_t>(), 7 % 3);
  EXPECT_NE(ds->describe().find("30 images 8x8"), std::string::npos) << ds->describe();
}

TEST(IdxDataset, TrainFlipFollowsTheSampleGenerator) {
  auto ds = make_idx_dataset(fixture("idx"), "train", grey_options());
  Rng r0 = sample_rng(0, 0, 0);
  const torch::Tensor plain = ds->get(0, r0, false)->image;
  int flipped = 0, kept = 0;
  for (uint64_t epoch = 0; epoch < 40; ++epoch) {
    Rng a = sample_rng(5, epoch, 0), b = sample_rng(5, epoch, 0);
    const torch::Tensor x = ds->get(0, a, true)->image;
    EXPECT_TRUE(torch::equal(x, ds->get(0, b, true)->image));
    if (torch::equal(x, plain)) {
      ++kept;
    } else {
      EXPECT_TRUE(torch::equal(x, plain.flip({2})));
      ++flipped;
    }
  }
  EXPECT_GT(flipped, 5);
  EXPECT_GT(kept, 5);
  // Without augmentation the training sample is the plain one.
  TransformOptions o = grey_options();
  o.augment = false;
  auto no_aug = make_idx_dataset(fixture("idx"), "train", o);
  for (uint64_t epoch = 0; epoch < 10; ++epoch) {
    Rng a = sample_rng(5, epoch, 0);
    EXPECT_TRUE(torch::equal(no_aug->get(0, a, true)->image, plain));
  }
}

TEST(IdxDataset, ThreeChannelsReplicateGreyWithPerChannelNormalisation) {
  TransformOptions o;
  o.channels = 3;
  auto ds = make_idx_dataset(fixture("idx"), "t10k", o);
  Rng rng = sample_rng(0, 0, 2);
  const torch::Tensor im = ds->get(2, rng, false)->image;
  ASSERT_EQ(im.sizes(), (std::vector<int64_t>{3, 8, 8}));
  for (int c = 0; c < 3; ++c) {
    const double want = (fixture_pixel(2, 1, 4) / 255.0 - o.mean[c]) / o.std[c];
    EXPECT_NEAR(im[c][1][4].item<float>(), want, 1e-5);
  }
}

// make_dataset from the sections of `config` it reads.
std::shared_ptr<Dataset> dataset_of(const Config& config, Split split) {
  const Settings s = Settings::from(config);
  return make_dataset(s.data, s.rootnet, s.model, split);
}

TEST(MakeDataset, ReadsConfigKeys) {
  Config c;
  c.set("data.format", "idx");
  c.set("data.root", fixture("idx"));
  c.set("data.train_split", "train");
  c.set("data.val_split", "t10k");
  c.set("model.in_channels", 1);
  c.set("data.mean", nlohmann::json::array({0.3}));
  c.set("data.std", nlohmann::json::array({0.3}));
  EXPECT_EQ(dataset_of(c, Split::kTrain)->size(), 30u);
  EXPECT_EQ(dataset_of(c, Split::kVal)->size(), 24u);
  // Three means for one channel: a ConfigError naming the key.
  c.set("data.mean", nlohmann::json::array({0.4, 0.4, 0.4}));
  try {
    dataset_of(c, Split::kTrain);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.mean"), std::string::npos) << e.what();
  }
}

TEST(SampleRng, DependsOnEveryInputAndNothingElse) {
  EXPECT_EQ(sample_rng(1, 2, 3)(), sample_rng(1, 2, 3)());
  const uint64_t base = sample_rng(1, 2, 3)();
  EXPECT_NE(base, sample_rng(0, 2, 3)());
  EXPECT_NE(base, sample_rng(1, 3, 3)());
  EXPECT_NE(base, sample_rng(1, 2, 4)());
  // Swapped inputs give different streams (no symmetric mixing).
  EXPECT_NE(sample_rng(2, 1, 3)(), base);
  EXPECT_NE(sample_rng(0, 0, 1)(), sample_rng(0, 1, 0)());
}

}  // namespace
}  // namespace amptune::data
