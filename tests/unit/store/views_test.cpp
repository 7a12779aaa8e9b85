// Unit tests of the comparison views of migration 5 (run_results, epoch_matrix) and of
// Store::query, on databases built by hand with the Store API in a per-test temp directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "store/store.h"
#include "support/scratch.h"

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class ViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::scratch_dir();
    store_ = std::make_unique<Store>((dir_ / "results.sqlite").string());
  }
  void TearDown() override {
    EXPECT_EQ(store_->integrity_check(), "ok");
    store_.reset();
    if (!std::getenv("AMPTUNE_KEEP_TEST_FILES")) fs::remove_all(dir_);
  }

  // A run of `sweep` with swept values `axes` and primary metric `metric`.
  int64_t add_run(const std::string& sweep, int cell, const std::string& axes,
                  const std::string& metric = "acc1") {
    const int64_t sweep_id = store_->ensure_sweep(sweep, "", "", "");
    RunSpec spec;
    spec.sweep_name = sweep;
    spec.cell_index = cell;
    spec.label = axes;
    spec.config_json = "{}";
    spec.config_hash = "hash" + sweep + std::to_string(cell) + "xxxxxxxx";
    spec.axes_json = axes;
    spec.columns = {{"primary_metric", json(metric).dump()}};
    return store_->ensure_run(sweep_id, spec).id;
  }

  void add_epoch(int64_t run, int epoch, std::map<std::string, double> metrics, double fps = 100) {
    EpochRecord record;
    record.run_id = run;
    record.epoch = epoch;
    record.global_step = 10 * (epoch + 1);
    record.lr = 0.1;
    record.train_loss = 2.0 - epoch * 0.5;
    record.train_fps_mean = record.train_fps_min = record.train_fps_max = fps;
    record.epoch_seconds = 1.5;
    record.metrics = std::move(metrics);
    store_->record_epoch(record);
  }

  // Rows of a view for one sweep, keyed by run id, each column -> text ("NULL" for NULL).
  std::map<int64_t, std::map<std::string, std::string>> view(const std::string& name,
                                                             const std::string& sweep) {
    auto result = store_->query("SELECT * FROM " + name + " WHERE sweep = ?1", {sweep});
    std::map<int64_t, std::map<std::string, std::string>> rows;
    for (const auto& row : result.rows) {
      std::map<std::string, std::string> columns;
      for (size_t c = 0; c < result.columns.size(); ++c) {
        columns[result.columns[c]] = row[c].value_or("NULL");
      }
      rows[std::stoll(columns.at("run_id"))] = columns;
    }
    return rows;
  }

  fs::path dir_;
  std::unique_ptr<Store> store_;
};

