// End-to-end tests of the amptune binary: sweeps, re-runs, exact resume, SIGKILL recovery,
// checkpoint fallback, validation errors. Each test works in its own scratch directory.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

using Fixture = TinySweep;

Fixture make(int epochs, const std::string& grid, int train_n = 96, const std::string& extra = "") {
  TinyOptions o;
  o.epochs = epochs;
  o.train_n = train_n;
  o.base = extra;
  o.tail = grid;
  return make_tiny_sweep(o);
}

// Same training result: identical losses/metrics every epoch, identical final checkpoint bytes.
void expect_same_training(const std::vector<records::EpochRow>& a,
                          const std::vector<records::EpochRow>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].epoch, b[i].epoch);
    EXPECT_EQ(a[i].global_step, b[i].global_step);
    EXPECT_EQ(a[i].train_loss, b[i].train_loss) << "epoch " << i;
    EXPECT_EQ(a[i].lr, b[i].lr);
    EXPECT_EQ(a[i].metrics.at("acc1"), b[i].metrics.at("acc1"));
    EXPECT_EQ(a[i].metrics.at("val_loss"), b[i].metrics.at("val_loss"));
  }
  ASSERT_TRUE(a.back().checkpoint && b.back().checkpoint);
  EXPECT_EQ(a.back().checkpoint->sha256, b.back().checkpoint->sha256)
      << "final weights/optimizer state differ";
}

TEST(Cli, HelpForEveryCommand) {
  const std::string dir = scratch_dir();
  for (const char* cmd : {"run", "resume", "list", "show", "data"}) {
    auto r = run_amptune({cmd, "--help"}, dir);
    EXPECT_EQ(r.exit_code, 0) << cmd << r.err;
    EXPECT_NE(r.out.find("usage: amptune"), std::string::npos) << cmd;
  }
  auto r = run_amptune({"frobnicate"}, dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command"), std::string::npos);
}

TEST(Cli, DryRunPrintsCellsAndWritesNothing) {
  auto f = make(1, "grid:\n  optim.lr: [0.05, 0.1]\n  data.batch_size: [8, 16]\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--dry-run"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4 of 4 cells"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optim.lr=0.1 data.batch_size=16"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(f.db));
}

TEST(Cli, InvalidSweepFailsWithLocationAndWritesNothing) {
  auto f = make(1, "grid:\n  optim.lrr: [0.05, 0.1]\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("sweep.yaml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optim.lrr"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optim.lr"), std::string::npos) << r.err;  // did-you-mean
  EXPECT_FALSE(fs::exists(f.db));
}

