// Store methods behind `amptune eval` and checkpoint retention: record_metrics (evaluated
// metrics of an existing epoch) and fork_epochs (epochs other runs fork from).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

#include "core/error.h"
#include "store/store.h"
#include "support/scratch.h"

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

std::string fresh_db() { return testing::scratch_dir() + "/amptune.sqlite"; }

RunRow make_run(Store& store, int cell) {
  const int64_t sweep = store.ensure_sweep("s", "", "", "");
  RunSpec spec;
  spec.sweep_name = "s";
  spec.cell_index = cell;
  spec.label = "cell " + std::to_string(cell);
  spec.config_json = "{\"cell\":" + std::to_string(cell) + "}";
  spec.config_hash = "abcdef0" + std::to_string(cell) + "0123456789";
  return store.ensure_run(sweep, spec);
}

void record(Store& store, int64_t run, int epoch, std::map<std::string, double> metrics) {
  EpochRecord r;
  r.run_id = run;
  r.epoch = epoch;
  r.global_step = 10 * (epoch + 1);
  r.lr = 0.1;
  r.train_loss = 1.5;
  r.metrics = std::move(metrics);
  r.checkpoint = CheckpointFile{"/tmp/x/epoch_" + std::to_string(epoch) + ".pt", 100, "ab"};
  store.record_epoch(r);
}

void exec(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(raw);
  ASSERT_EQ(rc, SQLITE_OK) << message;
}

TEST(StoreCheckpointMetrics, RecordMetricsReplacesOnlyTheGivenNames) {
  const std::string db = fresh_db();
  Store store(db);
  const RunRow run = make_run(store, 0);
  record(store, run.id, 0, {{"loss_scale", 128.0}, {"acc1", 10.0}});
  record(store, run.id, 1, {{"loss_scale", 64.0}});
  const std::string recorded_at = store.epochs(run.id)[1].recorded_at;

  store.record_metrics(run.id, 1, {{"acc1", 42.5}, {"val_loss", 0.75}});
  store.record_metrics(run.id, 0, {{"acc1", 11.0}});
  auto rows = store.epochs(run.id);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].metrics.at("acc1"), 11.0);          // replaced
  EXPECT_EQ(rows[0].metrics.at("loss_scale"), 128.0);   // untouched
  EXPECT_EQ(rows[1].metrics.at("acc1"), 42.5);          // added
  EXPECT_EQ(rows[1].metrics.at("val_loss"), 0.75);
  EXPECT_EQ(rows[1].metrics.at("loss_scale"), 64.0);
  EXPECT_EQ(rows[1].recorded_at, recorded_at);          // the epoch row itself is unchanged
  EXPECT_EQ(rows[1].global_step, 20);
  ASSERT_TRUE(rows[1].checkpoint.has_value());
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST(StoreCheckpointMetrics, RecordMetricsNeedsTheEpochRowAndValidNames) {
  const std::string db = fresh_db();
  Store store(db);
  const RunRow run = make_run(store, 0);
  record(store, run.id, 0, {{"acc1", 1.0}});
  try {
    store.record_metrics(run.id, 7, {{"acc1", 5.0}});
    FAIL() << "no StoreError for a missing epoch";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("no recorded epoch 7"), std::string::npos) << e.what();
  }
  try {
    store.record_metrics(run.id, 0, {{"acc1", 5.0}, {"train_loss", 1.0}});
    FAIL() << "no StoreError for a metric named like an epochs column";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("train_loss"), std::string::npos) << e.what();
  }
  // All or nothing: acc1 of the failed call was rolled back.
  EXPECT_EQ(store.epochs(run.id)[0].metrics.at("acc1"), 1.0);
  EXPECT_THROW(store.record_metrics(run.id + 100, 0, {{"acc1", 5.0}}), StoreError);
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST(StoreCheckpointMetrics, ForkEpochsListsTheEpochsForksStartFrom) {
  const std::string db = fresh_db();
  RunRow parent, a, b, c;
  {
    Store store(db);
    parent = make_run(store, 0);
    a = make_run(store, 1);
    b = make_run(store, 2);
    c = make_run(store, 3);
    EXPECT_TRUE(store.fork_epochs(parent.id).empty());
  }
  const std::string p = std::to_string(parent.id);
  exec(db, "UPDATE runs SET parent_run_id = " + p + ", parent_epoch = 5 WHERE id = " +
               std::to_string(a.id));
  exec(db, "UPDATE runs SET parent_run_id = " + p + ", parent_epoch = 2 WHERE id = " +
               std::to_string(b.id));
  exec(db, "UPDATE runs SET parent_run_id = " + p + ", parent_epoch = 5 WHERE id = " +
               std::to_string(c.id));
  Store store(db);
  EXPECT_EQ(store.fork_epochs(parent.id), (std::vector<int>{2, 5}));
  EXPECT_TRUE(store.fork_epochs(a.id).empty());
}

}  // namespace
}  // namespace amptune::store
