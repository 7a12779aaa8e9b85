// amptune diagnose and tune in FP8 with the real binary (docs/TUNE.md "FP8"): a planted FP8
// fault - conv1's first output filter multiplied by 1e6 (amptune data plant-weights), so its
// per-tensor weight scale leaves the other filters' small values below E4M3's smallest subnormal
// - is diagnosed by name (fp8_keep_out conv1, its weight flushed) and fixed by the search
// (amp.fp8.skip_modules: [conv1]) within tolerance of the BF16 reference. A planted output head
// that must stay out of FP8 - tools/make_fp8_head.py's forecaster, whose head computes the small
// difference of two large inputs - is diagnosed by name (fp8_keep_out head, the last module in
// FP8 departs) and fixed by the search (amp.fp8.skip_modules: [head]); no recipe key fixes it.
// Planted fault (b), a layer whose amax jumps so that delayed scaling saturates it, is the last
// test (its model and shards written by tools/make_fp8_faults.py at test time).
#include <gtest/gtest.h>

#include <cstdlib>
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

const std::string kSource = AMPTUNE_SOURCE_DIR;

bool python_torch() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return ok;
}
const char* const kNoPythonTorch =
    "/usr/bin/python3 with torch (tools/install-deps.sh installs python3-torch) missing: the "
    "planted model and its data are not written";

// Runs the generator `tool` (tools/..., with its arguments) with --out dir/gen (Debian's
// python3-torch).
void generate(const std::string& dir, const std::string& tool) {
  const std::string make = "/usr/bin/python3 " + kSource + "/tools/" + tool + " --out " + dir +
                           "/gen > " + dir + "/make.log 2>&1";
  ASSERT_EQ(std::system(make.c_str()), 0) << read_file(dir + "/make.log");
}