TEST(Cli, DryRunRefusesWhatRunWouldRefuseAndRunWritesNothing) {
  // O1 with master_weights true: apex refuses it; so must the dry run, before any row exists.
  auto f = make(1, "grid:\n  amp.opt_level: [O0, O2, O1]\n");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "--dry-run"}, f.dir).exit_code, 0);
  auto bad = make(1, "grid:\n  amp.opt_level: [O2, O1]\n", 96, "  amp.master_weights: \"true\"\n");
  auto r = run_amptune({"run", bad.yaml, "--db", bad.db, "--dry-run"}, bad.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("sweep.yaml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cell 1 (amp.opt_level=O1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("amp.master_weights must be auto with amp.opt_level O1"), std::string::npos)
      << r.err;
  r = run_amptune({"run", bad.yaml, "--db", bad.db}, bad.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_FALSE(fs::exists(bad.db));  // no pending row of cell 0 either

  // An epoch that trains nothing is refused by validation with the real reason.
  auto zero = make(1, "", 96, "  schedule.training_step_per_epoch: 0\n");
  r = run_amptune({"run", zero.yaml, "--db", zero.db}, zero.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("schedule.training_step_per_epoch is 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("fewer samples"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(zero.db));

  // Missing data: exit code 4 naming the path, before anything is written; --skip-data plans.
  auto nodata = make(1, "");
  fs::remove_all(nodata.dir + "/data");
  r = run_amptune({"run", nodata.yaml, "--db", nodata.db}, nodata.dir);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find(nodata.dir + "/data/train-images-idx3-ubyte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sweep.yaml:"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(nodata.db));
  EXPECT_EQ(run_amptune({"run", nodata.yaml, "--db", nodata.db, "--dry-run"}, nodata.dir).exit_code, 4);
  EXPECT_EQ(run_amptune({"run", nodata.yaml, "--dry-run", "--skip-data"}, nodata.dir).exit_code, 0);
  EXPECT_EQ(run_amptune({"run", nodata.yaml, "--skip-data"}, nodata.dir).exit_code, 2);
}

// A safetensors file by hand (this test links no torch): `rows` samples of x (F32 [2]) and
// y (I64), all zero.
std::string zero_shard(int rows) {
  const std::string r = std::to_string(rows), x = std::to_string(8 * rows);
  const std::string header = R"({"x":{"dtype":"F32","shape":[)" + r + R"(,2],"data_offsets":[0,)" +
                             x + R"(]},"y":{"dtype":"I64","shape":[)" + r +
                             R"(],"data_offsets":[)" + x + "," + std::to_string(16 * rows) + "]}}";
  std::string bytes(8, '\0');
  for (size_t i = 0, n = header.size(); i < 8; ++i, n >>= 8) bytes[i] = static_cast<char>(n & 255);
  return bytes + header + std::string(16 * rows, '\0');
}

// data.format tensors passes a dry run, which opens both splits (with the TorchScript model of
// model.task custom that reads it; an image model is refused with it, exit 3); a malformed
// shard stops it with exit 4 naming the file, before anything is written.
TEST(Cli, DryRunOpensTensorsData) {
  auto f = make(1, "");
  write_file(f.dir + "/tensors/train/shard-00000.safetensors", zero_shard(40));
  write_file(f.dir + "/tensors/train/shard-00001.safetensors", zero_shard(24));
  write_file(f.dir + "/tensors/val/shard-00000.safetensors", zero_shard(16));
  std::vector<std::string> args = {
      "run", f.yaml, "--db", f.db, "--dry-run", "--set", "data.format=tensors",
      "--set", "data.root=tensors", "--set", "data.val_split=val"};
  auto r = run_amptune(args, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("model resnet18 reads images"), std::string::npos) << r.err;
  args.insert(args.end(), {"--set", "model.name=torchscript", "--set", "model.task=custom",
                           "--set",
                           std::string("model.path=") + AMPTUNE_FIXTURE_DIR +
                               "/torchscript/regressor_custom.pt"});
  r = run_amptune(args, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 of 1 cells"), std::string::npos) << r.out;
  write_file(f.dir + "/tensors/val/shard-00000.safetensors", zero_shard(16).substr(0, 100));
  r = run_amptune(args, f.dir);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("tensors/val/shard-00000.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated?"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(f.db));
}

TEST(Cli, SweepTrainsEveryCellAndReRunTrainsNothing) {
  auto f = make(2, "grid:\n  optim.lr: [0.05, 0.1]\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One JSON summary line per run on stdout, with the field report's keys.
  EXPECT_NE(r.out.find("\"train_fps_mean\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"training_time\""), std::string::npos) << r.out;
  store::Store s(f.db);
  auto runs = s.runs(std::string("tiny"));
  ASSERT_EQ(runs.size(), 2u);
  std::vector<std::string> recorded;
  for (auto& run : runs) {
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.message;
    auto ep = s.epochs(run.id);
    ASSERT_EQ(ep.size(), 2u);
    for (auto& e : ep) {
      ASSERT_TRUE(e.checkpoint.has_value());
      EXPECT_TRUE(fs::exists(e.checkpoint->path));
      EXPECT_GT(e.metrics.at("acc1"), 0.0);
      recorded.push_back(e.recorded_at);
    }
  }
  auto again = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("0 trained, 2 skipped"), std::string::npos) << again.err;
  std::vector<std::string> after;
  for (auto& run : s.runs(std::string("tiny"))) {
    for (auto& e : s.epochs(run.id)) after.push_back(e.recorded_at);
  }
  EXPECT_EQ(recorded, after);
  EXPECT_EQ(s.integrity_check(), "ok");

  auto list = run_amptune({"list", "--db", f.db}, f.dir);
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find("tiny/0-"), std::string::npos) << list.out;
  auto show = run_amptune({"show", runs[0].name, "--db", f.db}, f.dir);
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("epoch_0001.safetensors"), std::string::npos) << show.out;
}

TEST(Cli, ResumeEqualsStraight) {
  // Both optimizers: their state (momentum, Adam moments and step) must survive the checkpoint.
  const std::string grid = "grid:\n  optim.name: [sgd, adam]\n";
  auto straight = make(3, grid);
  ASSERT_EQ(run_amptune({"run", straight.yaml, "--db", straight.db}, straight.dir).exit_code, 0);

  auto staged = make(3, grid);
  auto first = run_amptune({"run", staged.yaml, "--db", staged.db, "--stop-after-epoch", "0"},
                           staged.dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  store::Store s(staged.db);
  ASSERT_EQ(s.runs().size(), 2u);
  for (const auto& run : s.runs()) {
    EXPECT_EQ(run.status, records::RunStatus::kPending);
    EXPECT_EQ(s.epochs(run.id).size(), 1u);
    auto second = run_amptune({"resume", run.name, "--db", staged.db}, staged.dir);
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_NE(second.err.find("continuing after epoch 0"), std::string::npos) << second.err;
    SCOPED_TRACE(run.label);
    expect_same_training(epochs_of(straight.db, run.name), epochs_of(staged.db, run.name));
  }
}

TEST(Cli, ResumeFromEarlierEpochRetrainsLaterEpochsIdentically) {
  auto f = make(3, "");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db}, f.dir).exit_code, 0);
  store::Store s(f.db);
  auto run = s.runs().at(0);
  auto before = s.epochs(run.id);
  auto r = run_amptune({"resume", run.name, "--db", f.db, "--from-epoch", "0"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_training(before, s.epochs(run.id));
  auto missing = run_amptune({"resume", run.name, "--db", f.db, "--from-epoch", "7"}, f.dir);
  EXPECT_EQ(missing.exit_code, 6);
  EXPECT_NE(missing.err.find("no checkpoint of epoch 7"), std::string::npos) << missing.err;
  EXPECT_EQ(s.find_run(run.id)->status, records::RunStatus::kDone);  // a typo changes nothing
}

TEST(Cli, CorruptNewestCheckpointFallsBackToPrevious) {
  auto straight = make(3, "");
  ASSERT_EQ(run_amptune({"run", straight.yaml, "--db", straight.db}, straight.dir).exit_code, 0);

  auto f = make(3, "");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "--stop-after-epoch", "1"}, f.dir).exit_code, 0);
  store::Store s(f.db);
  auto run = s.runs().at(0);
  auto ep = s.epochs(run.id);
  ASSERT_EQ(ep.size(), 2u);
  // Truncate the newest checkpoint: resume must warn and continue from epoch 0's.
  fs::resize_file(ep[1].checkpoint->path, 100);
  auto r = run_amptune({"resume", run.name, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("falling back"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("continuing after epoch 0"), std::string::npos) << r.err;
  expect_same_training(epochs_of(straight.db, run.name), s.epochs(run.id));
  EXPECT_EQ(s.integrity_check(), "ok");
}

TEST(Cli, KilledMidEpochResumesToTheSameResult) {
  // Enough steps per epoch that the kill lands inside an epoch.
  auto straight = make(3, "", 3200);
  ASSERT_EQ(run_amptune({"run", straight.yaml, "--db", straight.db}, straight.dir).exit_code, 0);

  auto f = make(3, "", 3200);
  pid_t pid = spawn_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  StopOnExit stop(pid);
  // Wait until epoch 0 is recorded, then a little into epoch 1, and kill -9.
  bool recorded = false;
  for (int i = 0; i < 3000 && !recorded; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(f.db)) {
      try {
        store::Store s(f.db);
        auto runs = s.runs();
        recorded = !runs.empty() && !s.epochs(runs[0].id).empty();
      } catch (const std::exception&) {
      }
    }
  }
  ASSERT_TRUE(recorded) << read_file(f.dir + "/child.err");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_exit_code(pid), 128 + SIGKILL) << "the child finished before it could be killed";
  {
    store::Store s(f.db);
    auto run = s.runs().at(0);
    EXPECT_EQ(run.status, records::RunStatus::kRunning);  // what a dead process leaves behind
    EXPECT_LT(s.epochs(run.id).size(), 3u);
  }
  // The same command again takes over the stale run and finishes it.
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--stale-after", "0"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  auto run = s.runs().at(0);
  EXPECT_EQ(run.status, records::RunStatus::kDone);
  expect_same_training(epochs_of(straight.db, run.name), s.epochs(run.id));
  EXPECT_EQ(s.integrity_check(), "ok");
  // No temp files left in the checkpoint directory.
  for (auto& e : fs::directory_iterator(fs::path(s.epochs(run.id)[0].checkpoint->path).parent_path())) {
    EXPECT_EQ(e.path().extension(), ".safetensors") << e.path();
  }
}