const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST_F(ViewsTest, RunResultsBestAndLastInTheMetricsDirection) {
  const int64_t acc = add_run("grid", 0, R"({"optim.lr": 0.1, "model.name": "resnet18"})");
  add_epoch(acc, 0, {{"acc1", 50}, {"overflow_steps", 2}, {"skipped_steps", 1}}, 100);
  add_epoch(acc, 1, {{"acc1", 70}, {"overflow_steps", 3}, {"skipped_steps", 0}}, 200);
  add_epoch(acc, 2, {{"acc1", 60}, {"overflow_steps", 0}, {"skipped_steps", 0}}, 300);
  // Lower is better (metric_info.mrpe = 0): best is the smallest value.
  const int64_t mrpe = add_run("grid", 1, R"({"optim.lr": 0.01, "model.name": "rootnet"})", "mrpe");
  add_epoch(mrpe, 0, {{"mrpe", 300}});
  add_epoch(mrpe, 1, {{"mrpe", 200}});
  add_epoch(mrpe, 2, {{"mrpe", 250}});
  // Ties: the earliest epoch; a NaN (NULL) last value does not count as the last value.
  const int64_t tie = add_run("grid", 2, R"({"optim.lr": 0.5})");
  add_epoch(tie, 0, {{"acc1", 70}});
  add_epoch(tie, 1, {{"acc1", 70}});
  add_epoch(tie, 2, {{"acc1", kNaN}});
  const int64_t pending = add_run("grid", 3, R"({"optim.lr": 1.0})");
  const int64_t other = add_run("other", 0, R"({"optim.lr": 0.1})");
  add_epoch(other, 0, {{"acc1", 99}});

  auto rows = view("run_results", "grid");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows.count(other), 0u);

  auto& a = rows.at(acc);
  EXPECT_EQ(json::parse(a.at("params")), json::parse(R"({"optim.lr": 0.1, "model.name": "resnet18"})"));
  EXPECT_EQ(a.at("metric"), "acc1");
  EXPECT_EQ(a.at("higher_is_better"), "1");
  EXPECT_EQ(a.at("best_value"), "70");
  EXPECT_EQ(a.at("best_epoch"), "1");
  EXPECT_EQ(a.at("last_value"), "60");
  EXPECT_EQ(a.at("last_epoch"), "2");
  EXPECT_EQ(a.at("epochs_recorded"), "3");
  EXPECT_EQ(a.at("mean_fps"), "200");
  EXPECT_EQ(a.at("overflow_steps"), "5");
  EXPECT_EQ(a.at("skipped_steps"), "1");
  EXPECT_EQ(a.at("status"), "pending");

  auto& m = rows.at(mrpe);
  EXPECT_EQ(m.at("metric"), "mrpe");
  EXPECT_EQ(m.at("higher_is_better"), "0");
  EXPECT_EQ(m.at("best_value"), "200");
  EXPECT_EQ(m.at("best_epoch"), "1");
  EXPECT_EQ(m.at("last_value"), "250");
  EXPECT_EQ(m.at("overflow_steps"), "NULL");  // never recorded: NULL, not 0

  auto& t = rows.at(tie);
  EXPECT_EQ(t.at("best_value"), "70");
  EXPECT_EQ(t.at("best_epoch"), "0");
  EXPECT_EQ(t.at("last_value"), "70");
  EXPECT_EQ(t.at("last_epoch"), "1");
  EXPECT_EQ(t.at("epochs_recorded"), "3");

  auto& p = rows.at(pending);
  EXPECT_EQ(p.at("best_value"), "NULL");
  EXPECT_EQ(p.at("best_epoch"), "NULL");
  EXPECT_EQ(p.at("last_value"), "NULL");
  EXPECT_EQ(p.at("epochs_recorded"), "0");
  EXPECT_EQ(p.at("mean_fps"), "NULL");
  EXPECT_EQ(json::parse(p.at("params")), json::parse(R"({"optim.lr": 1.0})"));

  // Same answer as the existing best_epoch view.
  for (int64_t id : {acc, mrpe, tie}) {
    auto best = store_->query("SELECT best_value, best_epoch FROM best_epoch WHERE run_id = ?1",
                              {std::to_string(id)});
    ASSERT_EQ(best.rows.size(), 1u);
    EXPECT_EQ(best.rows[0][0].value_or(""), rows.at(id).at("best_value"));
    EXPECT_EQ(best.rows[0][1].value_or(""), rows.at(id).at("best_epoch"));
  }
}

TEST_F(ViewsTest, RunResultsOfAnEpochsColumnMetric) {
  // train_loss is a column of epochs, not a metrics row; lower is better.
  const int64_t run = add_run("loss", 0, "{}", "train_loss");
  add_epoch(run, 0, {});  // train_loss 2.0
  add_epoch(run, 1, {});  // 1.5
  add_epoch(run, 2, {});  // 1.0
  auto rows = view("run_results", "loss");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows.at(run).at("best_value"), "1");
  EXPECT_EQ(rows.at(run).at("best_epoch"), "2");
  EXPECT_EQ(rows.at(run).at("params"), "{}");
}

// lineage and fork_vs_parent read a primary metric kept on the epoch row (migration 13).
TEST_F(ViewsTest, LineageAndForkVsParentOfAnEpochsColumnMetric) {
  const int64_t parent = add_run("loss", 0, "{}", "train_loss");
  add_epoch(parent, 0, {});  // train_loss 2.0
  add_epoch(parent, 1, {});  // 1.5
  RunSpec fork;
  fork.sweep_name = "loss";
  fork.cell_index = 0;
  fork.config_json = "{}";
  fork.config_hash = "forkhash-of-loss-0";
  fork.columns = {{"primary_metric", json("train_loss").dump()}};
  fork.fork = ForkOrigin{parent, 0, "{}", "", false};
  const int64_t id = store_->ensure_run(store_->ensure_sweep("loss", "", "", ""), fork).id;
  add_epoch(id, 1, {});  // the fork's own epoch 1: 1.5
  add_epoch(id, 2, {});  // 1.0
  const auto lineage = store_->query(
      "SELECT epoch, value FROM lineage WHERE run_id = ?1 ORDER BY epoch", {std::to_string(id)});
  ASSERT_EQ(lineage.rows.size(), 3u);  // the parent's epoch 0, then its own 1 and 2
  EXPECT_EQ(std::stod(lineage.rows[0][1].value_or("nan")), 2.0);
  EXPECT_EQ(std::stod(lineage.rows[2][1].value_or("nan")), 1.0);
  const auto fvp = store_->query(
      "SELECT parent_at_fork, parent_last, fork_last FROM fork_vs_parent WHERE fork_id = ?1",
      {std::to_string(id)});
  ASSERT_EQ(fvp.rows.size(), 1u);
  EXPECT_EQ(std::stod(fvp.rows[0][0].value_or("nan")), 2.0);
  EXPECT_EQ(std::stod(fvp.rows[0][1].value_or("nan")), 1.5);
  EXPECT_EQ(std::stod(fvp.rows[0][2].value_or("nan")), 1.0);
}

