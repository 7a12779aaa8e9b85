// RootNet data: the synthetic generator, each reader on generated and hand-made files, errors on
// missing and malformed files, and the training / evaluation pipeline of the data set.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/sweep.h"
#include "data/dataset.h"
#include "data/rootnet_data.h"
#include "data_util.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;
using amptune::testing::scratch_dir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

SynthStats synth(const std::string& format, const std::string& out, int images, uint64_t seed = 7,
                 double unit_mm = 1.0) {
  SynthOptions o;
  o.unit_mm = unit_mm;
  o.format = format;
  o.out = out;
  o.images = images;
  o.seed = seed;
  o.width = 160;
  o.height = 128;
  return synth_rootnet(o);
}

TEST(RootNetData, SynthIsDeterministicPerSeed) {
  const std::string a = scratch_dir("a"), b = scratch_dir("b"), c = scratch_dir("c");
  synth("muco", a, 4, 11);
  synth("muco", b, 4, 11);
  synth("muco", c, 4, 12);
  const std::string ja = slurp(a + "/data/MuCo-3DHP.json");
  EXPECT_EQ(ja, slurp(b + "/data/MuCo-3DHP.json"));
  EXPECT_NE(ja, slurp(c + "/data/MuCo-3DHP.json"));
  EXPECT_EQ(slurp(a + "/data/augmented_set/syn_000003.jpg"),
            slurp(b + "/data/augmented_set/syn_000003.jpg"));
}

TEST(RootNetData, H36mReaderProtocolsAndSampling) {
  const std::string dir = scratch_dir();
  auto stats = synth("h36m", dir, 20);
  EXPECT_EQ(stats.images, 7 * 20);
  EXPECT_EQ(stats.files.size(), 21u);
  // Every 10th frame index is off the sampling grid: 18 of 20 kept per subject.
  auto train2 = read_h36m(dir, 2, true, 5);
  auto test2 = read_h36m(dir, 2, false, 64);
  auto train1 = read_h36m(dir, 1, true, 5);
  auto test1 = read_h36m(dir, 1, false, 64);
  EXPECT_EQ(train2.size(), 5u * 18);
  EXPECT_EQ(test2.size(), 2u * 18);
  EXPECT_EQ(train1.size(), 5u * 18 + 4);  // S9 frames are i * 64: kept for i % 5 == 0
  EXPECT_EQ(test1.size(), 18u);
  // Root depth in the generator's range, projection consistent with the camera.
  for (const auto& e : test2) {
    EXPECT_GE(e.root_cam[2], 1990);
    EXPECT_LE(e.root_cam[2], 7510);
    EXPECT_GE(e.action, 0);
    EXPECT_LT(e.action, 15);
    EXPECT_NEAR(e.root_img[0], e.root_cam[0] / e.root_cam[2] * e.fx + e.cx, 1e-6);
    EXPECT_TRUE(fs::exists(e.image_path)) << e.image_path;
    EXPECT_GT(e.bbox.w, 0);
    EXPECT_DOUBLE_EQ(e.bbox.w, e.bbox.h);
  }
}

TEST(RootNetData, H36mSubjectNineUnderProtocolOne) {
  // Protocol 1 trains on S9 with every 5th frame; the generator writes S9 frames at multiples
  // of 64, so a frame is kept iff its index is a multiple of 320.
  const std::string dir = scratch_dir();
  synth("h36m", dir, 20);
  auto train1 = read_h36m(dir, 1, true, 5);
  size_t s9 = 0;
  for (auto& e : train1) s9 += e.image_path.find("s_09_") != std::string::npos ? 1 : 0;
  // i * 64 % 5 == 0 iff i % 5 == 0: i = 0, 5, 10, 15 (i = 9, 19 are shifted by one).
  EXPECT_EQ(s9, 4u);
}

