// The training loop without a database: its phases one by one, and whole runs recorded through a
// MemoryRecorder (train/recorder.h): every epoch recorded, a stop asked for from outside, a run
// stopped after an epoch and continued from its checkpoint equal to one that never stopped.
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "support/scratch.h"
#include "support/tiny_config.h"
#include "support/tiny_data.h"
#include "train/phases.h"
#include "train/recorder.h"
#include "train/trainer.h"
#include "train/task.h"

namespace amptune::train {
namespace {
namespace fs = std::filesystem;

// `config` as run 1, "tiny".
RunInput as_run(const Config& config) {
  RunInput run(config);
  run.id = 1;
  run.name = "tiny";
  run.label = "tiny";
  run.config_hash = config.hash();
  return run;
}

// A run of resnet18 / 16 on the tiny IDX set: 2 epochs of 64 images in batches of 16.
RunInput tiny_run(const std::string& data_dir, int epochs = 2,
                  const std::string& model = "resnet18") {
  Config c = testing::tiny_config();
  c.set("model.name", model);
  c.set("data.format", "idx");
  c.set("data.root", data_dir);
  c.set("data.val_split", "t10k");
  c.set("data.mean", nlohmann::json::array({0.3}));
  c.set("data.std", nlohmann::json::array({0.3}));
  c.set("data.batch_size", 16);
  c.set("data.workers", 1);
  c.set("schedule.epochs", epochs);
  c.set("threads", 1);
  return as_run(c);
}

RunOptions quiet() {
  RunOptions o;
  o.progress = false;
  return o;
}

class TrainLoop : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_tiny_idx(dir_.path() / "data", 64, 32); }
  std::string data() const { return (dir_.path() / "data").string(); }
  std::string folder(const std::string& name) const {
    fs::create_directories(dir_.path() / name);
    return (dir_.path() / name).string();
  }
  testing::ScratchDir dir_{"loop"};
};

// Each phase on its own: what it leaves behind is what the next one needs.
TEST_F(TrainLoop, PhasesOneByOne) {
  MemoryRecorder recorder(folder("ckpt"));
  const RunInput run = tiny_run(data());
  RunTraining training(recorder, run, quiet());
  training.set_up();
  training.restore();
  EXPECT_EQ(training.first_epoch(), 0);
  EXPECT_EQ(training.epochs(), 2);
  training.evaluate_initial();  // eval_initial is off: nothing recorded
  EXPECT_TRUE(recorder.initial_metrics.empty());

  records::EpochRecord record = training.train_epoch(0);
  EXPECT_EQ(record.epoch, 0);
  EXPECT_EQ(record.global_step, 4);  // 64 images / 16
  EXPECT_TRUE(std::isfinite(record.train_loss));
  EXPECT_EQ(record.metrics.at("train_images"), 64);
  ASSERT_TRUE(record.times.has_value());
  EXPECT_FALSE(record.metrics.count("acc1"));

  training.evaluate_epoch(0, record);
  EXPECT_GE(record.metrics.at("acc1"), 0);
  EXPECT_LE(record.metrics.at("acc1"), 100);
  EXPECT_TRUE(record.metrics.count("loss_scale"));
  EXPECT_EQ(record.metrics.at("nonfinite_streak"), 0);  // every loss was finite

  training.record_epoch(0, record);
  ASSERT_EQ(recorder.epochs().size(), 1u);
  ASSERT_TRUE(recorder.epochs()[0].checkpoint.has_value());
  EXPECT_TRUE(fs::exists(recorder.epochs()[0].checkpoint->path));
  EXPECT_FALSE(recorder.ended.has_value()) << "the end is train_run's, not a phase's";
}

// A whole run through the loop's entry point: an epoch row per epoch, the summary, done.
TEST_F(TrainLoop, ARunRecordsEveryEpochAndEndsDone) {
  MemoryRecorder recorder(folder("ckpt"));
  const RunResult result = train_run(recorder, tiny_run(data()), quiet());
  ASSERT_EQ(result.outcome, Outcome::kDone) << result.message;
  ASSERT_EQ(recorder.epochs().size(), 2u);
  EXPECT_EQ(recorder.epochs()[1].global_step, 8);
  EXPECT_EQ(recorder.ended, Ending::kDone);
  EXPECT_EQ(recorder.summary, result.summary_json);
  EXPECT_NE(result.summary_json.find("\"run\":\"tiny\""), std::string::npos);
  EXPECT_FALSE(recorder.notes.empty());
}

