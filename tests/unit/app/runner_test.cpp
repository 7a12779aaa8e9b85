// The sweep runner's planning (app/run/runner.h): every check `run` makes before training, made
// without a database and without training, so a sweep that would fail at cell 5 fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "app/run/runner.h"
#include "core/error.h"
#include "support/scratch.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

const char* const kModel =
    "  model: {name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, small_input: true}\n";

// A sweep over the IDX data set in `data_root` (which need not exist) with `extra` appended.
std::string sweep(const std::string& data_root, const std::string& extra) {
  return "name: plan\nbase:\n" + std::string(kModel) + "  data: {format: idx, root: " + data_root +
         ", mean: [0.3], std: [0.3]}\n" + extra;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Plan, CellsAndForksInDeclarationOrder) {
  ScratchDir dir;
  const std::string path = dir.write(
      "s.yaml", sweep(dir.path().string(),
                      "  schedule.epochs: 3\n"
                      "grid:\n  optim.lr: [0.1, 0.2, 0.3]\n"
                      "forks:\n"
                      "  - from: {where: {optim.lr: 0.2}, epoch: 0}\n    set: {optim.lr: 0.01}\n"
                      "  - from: {epoch: 1}\n    grid: {optim.momentum: [0.5, 0.8]}\n"));
  const Plan plan = plan_sweep(path, {}, {}, /*data=*/false);
  ASSERT_EQ(plan.cells.size(), 3u);
  ASSERT_EQ(plan.forks.size(), 1u + 3u * 2u);
  auto decl = [&](const PlannedFork& f) -> const ForkDecl& { return plan.sweep.forks.at(f.decl); };
  EXPECT_EQ(plan.forks[0].decl, 0u);
  EXPECT_EQ(plan.forks[0].parent, 1u);  // optim.lr 0.2
  EXPECT_EQ(decl(plan.forks[0]).epoch, 0);
  for (size_t i = 1; i < plan.forks.size(); ++i) {
    EXPECT_EQ(plan.forks[i].decl, 1u);
    EXPECT_EQ(plan.forks[i].parent, (i - 1) / 2);  // cell order, then the override sets
    EXPECT_EQ(decl(plan.forks[i]).override_sets.at(plan.forks[i].set).at(0).second,
              (i % 2 ? 0.5 : 0.8))
        << i;
  }
  // --only keeps the selected cells and their forks
  const Plan only = plan_sweep(path, {}, {"optim.lr=0.3"}, false);
  ASSERT_EQ(only.cells.size(), 1u);
  EXPECT_EQ(only.cells[0].index, 2);
  EXPECT_EQ(only.forks.size(), 2u);
  EXPECT_THROW(plan_sweep(path, {}, {"optim.lr=0.7"}, false), UsageError);
}

TEST(Plan, RefusesWhatApexRefusesNamingTheLineAndTheCell) {
  ScratchDir dir;
  const std::string path = dir.write(
      "s.yaml", sweep(dir.path().string(),
                      "grid:\n  amp.opt_level: [O2, O1]\n  amp.master_weights: [auto, \"true\"]\n"));
  const std::string message = error_of([&] { plan_sweep(path, {}, {}, false); });
  EXPECT_NE(message.find(path + ":7:"), std::string::npos) << message;  // the key's line
  EXPECT_NE(message.find("cell 3 (amp.opt_level=O1 amp.master_weights=true)"), std::string::npos)
      << message;
  EXPECT_THROW(plan_sweep(path, {}, {}, false), ConfigError);
  // The valid cells alone plan.
  EXPECT_EQ(plan_sweep(path, {}, {"amp.master_weights=auto"}, false).cells.size(), 2u);
}

TEST(Plan, RefusesScheduleAndCastSettingsThatCannotRun) {
  ScratchDir dir;
  std::string message = error_of([&] {
    plan_sweep(dir.write("a.yaml", sweep(dir.path().string(),
                                         "  schedule.training_step_per_epoch: 0\n")),
               {}, {}, false);
  });
  EXPECT_NE(message.find("schedule.training_step_per_epoch is 0"), std::string::npos) << message;
  EXPECT_NE(message.find("for an evaluation-only cell set schedule.epochs: 0"), std::string::npos)
      << message;
  EXPECT_NE(message.find("a.yaml:5:"), std::string::npos) << message;

  message = error_of([&] {
    plan_sweep(dir.write("b.yaml", sweep(dir.path().string(), "  casts.int32: [k_value]\n")), {},
               {}, false);
  });
  EXPECT_NE(message.find("RootNet"), std::string::npos) << message;
  message = error_of([&] {
    plan_sweep(dir.write("c.yaml", sweep(dir.path().string(), "")), {"casts.int32=[k_valu]"}, {},
               false);
  });
  EXPECT_NE(message.find("casts.int32[0] must be one of k_value"), std::string::npos) << message;
}

TEST(Plan, ForkOverridesAreCheckedBeforeAnythingRuns) {
  ScratchDir dir;
  const std::string path = dir.write(
      "s.yaml", sweep(dir.path().string(),
                      "  schedule.epochs: 3\n"
                      "forks:\n  - from: {epoch: 0}\n    set: {amp.opt_level: O1, "
                      "amp.master_weights: \"true\"}\n"));
  const std::string message = error_of([&] { plan_sweep(path, {}, {}, false); });
  EXPECT_NE(message.find(path + ":7:"), std::string::npos) << message;  // the fork entry
  EXPECT_NE(message.find("fork of cell 0"), std::string::npos) << message;
}

TEST(Plan, DataIsCheckedOncePerDataSetAndNamed) {
  ScratchDir dir;
  const std::string missing = (dir.path() / "no-such-data").string();
  const std::string path =
      dir.write("s.yaml", sweep(missing, "grid:\n  optim.lr: [0.1, 0.2]\n"));
  EXPECT_EQ(plan_sweep(path, {}, {}, /*data=*/false).cells.size(), 2u);
  try {
    plan_sweep(path, {}, {}, /*data=*/true);
    ADD_FAILURE() << "missing data planned";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(missing), std::string::npos) << message;
    EXPECT_NE(message.find("cell 0"), std::string::npos) << message;
  }
}

TEST(Plan, EveryShippedExperimentPlans) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(AMPTUNE_SOURCE_DIR) / "experiments")) {
    if (entry.path().extension() != ".yaml") continue;
    // Its model and shards are written by tools/make_tiny_gpt.py first (planning loads the
    // model); GptTinyCli plans and runs it on them.
    if (entry.path().filename() == "gpt_tiny.yaml") continue;
    // Likewise tools/make_fp8_head.py's; TuneFp8Cli tunes it on them.
    if (entry.path().filename() == "tune_fp8_head.yaml") continue;
    ++files;
    EXPECT_NO_THROW(plan_sweep(entry.path().string(), {}, {}, /*data=*/false)) << entry.path();
  }
  EXPECT_GE(files, 5);
}

TEST(Plan, TallyExitCodesAndSummary) {
  Tally t;
  EXPECT_EQ(t.exit_code(), 0);
  train::RunResult r;
  r.outcome = train::Outcome::kLost;
  t.add(r);
  EXPECT_EQ(t.exit_code(), 0);
  EXPECT_NE(t.summary().find("1 taken over by another process"), std::string::npos);
  r.outcome = train::Outcome::kFailed;
  t.add(r);
  EXPECT_EQ(t.exit_code(), static_cast<int>(ExitCode::kFailedRuns));
  EXPECT_EQ(t.summary().rfind("0 trained, 0 skipped, 0 diverged, 1 failed, 0 interrupted", 0), 0u);
}

}  // namespace
}  // namespace amptune::app