// `command` (tune, run) on the shipped experiment `yaml` pointed at the generated model
// dir/gen/`model` and shards dir/gen/`data`, then `more`.
std::vector<std::string> generated_args(const std::string& command, const std::string& yaml,
                                        const std::string& db, const std::string& model,
                                        const std::string& data,
                                        const std::vector<std::string>& more) {
  std::vector<std::string> args = {command, kSource + "/experiments/" + yaml, "--db", db,
                                   "--set", "model.path=gen/" + model,
                                   "--set", "data.root=gen/" + data};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<std::string> fp8_head_args(const std::string& command, const std::string& db,
                                       const std::vector<std::string>& more) {
  return generated_args(command, "tune_fp8_head.yaml", db, "fp8_head.pt", "data", more);
}

TEST(TuneFp8Cli, AnOutputHeadThatNeedsMorePrecisionIsKeptOutOfFp8WhateverTheRecipe) {
  if (!python_torch()) {
    GTEST_SKIP() << kNoPythonTorch;
  }
  const std::string dir = scratch_dir("tune_fp8_head");
  ASSERT_NO_FATAL_FAILURE(generate(dir, "make_fp8_head.py"));
  const std::string db = dir + "/tune.sqlite";
  Result r = run_amptune(fp8_head_args("tune", db, {"--no-progress"}), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store store(db);
  const auto searches = store.tune_searches("tune_fp8_head");
  ASSERT_EQ(searches.size(), 1u);
  const records::TuneSearchRow& s = searches[0];
  ASSERT_EQ(records::to_string(s.status), "answered") << s.note;
  const double tolerance = 0.05;  // the block's abs, in validation mse
  EXPECT_LE(s.answer_value, s.reference_value + tolerance);
  // The head alone leaves FP8: fc1 and fc2 keep the start's recipe (delayed, margin 0).
  EXPECT_EQ(s.answer_yaml, "amp.fp8.enabled: true\namp.fp8.skip_modules: [head]\n");
  EXPECT_GT(epochs_of(db, std::to_string(s.start_run_id)).back().metrics.at("mse"),
            s.reference_value + tolerance)
      << "the start (every Linear in FP8) is outside the tolerance";
  const auto candidates = store.tune_candidates(s.id);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates[0].advice_rule, records::AdviceRule::kFp8KeepOut);
  EXPECT_EQ(candidates[0].advice_module, "head");
  EXPECT_EQ(candidates[0].move, TuneMoveKind::kFp8SkipModules);
  // Named by the output-head rule, not the flushing one: nothing flushes, the head departs.
  const auto advice = store.query(
      "SELECT advice FROM diagnosis_advice WHERE run_id = ?1 AND rule = 'fp8_keep_out'",
      {std::to_string(s.start_run_id)});
  ASSERT_EQ(advice.rows.size(), 1u);
  ASSERT_TRUE(advice.rows[0][0]);
  EXPECT_NE(advice.rows[0][0]->find("head is the last module in FP8"), std::string::npos)
      << *advice.rows[0][0];
  const auto flushed = store.query(
      "SELECT MAX(flushed_frac) FROM fp8_slots WHERE run_id = ?1",
      {std::to_string(s.start_run_id)});
  ASSERT_TRUE(flushed.rows.at(0)[0]);
  EXPECT_LT(std::stod(*flushed.rows.at(0)[0]), 0.05);
  // The recipe keys do not fix it: each recipe candidate of the search ended outside, and so do
  // whole runs with them all (current scaling with 2 more binades of margin; delayed with a margin
  // and a short history).
  for (const auto& c : candidates) {
    if (c.move == TuneMoveKind::kFp8SkipModules) continue;
    EXPECT_GT(c.value, c.reference_value + tolerance) << c.change_json;
  }
  const std::vector<std::vector<std::string>> recipes = {
      {"amp.fp8.recipe=current", "amp.fp8.margin=2"},
      {"amp.fp8.recipe=delayed", "amp.fp8.margin=1", "amp.fp8.amax_history_len=64"}};
  const std::string control_db = dir + "/control.sqlite";
  for (const auto& keys : recipes) {
    std::vector<std::string> more = {"-q", "--set", "amp.fp8.enabled=true"};
    for (const auto& key : keys) more.insert(more.end(), {"--set", key});
    r = run_amptune(fp8_head_args("run", control_db, more), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const auto runs = store::Store(control_db).runs();
  ASSERT_EQ(runs.size(), recipes.size());
  for (const auto& run : runs) {
    const auto rows = epochs_of(control_db, run.name);
    ASSERT_EQ(rows.size(), 6u) << run.label;
    EXPECT_GT(rows.back().metrics.at("mse"), s.reference_value + tolerance) << run.label;
  }
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

// Planted fault (b), an amax that jumps (docs/TUNE.md "Planted FP8 faults",
// experiments/tune_fp8_jump.yaml): tools/make_fp8_faults.py's MLP, written by Debian's torch
// 1.13 at test time, multiplies the input of its Linear `jump` by the batch's gain g (2^6 on
// about half the batches, else 1) and divides its output by g. BF16 and FP8 current scaling are
// invariant to g; delayed scaling with Megatron-LM's history (1 step, most recent) saturates
// jump's input whenever g rises. The search diagnoses jump (fp8_current_scaling) over 8
// consecutive batches and answers amp.fp8.recipe: current, everything still in FP8; the same
// samples with every gain 1 train under delayed scaling within tolerance, and in BF16 to the
// reference's losses bit for bit (the jump, not the data, is the fault).
// The shipped experiment on the generated files in dir/gen (`data` the shards' folder).
std::vector<std::string> jump_args(const std::string& command, const std::string& db,
                                   const std::string& data, const std::vector<std::string>& more) {
  return generated_args(command, "tune_fp8_jump.yaml", db, "jump.pt", data, more);
}

double number_at(const store::Store::QueryResult& q, size_t row, size_t column) {
  EXPECT_TRUE(q.rows.at(row).at(column)) << "NULL at row " << row << " column " << column;
  return std::stod(q.rows.at(row).at(column).value_or("nan"));
}

TEST(TuneFp8Cli, AnAmaxThatJumpsIsDiagnosedByNameAndScaledFromTheTensor) {
  if (!python_torch()) {
    GTEST_SKIP() << kNoPythonTorch;
  }
  const std::string dir = scratch_dir("tune_fp8_jump");
  ASSERT_NO_FATAL_FAILURE(generate(dir, "make_fp8_faults.py jump"));
  const std::string db = dir + "/results.sqlite";
  Result r = run_amptune(jump_args("tune", db, "jump", {"--no-progress"}), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store store(db);
  const auto searches = store.tune_searches("tune_fp8_jump");
  ASSERT_EQ(searches.size(), 1u);
  const records::TuneSearchRow& s = searches[0];
  EXPECT_EQ(records::to_string(s.status), "answered") << s.note;
  EXPECT_LE(s.answer_value, s.reference_value + 0.1);
  EXPECT_NE(s.answer_yaml.find("amp.fp8.recipe: current"), std::string::npos) << s.answer_yaml;
  EXPECT_EQ(s.answer_yaml.find("skip_modules"), std::string::npos) << s.answer_yaml;
  // The start (delayed scaling) ends outside the band: the fault is real.
  const auto start = store.epochs(s.start_run_id);
  ASSERT_FALSE(start.empty());
  EXPECT_GT(start.back().train_loss, s.reference_value + 0.1);
  // The diagnosis names jump by the saturation rule; the search's first move is it.
  const auto candidates = store.tune_candidates(s.id);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates[0].advice_rule, records::AdviceRule::kFp8CurrentScaling);
  EXPECT_EQ(candidates[0].advice_module, "jump");
  EXPECT_EQ(candidates[0].move, TuneMoveKind::kFp8Recipe);
  for (const auto& c : candidates) {
    EXPECT_NE(c.move, TuneMoveKind::kFp8SkipModules) << c.change_json;
  }
  const std::string id = std::to_string(s.start_run_id);
  const auto saturated = store.query(
      "SELECT saturated_frac FROM fp8_slots WHERE run_id = ?1 AND module = 'jump' AND "
      "role = 'input'", {id});
  ASSERT_EQ(saturated.rows.size(), 1u);
  EXPECT_GT(number_at(saturated, 0, 0), 0.25);
  // The diagnosed batches advance the history as training steps do: batch b's scale is that of
  // batch b - 1's amax (a history of 1 step), and a rise of the gain among them saturates.
  const auto rows = store.query(
      "SELECT batch, amax, scale, history_max, history_len, saturated_frac FROM fp8_diagnostics "
      "WHERE run_id = ?1 AND module = 'jump' AND role = 'input' ORDER BY batch", {id});
  ASSERT_EQ(rows.rows.size(), 8u);
  int jumps = 0;
  for (size_t b = 1; b < rows.rows.size(); ++b) {
    SCOPED_TRACE("batch " + std::to_string(b));
    const double before = number_at(rows, b - 1, 1);
    EXPECT_EQ(number_at(rows, b, 3), before);
    EXPECT_EQ(number_at(rows, b, 4), 1);
    EXPECT_EQ(number_at(rows, b, 2), 448.0f / static_cast<float>(before));
    jumps += number_at(rows, b, 1) > 32 * before && number_at(rows, b, 5) > 0.25;
  }
  EXPECT_GE(jumps, 1);

  // The control: the same samples with every gain 1, delayed scaling within tolerance, BF16
  // equal to the reference.
  const std::string steady = dir + "/steady.sqlite";
  r = run_amptune(jump_args("run", steady, "steady", {"-q", "--set", "amp.fp8.enabled=true"}),
                  dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bf16 = dir + "/steady_bf16.sqlite";
  r = run_amptune(jump_args("run", bf16, "steady", {"-q"}), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto reference = store.epochs(s.reference_run_id);
  const auto fp8_runs = store::Store(steady).runs();
  const auto bf16_runs = store::Store(bf16).runs();
  ASSERT_EQ(fp8_runs.size(), 1u);
  ASSERT_EQ(bf16_runs.size(), 1u);
  const auto delayed = epochs_of(steady, fp8_runs[0].name);
  const auto same = epochs_of(bf16, bf16_runs[0].name);
  ASSERT_EQ(delayed.size(), reference.size());
  ASSERT_EQ(same.size(), reference.size());
  EXPECT_LE(delayed.back().train_loss, s.reference_value + 0.1);
  for (size_t e = 0; e < reference.size(); ++e) {
    EXPECT_EQ(same[e].train_loss, reference[e].train_loss) << "epoch " << e;
  }
}

// An FP8 run on an fp16 base with two overflows, the second hidden by the first: inputs left
// unnormalised (mean -1, std 3.2e-5: 31250..62500, finite in fp16) overflow conv1's fp16 output,
// layer2.0.conv1's weight x 30000 its own, and the first one's inf reaches the second as NaN.
// The diagnosis probes again with conv1 kept in fp32 and must quantise at the checkpoint's FP8
// scales, as the run's own passes do. (With a fresh scaling state, scale 1, the planted weight
// saturated at E4M3's 448 in the probe and the hidden overflow went unseen.)
TEST(Fp8DiagnoseCli, AnOverflowTheFirstHidesIsFoundAtTheCheckpointsScales) {
  TinyOptions o = quick_tiny("", 1);
  o.name = "fp8_hidden";
  o.dir_tag = "fp8_hidden";
  o.base =
      "  amp: {opt_level: O1, loss_scale: dynamic, max_loss_scale: 1024, fp8: {enabled: true}}\n";
  o.model =
      "{name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, small_input: true, "
      "weights: planted.pt}";
  const TinySweep f = make_tiny_sweep(o);
  Result r = run_amptune({"data", "plant-weights", f.yaml, "--scale",
                          "layer2.0.conv1.weight=30000", "--out", "planted.pt"},
                         f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_amptune({"run", f.yaml, "--db", f.db, "-q", "--set", "data.mean=[-1.0]", "--set",
                   "data.std=[0.000032]"},
                  f.dir);
  ASSERT_EQ(epochs_of(f.db, "1").size(), 1u) << r.err;
  ASSERT_TRUE(epochs_of(f.db, "1")[0].checkpoint) << "the FP8 scales of epoch 0";
  r = run_amptune({"diagnose", "1", "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = store::Store(f.db).query(
      "SELECT module FROM diagnosis_advice WHERE rule = 'activation_overflow' ORDER BY module");
  std::vector<std::string> modules;
  for (const auto& row : rows.rows) modules.push_back(row.at(0).value_or("NULL"));
  EXPECT_EQ(modules, (std::vector<std::string>{"conv1", "layer2.0.conv1"})) << r.out;
}

}  // namespace
}  // namespace amptune::testing