// Stopping from outside is one call on the recorder: the loop stops at its next step and the
// run is left to continue (pending), with the reason given.
TEST_F(TrainLoop, AStopRequestedFromOutsideLeavesTheRunPending) {
  MemoryRecorder recorder(folder("ckpt"));
  recorder.request_stop(StopRequest{Outcome::kInterrupted, "stopped by the test"});
  const RunResult result = train_run(recorder, tiny_run(data()), quiet());
  EXPECT_EQ(result.outcome, Outcome::kInterrupted);
  EXPECT_EQ(result.message, "stopped by the test");
  EXPECT_EQ(recorder.ended, Ending::kPending);
  EXPECT_TRUE(recorder.epochs().empty());

  // A takeover writes nothing more: the run is someone else's.
  MemoryRecorder taken(folder("taken"));
  taken.request_stop(StopRequest{Outcome::kLost, "run tiny is held by another process"});
  EXPECT_EQ(train_run(taken, tiny_run(data()), quiet()).outcome, Outcome::kLost);
  EXPECT_EQ(taken.ended, Ending::kUntouched);
}

// Stopped after epoch 0 and continued from its checkpoint, the run's epochs equal those of a run
// that never stopped, bitwise: restore reads the epochs and checkpoints from the recorder.
TEST_F(TrainLoop, AStoppedRunContinuesFromItsCheckpointBitwise) {
  MemoryRecorder whole(folder("whole"));
  ASSERT_EQ(train_run(whole, tiny_run(data(), 3), quiet()).outcome, Outcome::kDone);

  MemoryRecorder staged(folder("staged"));
  RunOptions stop = quiet();
  stop.stop_after_epoch = 0;
  EXPECT_EQ(train_run(staged, tiny_run(data(), 3), stop).outcome, Outcome::kInterrupted);
  EXPECT_EQ(staged.ended, Ending::kPending);
  ASSERT_EQ(staged.epochs().size(), 1u);
  ASSERT_EQ(train_run(staged, tiny_run(data(), 3), quiet()).outcome, Outcome::kDone);

  const auto a = whole.epochs(), b = staged.epochs();
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].global_step, b[i].global_step) << i;
    EXPECT_EQ(a[i].train_loss, b[i].train_loss) << i;
    EXPECT_EQ(a[i].metrics.at("acc1"), b[i].metrics.at("acc1")) << i;
    EXPECT_EQ(a[i].metrics.at("val_loss"), b[i].metrics.at("val_loss")) << i;
  }
}

// A run whose every loss is NaN under a dynamic scale (O1 fp16, emulated on the CPU: inputs
// of about 10^6 overflow fp16 in conv1, every step is skipped, the weights never change): 16
// steps an epoch, so the 100th NaN in a row is step 3 of epoch 6.
RunInput nan_run(const std::string& data_dir) {
  Config c = tiny_run(data_dir, 8).config();
  c.set("data.std", nlohmann::json::array({1e-6}));
  c.set("data.batch_size", 4);
  c.set("amp.opt_level", "O1");
  c.set("amp.loss_scale", "dynamic");
  return as_run(c);
}

// Divergence is a property of the steps (train/divergence.h): a run stopped and continued after
// every epoch counts its inf/NaN losses in a row across the resumes (the metric
// nonfinite_streak of the epoch it continues from) and diverges at the same step as one that
// never stopped.
TEST_F(TrainLoop, ANonFiniteStreakSurvivesAResume) {
  MemoryRecorder whole(folder("nan-whole"));
  const RunResult straight = train_run(whole, nan_run(data()), quiet());
  ASSERT_EQ(straight.outcome, Outcome::kDiverged) << straight.message;
  EXPECT_NE(straight.message.find("100 steps in a row"), std::string::npos) << straight.message;
  EXPECT_NE(straight.message.find("at epoch 6 step 3"), std::string::npos) << straight.message;

  MemoryRecorder staged(folder("nan-staged"));
  RunOptions stop = quiet();
  RunResult result;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    stop.stop_after_epoch = epoch;
    result = train_run(staged, nan_run(data()), stop);
    if (result.outcome != Outcome::kInterrupted) break;
  }
  EXPECT_EQ(result.outcome, Outcome::kDiverged) << result.message;
  EXPECT_EQ(result.message, straight.message);
  EXPECT_EQ(staged.ended, Ending::kDiverged);

  // Each epoch recorded the streak so far, earlier epochs included, in both runs.
  const auto a = whole.epochs(), b = staged.epochs();
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].metrics.at("nonfinite_streak"), 16.0 * static_cast<double>(i + 1)) << i;
    EXPECT_EQ(b[i].metrics.at("nonfinite_streak"), a[i].metrics.at("nonfinite_streak")) << i;
    EXPECT_EQ(b[i].metrics.at("skipped_steps"), 16.0) << i;
  }
}