TEST(RootNetData, MucoMupotsMpiiReaders) {
  const std::string muco = scratch_dir("muco"), mupots = scratch_dir("mupots"),
                    mpii = scratch_dir("mpii");
  auto sm = synth("muco", muco, 10);
  auto sp = synth("mupots", mupots, 10);
  auto si = synth("mpii", mpii, 10);
  auto m = read_muco(muco);
  EXPECT_GE(m.size(), 10u);  // at least the closest person of each image
  EXPECT_LE(m.size(), static_cast<size_t>(sm.people));
  auto p = read_mupots(mupots, "");
  // People marked is_valid 0 are skipped, as the original's loader skips them; the generator
  // always writes some.
  ASSERT_GE(sp.invalid_people, 1);
  int valid_in_file = 0;
  {
    std::ifstream in(mupots + "/data/MuPoTS-3D.json");
    const auto doc = nlohmann::json::parse(in);
    for (const auto& a : doc.at("annotations")) valid_in_file += a.at("is_valid").get<int>() != 0;
  }
  EXPECT_EQ(valid_in_file, sp.people - sp.invalid_people);
  EXPECT_EQ(p.size(), static_cast<size_t>(valid_in_file));
  for (auto& e : p) {
    EXPECT_EQ(e.score, 1.0);
    EXPECT_TRUE(e.valid);
  }
  auto i = read_mpii(mpii);
  ASSERT_EQ(i.size(), 10u);
  EXPECT_FALSE(i[0].have_depth);
  EXPECT_EQ(i[0].fx, 1500);
  EXPECT_EQ(i[0].cx, 80);
  EXPECT_TRUE(fs::exists(i[0].image_path));
  EXPECT_EQ(si.images, 10);

  // Detector boxes from a bbox file replace the ground-truth boxes.
  const std::string boxes = mupots + "/bbox.json";
  write_text(boxes, R"([{"image_id": 0, "bbox": [10, 10, 50, 80], "score": 0.8},
                        {"image_id": 1, "bbox": [5, 5, 0, 10], "score": 0.9}])");
  auto d = read_mupots(mupots, boxes);
  ASSERT_EQ(d.size(), 1u);  // the empty box is skipped
  EXPECT_EQ(d[0].score, 0.8);
  EXPECT_DOUBLE_EQ(d[0].bbox.w, 79 * 1.25);
}

TEST(RootNetData, MucoPersonSelectionRule) {
  const std::string dir = scratch_dir();
  auto person = [](double x, double z) {
    nlohmann::json cam = nlohmann::json::array(), img = nlohmann::json::array();
    for (int j = 0; j < 21; ++j) {
      cam.push_back({x, 0.0, z});
      img.push_back({100.0, 100.0});
    }
    return nlohmann::json{{"image_id", 1}, {"keypoints_cam", cam}, {"keypoints_img", img},
                          {"bbox", {50, 50, 100, 100}}};
  };
  nlohmann::json doc = {
      {"images", {{{"id", 1}, {"file_name", "a.jpg"}, {"width", 640}, {"height", 480},
                   {"f", {1500, 1500}}, {"c", {320, 240}}}}},
      {"annotations", {person(0, 3000), person(300, 3100), person(2000, 5000), person(2300, 6000)}}};
  write_text(dir + "/data/MuCo-3DHP.json", doc.dump());
  auto m = read_muco(dir);
  // Closest (z 3000) always; the 300 mm neighbour is dropped; x 2000 and x 2300 are 300 mm apart
  // in 2D: both dropped.
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].root_cam[2], 3000);
  doc["annotations"][3] = person(-3000, 6000);
  write_text(dir + "/data/MuCo-3DHP.json", doc.dump());
  m = read_muco(dir);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].root_cam[0], 2000);
  EXPECT_EQ(m[2].root_cam[0], -3000);
}