TEST(Cli, DivergedRunIsMarkedAndSweepGoesOn) {
  // lr 1e6 blows the loss up; lr 0.05 trains normally.
  auto f = make(1, "grid:\n  optim.lr: [1000000.0, 0.05]\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  auto runs = s.runs(std::string("tiny"));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].status, records::RunStatus::kDiverged);
  EXPECT_NE(runs[0].message.find("epoch 0"), std::string::npos) << runs[0].message;
  EXPECT_EQ(runs[1].status, records::RunStatus::kDone);
}

TEST(Cli, RetentionKeepsNewestAndBest) {
  auto f = make(4, "", 96, "  checkpoint: {keep_last: 1, keep_best: 1}\n");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db}, f.dir).exit_code, 0);
  store::Store s(f.db);
  auto ep = s.epochs(s.runs().at(0).id);
  ASSERT_EQ(ep.size(), 4u);
  int kept = 0;
  for (auto& e : ep) {
    if (e.checkpoint) {
      ++kept;
      EXPECT_TRUE(fs::exists(e.checkpoint->path));
    }
  }
  EXPECT_GE(kept, 1);
  EXPECT_LE(kept, 2);
  EXPECT_TRUE(ep.back().checkpoint.has_value());  // the newest is never deleted
  size_t files = 0;
  for (auto& e : fs::directory_iterator(fs::path(ep.back().checkpoint->path).parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, static_cast<size_t>(kept));
}

}  // namespace
}  // namespace amptune::testing

