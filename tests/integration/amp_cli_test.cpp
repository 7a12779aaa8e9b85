// End-to-end mixed precision: O1/O2/O3 with a dynamic loss scale resume bitwise (masters and
// scaler state in the checkpoint), the run row carries the resolved precision columns, the
// loss-scale history is in the database, and apex-refused combinations stop before training.
// `amptune diagnose` names a planted overflow and amp.fp32_modules removes it; gradient
// underflow shows at loss scale 1 and not under the dynamic scale; O0 against O0 is exact.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

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
    EXPECT_EQ(events[0].reason, ScaleReason::kInit);
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
  auto f = make(1, "zip:\n  - {amp.opt_level: [O0, O1, O3], amp.dtype: [fp16, bf16, fp16]}\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  std::map<std::string, std::vector<std::string>> seen;
  for (const auto& run : s.runs()) {
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.message;
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
  // (ctest holds oneDNN to AVX2, cmake/amptune.cmake: on a CPU with bf16 instructions auto
  // then emulates, saying so.)
  if (o1[2] == "\"native\"") {
    EXPECT_NE(o1[3].find("_bf16 (oneDNN bf16 kernels)"), std::string::npos) << o1[3];
  } else {
    EXPECT_EQ(o1[2], "\"emulate\"");
    EXPECT_TRUE(o1[3].find("the CPU lacks avx512_bf16 / amx_bf16") != std::string::npos ||
                o1[3].find("oneDNN is held to ONEDNN_MAX_CPU_ISA=AVX2") != std::string::npos)
        << o1[3];
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

// The sweep's runs in cell order and one value of each as text (the query's first column).
std::vector<std::optional<std::string>> per_run(const store::Store& s, const std::string& sql) {
  std::vector<std::optional<std::string>> out;
  for (const auto& run : s.runs()) {
    const auto q = s.query(sql, {std::to_string(run.id)});
    out.push_back(q.rows.empty() ? std::nullopt : q.rows[0][0]);
  }
  return out;
}

// Trains sweep `f` (two cells) on the planted data and returns each run's overflow_steps. The
// planted layer: unnormalised inputs of 62500 to 125000 (mean -1, std 1.6e-5) are fine in fp32
// but beyond fp16's 65504 once conv1 casts them: its outputs are inf. In fp32, conv1 gives large
// but finite values, which bn1 brings back into range.
std::vector<double> run_on_planted_data(const TinySweep& f) {
  auto r = run_amptune(
      {"run", f.yaml, "--db", f.db, "--set", "data.mean=[-1.0]", "--set", "data.std=[0.000016]"},
      f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> out;
  for (const auto& v :
       per_run(store::Store(f.db),
               "SELECT value FROM metrics WHERE run_id = ?1 AND name = 'overflow_steps'")) {
    out.push_back(v ? std::stod(*v) : -1);
  }
  return out;
}

TEST(AmpCli, DiagnoseNamesAPlantedOverflowAndFp32ModulesRemoveIt) {
  TinyOptions o = quick_tiny("grid:\n  amp.fp32_modules: [[], [conv1]]\n");
  o.name = "planted";
  o.base = "  amp: {opt_level: O1, loss_scale: dynamic, max_loss_scale: 1024}\n";
  const auto f = make_tiny_sweep(o);
  const auto overflow = run_on_planted_data(f);
  store::Store s(f.db);
  const auto runs = s.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_GT(overflow.at(0), 0);  // the planted layer overflows
  EXPECT_EQ(overflow.at(1), 0);  // ... not in fp32
  const auto val_loss =
      per_run(s, "SELECT value FROM metrics WHERE run_id = ?1 AND name = 'val_loss'");
  ASSERT_TRUE(val_loss[1].has_value());

  auto r = run_amptune({"diagnose", runs[0].name, "--db", f.db, "--batches", "4"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("first divergence: conv1 (forward #0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("amp.fp32_modules: [conv1]"), std::string::npos) << r.out;
  auto q = s.query("SELECT module, reason FROM first_divergence WHERE run_id = ?1",
                   {std::to_string(runs[0].id)});
  ASSERT_EQ(q.rows.size(), 1u);
  EXPECT_EQ(q.rows[0][0], "conv1");
  EXPECT_EQ(q.rows[0][1], "overflow");
  q = s.query("SELECT rule, module FROM diagnosis_advice WHERE run_id = ?1 ORDER BY seq",
              {std::to_string(runs[0].id)});
  ASSERT_FALSE(q.rows.empty());
  EXPECT_EQ(q.rows[0][0], "activation_overflow");
  EXPECT_EQ(q.rows[0][1], "conv1");

  r = run_amptune({"diagnose", runs[1].name, "--db", f.db, "--batches", "4"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  q = s.query(
      "SELECT COUNT(*), SUM(overflow_frac > 0) FROM diagnostics WHERE run_id = ?1 AND "
      "kind = 'forward'",
      {std::to_string(runs[1].id)});
  EXPECT_GT(std::stoi(q.rows[0][0].value()), 20);
  EXPECT_EQ(q.rows[0][1], "0");  // no module overflows with conv1 in fp32
  q = s.query(
      "SELECT dtype FROM diagnostics WHERE run_id = ?1 AND kind = 'forward' AND "
      "module = 'conv1' AND batch = 0",
      {std::to_string(runs[1].id)});
  EXPECT_EQ(q.rows.at(0)[0], "fp32");
}

// Two planted overflows in different stages: conv1's (the inputs of the test above) and one in
// layer2 (`amptune data plant-weights`: layer2.0.conv1's weight x 30000, which its BatchNorm
// normalises in fp32). Under O1 every step overflows; downstream of conv1 every value is NaN, so
// diagnose finds layer2.0.conv1 with conv1 kept in fp32, and names both, each once, and neither
// the modules that carry their inf nor the blocks that hold them. Both kept in fp32: no overflow.
TEST(AmpCli, DiagnoseNamesEveryOverflowThatStartsFromFiniteValues) {
  TinyOptions o = quick_tiny("grid:\n  amp.fp32_modules: [[], [conv1, layer2.0.conv1]]\n");
  o.name = "two_overflows";
  o.model =
      "{name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, small_input: true, "
      "weights: planted.pt}";
  o.base = "  amp: {opt_level: O1, loss_scale: dynamic, max_loss_scale: 1024}\n";
  const auto f = make_tiny_sweep(o);
  auto r = run_amptune({"data", "plant-weights", f.yaml, "--scale", "layer2.0.conv1.weight=30000",
                        "--out", "planted.pt"},
                       f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run_on_planted_data(f), (std::vector<double>{4, 0}));  // every step of the epoch
  store::Store s(f.db);
  const auto runs = s.runs();
  ASSERT_EQ(runs.size(), 2u);

  r = run_amptune({"diagnose", runs[0].name, "--db", f.db, "--batches", "2"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("first divergence: conv1 (forward #0)"), std::string::npos) << r.out;
  auto q = s.query(
      "SELECT module, advice FROM diagnosis_advice WHERE run_id = ?1 AND "
      "rule = 'activation_overflow' ORDER BY seq",
      {std::to_string(runs[0].id)});
  ASSERT_EQ(q.rows.size(), 2u) << r.out;
  EXPECT_EQ(q.rows[0][0], "conv1");
  EXPECT_EQ(q.rows[1][0], "layer2.0.conv1");
  EXPECT_NE(q.rows[1][1].value().find("together: amp.fp32_modules: [conv1, layer2.0.conv1]"),
            std::string::npos)
      << q.rows[1][1].value();
  // The evidence: conv1's input was finite, bn1's held its inf.
  q = s.query(
      "SELECT module, MAX(input_nonfinite_frac) FROM diagnostics WHERE run_id = ?1 AND "
      "kind = 'forward' AND module IN ('conv1', 'bn1') GROUP BY module ORDER BY module",
      {std::to_string(runs[0].id)});
  ASSERT_EQ(q.rows.size(), 2u);
  EXPECT_GT(std::stod(q.rows[0][1].value()), 0);  // bn1
  EXPECT_EQ(std::stod(q.rows[1][1].value()), 0);  // conv1
  q = s.query(
      "SELECT COUNT(*) FROM diagnostics WHERE run_id = ?1 AND kind = 'gradient' AND "
      "input_nonfinite_frac IS NOT NULL",
      {std::to_string(runs[0].id)});
  EXPECT_EQ(q.rows[0][0], "0");

  r = run_amptune({"diagnose", runs[1].name, "--db", f.db, "--batches", "2"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  q = s.query(
      "SELECT COUNT(*) FROM diagnosis_advice WHERE run_id = ?1 AND "
      "rule = 'activation_overflow'",
      {std::to_string(runs[1].id)});
  EXPECT_EQ(q.rows[0][0], "0") << r.out;
}

TEST(AmpCli, DiagnoseShowsGradientUnderflowAtScaleOneAndNotUnderTheDynamicScale) {
  TinyOptions o = quick_tiny("grid:\n  amp.loss_scale: [1.0, dynamic]\n");
  o.name = "underflow";
  o.base = "  amp: {opt_level: O1}\n";
  const auto f = make_tiny_sweep(o);
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  for (const auto& run : s.runs()) {
    r = run_amptune({"diagnose", run.name, "--db", f.db, "--batches", "2"}, f.dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Gradient values flushed to zero or subnormal in fp16, over all parameters and batches.
  const auto underflows =
      per_run(s,
              "SELECT SUM(underflow_frac * numel) FROM diagnostics WHERE run_id = ?1 AND "
              "kind = 'gradient'");
  const auto scales = per_run(s, "SELECT loss_scale FROM diagnoses WHERE run_id = ?1");
  EXPECT_EQ(std::stod(scales[0].value()), 1.0);
  EXPECT_GT(std::stod(scales[1].value()), 1000.0);
  const double at_one = std::stod(underflows[0].value());
  const double dynamic = std::stod(underflows[1].value());
  EXPECT_GT(at_one, 0);
  EXPECT_LT(dynamic, at_one / 10) << at_one;
}

TEST(AmpCli, DiagnoseO0AgainstO0IsExactAndBadOptionsAreRefused) {
  const auto f = make_tiny_sweep(quick_tiny(""));
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(f.db);
  const auto run = s.runs().at(0);
  r = run_amptune({"diagnose", run.name, "--db", f.db, "--batches", "2"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no module departs"), std::string::npos) << r.out;
  auto q = s.query(
      "SELECT COUNT(*), SUM(cosine = 1 AND max_abs_err = 0 AND max_rel_err = 0 AND "
      "frac_rel_err_1e3 = 0 AND overflow_frac IS NULL AND underflow_frac IS NULL), "
      "COUNT(DISTINCT batch), SUM(kind = 'gradient') FROM diagnostics WHERE run_id = ?1",
      {std::to_string(run.id)});
  EXPECT_GT(std::stoi(q.rows[0][0].value()), 40);
  EXPECT_EQ(q.rows[0][1], q.rows[0][0]);  // every row exact
  EXPECT_EQ(q.rows[0][2], "2");
  EXPECT_GT(std::stoi(q.rows[0][3].value()), 0);
  EXPECT_TRUE(s.query("SELECT * FROM first_divergence").rows.empty());

  // A second diagnosis of the same checkpoint replaces the first.
  r = run_amptune({"diagnose", run.name, "--db", f.db, "--batches", "1"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  q = s.query("SELECT COUNT(DISTINCT batch), (SELECT batches FROM diagnoses) FROM diagnostics");
  EXPECT_EQ(q.rows[0][0], "1");
  EXPECT_EQ(q.rows[0][1], "1");

  r = run_amptune({"diagnose", run.name, "--db", f.db, "--against", "O7"}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("--against"), std::string::npos) << r.err;
  r = run_amptune({"diagnose", run.name, "--db", f.db, "--batches", "0"}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("--batches must be at least 1"), std::string::npos) << r.err;
  r = run_amptune({"diagnose", run.name, "--db", f.db, "--cosine-min", "2"}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("--cosine-min must be in (0, 1]"), std::string::npos) << r.err;
  r = run_amptune({"diagnose", run.name, "--db", f.db, "--epoch", "5"}, f.dir);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_NE(r.err.find("no checkpoint of epoch 5"), std::string::npos) << r.err;
  r = run_amptune({"run", f.yaml, "--db", f.db, "--set", "amp.fp32_modules=[layer9]"}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("amp.fp32_modules: 'layer9' matches no module"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace amptune::testing
