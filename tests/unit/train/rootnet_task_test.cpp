// RootNet task: int32 cast points, the LR rule of the original, training loss and evaluation
// metrics on tiny synthetic sets.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/rootnet_data.h"
#include "support/scratch.h"
#include "support/tiny_config.h"
#include "train/casts.h"
#include "train/diagnose.h"
#include "train/schedule.h"
#include "train/task.h"

namespace amptune::train {
namespace {

namespace fs = std::filesystem;

std::map<std::string, torch::Tensor> batch_fields() {
  return {{"k_value", torch::tensor({9976.3063f, 14579.9162f})},
          {"coord", torch::tensor({{31.7f, 12.2f, 4999.9f}, {-0.5f, 63.9f, 2000.5f}})},
          {"vis", torch::tensor({{1.0f}, {0.0f}})},
          {"have_depth", torch::tensor({{1.0f}, {0.0f}})},
          {"bbox", torch::tensor({{99.7487f, 72.1788f, 300.7125f, 300.7125f},
                                  {221.2287f, 40.9438f, 205.7625f, 205.7625f}})}};
}

TEST(RootNetCasts, RoundTripTruncatesTowardZero) {
  auto t = int32_roundtrip(torch::tensor({9976.3063, -1.7, 2.999}, torch::kDouble));
  EXPECT_EQ(t.scalar_type(), torch::kDouble);
  EXPECT_EQ(t[0].item<double>(), 9976.0);
  EXPECT_EQ(t[1].item<double>(), -1.0);
  EXPECT_EQ(t[2].item<double>(), 2.0);
}

TEST(RootNetCasts, EachPointChangesExactlyItsTensor) {
  const std::map<std::string, std::string> train_field = {{"k_value", "k_value"},
                                                          {"target_coord", "coord"},
                                                          {"target_vis", "vis"},
                                                          {"have_depth", "have_depth"},
                                                          {"bbox", "bbox"}};
  for (const auto& [point, field] : train_field) {
    auto fields = batch_fields();
    const auto before = batch_fields();
    Int32Casts({point}).apply(fields, true);
    for (auto& [name, t] : fields) {
      if (name == field) {
        EXPECT_TRUE(torch::equal(t, before.at(name).to(torch::kInt32).to(t.scalar_type())))
            << point;
      } else {
        EXPECT_TRUE(torch::equal(t, before.at(name))) << point << " changed " << name;
      }
    }
    // Train points do nothing on the test side.
    auto test_fields = batch_fields();
    Int32Casts({point}).apply(test_fields, false);
    for (auto& [name, t] : test_fields) EXPECT_TRUE(torch::equal(t, before.at(name)));
  }
  auto fields = batch_fields();
  Int32Casts({"k_value"}).apply(fields, true);
  EXPECT_EQ(fields["k_value"][0].item<float>(), 9976.0f);
  EXPECT_EQ(fields["k_value"][1].item<float>(), 14579.0f);
  // Test side: cam_param is the test-time k value, test_bbox the back-projection box.
  auto test_fields = batch_fields();
  Int32Casts({"cam_param"}).apply(test_fields, false);
  EXPECT_EQ(test_fields["k_value"][0].item<float>(), 9976.0f);
  EXPECT_TRUE(torch::equal(test_fields["bbox"], batch_fields()["bbox"]));
  Int32Casts({"test_bbox"}).apply(test_fields, false);
  EXPECT_EQ(test_fields["bbox"][0][0].item<float>(), 99.0f);
  auto unchanged = batch_fields();
  Int32Casts({"cam_param", "test_bbox"}).apply(unchanged, true);
  EXPECT_TRUE(torch::equal(unchanged["k_value"], batch_fields()["k_value"]));
}

TEST(RootNetCasts, UnknownNamesAreConfigErrors) {
  try {
    Int32Casts({"k_value", "kvalue"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("casts.int32"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("kvalue"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cam_param"), std::string::npos);
  }
  EXPECT_EQ(int32_cast_points().size(), 7u);
  Config c(Schema::builtin());
  EXPECT_THROW(c.set_yaml("casts.int32", "[k_value, bogus]", {}), ConfigError);
}

Config tiny_rootnet_config(const std::string& dir, const std::string& test_set) {
  Config c(Schema::builtin());
  c.set("model.name", "rootnet");
  c.set("model.backbone_depth", 18);
  c.set("model.width", 0.125);
  c.set("data.format", "rootnet");
  c.set("rootnet.input_size", 64);
  c.set("rootnet.train_sets", nlohmann::json::array({"muco", "mpii"}));
  c.set("rootnet.test_set", test_set);
  c.set("rootnet.muco_root", dir + "/MuCo");
  c.set("rootnet.mpii_root", dir + "/MPII");
  c.set("rootnet.mupots_root", dir + "/MuPoTS");
  c.set("rootnet.h36m_root", dir + "/Human36M");
  c.set("rootnet.h36m_test_every", 64);
  return c;
}

void synth(const std::string& format, const std::string& out, int images) {
  data::SynthOptions o;
  o.format = format;
  o.out = out;
  o.images = images;
  o.width = 128;
  o.height = 96;
  data::synth_rootnet(o);
}

// The evaluation loader of these tests: batches of 4 in order; shard `rank` of `world`.
data::LoaderOptions eval_options(int rank = 0, int world = 1) {
  data::LoaderOptions lo;
  lo.batch_size = 4;
  lo.workers = 0;
  lo.shuffle = false;
  lo.train = false;
  lo.drop_last = false;
  lo.rank = rank;
  lo.world = world;
  lo.shard = data::LoaderOptions::Shard::kBatches;
  return lo;
}

// make_dataset from the sections of `config` it reads.
std::shared_ptr<data::Dataset> dataset_of(const Config& config, data::Split split) {
  const Settings s = Settings::from(config);
  return data::make_dataset(s.data, s.rootnet, s.model, split);
}

std::map<std::string, double> evaluate(Task& task, const Config& c) {
  auto val = dataset_of(c, data::Split::kVal);
  data::Loader loader(val, eval_options());
  task.module().eval();
  return task.evaluate(loader, torch::kCPU);
}

TEST(ModelRegistry, EveryRegisteredModelBuildsAndIsJudgedByItsMetric) {
  std::vector<std::string> names;
  for (const ModelEntry& entry : registered_models()) names.push_back(entry.name);
  EXPECT_EQ(names, (std::vector<std::string>{"resnet18", "resnet34", "resnet50", "resnet101",
                                             "resnet152", "rootnet", "torchscript"}));
  for (const std::string& name : names) {
    Config c;
    c.set("model.name", name);
    c.set("model.width", 0.0625);
    c.set("model.num_classes", 4);
    c.set("model.backbone_depth", 18);
    c.set("model.path", std::string(AMPTUNE_FIXTURE_DIR) + "/torchscript/resnet18_tiny_script.pt");
    c.set("rootnet.test_set", "h36m");
    torch::manual_seed(0);
    auto task = make_task(Settings::from(c));
    EXPECT_GT(task->module().parameters().size(), 10u) << name;
    const ModelInfo info = model_info(Settings::from(c));
    EXPECT_EQ(info.primary_metric, name == "rootnet" ? "mrpe" : "acc1") << name;
    EXPECT_EQ(info.higher_is_better, name != "rootnet") << name;
    // The headline metrics: what its papers report (and its evaluation records).
    const std::vector<std::string> expected =
        name == "rootnet" ? std::vector<std::string>{"mrpe", "ap_root_25"}
                          : std::vector<std::string>{"acc1", "acc5"};
    EXPECT_EQ(headline_metrics(name), expected) << name;
  }
  EXPECT_TRUE(headline_metrics("vgg16").empty());  // another build's model: none
  Config mupots;
  mupots.set("model.name", "rootnet");
  mupots.set("rootnet.test_set", "mupots");
  EXPECT_EQ(model_info(Settings::from(mupots)).primary_metric, "ap_root_25");
  EXPECT_TRUE(model_info(Settings::from(mupots)).higher_is_better);
  Config vgg;
  vgg.set("model.name", "vgg16");
  try {
    model_info(Settings::from(vgg));
    ADD_FAILURE() << "an unregistered model";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("one of resnet18, resnet34, resnet50, resnet101, "
                                         "resnet152, rootnet, torchscript, got 'vgg16'"),
              std::string::npos)
        << e.what();
  }
}

// model.memory_format: auto puts a CPU model's 4-d weights and its inputs in channels_last, in
// place (the tensors the optimizer holds are the ones relaid), and a step computes what the NCHW
// model computes up to float rounding; contiguous keeps NCHW.
TEST(TaskLayout, AutoIsChannelsLastOnACpuAndComputesTheSame) {
  Config c = testing::tiny_config();
  c.set("model.width", 0.125);  // 8 channels and more: every LibTorch runs it in channels_last
  torch::manual_seed(0);
  auto nhwc = make_task(Settings::from(c));
  c.set("model.memory_format", "contiguous");
  torch::manual_seed(0);
  auto nchw = make_task(Settings::from(c));

  auto weight = [](Task& t) { return t.module().named_parameters()["layer1.0.conv1.weight"]; };
  const torch::Tensor held = weight(*nhwc);  // as an optimizer holds it
  nhwc->place(torch::kCPU);
  nchw->place(torch::kCPU);
  EXPECT_EQ(nhwc->memory_format(), torch::MemoryFormat::ChannelsLast);
  EXPECT_EQ(nchw->memory_format(), torch::MemoryFormat::Contiguous);
  EXPECT_EQ(held.unsafeGetTensorImpl(), weight(*nhwc).unsafeGetTensorImpl());
  EXPECT_TRUE(held.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(held.is_contiguous());
  for (const auto& p : nhwc->module().parameters()) {
    if (p.dim() == 4) {
      EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  for (const auto& p : nchw->module().parameters()) EXPECT_TRUE(p.is_contiguous());

  data::Batch batch;
  batch.images = torch::randn({6, 1, 16, 16});
  batch.fields["label"] = torch::randint(0, 4, {6}, torch::kLong);
  EXPECT_TRUE(nhwc->input(batch.images, torch::kCPU).is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(nchw->input(batch.images, torch::kCPU).is_contiguous());
  const auto labels = batch.fields["label"];
  EXPECT_TRUE(nhwc->input(labels, torch::kCPU).equal(labels));  // not an image: as it is

  nhwc->module().train();
  nchw->module().train();
  auto a = nhwc->train_loss(batch, torch::kCPU), b = nchw->train_loss(batch, torch::kCPU);
  EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-5 * std::fabs(b.item<double>()));
  a.backward();
  b.backward();
  const auto ga = weight(*nhwc).grad(), gb = weight(*nchw).grad();
  EXPECT_TRUE(ga.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_LT((ga - gb).abs().max().item<double>(), 1e-4 * gb.abs().max().item<double>());
}

// A model with a 1x1 stride-2 convolution of fewer than 8 input channels (ResNet's downsampling at
// model.width 0.0625: layer2.0.downsample.0 has 4): oneDNN corrupts memory in its channels_last
// weight gradient (cpu_channels_last_conv_safe), so auto keeps such a model in NCHW on the CPU
// and an explicit channels_last is refused naming the convolution.
TEST(TaskLayout, ChannelsLastIsAvoidedWhereOneDnnCorruptsMemory) {
  EXPECT_FALSE(cpu_channels_last_conv_safe(4, 1, 1, 2, 2));
  EXPECT_FALSE(cpu_channels_last_conv_safe(7, 1, 1, 1, 2));
  EXPECT_TRUE(cpu_channels_last_conv_safe(8, 1, 1, 2, 2));
  EXPECT_TRUE(cpu_channels_last_conv_safe(4, 3, 3, 2, 2));
  EXPECT_TRUE(cpu_channels_last_conv_safe(4, 1, 1, 1, 1));
  Config c = testing::tiny_config();  // width 0.0625
  auto automatic = make_task(Settings::from(c));
  automatic->place(torch::kCPU);
  EXPECT_EQ(automatic->memory_format(), torch::MemoryFormat::Contiguous);
  for (const auto& p : automatic->module().parameters()) EXPECT_TRUE(p.is_contiguous());
  c.set("model.memory_format", "channels_last");
  auto forced = make_task(Settings::from(c));
  try {
    forced->place(torch::kCPU);
    ADD_FAILURE() << "channels_last accepted for a convolution oneDNN corrupts memory in";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.memory_format: channels_last"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("layer2.0.downsample.0 (1x1, stride 2, 4 input channels)"),
              std::string::npos)
        << e.what();
  }
}

// tune's forward work (train::forward_work) counts a transposed convolution by its inputs: at
// 64x64 patches the backbone (ResNet-18 at width 1/8) leaves 2x2 maps of 64 channels, and the
// three 4x4 stride-2 deconvolutions to 32 channels take 4*64*32*16 + 16*32*32*16 + 64*32*32*16
// = 1441792 multiply-accumulates.
TEST(RootNetTask, ForwardWorkCountsTheDeconvolutionsByTheirInputs) {
  const std::string dir = amptune::testing::scratch_dir();
  synth("muco", dir + "/MuCo", 2);
  synth("mpii", dir + "/MPII", 2);
  synth("mupots", dir + "/MuPoTS", 2);
  Config c = tiny_rootnet_config(dir, "mupots");
  c.set("amp.opt_level", "O1");
  c.set("amp.fp32_modules", nlohmann::json::array({"deconv"}));
  const ForwardWork work = forward_work(c);
  EXPECT_EQ(work.fp32_macs, 1441792);
  EXPECT_GT(work.macs, work.fp32_macs);
}

TEST(RootNetTask, TrainsAndEvaluatesOnMupots) {
  const std::string dir = amptune::testing::scratch_dir();
  synth("muco", dir + "/MuCo", 6);
  synth("mpii", dir + "/MPII", 4);
  synth("mupots", dir + "/MuPoTS", 5);
  Config c = tiny_rootnet_config(dir, "mupots");
  torch::manual_seed(0);
  auto task = make_task(Settings::from(c));
  auto train = dataset_of(c, data::Split::kTrain);
  data::LoaderOptions lo;
  lo.batch_size = 4;
  lo.workers = 0;
  data::Loader loader(train, lo);
  auto batch = loader.next();
  ASSERT_TRUE(batch);
  task->module().train();
  auto loss = task->train_loss(*batch, torch::kCPU);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  auto m = evaluate(*task, c);
  for (const char* k : {"mrpe", "mrpe_x", "mrpe_y", "mrpe_z", "ap_root_25", "val_loss"}) {
    EXPECT_TRUE(m.count(k)) << k;
  }
  EXPECT_GT(m["mrpe"], 0);
  EXPECT_GE(m["ap_root_25"], 0);
  EXPECT_LE(m["ap_root_25"], 100);
  EXPECT_GT(m["mrpe_constant"], 0);
  EXPECT_EQ(m["val_samples"], static_cast<double>(data::read_mupots(dir + "/MuPoTS", "").size()));
  // Only people with is_valid 1 are evaluated (the generator marks some 0).
  std::ifstream in(dir + "/MuPoTS/data/MuPoTS-3D.json");
  const auto doc = nlohmann::json::parse(in);
  int valid = 0, all = 0;
  for (const auto& a : doc.at("annotations")) {
    valid += a.at("is_valid").get<int>() != 0;
    ++all;
  }
  EXPECT_LT(valid, all);
  EXPECT_EQ(m["val_samples"], static_cast<double>(valid));
}

// A data-parallel evaluation: the batches of two shards (LoaderOptions::Shard::kBatches),
// their records through bytes (as the ranks gather them) and in batch order give every metric
// of one process bitwise: MRPE over all images, AP_root over all people, the loss.
TEST(RootNetTask, ShardedEvaluationEqualsOneProcessBitwise) {
  const std::string dir = amptune::testing::scratch_dir();
  synth("muco", dir + "/MuCo", 2);
  synth("mpii", dir + "/MPII", 2);
  synth("mupots", dir + "/MuPoTS", 7);
  Config c = tiny_rootnet_config(dir, "mupots");
  torch::manual_seed(0);
  auto task = make_task(Settings::from(c));
  const auto single = evaluate(*task, c);
  auto val = dataset_of(c, data::Split::kVal);
  std::vector<EvalBatch> all;
  for (int rank = 0; rank < 2; ++rank) {
    data::Loader loader(val, eval_options(rank, 2));
    for (auto& b :
         decode_eval_batches(encode_eval_batches(task->evaluate_batches(loader, torch::kCPU)))) {
      all.push_back(std::move(b));
    }
  }
  ASSERT_GE(all.size(), 3u);  // both ranks had batches
  std::sort(all.begin(), all.end(),
            [](const EvalBatch& a, const EvalBatch& b) { return a.index < b.index; });
  const auto sharded = task->metrics(all);
  EXPECT_EQ(sharded, single);
  EXPECT_TRUE(single.count("ap_root_25") && single.count("mrpe"));
  EXPECT_THROW(decode_eval_batches(std::string(5, 'x')), std::runtime_error);
}

TEST(RootNetTask, H36mGivesPerActionMrpe) {
  const std::string dir = amptune::testing::scratch_dir();
  synth("h36m", dir + "/Human36M", 6);
  synth("muco", dir + "/MuCo", 2);
  synth("mpii", dir + "/MPII", 2);
  Config c = tiny_rootnet_config(dir, "h36m");
  torch::manual_seed(0);
  auto task = make_task(Settings::from(c));
  auto m = evaluate(*task, c);
  EXPECT_FALSE(m.count("ap_root_25"));
  int per_action = 0;
  for (const auto& name : data::h36m_action_names()) per_action += m.count("mrpe_" + name);
  EXPECT_GE(per_action, 1);
  EXPECT_TRUE(m.count("mrpe_constant"));
  // Test-time casts change the figures only through the named tensors.
  c.set("casts.int32", nlohmann::json::array({"cam_param", "test_bbox"}));
  torch::manual_seed(0);
  auto cast_task = make_task(Settings::from(c));
  auto mc = evaluate(*cast_task, c);
  EXPECT_NE(mc["mrpe"], m["mrpe"]);
  EXPECT_NEAR(mc["mrpe"], m["mrpe"], 0.05 * m["mrpe"]);
}

}  // namespace
}  // namespace amptune::train