TEST(RootNetData, MissingAndMalformedFilesNameThePathAndFormat) {
  const std::string dir = scratch_dir();
  try {
    read_muco(dir);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/data/MuCo-3DHP.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MuCo-3DHP"), std::string::npos);
  }
  EXPECT_THROW(read_h36m(dir, 2, true, 5), DataError);
  write_text(dir + "/data/MuPoTS-3D.json", "{\"images\": [ {\"id\": 1,");
  try {
    read_mupots(dir, "");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("malformed JSON"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MuPoTS-3D.json"), std::string::npos);
  }
  write_text(dir + "/annotations/train.json",
             R"({"images": [{"id": 1, "file_name": "x.jpg", "width": 10, "height": 10}],
                 "annotations": [{"image_id": 1, "bbox": [1, 1, 5, 5], "keypoints": "oops"}]})");
  try {
    read_mpii(dir);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("keypoints"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_h36m(dir, 3, true, 5), ConfigError);
}

Config rootnet_config(const std::string& muco, const std::string& mpii,
                      const std::string& mupots) {
  Config c(Schema::builtin());
  c.set("data.format", "rootnet");
  c.set("rootnet.muco_root", muco);
  c.set("rootnet.mpii_root", mpii);
  c.set("rootnet.mupots_root", mupots);
  c.set("rootnet.test_set", "mupots");
  c.set("rootnet.input_size", 64);
  return c;
}

// make_dataset from the sections of `config` it reads.
std::shared_ptr<Dataset> dataset_of(const Config& config, Split split) {
  const Settings s = Settings::from(config);
  return make_dataset(s.data, s.rootnet, s.model, split);
}

TEST(RootNetData, PipelineTargetsAndMixing) {
  const std::string muco = scratch_dir("muco"), mupots = scratch_dir("mupots"),
                    mpii = scratch_dir("mpii");
  synth("muco", muco, 6);
  synth("mupots", mupots, 4);
  synth("mpii", mpii, 3);
  Config c = rootnet_config(muco, mpii, mupots);
  auto train = dataset_of(c, Split::kTrain);
  const size_t n_muco = read_muco(muco).size();
  EXPECT_EQ(train->size(), 2 * std::max<size_t>(n_muco, 3));
  auto test = dataset_of(c, Split::kVal);
  auto entries = read_mupots(mupots, "");
  ASSERT_EQ(test->size(), entries.size());
  Rng rng(1);
  for (size_t i = 0; i < test->size(); ++i) {
    auto s = test->get(i, rng, false);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->image.sizes(), (std::vector<int64_t>{3, 64, 64}));
    const auto& e = entries[i];
    // Without augmentation the target maps back to the root's image position.
    auto coord = s->fields["coord"];
    const double xi = coord[0].item<double>() / 16 * e.bbox.w + e.bbox.x;
    const double yi = coord[1].item<double>() / 16 * e.bbox.h + e.bbox.y;
    if (s->fields["vis"].item<float>() > 0) {
      EXPECT_NEAR(xi, e.root_img[0], 1e-2);
      EXPECT_NEAR(yi, e.root_img[1], 1e-2);
    }
    EXPECT_NEAR(coord[2].item<double>(), e.root_cam[2], 1e-2);
    EXPECT_NEAR(s->fields["k_value"].item<double>(), k_value(e.bbox, e.fx, e.fy), 1e-2);
    EXPECT_EQ(s->fields["image_id"].item<int64_t>(), e.image_id);
  }
  // Training samples: the second half of the indices comes from MPII (have_depth 0).
  auto s2 = train->get(train->size() - 1, rng, true);
  ASSERT_TRUE(s2);
  EXPECT_EQ(s2->fields["have_depth"].item<float>(), 0.0f);
  auto s1 = train->get(0, rng, true);
  EXPECT_EQ(s1->fields["have_depth"].item<float>(), 1.0f);
  // Pixels are normalised without /255: values far beyond the 0..1 range.
  EXPECT_GT(s1->image.abs().max().item<float>(), 50.0f);
}

