// The FP8 rows of a diagnosis (table fp8_diagnostics and view fp8_slots, migration 22): written
// with the diagnosis and replaced with it, read back as written (NaN as NULL), the newest
// diagnosis that has any, a database of schema 21 migrated with its diagnoses kept, and merge
// bringing them with their run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/embedded.h"
#include "store/migrations.h"
#include "store/store.h"
#include "raw_exec.h"
#include "support/scratch.h"
#include "train/checkpoint_layout.h"

namespace amptune::store {
namespace {

using records::Diagnosis;
using records::Fp8DiagnosticRow;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

records::RunSpec spec(int index) {
  records::RunSpec s;
  s.sweep_name = "fp8";
  s.cell_index = index;
  s.label = "cell " + std::to_string(index);
  s.config_json = R"({"seed":)" + std::to_string(index) + "}";
  s.config_hash = std::string(63, 'a') + std::to_string(index);
  s.axes_json = "{}";
  return s;
}

Fp8DiagnosticRow fp8_row(int batch, int seq, const std::string& module, const std::string& role,
                         double saturated) {
  Fp8DiagnosticRow r;
  r.batch = batch;
  r.seq = seq;
  r.module = module;
  r.role = role;
  r.format = role == "grad_output" ? "e5m2" : "e4m3";
  r.numel = 64;
  r.saturated_frac = saturated;
  r.flushed_frac = 0.25;
  r.sqnr_db = 21.5;
  r.amax = 900;
  r.scale = 448.0f / 100;
  r.history_min = 10;
  r.history_max = 100;
  r.history_len = 3;
  return r;
}

Diagnosis diagnosis(int64_t run, int epoch, std::vector<Fp8DiagnosticRow> rows) {
  Diagnosis d;
  d.run_id = run;
  d.epoch = epoch;
  d.batches = 2;
  d.fp8_rows = std::move(rows);
  d.advice = {{records::AdviceRule::kFp8CurrentScaling, "fc", "switch fc to current scaling"}};
  return d;
}

TEST(StoreFp8Diagnostics, RowsRoundTripReplaceAndGroupPerSlot) {
  const std::string dir = testing::scratch_dir();
  Store store(dir + "/r.sqlite");
  const int64_t sweep = store.ensure_sweep("fp8", "", "", "");
  const int64_t run = store.ensure_run(sweep, spec(0)).id;
  EXPECT_FALSE(store.fp8_diagnosis(run));
  store.record_diagnosis(diagnosis(run, -1, {}));  // no FP8 rows: none to show
  EXPECT_FALSE(store.fp8_diagnosis(run));

  Fp8DiagnosticRow empty_history = fp8_row(1, 1, "fc", "weight", 0.5);
  empty_history.history_len = 0;
  empty_history.history_min = empty_history.history_max = kNaN;
  empty_history.sqnr_db = kNaN;  // exact
  store.record_diagnosis(
      diagnosis(run, 0, {fp8_row(0, 0, "fc", "input", 0.01), fp8_row(0, 1, "fc", "weight", 0),
                         fp8_row(1, 0, "fc", "input", 0.03), empty_history}));
  const auto got = store.fp8_diagnosis(run);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->epoch, 0);
  ASSERT_EQ(got->rows.size(), 4u);
  const Fp8DiagnosticRow& first = got->rows[0];
  EXPECT_EQ(first.module, "fc");
  EXPECT_EQ(first.role, "input");
  EXPECT_EQ(first.format, "e4m3");
  EXPECT_EQ(first.numel, 64);
  EXPECT_DOUBLE_EQ(first.saturated_frac, 0.01);
  EXPECT_DOUBLE_EQ(first.flushed_frac, 0.25);
  EXPECT_DOUBLE_EQ(first.sqnr_db, 21.5);
  EXPECT_DOUBLE_EQ(first.scale, 448.0f / 100);
  EXPECT_DOUBLE_EQ(first.history_max, 100);
  EXPECT_EQ(first.history_len, 3);
  EXPECT_TRUE(std::isnan(got->rows[3].sqnr_db));
  EXPECT_TRUE(std::isnan(got->rows[3].history_min));
  EXPECT_EQ(got->rows[3].history_len, 0);

