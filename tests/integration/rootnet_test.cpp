// RootNet end to end through the binary: synthetic data in the official formats, a tiny sweep
// over the int32 cast points, metrics in the store, evaluation-only cells, and exact resume of a
// RootNet run.
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

std::string make_data(const std::string& dir) {
  const std::vector<std::vector<std::string>> sets = {
      {"muco", "MuCo", "24", "1"}, {"mpii", "MPII", "12", "2"}, {"mupots", "MuPoTS", "8", "3"}};
  for (const auto& s : sets) {
    auto r = run_amptune({"data", "synth-rootnet", "--format", s[0], "--out", dir + "/" + s[1],
                          "--images", s[2], "--seed", s[3], "--width", "128", "--height", "96"},
                         dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(s[0] + ": " + s[2] + " images"), std::string::npos) << r.out;
  }
  return "name: rn\n"
         "description: rootnet integration sweep\n"
         "base:\n"
         "  model: {name: rootnet, backbone_depth: 18, width: 0.0625}\n"
         "  data: {format: rootnet, batch_size: 8, workers: 1}\n"
         "  rootnet: {train_sets: [muco, mpii], test_set: mupots, input_size: 64,\n"
         "            muco_root: " + dir + "/MuCo, mpii_root: " + dir + "/MPII,\n"
         "            mupots_root: " + dir + "/MuPoTS}\n"
         "  optim: {name: adam, lr: 0.001, weight_decay: 0}\n"
         "  schedule: {epochs: 2, skip_steps: 1, training_step_per_epoch: 3}\n"
         "  threads: 1\n";
}

// The data and sweep `rn` (make_data, then `grid`) in a fresh scratch directory, with its
// database path (results/ exists).
struct RnSweep {
  std::string dir, yaml, db;
};
RnSweep rn_sweep(const std::string& grid) {
  RnSweep s;
  s.dir = scratch_dir();
  s.yaml = s.dir + "/sweep.yaml";
  write_file(s.yaml, make_data(s.dir) + grid);
  s.db = s.dir + "/results/amptune.sqlite";
  fs::create_directories(s.dir + "/results");
  return s;
}