// The int32 cast fault needs small k values (docs/ROOTNET.md "The int32 cast of k"): k =
// real_size x f / box side, so with the box's real size in millimetres (the default 2000) k is in
// the thousands and truncation moves it by under 1 part in 1000. experiments/rootnet_int32_k.yaml
// reads scenes written in metres (synth-rootnet --unit m) with the real size in metres: k is a
// few units that truncation cuts by tens of percent, and depth (gamma x k) stays a few units.
TEST(RootNetData, KValuesOfTheInt32CastExperimentAreAFewUnits) {
  const std::string muco = scratch_dir("muco"), mupots = scratch_dir("mupots"),
                    mpii = scratch_dir("mpii");
  synth("muco", muco, 20, 1, 1000.0);
  synth("mupots", mupots, 20, 3, 1000.0);
  synth("mpii", mpii, 3, 2);
  EXPECT_THROW(synth("h36m", scratch_dir("h36m"), 1, 1, 1000.0), DataError);
  const Sweep sweep = load_sweep(AMPTUNE_SOURCE_DIR "/experiments/rootnet_int32_k.yaml");
  const std::vector<double> metres = sweep.base.get_double_list("rootnet.bbox_real");
  ASSERT_EQ(metres, (std::vector<double>{2.0, 2.0}));
  for (const auto& e : read_mupots(mupots, "")) {  // roots 2-7.5 m away, in metres
    EXPECT_GE(e.root_cam[2], 1.9);
    EXPECT_LE(e.root_cam[2], 8.0);
  }
  for (const bool in_metres : {false, true}) {
    Config c = rootnet_config(muco, mpii, mupots);
    if (in_metres) c.set("rootnet.bbox_real", nlohmann::json(metres));
    for (const Split split : {Split::kTrain, Split::kVal}) {
      auto set = dataset_of(c, split);
      const size_t n = split == Split::kTrain ? set->size() / 2 : set->size();  // MuCo / MuPoTS
      ASSERT_GE(n, 20u);
      double k_min = 1e300, k_max = 0, cut_sum = 0, cut_max = 0;
      Rng rng(1);
      for (size_t i = 0; i < n; ++i) {
        auto s = set->get(i, rng, false);
        ASSERT_TRUE(s);
        const double k = s->fields["k_value"].item<double>();
        const double cut = (k - std::trunc(k)) / k;  // what the cast to int32 takes away
        k_min = std::min(k_min, k);
        k_max = std::max(k_max, k);
        cut_sum += cut;
        cut_max = std::max(cut_max, cut);
      }
      SCOPED_TRACE(std::string(in_metres ? "metres" : "millimetres") +
                   (split == Split::kTrain ? " train" : " test"));
      if (in_metres) {
        EXPECT_GE(k_min, 1.0);
        EXPECT_LE(k_max, 12.0);
        // measured: k 2.2-7.9, 11-13 % cut on average, up to 29 %
        EXPECT_GE(cut_sum / static_cast<double>(n), 0.05);
        EXPECT_GE(cut_max, 0.2);
      } else {
        EXPECT_GE(k_min, 1000.0);
        EXPECT_LT(cut_max, 1e-3);
      }
    }
  }
}

TEST(RootNetData, VisIsClearedWhenTheRootLeavesThePatch) {
  const std::string dir = scratch_dir();
  synth("mupots", dir, 1);
  // Move the first annotation's root far outside its box.
  auto doc = nlohmann::json::parse(slurp(dir + "/data/MuPoTS-3D.json"));
  for (auto& row : doc["annotations"][0]["keypoints_img"]) row = {1000.0, 1000.0};
  write_text(dir + "/data/MuPoTS-3D.json", doc.dump());
  Config c = rootnet_config(dir, dir, dir);
  auto test = dataset_of(c, Split::kVal);
  Rng rng(1);
  auto s = test->get(0, rng, false);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->fields["vis"].item<float>(), 0.0f);
}

}  // namespace
}  // namespace amptune::data
