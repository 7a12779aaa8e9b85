// Evaluation of initial weights with the real binary: evaluation-only cells (schedule.epochs: 0)
// against PyTorch's own evaluation of the same torchvision ResNet weights, the precision policy
// applied to them, schedule.eval_initial next to the same run without it, resume, merge, and
// what the other commands make of a run whose one epoch trained nothing.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

bool python_torchvision() {
  static const bool ok =
      std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
  return ok;
}

// The output of a command run through the shell; the test fails unless it exits 0.
std::string shell_output(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run " << command;
    return out;
  }
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0) << command << "\n" << out;
  return out;
}

std::map<std::string, double> initial_metrics_of(const std::string& db, const std::string& run) {
  store::Store s(db);
  const auto r = s.find_run(run);
  EXPECT_TRUE(r.has_value()) << run;
  return r ? s.initial_metrics(r->id) : std::map<std::string, double>{};
}

// Rows of a read-only query, every value as text ("NULL" for NULL).
std::vector<std::vector<std::string>> rows_of(const std::string& db, const std::string& sql) {
  store::Store s(db);
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : s.query(sql).rows) {
    auto& out = rows.emplace_back();
    for (const auto& v : row) out.push_back(v.value_or("NULL"));
  }
  return rows;
}

// tools/make_model_fixtures.py's narrow torchvision ResNet-50 (Bottleneck, small-input stem, one
// channel, ten classes) evaluated by amptune on 28x28 IDX images, one cell per opt level.
constexpr const char* kFixtureModel = "resnet50_w0.03125_small_weights.pt";

struct PretrainedSweep {
  std::string dir, db, yaml, weights;
};

PretrainedSweep pretrained_sweep(const std::string& grid) {
  PretrainedSweep f;
  f.dir = scratch_dir();
  write_tiny_idx(f.dir + "/data", 16, 80, 28, 10);
  f.db = f.dir + "/results/amptune.sqlite";
  fs::create_directories(f.dir + "/results");
  f.weights = std::string(AMPTUNE_FIXTURE_DIR) + "/models/" + kFixtureModel;
  f.yaml = f.dir + "/sweep.yaml";
  write_file(f.yaml,
             "name: pretrained\n"
             "base:\n"
             "  model: {name: resnet50, num_classes: 10, in_channels: 1, width: 0.03125,\n"
             "          small_input: true, weights: " +
                 f.weights +
                 "}\n"
                 "  data: {format: idx, root: " +
                 f.dir +
                 "/data, val_split: t10k, mean: [0.5],\n"
                 "         std: [0.25], batch_size: 32, workers: 1}\n"
                 "  schedule: {epochs: 0}\n"
                 "  threads: 1\n" +
                 grid);
  return f;
}

