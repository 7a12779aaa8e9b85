// A metric's direction has one owner: the model that records it (train::recorded_metrics: the
// registry's table in train/tasks.cpp, or a TorchScript module's higher_is_better), written by
// Store::ensure_run to metric_info (records::RunSpec::metric_directions), where compare, the
// report and the views read it; prune and tune read the declaration itself. Here a custom task's
// lower-is-better metric (tests/fixtures/torchscript/regressor_custom.pt: mse) is ranked by each
// of the five, which must agree; and the directions the store's schema seeds into metric_info
// (schemas/store.sql, for databases older than RunSpec::metric_directions) must be the registered
// models' own.
#include <algorithm>
#include <fstream>
#include <set>

#include "app/views/compare.h"
#include "app/prune/prune_rules.h"
#include "app/prune/prune_sweep.h"
#include "app/views/report.h"
#include "app/views/report_plots.h"
#include "app/tune/tune.h"
#include "core/settings.h"
#include "support/tiny_config.h"
#include "train/model_info.h"
#include "train/plan.h"
#include "train/task.h"
#include "unit/app/app_fixture.h"

namespace amptune::app {
namespace {

const std::string kFixtures = std::string(AMPTUNE_FIXTURE_DIR) + "/torchscript/";

// The custom task's sweep, with a tune: block (an fp32 reference, an O2 start).
std::string sweep_yaml() {
  const std::string model = kFixtures + "regressor_custom.pt", data = kFixtures + "tensors";
  return "name: regression\nbase:\n  model: {name: torchscript, path: " + model +
         ", task: custom}\n  data: {format: tensors, root: " + data +
         ", train_split: train, val_split: val, batch_size: 32, workers: 1}\n"
         "  optim: {name: sgd, lr: 0.02, momentum: 0.9}\n  schedule: {epochs: 3}\n  threads: 1\n"
         "tune:\n  tolerance: {abs: 0.1}\n  reference: {amp.opt_level: O0}\n"
         "  start: {amp.opt_level: O2, amp.backend: emulate}\n";
}

// Sweep "regression" of the custom task, three cells whose mse ranks them A < B < C at every
// epoch (lower is better: A is best); in the other direction the order is reversed at every
// epoch, so a reader that ranks the wrong way puts C first.
class MetricDirectionTest : public AppTest {
 protected:
  void SetUp() override {
    const std::string yaml = dir_.write("sweep.yaml", sweep_yaml());
    plan_ = plan_tune(yaml, {}, /*data=*/false);  // tune's reader: the module's declaration
    settings_ = Settings::from(plan_.start);
    const std::vector<std::vector<double>> mse = {
        {0.5, 0.3, 0.2}, {0.7, 0.6, 0.5}, {0.9, 0.8, 0.85}};
    for (int cell = 0; cell < 3; ++cell) {
      records::RunSpec spec;
      spec.sweep_name = "regression";
      spec.cell_index = cell;
      spec.label = "cell " + std::to_string(cell);
      spec.config_json = plan_.start.canonical_json();
      spec.config_hash = std::string(63, '0') + std::to_string(cell);
      spec.axes_json = "{}";
      spec.columns = train::run_columns(settings_);                      // primary_metric mse
      spec.metric_directions = train::run_metric_directions(settings_);  // the module's
      ids_.push_back(store_.ensure_run(store_.ensure_sweep("regression", "", "", ""), spec).id);
      add_epochs(ids_.back(), "mse", mse[cell]);
      finish(ids_.back());
    }
  }

  // The run ids of a comparison table's rows, best first.
  static std::vector<int64_t> order(const CompareTable& table) {
    std::vector<int64_t> out;
    for (const auto& row : table.rows)
      out.insert(out.end(), row.run_ids.begin(), row.run_ids.end());
    return out;
  }

