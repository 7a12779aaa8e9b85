// amptune diagnose and tune in FP8 with the real binary (docs/TUNE.md "FP8"): a planted FP8
// fault - conv1's first output filter multiplied by 1e6 (amptune data plant-weights), so its
// per-tensor weight scale leaves the other filters' small values below E4M3's smallest subnormal
// - is diagnosed by name (fp8_keep_out conv1, its weight flushed) and fixed by the search
// (amp.fp8.skip_modules: [conv1]) within tolerance of the BF16 reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {

const std::string kTune =
    "tune:\n"
    "  metric: train_loss\n"
    "  tolerance: {abs: 0.1}\n"
    "  reference: {amp.fp8.enabled: false}\n"
    "  start: {amp.fp8.enabled: true}\n"
    "  moves: [fp8_skip_modules, fp8_recipe, fp8_margin, fp8_history]\n";

TinySweep fp8_sweep(const std::string& tag) {
  TinyOptions o = quick_tiny(kTune, 3);
  o.name = "fp8";
  o.dir_tag = tag;
  o.base = "  amp: {opt_level: O1, dtype: bf16}\n";
  o.model =
      "{name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, small_input: true, "
      "weights: planted.pt}";
  return make_tiny_sweep(o);
}

TEST(TuneFp8Cli, AFilterThatSetsTheScaleIsDiagnosedByNameAndKeptOutOfFp8) {
  const TinySweep f = fp8_sweep("underflow");
  Result r = run_amptune({"data", "plant-weights", f.yaml, "--scale", "conv1.weight[0]=1e6",
                          "--out", "planted.pt"},
                         f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_amptune({"tune", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store store(f.db);
  const auto searches = store.tune_searches("fp8");
  ASSERT_EQ(searches.size(), 1u);
  const records::TuneSearchRow& s = searches[0];
  EXPECT_EQ(records::to_string(s.status), "answered") << s.note;
  EXPECT_LE(s.answer_value, s.reference_value + 0.1);
  EXPECT_NE(s.answer_yaml.find("amp.fp8.skip_modules: [conv1]"), std::string::npos)
      << s.answer_yaml;
  EXPECT_NE(r.out.find("  amp.fp8.enabled: true\n"), std::string::npos) << r.out;
  // The diagnosis of the start names conv1 by the flushing rule; the search's first move is it.
  const auto candidates = store.tune_candidates(s.id);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates[0].advice_rule, records::AdviceRule::kFp8KeepOut);
  EXPECT_EQ(candidates[0].advice_module, "conv1");
  EXPECT_EQ(candidates[0].move, TuneMoveKind::kFp8SkipModules);
  const auto flushed = store.query(
      "SELECT MAX(flushed_frac) FROM fp8_slots WHERE run_id = ?1 AND module = 'conv1' AND "
      "role = 'weight'",
      {std::to_string(s.start_run_id)});
  ASSERT_TRUE(flushed.rows.at(0)[0]);
  EXPECT_GT(std::stod(*flushed.rows.at(0)[0]), 0.5);
  // show prints the FP8 rows and the advice of the start's diagnosis.
  const Result show = run_amptune({"show", std::to_string(s.start_run_id), "--db", f.db}, f.dir);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("FP8 (diagnosis of"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("amp.fp8.skip_modules: [conv1]"), std::string::npos) << show.out;
}

}  // namespace
}  // namespace amptune::testing
