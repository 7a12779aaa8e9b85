// Performance records of a real run: the per-epoch time breakdown in the database and in
// `amptune show`, profile.steps' Chrome trace beside the checkpoints with its path on the epoch
// row, and the check of profile.steps before anything trains.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

// In a sweep process, a later run's start-up is what it spent before its first step, not the
// process's age (which holds the earlier runs' whole training).
TEST(PerfCli, ALaterRunOfASweepIsNotChargedTheEarlierRunsTraining) {
  TinyOptions o = quick_tiny("grid:\n  optim.lr: [0.05, 0.1]\n", 3);
  o.name = "startup";
  o.train_n = 512;  // 32 steps per epoch: the first run trains far longer than any start-up
  TinySweep f = make_tiny_sweep(o);
  const auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  const auto runs = s.runs("startup");
  ASSERT_EQ(runs.size(), 2u);
  const auto first = s.epochs(runs[0].id), second = s.epochs(runs[1].id);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  ASSERT_TRUE(first[0].times && second[0].times);
  double first_training = 0;
  for (const auto& e : first) first_training += e.epoch_seconds;
  EXPECT_GT(first[0].times->startup, 0);
  EXPECT_GT(second[0].times->startup, 0);
  EXPECT_LT(second[0].times->startup, first_training)
      << "the second run's start-up holds the first run's training";
  EXPECT_LT(second[1].times->startup, 0);  // on its first epoch only
}

TEST(PerfCli, TimeBreakdownAndProfileTraceAreRecorded) {
  TinyOptions o = quick_tiny("", 2);  // 64 images, batch 16: 4 steps per epoch
  o.name = "perf";
  o.base = "  profile: {steps: [1, 2]}\n";
  TinySweep f = make_tiny_sweep(o);
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  store::Store s(f.db);
  const auto runs = s.runs();
  ASSERT_EQ(runs.size(), 1u);
  const auto epochs = s.epochs(runs[0].id);
  ASSERT_EQ(epochs.size(), 2u);
  for (const auto& e : epochs) {
    ASSERT_TRUE(e.times) << "epoch " << e.epoch;
    const store::EpochTimes& t = *e.times;
    EXPECT_GT(t.forward, 0);
    EXPECT_GT(t.backward, 0);
    EXPECT_GT(t.optimizer, 0);
    EXPECT_GT(t.eval, 0);  // the test split is evaluated every epoch
    EXPECT_GE(t.data_wait, 0);
    EXPECT_GT(t.checkpoint, 0);  // checkpoint.every 1
    EXPECT_GE(t.db, 0);          // set after record_epoch
    EXPECT_LE(t.inside_epoch(), e.epoch_seconds);
    ASSERT_TRUE(e.checkpoint);
  }
  // The process's start-up on its first epoch only.
  EXPECT_GT(epochs[0].times->startup, 0);
  EXPECT_LT(epochs[0].times->startup, epochs[0].epoch_seconds + 600);
  EXPECT_LT(epochs[1].times->startup, 0);

  // Steps 1-2 lie in epoch 0: its row names the trace, beside the checkpoints.
  ASSERT_FALSE(epochs[0].profile_trace.empty());
  EXPECT_TRUE(epochs[1].profile_trace.empty());
  const fs::path trace(epochs[0].profile_trace);
  EXPECT_EQ(trace.filename(), "profile_steps_1-2.json");
  EXPECT_EQ(trace.parent_path(), fs::path(epochs[0].checkpoint->path).parent_path());
  const nlohmann::json j = nlohmann::json::parse(read_file(trace.string()));  // throws if invalid
  const nlohmann::json& events = j.is_object() ? j.at("traceEvents") : j;
  ASSERT_TRUE(events.is_array());
  int complete = 0, convolutions = 0;
  for (const auto& e : events) {
    if (e.value("ph", "") == "X" && e.contains("ts") && e.contains("dur")) ++complete;
    if (e.value("name", "").find("convolution") != std::string::npos) ++convolutions;
  }
  EXPECT_GT(complete, 0) << j.dump().substr(0, 500);
  // Two training steps of a ResNet-18: 20 convolutions forward each, and their backward.
  EXPECT_GE(convolutions, 40) << j.dump().substr(0, 500);

  r = run_amptune({"show", runs[0].name, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("time per epoch (seconds"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profile_steps_1-2.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("amp backend none (O0: fp32, no low precision)"), std::string::npos)
      << r.out;
  // The malloc the run ran on, on its row and in `show`: the one the build linked.
  EXPECT_EQ(runs[0].provenance.allocator, AMPTUNE_EXPECTED_ALLOCATOR);
  EXPECT_NE(r.out.find(std::string(", malloc ") + AMPTUNE_EXPECTED_ALLOCATOR), std::string::npos)
      << r.out;
}

// `amptune version` names the malloc the binary runs on: the build's (AMPTUNE_ALLOCATOR), or one
// preloaded ahead of it.
TEST(PerfCli, VersionNamesTheMallocInUse) {
  auto r = run_amptune({"version"}, ".");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::string("malloc: ") + AMPTUNE_EXPECTED_ALLOCATOR + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("LibTorch "), std::string::npos) << r.out;
}

TEST(PerfCli, ProfileStepsMustBeARange) {
  TinySweep f = make_tiny_sweep(quick_tiny(""));
  for (const char* bad : {"profile.steps=[3, 1]", "profile.steps=[2]"}) {
    auto r = run_amptune({"run", f.yaml, "--db", f.db, "--set", bad}, f.dir);
    EXPECT_EQ(r.exit_code, 3) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("profile.steps must be [first, last]"), std::string::npos) << r.err;
  }
  // A longer list is refused by the schema's cap before its entries are read.
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--set", "profile.steps=[1, 2, 3]"}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("profile.steps has 3 entries, more than the 2 it takes"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(f.dir + "/results/checkpoints")) << "nothing may have trained";
}

}  // namespace
}  // namespace amptune::testing
