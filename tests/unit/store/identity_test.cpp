// A run's identity across the change that took paths, checkpoint folders, threads and loader
// counts out of it (migration 12, docs/CONFIG.md "Identity"): a database of the previous schema
// (migrations 1-11 exactly as released, with runs as that release wrote them) is re-hashed when
// opened, keeping ids, names and lineage; merge re-hashes such an input the same way; a run
// recorded without a data fingerprint is found again by its config hash and takes the
// fingerprint of the first data it meets.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

#include "core/config.h"
#include "core/embedded.h"
#include "store/migrations.h"
#include "store/store.h"
#include "unit/store/raw_exec.h"
#include "train/checkpoint_layout.h"
#include "support/scratch.h"

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

using testing::ScratchDir;

const char* const kCell =
    R"({"optim":{"lr":0.1},"checkpoint":{"dir":"/node1/ckpt"},"threads":4,)"
    R"("data":{"root":"/data/imagenet","workers":2}})";
// The same cell as another node ran it: other folders and counts, the same computation.
const char* const kSameCellElsewhere =
    R"({"optim":{"lr":0.1},"checkpoint":{"dir":"/node2/ckpt"},"threads":8,)"
    R"("data":{"root":"/scratch/imagenet","workers":0}})";
const char* const kFork = R"({"optim":{"lr":0.01},"checkpoint":{"dir":"/node1/ckpt"}})";
const char* const kUnreadable = R"({"optim":{"no_such_key":1}})";

// A database at schema 11 as the release before migration 12 wrote it: its runs carry the old
// identities ("oldhash1" ...), run 3 is a fork of run 1 at epoch 1, run 1 has an epoch.
void write_schema_11(const std::string& path) {
  const auto migrations = parse_migrations(embedded::store_sql);
  ASSERT_GE(migrations.size(), 12u);
  std::string sql =
      "CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);";
  for (size_t m = 0; m < 11; ++m) {
    ASSERT_EQ(migrations[m].version, static_cast<int>(m) + 1);
    sql += migrations[m].sql + "INSERT INTO schema_version VALUES (" + std::to_string(m + 1) +
           ", 't');";
  }
  auto run = [](int id, const std::string& config, const std::string& hash,
                const std::string& fork) {
    return "INSERT INTO runs (id, sweep_id, name, cell_index, label, status, config_json, "
           "config_hash, created_at" +
           std::string(fork.empty() ? "" : ", parent_run_id, parent_epoch, reset_optimizer") +
           ") VALUES (" + std::to_string(id) + ", 1, 'grid/" + std::to_string(id) + "-" + hash +
           "', 0, 'base', 'done', '" + config + "', '" + hash + "', 't'" + fork + ");";
  };
  sql += "INSERT INTO sweeps (id, name, created_at, updated_at) VALUES (1, 'grid', 't', 't');" +
         run(1, kCell, "oldhash1", "") + run(2, kSameCellElsewhere, "oldhash2", "") +
         run(3, kFork, "oldhash3", ", 1, 1, 0") + run(4, kUnreadable, "oldhash4", "") +
         "INSERT INTO epochs (run_id, epoch, global_step, recorded_at) VALUES (1, 0, 10, 't');";
  raw_exec(path, sql);
}

std::string config_hash(const char* json) { return Config::from_json(json, "test").hash(); }

// Checks the four runs of write_schema_11 after migration 12 in `store`, found by name.
void expect_rehashed(const Store& store) {
  const RunRow cell = store.find_run("grid/1-oldhash1").value();
  const RunRow elsewhere = store.find_run("grid/2-oldhash2").value();
  const RunRow fork = store.find_run("grid/3-oldhash3").value();
  const RunRow unreadable = store.find_run("grid/4-oldhash4").value();
  // The cell: its config hash, which no longer holds its folders, counts or data path.
  EXPECT_EQ(cell.config_hash, config_hash(kCell));
  EXPECT_EQ(config_hash(kCell), config_hash(kSameCellElsewhere));
  EXPECT_EQ(cell.legacy_config_hash, "oldhash1");
  EXPECT_EQ(cell.epochs_done, 1);
  EXPECT_TRUE(cell.data_fingerprint.empty());
  // The same cell recorded twice keeps its old identity (two rows cannot share one).
  EXPECT_EQ(elsewhere.config_hash, "oldhash2");
  EXPECT_TRUE(elsewhere.legacy_config_hash.empty());
  // The fork: from its parent's new identity; lineage unchanged.
  ASSERT_TRUE(fork.fork);
  EXPECT_EQ(fork.fork->parent_run_id, cell.id);
  EXPECT_EQ(fork.fork->parent_epoch, 1);
  EXPECT_EQ(fork.config_hash, fork_identity(config_hash(kFork), cell.config_hash, 1, false));
  EXPECT_EQ(fork.legacy_config_hash, "oldhash3");
  // A config this schema cannot read keeps its identity.
  EXPECT_EQ(unreadable.config_hash, "oldhash4");
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST(Identity, MigrationRehashesRunsOfThePreviousSchemaKeepingIdsAndLineage) {
  ScratchDir dir;
  const std::string path = (dir.path() / "old.sqlite").string();
  write_schema_11(path);
  Store store(path);
  EXPECT_EQ(store.schema_version(), parse_migrations(embedded::store_sql).back().version);
  expect_rehashed(store);
  EXPECT_EQ(store.find_run("grid/1-oldhash1")->id, 1);
  EXPECT_EQ(store.find_run("grid/3-oldhash3")->id, 3);
  // Opening again changes nothing (the migration ran once).
  Store again(path);
  expect_rehashed(again);
}

TEST(Identity, MergeRehashesAnInputOfThePreviousSchema) {
  ScratchDir dir;
  const std::string old = (dir.path() / "old.sqlite").string();
  write_schema_11(old);
  Store target((dir.path() / "into.sqlite").string());
  target.merge({old}, train::checkpoint_layout());
  expect_rehashed(target);
  // The input was read, not migrated.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(old.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* version = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT MAX(version) FROM schema_version", -1, &version,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(version), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(version, 0), 11);
  sqlite3_finalize(version);
  sqlite3_close(db);
}

TEST(Identity, ARunWithoutFingerprintIsFoundByItsConfigHashAndTakesTheFirstDataItMeets) {
  ScratchDir dir;
  const std::string path = (dir.path() / "old.sqlite").string();
  write_schema_11(path);
  Store store(path);
  RunSpec spec;
  spec.sweep_name = "grid";
  spec.config_json = kSameCellElsewhere;  // planned on another node
  spec.config_key = config_hash(kSameCellElsewhere);
  spec.data_fingerprint = "fp-of-the-data";
  spec.config_hash = run_identity(spec.config_key, spec.data_fingerprint);
  const RunRow found = store.ensure_run(1, spec);
  EXPECT_EQ(found.id, 1);
  EXPECT_EQ(found.data_fingerprint, "fp-of-the-data");
  EXPECT_EQ(found.config_json, kSameCellElsewhere);  // it executes where it is planned now
  EXPECT_EQ(found.name, "grid/1-oldhash1");
  // Found again with the same data; other data make another run.
  EXPECT_EQ(store.ensure_run(1, spec).id, 1);
  spec.data_fingerprint = "fp-of-other-data";
  spec.config_hash = run_identity(spec.config_key, spec.data_fingerprint);
  const RunRow other = store.ensure_run(1, spec);
  EXPECT_NE(other.id, 1);
  EXPECT_EQ(other.data_fingerprint, "fp-of-other-data");
  EXPECT_EQ(other.config_hash, spec.config_hash);
}

}  // namespace
}  // namespace amptune::store
