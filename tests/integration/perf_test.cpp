// Performance records of a real run: the per-epoch time breakdown in the database and in
// `amptune show`, profile.steps' Chrome trace beside the checkpoints with its path on the epoch
// row, and the check of profile.steps before anything trains.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

// The tiny ResNet-18 (width 1/16, small-input stem) on a 12 x 12 grey image, by hand: conv1
// 144 x 4 x 9 = 5184 MACs; layer1 4 x 144 x 4 x 4 x 9 = 82944; layer2 at 6 x 6 36 x 8 x 4 x 9 +
// 3 x 36 x 8 x 8 x 9 + its 1x1 downsample 36 x 8 x 4 = 73728; layer3 at 3 x 3 the same 73728;
// layer4 at 2 x 2 4 x 32 x 16 x 9 + 3 x 4 x 32 x 32 x 9 + 4 x 32 x 16 = 131072; fc 32 x 4 = 128.
// 366784 MACs x 2 x 3.
constexpr double kTinyTrainingFlops = 6.0 * 366784;

// Trains the one-cell sweep of `o`: its files, the command's output, its run (exit code and run
// count checked).
std::tuple<TinySweep, Result, records::RunRow> train_one(const TinyOptions& o) {
  TinySweep f = make_tiny_sweep(o);
  Result r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto runs = store::Store(f.db).runs();
  EXPECT_EQ(runs.size(), 1u);
  return {f, r, runs.empty() ? records::RunRow{} : runs[0]};
}

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
  auto [f, r, run] = train_one(o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  const auto epochs = s.epochs(run.id);
  ASSERT_EQ(epochs.size(), 2u);
  for (const auto& e : epochs) {
    ASSERT_TRUE(e.times) << "epoch " << e.epoch;
    const records::EpochTimes& t = *e.times;
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

  r = run_amptune({"show", run.name, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("time per epoch (seconds"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profile_steps_1-2.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("amp backend none (O0: fp32, no low precision)"), std::string::npos)
      << r.out;
  // The malloc the run ran on, on its row and in `show`: the one the build linked.
  EXPECT_EQ(run.provenance.allocator, AMPTUNE_EXPECTED_ALLOCATOR);
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

// `version` names the BLAS that serves LibTorch's fp32 matmuls (core/blas.h; docs/PERFORMANCE.md
// "BLAS"): with Debian's LibTorch, the file the system's libblas.so.3 resolves to.
TEST(PerfCli, VersionNamesTheBlasInUse) {
  auto r = run_amptune({"version"}, scratch_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("\nBLAS: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string blas = r.out.substr(at + 7, r.out.find('\n', at + 1) - at - 7);
  EXPECT_NE(blas, "unknown");
  // The libblas.so.3 the dynamic linker gives this process (same environment: LD_LIBRARY_PATH
  // counts), when the LibTorch calls one (Debian's does; PyTorch's wheels carry their own BLAS
  // inside libtorch_cpu.so).
  if (blas.find("built into LibTorch") != std::string::npos) {
    EXPECT_NE(blas.find("libtorch_cpu"), std::string::npos) << blas;
    return;
  }
  void* lib = ::dlopen("libblas.so.3", RTLD_NOW | RTLD_LOCAL);
  Dl_info info{};
  if (lib && blas.rfind("none", 0) != 0 && ::dladdr(::dlsym(lib, "sgemm_"), &info) != 0) {
    const std::string file = fs::canonical(info.dli_fname).string();
    EXPECT_NE(blas.find(file), std::string::npos) << blas << " should name " << file;
  }
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

// A run records its training FLOPs per sample and its peak (docs/PERFORMANCE.md "MFU") when it
// starts; `show`, `compare`, the view epoch_mfu and the summary line give its MFU.
TEST(PerfCli, ARunRecordsItsWorkAndPeakAndShowsItsMfu) {
  TinyOptions o = quick_tiny("", 1);
  o.schedule = ", skip_steps: 1";  // 3 of the 4 steps timed: the epoch has an img/s
  auto [f, r, run] = train_one(o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  const records::RunWork& work = run.work;
  EXPECT_EQ(work.train_flops_per_sample, kTinyTrainingFlops);
  EXPECT_EQ(work.peak_precision, "fp32");                                          // O0
  EXPECT_EQ(work.peak_source.rfind("cpu: 1 core x ", 0), 0u) << work.peak_source;  // threads 1
  const auto view = s.query(
      "SELECT train_img_s, achieved_flops, peak_flops, mfu, peak_source "
      "FROM epoch_mfu");
  if (work.peak_flops > 0) {  // a clock was found
    ASSERT_EQ(view.rows.size(), 1u);
    const double img_s = std::stod(*view.rows[0][0]), mfu = std::stod(*view.rows[0][3]);
    EXPECT_DOUBLE_EQ(mfu, img_s * work.train_flops_per_sample / work.peak_flops);
    EXPECT_GT(mfu, 0);
    EXPECT_EQ(*view.rows[0][4], work.peak_source);
  }
  // The summary line: its JSON has the figures.
  const auto summary = nlohmann::json::parse(r.out.substr(r.out.rfind("{\"run\"")));
  EXPECT_DOUBLE_EQ(summary.at("train_gflop_per_sample").get<double>(),
                   work.train_flops_per_sample / 1e9);
  EXPECT_EQ(summary.at("peak_source"), work.peak_source);
  EXPECT_TRUE(summary.contains("mfu"));

  // The BLAS its matmuls ran on is recorded with its provenance and shown (migration 20).
  EXPECT_FALSE(run.provenance.blas.empty());
  EXPECT_TRUE(run.work.uncounted_ops.empty()) << run.work.uncounted_ops;

  r = run_amptune({"show", "1", "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(", BLAS " + run.provenance.blas + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("work is partial"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GFLOP per training sample; peak "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(" + work.peak_source + ")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MFU"), std::string::npos) << r.out;
  r = run_amptune({"compare", "--sweep", "tiny", "--db", f.db, "--format", "json"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto table = nlohmann::json::parse(r.out);
  ASSERT_EQ(table.size(), 1u);
  if (work.peak_flops > 0) {
    EXPECT_GT(table[0].at("mfu").get<double>(), 0) << r.out;
  }
}

// --peak-flops, else AMPTUNE_PEAK_FLOPS, is one device's peak (the source says which); a value
// that is not a positive number is refused before anything is written (2 for the option, 3 for
// the environment).
TEST(PerfCli, PeakFlopsGivenByOptionOrEnvironment) {
  TinyOptions o = quick_tiny("", 1);
  o.dir_tag = "option";
  TinySweep f = make_tiny_sweep(o);
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q", "--peak-flops", "2e9"}, f.dir,
                       {{"AMPTUNE_PEAK_FLOPS", "3e9"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  records::RunWork work = store::Store(f.db).runs()[0].work;
  EXPECT_EQ(work.peak_flops, 2e9);
  EXPECT_EQ(work.peak_source, "--peak-flops");

  o.dir_tag = "env";
  f = make_tiny_sweep(o);
  r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir, {{"AMPTUNE_PEAK_FLOPS", "3e9"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  work = store::Store(f.db).runs()[0].work;
  EXPECT_EQ(work.peak_flops, 3e9);
  EXPECT_EQ(work.peak_source, "AMPTUNE_PEAK_FLOPS");

  o.dir_tag = "bad";
  f = make_tiny_sweep(o);
  for (const char* bad : {"0", "-1", "fast", "1e12x"}) {
    r = run_amptune({"run", f.yaml, "--db", f.db, "--peak-flops", bad}, f.dir);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("--peak-flops must be a positive number of FLOP/s of one device"),
              std::string::npos)
        << r.err;
    r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir, {{"AMPTUNE_PEAK_FLOPS", bad}});
    EXPECT_EQ(r.exit_code, 3) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("AMPTUNE_PEAK_FLOPS must be a positive number"), std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(fs::exists(f.db)) << "nothing may have been written";
}

}  // namespace
}  // namespace amptune::testing
