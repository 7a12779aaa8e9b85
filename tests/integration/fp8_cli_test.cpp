// End-to-end FP8 (amp.fp8.*, docs/AMP.md "FP8: the recipe"): a sweep with amp.fp8.recipe as an
// axis trains on an emulated O1 bf16 base with a dynamic loss scale; stopped after epoch 0 with
// the amax histories far from full (amax_history_len longer than the steps trained) and resumed,
// every epoch row, loss-scale event and the final checkpoint (which holds the FP8 state) equal the
// uninterrupted run's; the start line names the recipe; a run without FP8 forks into FP8 (empty
// histories) and an FP8 run into one without.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {

TinySweep make(const std::string& tail, const std::string& tag) {
  TinyOptions o = quick_tiny(tail, 3);
  o.name = "fp8";
  o.dir_tag = tag;
  o.base =
      "  amp: {opt_level: O1, dtype: bf16, backend: emulate, loss_scale: dynamic, "
      "growth_interval: 2,\n"
      "        fp8: {enabled: true, amax_history_len: 64, margin: 1}}\n";
  return make_tiny_sweep(o);
}

TEST(Fp8Cli, RecipeAxisResumesBitwiseMidHistory) {
  const std::string grid = "grid:\n  amp.fp8.recipe: [delayed, current]\n";
  auto straight = make(grid, "straight");
  auto r = run_amptune({"run", straight.yaml, "--db", straight.db}, straight.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("fp8 hybrid, delayed scaling (margin 1, amax history 64, max)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("fp8 hybrid, current scaling (margin 1)"), std::string::npos) << r.err;

  auto staged = make(grid, "staged");
  auto first =
      run_amptune({"run", staged.yaml, "--db", staged.db, "--stop-after-epoch", "0"}, staged.dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  store::Store s(staged.db), t(straight.db);
  ASSERT_EQ(s.runs().size(), 2u);
  std::vector<double> first_losses;
  for (const auto& run : s.runs()) {
    SCOPED_TRACE(run.label);
    EXPECT_NE(run.config_json.find("\"fp8\""), std::string::npos) << run.config_json;
    auto second = run_amptune({"resume", run.name, "--db", staged.db}, staged.dir);
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_NE(second.err.find("continuing after epoch 0"), std::string::npos) << second.err;
    const auto a = epochs_of(straight.db, run.name), b = epochs_of(staged.db, run.name);
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].train_loss, b[i].train_loss) << "epoch " << i;
      EXPECT_EQ(a[i].global_step, b[i].global_step);
      for (const auto& [name, value] : a[i].metrics) {
        if (name.find("fps") != std::string::npos || name.find("seconds") != std::string::npos ||
            name.find("_ms") != std::string::npos || name.find("share") != std::string::npos) {
          continue;  // timings
        }
        ASSERT_TRUE(b[i].metrics.count(name)) << name;
        EXPECT_EQ(value, b[i].metrics.at(name)) << name << " epoch " << i;
      }
    }
    EXPECT_EQ(a.back().checkpoint->sha256, b.back().checkpoint->sha256)
        << "final weights, optimizer, scaler or FP8 state differ";
    const auto ea = t.scale_events(t.find_run(run.name)->id);
    const auto eb = s.scale_events(run.id);
    ASSERT_EQ(ea.size(), eb.size());
    for (size_t i = 0; i < ea.size(); ++i) {
      EXPECT_EQ(ea[i].global_step, eb[i].global_step);
      EXPECT_EQ(ea[i].scale, eb[i].scale);
      EXPECT_EQ(ea[i].reason, eb[i].reason);
    }
    first_losses.push_back(a[0].train_loss);
  }
  // The recipe changes the numbers (two identities, two loss curves).
  ASSERT_EQ(first_losses.size(), 2u);
  EXPECT_NE(first_losses[0], first_losses[1]);
}

TEST(Fp8Cli, ForksIntoAndOutOfFp8) {
  TinyOptions o = quick_tiny("", 1);
  o.name = "plain";
  o.dir_tag = "fork";
  auto f = make_tiny_sweep(o);
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // No FP8 state in the parent's checkpoint: the fork starts with empty histories.
  r = run_amptune({"fork", "1", "--epoch", "0", "--set", "amp.fp8.enabled=true", "--set",
                   "schedule.epochs=2", "--db", f.db},
                  f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  ASSERT_EQ(s.runs().size(), 2u);
  const auto fp8_run = s.runs()[1];
  EXPECT_EQ(fp8_run.status, records::RunStatus::kDone) << fp8_run.message;
  // And back out of FP8: the parent's FP8 tensors are left.
  r = run_amptune({"fork", fp8_run.name, "--epoch", "1", "--set", "amp.fp8.enabled=false",
                   "--set", "schedule.epochs=3", "--db", f.db},
                  f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store again(f.db);
  ASSERT_EQ(again.runs().size(), 3u);
  EXPECT_EQ(again.runs()[2].status, records::RunStatus::kDone) << again.runs()[2].message;
}

}  // namespace
}  // namespace amptune::testing