  // The view: worst over the batches per slot and role, with the history's ratio.
  const auto slots = store.query(
      "SELECT module, role, saturated_frac, history_ratio, first_seq FROM fp8_slots "
      "WHERE run_id = ?1 ORDER BY first_seq, role",
      {std::to_string(run)});
  ASSERT_EQ(slots.rows.size(), 2u);
  EXPECT_EQ(slots.rows[0][1], "input");
  EXPECT_EQ(slots.rows[0][2], "0.03");
  EXPECT_EQ(slots.rows[0][3], "10");
  EXPECT_EQ(slots.rows[1][1], "weight");
  EXPECT_EQ(slots.rows[1][2], "0.5");

  // A new diagnosis of the same checkpoint replaces the rows.
  store.record_diagnosis(diagnosis(run, 0, {fp8_row(0, 0, "head", "grad_output", 0)}));
  ASSERT_EQ(store.fp8_diagnosis(run)->rows.size(), 1u);
  EXPECT_EQ(store.fp8_diagnosis(run)->rows[0].format, "e5m2");
  EXPECT_EQ(store.query("SELECT COUNT(*) FROM fp8_diagnostics").rows[0][0], "1");
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST(StoreFp8Diagnostics, SchemaTwentyOneMigratesAndMergeBringsTheRows) {
  const std::string dir = testing::scratch_dir();
  const std::string old = dir + "/old.sqlite", into = dir + "/into.sqlite";
  const auto migrations = parse_migrations(embedded::store_sql);
  ASSERT_GE(migrations.size(), 22u);
  std::string sql =
      "BEGIN; CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);";
  for (int v = 1; v <= 21; ++v) {
    sql += migrations[v - 1].sql + "\nINSERT INTO schema_version VALUES (" + std::to_string(v) +
           ", 't');";
  }
  raw_exec(old, "PRAGMA journal_mode = WAL");
  raw_exec(old, sql + "COMMIT;");
  raw_exec(old,
           "INSERT INTO sweeps (name, created_at, updated_at) VALUES ('fp8', 't', 't');"
           "INSERT INTO runs (sweep_id, name, cell_index, label, status, config_json, "
           "config_hash, created_at) VALUES (1, 'fp8/0-aaaaaaaa', 0, 'base', 'done', '{}', "
           "'aaaaaaaaaaaa', 't');"
           "INSERT INTO diagnoses (run_id, epoch, against, batches, cosine_min, recorded_at) "
           "VALUES (1, 0, 'O0', 1, 0.99, 't');");
  {
    Store store(old);
    EXPECT_EQ(store.schema_version(), migrations.back().version);
    EXPECT_EQ(store.query("SELECT COUNT(*) FROM diagnoses").rows[0][0], "1");
    EXPECT_FALSE(store.fp8_diagnosis(1));
    store.record_diagnosis(diagnosis(1, 0, {fp8_row(0, 0, "fc", "input", 0.02)}));
  }
  Store target(into);
  target.merge({old}, train::checkpoint_layout());
  const auto run = target.find_run("fp8/0-aaaaaaaa");
  ASSERT_TRUE(run);
  const auto got = target.fp8_diagnosis(run->id);
  ASSERT_TRUE(got);
  ASSERT_EQ(got->rows.size(), 1u);
  EXPECT_DOUBLE_EQ(got->rows[0].saturated_frac, 0.02);
  target.merge({old}, train::checkpoint_layout());  // again: nothing doubles
  EXPECT_EQ(target.query("SELECT COUNT(*) FROM fp8_diagnostics").rows[0][0], "1");
  EXPECT_EQ(target.integrity_check(), "ok");
}

}  // namespace
}  // namespace amptune::store
