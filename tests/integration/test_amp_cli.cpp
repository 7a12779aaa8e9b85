// End-to-end mixed precision: O1/O2/O3 with a dynamic loss scale resume bitwise (masters and
// scaler state in the checkpoint), the run row carries the resolved precision columns, the
// loss-scale history is in the database, and apex-refused combinations stop before training.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

using Fixture = TinySweep;

Fixture make(int epochs, const std::string& amp) {
  TinyOptions o;
  o.name = "amp";
  o.epochs = epochs;
  o.base = amp;
  return make_tiny_sweep(o);
}

TEST(AmpCli, ResumeEqualsStraightForEveryOptLevel) {
  // growth_interval 2 so that the scale both backs off and grows within a few steps.
  const std::string amp =
      "  amp: {loss_scale: dynamic, growth_interval: 2}\n"
      "grid:\n  amp.opt_level: [O1, O2, O3]\n";
  auto straight = make(3, amp);
  auto r = run_amptune({"run", straight.yaml, "--db", straight.db}, straight.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  auto staged = make(3, amp);
  auto first =
      run_amptune({"run", staged.yaml, "--db", staged.db, "--stop-after-epoch", "0"}, staged.dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  store::Store s(staged.db);
  store::Store t(straight.db);
  ASSERT_EQ(s.runs().size(), 3u);
  for (const auto& run : s.runs()) {
    SCOPED_TRACE(run.label);
    auto second = run_amptune({"resume", run.name, "--db", staged.db}, staged.dir);
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_NE(second.err.find("continuing after epoch 0"), std::string::npos) << second.err;
    auto a = epochs_of(straight.db, run.name);
    auto b = epochs_of(staged.db, run.name);
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].train_loss, b[i].train_loss) << "epoch " << i;
      EXPECT_EQ(a[i].global_step, b[i].global_step);
      for (const char* m : {"acc1", "val_loss", "loss_scale", "loss_scale_min", "loss_scale_max",
                            "overflow_steps", "skipped_steps"}) {
        ASSERT_TRUE(a[i].metrics.count(m)) << m;
        EXPECT_EQ(a[i].metrics.at(m), b[i].metrics.at(m)) << m << " epoch " << i;
      }
    }
    EXPECT_EQ(a.back().checkpoint->sha256, b.back().checkpoint->sha256)
        << "final weights, masters, optimizer or scaler state differ";

    // The run row and the scale history.
    const auto row = t.find_run(run.name);
    ASSERT_TRUE(row);
    EXPECT_EQ(row->columns.at("backend"), "\"emulate\"");
    EXPECT_EQ(row->columns.at("dtype"), "\"fp16\"");
    EXPECT_EQ(row->columns.at("loss_scale"), "\"dynamic\"");
    const auto events = t.scale_events(row->id);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events[0].reason, "init");
    EXPECT_EQ(events[0].scale, 65536.0);
    // Every change is recorded: the epochs' end scales follow from the events.
    double scale = 0;
    size_t e = 0;
    for (const auto& epoch : a) {
      while (e < events.size() && events[e].global_step <= epoch.global_step) {
        scale = events[e++].scale;
      }
      EXPECT_EQ(epoch.metrics.at("loss_scale"), scale);
    }
    EXPECT_EQ(s.scale_events(s.find_run(run.name)->id).size(), events.size());
  }
}

TEST(AmpCli, RunRowShowsResolvedPrecision) {
  auto f = make(1,
               "zip:\n  - {amp.opt_level: [O0, O1, O3], amp.dtype: [fp16, bf16, fp16]}\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  std::map<std::string, std::vector<std::string>> seen;
  for (const auto& run : s.runs()) {
    EXPECT_EQ(run.status, store::RunStatus::kDone) << run.message;
    seen[run.columns.at("opt_level")] = {run.columns.at("dtype"), run.columns.at("loss_scale"),
                                         run.columns.at("backend"),
                                         run.columns.at("backend_reason")};
  }
  // O1 bf16 with amp.backend auto: native on a CPU with bf16 instructions, emulated otherwise,
  // and the run row says why.
  const std::vector<std::string>& o1 = seen.at("\"O1\"");
  ASSERT_EQ(o1.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(o1.begin(), o1.begin() + 2),
            (std::vector<std::string>{"\"bf16\"", "\"dynamic\""}));
  if (o1[2] == "\"native\"") {
    EXPECT_NE(o1[3].find("_bf16 (oneDNN bf16 kernels)"), std::string::npos) << o1[3];
  } else {
    EXPECT_EQ(o1[2], "\"emulate\"");
    EXPECT_NE(o1[3].find("the CPU lacks avx512_bf16 / amx_bf16"), std::string::npos) << o1[3];
  }
  EXPECT_EQ(seen.at("\"O0\""), (std::vector<std::string>{"\"fp16\"", "1.0", "\"none\"",
                                                         "\"O0: fp32, no low precision\""}));
  EXPECT_EQ(seen.at("\"O3\""),
            (std::vector<std::string>{"\"fp16\"", "1.0", "\"emulate\"",
                                      "\"auto: LibTorch has no CPU kernels for O3 fp16\""}));
}

TEST(AmpCli, ApexRefusedCombinationStopsBeforeTraining) {
  auto f = make(1, "  amp: {opt_level: O1, keep_batchnorm_fp32: true}\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("amp.keep_batchnorm_fp32"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace amptune::testing