// A fork continues its parent's loss curve: it starts with the streak of the parent's epoch it
// forks from, so it diverges where the parent would have.
TEST_F(TrainLoop, AForkContinuesItsParentsNonFiniteStreak) {
  MemoryRecorder parent(folder("nan-parent"));
  RunOptions stop = quiet();
  stop.stop_after_epoch = 2;
  const RunInput parent_run = nan_run(data());
  ASSERT_EQ(train_run(parent, parent_run, stop).outcome, Outcome::kInterrupted);
  ASSERT_EQ(parent.epochs().size(), 3u);
  EXPECT_EQ(parent.epochs()[2].metrics.at("nonfinite_streak"), 48);

  RunInput fork = nan_run(data());
  fork.id = 2;
  fork.name = "tiny-fork";
  fork.fork = records::ForkOrigin{parent_run.id, 2, "{}", "", false};
  MemoryRecorder forked(folder("nan-fork"));
  forked.others.emplace(parent_run.id, std::make_pair(parent_run, parent.epochs()));
  const RunResult result = train_run(forked, fork, quiet());
  EXPECT_EQ(result.outcome, Outcome::kDiverged) << result.message;
  EXPECT_NE(result.message.find("100 steps in a row"), std::string::npos) << result.message;
  EXPECT_NE(result.message.find("at epoch 6 step 3"), std::string::npos) << result.message;
  ASSERT_FALSE(forked.epochs().empty());
  EXPECT_EQ(forked.epochs()[0].epoch, 3);
  EXPECT_EQ(forked.epochs()[0].metrics.at("nonfinite_streak"), 64);

  // A recorded streak that cannot be one (negative, fractional, more than the steps) is refused
  // with the run, epoch and metric named.
  for (const double bad : {-1.0, 2.5, 49.0}) {
    auto rows = parent.epochs();
    rows[2].metrics["nonfinite_streak"] = bad;
    MemoryRecorder refused(folder("nan-refused"));
    refused.others.emplace(parent_run.id, std::make_pair(parent_run, rows));
    const RunResult r = train_run(refused, fork, quiet());
    EXPECT_EQ(r.outcome, Outcome::kFailed);
    EXPECT_NE(r.message.find("run tiny epoch 2: metric nonfinite_streak is"), std::string::npos)
        << r.message;
  }
}

// A classifier that is not a ResNet, in the test alone: a two-layer perceptron over the pixels.
struct TinyMlpImpl : torch::nn::Module {
  explicit TinyMlpImpl(const ModelSettings& model)
      : fc1(register_module("fc1", torch::nn::Linear(12 * 12 * model.in_channels, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, model.num_classes))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(TinyMlp);

// A new classification model is its module plus one registration: it then trains, evaluates,
// stops and resumes bitwise through the public API like the built-in ones.
TEST_F(TrainLoop, ANewClassifierIsItsModuleAndOneRegistration) {
  static const bool registered = [] {
    register_model(classifier(
        "test_mlp", [](const Settings& s) { return torch::nn::AnyModule(TinyMlp(s.model)); }));
    return true;
  }();
  ASSERT_TRUE(registered);
  EXPECT_THROW(register_model(classifier("test_mlp", nullptr)), UsageError);

  MemoryRecorder whole(folder("mlp-whole"));
  const RunResult done = train_run(whole, tiny_run(data(), 2, "test_mlp"), quiet());
  ASSERT_EQ(done.outcome, Outcome::kDone) << done.message;
  ASSERT_EQ(whole.epochs().size(), 2u);
  EXPECT_GE(whole.epochs()[1].metrics.at("acc1"), 0);
  EXPECT_TRUE(whole.epochs()[1].metrics.count("acc5"));

  MemoryRecorder staged(folder("mlp-staged"));
  RunOptions stop = quiet();
  stop.stop_after_epoch = 0;
  EXPECT_EQ(train_run(staged, tiny_run(data(), 2, "test_mlp"), stop).outcome,
            Outcome::kInterrupted);
  ASSERT_EQ(train_run(staged, tiny_run(data(), 2, "test_mlp"), quiet()).outcome, Outcome::kDone);
  ASSERT_EQ(staged.epochs().size(), 2u);
  EXPECT_EQ(staged.epochs()[1].train_loss, whole.epochs()[1].train_loss);
  EXPECT_EQ(staged.epochs()[1].metrics.at("val_loss"), whole.epochs()[1].metrics.at("val_loss"));

  EXPECT_EQ(model_info(tiny_run(data(), 2, "test_mlp").settings()).primary_metric, "acc1");
  EXPECT_EQ(headline_metrics("test_mlp"), (std::vector<std::string>{"acc1", "acc5"}));
}

}  // namespace
}  // namespace amptune::train