TEST(EvalOnly, PretrainedTorchvisionResnetGivesPyTorchsAccuracyUnderEachPrecision) {
  auto f = pretrained_sweep("grid:\n  amp.opt_level: [O0, O1, O2]\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("evaluation only"), std::string::npos) << r.err;

  std::map<std::string, std::map<std::string, double>> by_level;
  for (const char* id : {"1", "2", "3"}) {
    const auto rows = epochs_of(f.db, id);
    ASSERT_EQ(rows.size(), 1u);
    const auto& e = rows[0];
    EXPECT_EQ(e.epoch, 0);
    EXPECT_EQ(e.global_step, 0);  // nothing trained
    EXPECT_TRUE(std::isnan(e.lr));
    EXPECT_TRUE(std::isnan(e.train_loss));
    EXPECT_TRUE(std::isnan(e.train_fps_mean));
    EXPECT_FALSE(e.checkpoint.has_value());
    EXPECT_EQ(e.metrics.count("train_images"), 0u);
    EXPECT_EQ(e.metrics.at("val_samples"), 80);
    // The same evaluation is the run's starting point.
    EXPECT_EQ(initial_metrics_of(f.db, id), e.metrics);
    const std::string level =
        rows_of(f.db, "SELECT opt_level FROM runs WHERE id = " + std::string(id))[0][0];
    by_level[level] = e.metrics;
  }
  EXPECT_EQ(rows_of(f.db, "SELECT status, COUNT(*) FROM runs GROUP BY status"),
            (std::vector<std::vector<std::string>>{{"done", "3"}}));
  // No checkpoint directory: nothing was saved.
  EXPECT_FALSE(fs::exists(f.dir + "/results/checkpoints/amptune/1"));

  if (!python_torchvision()) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision missing (tools/install-deps.sh "
                    "installs python3-torch): the PyTorch side of the comparison was not run";
  }
  const std::string tool = std::string(AMPTUNE_SOURCE_DIR) + "/tools/eval_torchvision_idx.py";
  const auto torch_side = nlohmann::json::parse(shell_output(
      "/usr/bin/python3 " + tool + " --weights " + f.weights + " --data " + f.dir +
      "/data --split t10k --arch resnet50 --width 0.03125 --small-input --in-channels 1 "
      "--num-classes 10 --mean 0.5 --std 0.25"));
  ASSERT_EQ(torch_side.at("samples").get<int>(), 80);
  const auto& o0 = by_level.at("O0");
  EXPECT_EQ(o0.at("acc1"), 100.0 * torch_side.at("top1").get<double>() / 80.0);
  EXPECT_EQ(o0.at("acc5"), 100.0 * torch_side.at("top5").get<double>() / 80.0);
  const double torch_loss = torch_side.at("val_loss").get<double>();
  EXPECT_NEAR(o0.at("val_loss"), torch_loss, 1e-5 * std::abs(torch_loss));

  // The cell's precision applies: fp16 (emulated on the CPU) moves the loss a little.
  for (const char* level : {"O1", "O2"}) {
    const double loss = by_level.at(level).at("val_loss");
    EXPECT_NE(loss, o0.at("val_loss")) << level;
    EXPECT_NEAR(loss, o0.at("val_loss"), 2e-2 * o0.at("val_loss")) << level;
  }

  // A fork has no checkpoint to start from.
  r = run_amptune({"fork", "1", "--epoch", "0", "--set", "schedule.epochs=2", "--db", f.db}, f.dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("is evaluation-only (schedule.epochs: 0)"), std::string::npos) << r.err;
  EXPECT_EQ(rows_of(f.db, "SELECT COUNT(*) FROM runs")[0][0], "3");  // nothing added
}

// The tiny sweep three ways with the same seed: trained, trained with eval_initial, and its
// evaluation-only cell (zip: the lists advance together).
TinySweep initial_sweep(int epochs) {
  const std::string e = std::to_string(epochs);
  return make_tiny_sweep(quick_tiny("zip:\n  - {schedule.epochs: [" + e + ", " + e +
                                        ", 0], schedule.eval_initial: [false, true, false]}\n",
                                    epochs));
}

TEST(EvalOnly, EvalInitialRecordsTheStartAndChangesNoTrainingValue) {
  auto f = initial_sweep(2);
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plain = epochs_of(f.db, "1"), initial = epochs_of(f.db, "2"),
             only = epochs_of(f.db, "3");
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(initial.size(), 2u);
  ASSERT_EQ(only.size(), 1u);
  // Evaluating first disturbs neither the random streams nor the BatchNorm statistics: every
  // training value and every evaluation after it is bitwise the same.
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(initial[e].global_step, plain[e].global_step);
    EXPECT_EQ(initial[e].train_loss, plain[e].train_loss) << "epoch " << e;
    EXPECT_EQ(initial[e].lr, plain[e].lr);
    EXPECT_EQ(initial[e].metrics, plain[e].metrics) << "epoch " << e;
    EXPECT_GE(initial[e].global_step, 1);
  }
  // The starting point is the evaluation-only cell's evaluation (same seed: same initial weights).
  const auto start = initial_metrics_of(f.db, "2");
  EXPECT_EQ(start, only[0].metrics);
  EXPECT_EQ(start.count("acc1"), 1u);
  EXPECT_TRUE(initial_metrics_of(f.db, "1").empty());

  // vs_initial: how far training moved the run from its start.
  const auto moved = rows_of(f.db,
                             "SELECT run_id, initial_value, last_value, last_epoch, change "
                             "FROM vs_initial WHERE metric = 'val_loss' ORDER BY run_id");
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_EQ(moved[0][0], "2");
  EXPECT_EQ(std::stod(moved[0][1]), start.at("val_loss"));
  EXPECT_EQ(std::stod(moved[0][2]), initial[1].metrics.at("val_loss"));
  EXPECT_EQ(moved[0][3], "1");
  EXPECT_DOUBLE_EQ(std::stod(moved[0][4]),
                   initial[1].metrics.at("val_loss") - start.at("val_loss"));
  EXPECT_EQ(moved[1], (std::vector<std::string>{"3", moved[1][1], "NULL", "NULL", "NULL"}));

  // The read side takes a run whose epoch trained nothing.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"show", "3"},
        {"compare", "--sweep", "tiny"},
        {"list"},
        {"status"},
        {"report", "--sweep", "tiny", "--out", f.dir + "/report"},
        {"gc", "--dry-run"}}) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--db", f.db});
    r = run_amptune(full, f.dir);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
  }
  // amptune eval of an epoch without a checkpoint says so.
  r = run_amptune({"eval", "3", "--epoch", "0", "--db", f.db}, f.dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("saved epochs: none"), std::string::npos) << r.err;

  // merge carries initial_metrics to the merged run ids.
  const std::string merged = f.dir + "/results/merged.sqlite";
  {
    store::Store target(merged);  // an unrelated run first, so the ids move
    const int64_t sweep = target.ensure_sweep("other", "", "", "");
    records::RunSpec spec;
    spec.config_json = "{}";
    spec.config_hash = "0123456789abcdef";
    target.ensure_run(sweep, spec);
  }
  r = run_amptune({"merge", f.db, "--into", merged}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string name2 = rows_of(f.db, "SELECT name FROM runs WHERE id = 2")[0][0];
  const std::string name3 = rows_of(f.db, "SELECT name FROM runs WHERE id = 3")[0][0];
  EXPECT_EQ(initial_metrics_of(merged, name2), start);
  EXPECT_EQ(initial_metrics_of(merged, name3), only[0].metrics);
  EXPECT_NE(rows_of(merged, "SELECT id FROM runs WHERE name = '" + name2 + "'")[0][0], "2");
}