TEST(RootNetCli, SynthSweepRecordsMetricsPerEpoch) {
  const auto [dir, yaml, db] = rn_sweep("grid:\n  casts.int32: [[], [k_value, cam_param]]\n");
  auto r = run_amptune({"run", yaml, "--db", db}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store s(db);
  auto runs = s.runs(std::string("rn"));
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& run : runs) {
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.message;
    auto ep = s.epochs(run.id);
    ASSERT_EQ(ep.size(), 2u);
    for (const auto& e : ep) {
      for (const char* m : {"mrpe", "mrpe_x", "mrpe_y", "mrpe_z", "ap_root_25", "mrpe_constant"}) {
        EXPECT_TRUE(e.metrics.count(m)) << m << " missing in " << run.name;
      }
      EXPECT_GT(e.metrics.at("mrpe"), 0.0);
      EXPECT_TRUE(e.checkpoint.has_value());
    }
  }
  // The cast changes the numbers.
  EXPECT_NE(s.epochs(runs[0].id).back().train_loss, s.epochs(runs[1].id).back().train_loss);

  // diagnose names RootNet's modules and reports each cast point with its truncation error.
  r = run_amptune({"diagnose", runs[1].name, "--db", db, "--batches", "1"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = std::to_string(runs[1].id);
  auto q = s.query("SELECT module, dtype, max_abs_err FROM diagnostics WHERE run_id = ?1 AND "
                   "kind = 'cast' ORDER BY seq",
                   {id});
  ASSERT_EQ(q.rows.size(), 2u);
  EXPECT_EQ(q.rows[0][0], "k_value");
  EXPECT_EQ(q.rows[1][0], "cam_param");
  for (const auto& row : q.rows) {
    EXPECT_EQ(row[1], "int32");
    const double error = std::stod(row[2].value());
    EXPECT_GT(error, 0);  // k values are not whole numbers ...
    EXPECT_LT(error, 1);  // ... and truncation moves them by less than 1
  }
  for (const char* module : {"backbone.layer1.0.conv1", "backbone", "deconv.0", "deconv.1",
                             "deconv", "xy_layer", "depth_layer", ""}) {
    q = s.query("SELECT cosine FROM diagnostics WHERE run_id = ?1 AND kind = 'forward' AND "
                "module = ?2",
                {id, module});
    ASSERT_EQ(q.rows.size(), 1u) << module;
    EXPECT_EQ(q.rows[0][0], "1") << module;  // O0 against O0
  }
}

// An evaluation-only sweep (schedule.epochs: 0) over the opt levels: each cell evaluates its
// seeded initial weights under its own precision, records MRPE and AP_root (also as the run's
// initial_metrics), trains nothing and saves no checkpoint.
TEST(RootNetCli, EvaluationOnlyCellsRecordMrpeAndApRootAndSaveNoCheckpoint) {
  const auto [dir, yaml, db] = rn_sweep("grid:\n  amp.opt_level: [O0, O2]\n");
  auto r =
      run_amptune({"run", yaml, "--db", db, "--no-progress", "--set", "schedule.epochs=0"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("evaluation only"), std::string::npos) << r.err;
  store::Store s(db);
  const auto runs = s.runs(std::string("rn"));
  ASSERT_EQ(runs.size(), 2u);
  std::map<std::string, std::map<std::string, double>> by_level;
  for (const auto& run : runs) {
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.message;
    const auto epochs = s.epochs(run.id);
    ASSERT_EQ(epochs.size(), 1u) << run.name;
    const auto& e = epochs[0];
    EXPECT_EQ(e.epoch, 0);
    EXPECT_EQ(e.global_step, 0);  // nothing trained
    EXPECT_TRUE(std::isnan(e.train_loss));
    EXPECT_FALSE(e.checkpoint.has_value()) << run.name;
    for (const char* m : {"mrpe", "ap_root_25"}) {
      ASSERT_EQ(e.metrics.count(m), 1u) << m << " missing in " << run.name;
      EXPECT_TRUE(std::isfinite(e.metrics.at(m))) << m;
    }
    EXPECT_GT(e.metrics.at("mrpe"), 0.0);
    EXPECT_EQ(s.initial_metrics(run.id), e.metrics);
    by_level[run.columns.at("opt_level")] = e.metrics;
  }
  ASSERT_EQ(by_level.size(), 2u);
  const auto& o0 = by_level.at("\"O0\"");
  const auto& o2 = by_level.at("\"O2\"");
  // The same seeded weights evaluated in fp16 (O2) land near, but not on, the fp32 values.
  EXPECT_NE(o2.at("mrpe"), o0.at("mrpe"));
  EXPECT_NEAR(o2.at("mrpe"), o0.at("mrpe"), 0.05 * o0.at("mrpe"));
  // No checkpoint path on any epoch row, and no file under the checkpoint folder but the mark of
  // the database it belongs to (docs/SECURITY.md "Checkpoint folders").
  EXPECT_EQ(s.query("SELECT COUNT(*) FROM epochs WHERE checkpoint_path IS NOT NULL").rows[0][0],
            "0");
  const fs::path checkpoints = dir + "/results/checkpoints";
  if (fs::exists(checkpoints)) {
    for (const auto& entry : fs::recursive_directory_iterator(checkpoints)) {
      EXPECT_FALSE(entry.is_regular_file() && entry.path().filename() != ".amptune-database")
          << entry.path();
    }
  }
  // The report ranks by ap_root_25 (MuPoTS) and shows mrpe beside it.
  r = run_amptune({"report", "--db", db, "--sweep", "rn", "--out", dir + "/report"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      read_file(dir + "/report/index.html").find("<th>ap_<wbr>root_<wbr>25</th><th>mrpe</th>"),
      std::string::npos);
}

// With Adam, the original's optimizer: its moments must come back as two separate tensors
// (an aliasing bug once made resumed RootNet runs diverge to NaN).
TEST(RootNetCli, ResumeEqualsStraight) {
  const std::string dir = scratch_dir();
  std::string text = make_data(dir);
  write_file(dir + "/a.yaml", text);
  write_file(dir + "/b.yaml", text);
  fs::create_directories(dir + "/ra");
  fs::create_directories(dir + "/rb");
  ASSERT_EQ(run_amptune({"run", dir + "/a.yaml", "--db", dir + "/ra/db.sqlite"}, dir).exit_code, 0);
  auto first = run_amptune(
      {"run", dir + "/b.yaml", "--db", dir + "/rb/db.sqlite", "--stop-after-epoch", "0"}, dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  store::Store sb(dir + "/rb/db.sqlite");
  auto run = sb.runs().at(0);
  auto second = run_amptune({"resume", run.name, "--db", dir + "/rb/db.sqlite"}, dir);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  store::Store sa(dir + "/ra/db.sqlite");
  auto a = sa.epochs(sa.runs().at(0).id);
  auto b = sb.epochs(run.id);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i].train_loss, b[i].train_loss) << i;
    EXPECT_EQ(a[i].metrics.at("mrpe"), b[i].metrics.at("mrpe")) << i;
  }
  ASSERT_TRUE(a.back().checkpoint && b.back().checkpoint);
  EXPECT_EQ(a.back().checkpoint->sha256, b.back().checkpoint->sha256);
}

// amptune tune from the seed's port (O2, static loss scale 128, int32 casts of k_value and
// cam_param) against O0 on synthetic RootNet data: the static scale lets RootNet's depth
// gradients overflow (the start diverges), the search ends within the MRPE tolerance, and every
// move on its path is explained by a stored diagnosis row or by the move order.
TEST(RootNetCli, TuneFromTheSeedPortEndsWithinTheMrpeTolerance) {
  RnSweep s;
  s.dir = scratch_dir();
  s.yaml = s.dir + "/sweep.yaml";
  s.db = s.dir + "/results/amptune.sqlite";
  fs::create_directories(s.dir + "/results");
  std::string text = make_data(s.dir);
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("batch_size: 8", "batch_size: 4");  // 13 steps per epoch
  replace("epochs: 2, skip_steps: 1, training_step_per_epoch: 3", "epochs: 3, skip_steps: 1");
  write_file(s.yaml, text +
                         "  amp: {max_loss_scale: 1024}\n"
                         "tune:\n"
                         "  metric: mrpe\n"
                         "  tolerance: {rel: 0.1}\n"
                         "  reference: {amp.opt_level: O0}\n"
                         "  start: {amp.opt_level: O2, amp.loss_scale: 128, "
                         "casts.int32: [k_value, cam_param]}\n"
                         "  moves: [loss_scale, keep_batchnorm_fp32, fp32_modules, casts, "
                         "opt_level, lr_dec_epoch]\n");
  const Result r = run_amptune({"tune", s.yaml, "--db", s.db, "--no-progress"}, s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store store(s.db);
  const auto searches = store.tune_searches("rn");
  ASSERT_EQ(searches.size(), 1u);
  const records::TuneSearchRow& search = searches[0];
  ASSERT_EQ(records::to_string(search.status), "answered") << search.note << "\n" << r.out;
  EXPECT_LE(search.answer_value, search.reference_value * 1.1);
  const auto answer = nlohmann::json::parse(store.find_run(search.answer_run_id)->config_json);
  EXPECT_EQ(answer.at("amp").at("loss_scale"), "dynamic") << r.out;
  EXPECT_EQ(store.find_run(search.start_run_id)->status, records::RunStatus::kDiverged);
  std::map<int, records::TuneRoundRow> rounds;
  for (const auto& round : store.tune_rounds(search.id)) rounds[round.round] = round;
  const auto candidates = store.tune_candidates(search.id);
  ASSERT_FALSE(candidates.empty());
  for (const auto& c : candidates) {
    if (!c.advice_rule) {
      EXPECT_EQ(c.reason.rfind("move order: ", 0), 0u) << c.reason;
      continue;
    }
    const records::TuneRoundRow& round = rounds.at(c.round);
    ASSERT_TRUE(round.diagnosis_epoch);
    const auto advice = store.diagnosis_advice(round.start_run_id, *round.diagnosis_epoch);
    ASSERT_TRUE(advice) << "the diagnosis of round " << c.round << " is stored";
    bool found = false;
    for (const auto& a : *advice) {
      found = found || (a.rule == *c.advice_rule && a.module == c.advice_module);
    }
    EXPECT_TRUE(found) << records::to_string(*c.advice_rule) << " " << c.advice_module;
  }
  EXPECT_NE(r.out.find("paste into base:\n"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace amptune::testing