  TunePlan plan_;
  Settings settings_;
  std::vector<int64_t> ids_;  // A, B, C
};

TEST_F(MetricDirectionTest, ACustomLowerIsBetterMetricIsRankedTheSameByEveryReader) {
  const std::vector<int64_t> best_first = ids_;
  ASSERT_EQ(train::model_info(settings_).primary_metric, "mse");
  ASSERT_EQ(train::run_metric_directions(settings_).at("mse"), false);  // the module's own

  // compare and the report: metric_info, as ensure_run wrote it from the run's spec.
  EXPECT_EQ(store_.higher_is_better("mse"), false);
  CompareOptions options;
  options.sweep = "regression";
  const CompareTable table = build_compare(store_, options);
  EXPECT_FALSE(table.higher_is_better);
  EXPECT_EQ(order(table), best_first);
  EXPECT_EQ(table.rows[0].value, 0.2);  // A's lowest
  const ReportModel report = build_report(store_, "regression");
  EXPECT_FALSE(report.table.higher_is_better);
  EXPECT_EQ(order(report.table), best_first);
  const PlotDef& metric_plot = *std::find_if(  // (the heatmaps come first)
      report_plots().begin(), report_plots().end(),
      [](const PlotDef& def) { return def.data == PlotData::kMetric; });
  ASSERT_EQ(metric_plot.data, PlotData::kMetric);
  EXPECT_EQ(plot_text(metric_plot.y_label, report, metric_plot), "mse (lower is better)");

  // The views: each run's best epoch and the leaderboard.
  const auto board = store_.query(
      "SELECT run_id, rank, best_value FROM sweep_leaderboard WHERE sweep = 'regression' "
      "ORDER BY rank");
  ASSERT_EQ(board.rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(board.rows[i][0], std::to_string(best_first[i])) << i;
    EXPECT_EQ(board.rows[i][1], std::to_string(i + 1)) << i;
  }
  EXPECT_EQ(std::stod(board.rows[0][2].value()), 0.2);
  const auto results = store_.query(
      "SELECT best_value, best_epoch FROM run_results WHERE run_id = ?", {std::to_string(ids_[2])});
  ASSERT_EQ(results.rows.size(), 1u);
  EXPECT_EQ(std::stod(results.rows[0][0].value()), 0.8);  // C's lowest, at its epoch 1
  EXPECT_EQ(results.rows[0][1], "1");

  // prune: the block resolved against the cells' model; ASHA at its first rung (epoch 0, eta 3:
  // one of three continues) keeps A and stops C.
  PruneBlock block;
  block.rule = PruneRule::kAsha;
  PrunePlanner planner(block);
  planner.add(settings_);
  const PruneSettings prune = planner.settings();
  EXPECT_EQ(prune.metric, "mse");
  EXPECT_FALSE(prune.higher_is_better);
  const PruneTable cells = prune_table(store_, "regression", prune);
  EXPECT_FALSE(decide_prune(cells, prune, ids_[0], 0).stop);
  EXPECT_TRUE(decide_prune(cells, prune, ids_[2], 0).stop);

  // tune: the plan's metric and tolerance band; with B's 0.5 as the reference, A's 0.2 is
  // within it (better) and C's 0.85 outside, A's shortfall the smallest.
  EXPECT_EQ(plan_.metric, "mse");
  EXPECT_FALSE(plan_.tolerance.higher_is_better);
  EXPECT_TRUE(plan_.tolerance.within(0.2, 0.5));
  EXPECT_FALSE(plan_.tolerance.within(0.85, 0.5));
  EXPECT_LT(plan_.tolerance.shortfall(0.2, 0.5), plan_.tolerance.shortfall(0.85, 0.5));
}

// The directions schemas/store.sql seeds into metric_info (migrations 2, 3 and 18; databases
// written before runs carried their directions read them) are those train declares: every
// metric of every registered model with a fixed list (a TorchScript model's come from its file),
// and train_loss, which every run records. A seeded name is one of those, or one amptune records
// for every run (records::amptune_metric_names, the epochs columns), never a stale name.
TEST(MetricDirectionSync, TheSchemasSeededDirectionsAreTheRegisteredModels) {
  testing::ScratchDir dir;
  const store::Store store((dir.path() / "fresh.sqlite").string());
  std::map<std::string, bool> seeded;
  for (const auto& row : store.query("SELECT name, higher_is_better FROM metric_info").rows) {
    seeded[row[0].value()] = row[1].value() == "1";
  }
  ASSERT_FALSE(seeded.empty());
  std::set<std::string> declared;
  int models = 0;
  for (const train::ModelEntry& entry : train::registered_models()) {
    if (entry.metrics_for) continue;  // its metrics are its file's
    ++models;
    std::vector<train::MetricDef> metrics = entry.metrics;
    // What recorded_metrics adds to every model's (train_loss), as a resnet18 run records it.
    for (const train::MetricDef& def :
         train::recorded_metrics(Settings::from(testing::tiny_config()))) {
      if (def.name == "train_loss") metrics.push_back(def);
    }
    for (const train::MetricDef& def : metrics) {
      declared.insert(def.name);
      ASSERT_TRUE(seeded.count(def.name))
          << entry.name << " records " << def.name << ", which metric_info is not seeded with";
      EXPECT_EQ(seeded.at(def.name), def.higher_is_better) << entry.name << " " << def.name;
    }
  }
  EXPECT_GE(models, 6);  // resnet18 ... resnet152, rootnet
  const std::vector<std::string>& own = records::amptune_metric_names();
  for (const auto& [name, higher] : seeded) {
    const bool amptunes =
        std::count(own.begin(), own.end(), name) > 0 || records::is_epoch_column_metric(name);
    EXPECT_TRUE(declared.count(name) || amptunes) << name << " is seeded but no model records it";
  }
}

}  // namespace
}  // namespace amptune::app