TEST(EvalOnly, ResumeAfterACrashKeepsTheInitialMetrics) {
  auto f = make_tiny_sweep(quick_tiny("", 30));
  const pid_t a = spawn_amptune(
      {"run", f.yaml, "--db", f.db, "--no-progress", "--set", "schedule.eval_initial=true"}, f.dir);
  StopOnExit stop(a);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(f.db) &&
        rows_of(f.db, "SELECT COUNT(*) FROM epochs WHERE checkpoint_path IS NOT NULL")[0][0] != "0")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(::kill(a, SIGKILL), 0);
  ASSERT_EQ(wait_exit_code(a), 128 + SIGKILL);
  const auto before = initial_metrics_of(f.db, "1");
  ASSERT_EQ(before.count("val_loss"), 1u) << read_file(f.dir + "/child.err");
  // How far the run got before the kill depends on the machine's speed: the resumed run goes
  // two epochs past wherever that was (epoch 0 is the initial evaluation's row).
  const size_t rows_at_kill = epochs_of(f.db, "1").size();
  ASSERT_LT(rows_at_kill, 28u) << "the run all but finished before it was killed";
  const std::string stop_after = std::to_string(rows_at_kill + 1);

  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress", "--set",
                        "schedule.eval_initial=true", "--stop-after-epoch", stop_after},
                       f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("continuing after epoch"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("initial weights"), std::string::npos) << r.err;  // not evaluated again
  EXPECT_EQ(initial_metrics_of(f.db, "1"), before);
  EXPECT_EQ(epochs_of(f.db, "1").size(), rows_at_kill + 2);
}

TEST(EvalOnly, EvaluationOnlyCellsNeedAnEvaluation) {
  auto f = make_tiny_sweep(quick_tiny("", 0));
  auto r =
      run_amptune({"run", f.yaml, "--db", f.db, "--set", "schedule.eval_step_per_epoch=0"}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("schedule.epochs is 0 (an evaluation-only run) but "
                       "schedule.eval_step_per_epoch is 0"),
            std::string::npos)
      << r.err;
  // A sweep's forks cannot start from an evaluation-only cell.
  const std::string base = read_file(f.yaml);
  write_file(f.yaml, base + "forks:\n  - from: {epoch: 0}\n    set: {optim.lr: 0.01}\n");
  r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("cell 0 is evaluation-only (schedule.epochs: 0) and saves no checkpoint"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(f.db));  // refused before the database was touched
  write_file(f.yaml, base);
  // The training split is not read: an evaluation-only run works without it.
  fs::remove(f.dir + "/data/train-images-idx3-ubyte");
  fs::remove(f.dir + "/data/train-labels-idx1-ubyte");
  r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(epochs_of(f.db, "1").size(), 1u);
}

}  // namespace
}  // namespace amptune::testing