TEST_F(ViewsTest, EpochMatrixHoldsThePrimaryMetricPerEpoch) {
  const int64_t acc = add_run("grid", 0, R"({"seed": 1})");
  add_epoch(acc, 0, {{"acc1", 50.25}, {"acc5", 90}});
  add_epoch(acc, 1, {{"acc1", kNaN}});
  add_epoch(acc, 2, {{"acc1", 61}});
  const int64_t mrpe = add_run("grid", 1, R"({"seed": 2})", "mrpe");
  add_epoch(mrpe, 0, {{"mrpe", 300.5}, {"acc1", 1}});
  const int64_t pending = add_run("grid", 2, R"({"seed": 3})");
  add_epoch(add_run("other", 0, "{}"), 0, {{"acc1", 5}});

  auto result = store_->query("SELECT run_id, metric, epochs_recorded, by_epoch FROM epoch_matrix "
                              "WHERE sweep = ?1",
                              {"grid"});
  ASSERT_EQ(result.rows.size(), 3u);
  // Ordered by cell.
  EXPECT_EQ(result.rows[0][0].value_or(""), std::to_string(acc));
  EXPECT_EQ(result.rows[1][0].value_or(""), std::to_string(mrpe));
  EXPECT_EQ(result.rows[2][0].value_or(""), std::to_string(pending));

  EXPECT_EQ(result.rows[0][1].value_or(""), "acc1");
  EXPECT_EQ(result.rows[0][2].value_or(""), "3");
  EXPECT_EQ(json::parse(result.rows[0][3].value_or("")), json::parse(R"({"0": 50.25, "2": 61})"));
  EXPECT_EQ(result.rows[1][1].value_or(""), "mrpe");
  EXPECT_EQ(json::parse(result.rows[1][3].value_or("")), json::parse(R"({"0": 300.5})"));
  EXPECT_EQ(result.rows[2][2].value_or(""), "0");
  EXPECT_EQ(result.rows[2][3].value_or(""), "{}");

  auto cell = store_->query(
      "SELECT json_extract(by_epoch, '$.\"2\"') FROM epoch_matrix WHERE run_id = ?1",
      {std::to_string(acc)});
  ASSERT_EQ(cell.rows.size(), 1u);
  EXPECT_EQ(cell.rows[0][0].value_or(""), "61");
}

TEST_F(ViewsTest, QueryIsReadOnlyAndKeepsDoublesExact) {
  const int64_t run = add_run("grid", 0, "{}");
  const double value = 0.1 + 0.2;  // 0.30000000000000004: 15 digits would lose it
  add_epoch(run, 0, {{"acc1", value}, {"acc5", kNaN}});
  auto result = store_->query(
      "SELECT name, value FROM metrics WHERE run_id = ?1 ORDER BY name", {std::to_string(run)});
  ASSERT_EQ(result.columns, (std::vector<std::string>{"name", "value"}));
  ASSERT_EQ(result.rows.size(), 2u);
  EXPECT_EQ(std::strtod(result.rows[0][1]->c_str(), nullptr), value);
  EXPECT_FALSE(result.rows[1][1].has_value());  // NaN was stored as NULL

  EXPECT_THROW(store_->query("DELETE FROM metrics"), StoreError);
  EXPECT_THROW(store_->query("SELECT 1; DELETE FROM metrics"), StoreError);
  EXPECT_THROW(store_->query("SELECT * FROM no_such_table"), StoreError);
  try {
    store_->query("UPDATE runs SET label = 'x'");
    FAIL() << "a writing statement was accepted";
  } catch (const StoreError& error) {
    EXPECT_NE(std::string(error.what()).find("read-only"), std::string::npos) << error.what();
  }
  EXPECT_EQ(store_->query("SELECT COUNT(*) FROM metrics").rows[0][0].value_or(""), "2");
}

}  // namespace
}  // namespace amptune::store