namespace amptune::testing {
namespace {

TEST(Cli, ImageFolderJpegPathTrainsAndSkipsACorruptImage) {
  const std::string dir = scratch_dir();
  write_tiny_idx(dir + "/idx", 96, 48);
  auto exp = run_amptune({"data", "export-imagefolder", "--idx", dir + "/idx", "--out",
                          dir + "/jpeg", "--names", "generic"},
                         dir);
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  EXPECT_NE(exp.out.find("train: 96 images"), std::string::npos) << exp.out;
  // Replace one training JPEG by garbage: it must be skipped and counted, not crash the run.
  fs::path victim;
  for (auto& e : fs::recursive_directory_iterator(dir + "/jpeg/train")) {
    if (e.is_regular_file()) {
      victim = e.path();
      break;
    }
  }
  ASSERT_FALSE(victim.empty());
  write_file(victim.string(), "this is not a JPEG");
  write_file(dir + "/sweep.yaml",
             "name: jpeg\n"
             "base:\n"
             "  model: {name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, small_input: true}\n"
             "  data: {format: imagefolder, root: " + dir + "/jpeg, image_size: 12, resize_size: 12,\n"
             "         mean: [0.3], std: [0.3], batch_size: 16, workers: 2}\n"
             "  optim: {lr: 0.05}\n"
             "  schedule: {epochs: 1, skip_steps: 1}\n"
             "  threads: 1\n");
  const std::string db = dir + "/amptune.sqlite";
  auto r = run_amptune({"run", dir + "/sweep.yaml", "--db", db}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(victim.filename().string()), std::string::npos) << r.err;  // named once
  store::Store s(db);
  auto run = s.runs().at(0);
  EXPECT_EQ(run.status, records::RunStatus::kDone) << run.message;
  auto ep = s.epochs(run.id);
  ASSERT_EQ(ep.size(), 1u);
  EXPECT_EQ(ep[0].skipped_samples, 1);
  EXPECT_GT(ep[0].metrics.at("acc1"), 0.0);
}

}  // namespace
}  // namespace amptune::testing
