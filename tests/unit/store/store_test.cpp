// Unit tests of the results database (src/store). Each test works in its own temp directory and
// ends with PRAGMA integrity_check / foreign_key_check on every database it made.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/embedded.h"
#include "core/error.h"
#include "core/log.h"
#include "store/internal.h"
#include "store/migrations.h"
#include "store/store.h"
#include "raw_exec.h"
#include "support/errors.h"
#include "support/scratch.h"

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A second, raw connection to inspect or tamper with a database file.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("open " + path);
  }
  ~RawDb() { sqlite3_close(db_); }
  void exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      std::string message = error ? error : "?";
      sqlite3_free(error);
      throw std::runtime_error(message + " in " + sql);
    }
  }
  // Rows of a query, each column as text ("NULL" for NULL).
  std::vector<std::vector<std::string>> rows(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
      throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in " + sql);
    }
    std::vector<std::vector<std::string>> out;
    while (sqlite3_step(statement) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(statement); ++i) {
        const unsigned char* text = sqlite3_column_text(statement, i);
        row.push_back(text ? reinterpret_cast<const char*>(text) : "NULL");
      }
      out.push_back(row);
    }
    sqlite3_finalize(statement);
    return out;
  }
  std::string text(const std::string& sql) {
    auto result = rows(sql);
    return result.empty() || result[0].empty() ? "<no row>" : result[0][0];
  }
  int64_t integer(const std::string& sql) { return std::stoll(text(sql)); }

 private:
  sqlite3* db_ = nullptr;
};

int latest_version() { return parse_migrations(embedded::store_sql).back().version; }

std::string message_of(const std::function<void()>& f) {
  return testing::message_of<StoreError>(f);
}

bool is_iso_utc(const std::string& text) {
  static const std::regex pattern(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  return std::regex_match(text, pattern);
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::scratch_dir(); }
  void TearDown() override {
    for (const auto& path : databases_) {
      if (!fs::exists(path)) continue;
      Store store(path);
      EXPECT_EQ(store.integrity_check(), "ok") << path;
      RawDb raw(path);
      EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok") << path;
    }
    // AMPTUNE_KEEP_TEST_FILES=1 keeps the databases for a look with the sqlite3 shell.
    if (!std::getenv("AMPTUNE_KEEP_TEST_FILES")) fs::remove_all(dir_);
  }
  std::string db_path(const std::string& name = "results.sqlite") {
    std::string path = (dir_ / name).string();
    databases_.push_back(path);
    return path;
  }

  static RunSpec spec(const std::string& sweep, int index, const std::string& hash_seed,
                      const std::string& axes = "{}") {
    RunSpec s;
    s.sweep_name = sweep;
    s.cell_index = index;
    s.label = "cell " + std::to_string(index);
    s.config_json = R"({"optim":{"lr":0.1},"seed":)" + std::to_string(index) + "}";
    s.config_hash = sha_like(hash_seed);
    s.axes_json = axes;
    return s;
  }
  // 64 hex characters derived from a seed string (the store does not check it is a real sha256).
  static std::string sha_like(const std::string& seed) {
    std::string out;
    size_t h = std::hash<std::string>{}(seed);
    while (out.size() < 64) {
      char buffer[17];
      std::snprintf(buffer, sizeof buffer, "%016zx", h);
      out += buffer;
      h = h * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    return out.substr(0, 64);
  }
  static EpochRecord epoch_record(int64_t run_id, int epoch, std::map<std::string, double> metrics,
                                  bool checkpoint = false) {
    EpochRecord r;
    r.run_id = run_id;
    r.epoch = epoch;
    r.global_step = 100 * (epoch + 1);
    r.lr = 0.1;
    r.train_loss = 2.0 - 0.1 * epoch;
    r.train_fps_mean = 100 + epoch;
    r.train_fps_min = 90;
    r.train_fps_max = 110;
    r.epoch_seconds = 10;
    r.metrics = std::move(metrics);
    if (checkpoint) {
      r.checkpoint = CheckpointFile{"ckpt/run" + std::to_string(run_id) + "_e" + std::to_string(epoch) + ".pt",
                                    1000 + epoch, sha_like("ckpt" + std::to_string(epoch))};
    }
    return r;
  }

  fs::path dir_;
  std::vector<std::string> databases_;
};

// --- migrations file ---------------------------------------------------------------------------

TEST(StoreMigrations, EmbeddedFileCountsFromOne) {
  auto migrations = parse_migrations(embedded::store_sql);
  ASSERT_GE(migrations.size(), 2u);
  for (size_t i = 0; i < migrations.size(); ++i) {
    EXPECT_EQ(migrations[i].version, static_cast<int>(i) + 1);
    const std::string& sql = migrations[i].sql;
    EXPECT_TRUE(sql.find("CREATE") != std::string::npos || sql.find("ALTER TABLE") != std::string::npos)
        << "migration " << i + 1 << " changes nothing";
  }
}

TEST(StoreMigrations, RejectsGapsBadNumbersAndSqlBeforeTheFirst) {
  EXPECT_NE(message_of([] { parse_migrations("-- migration: 1\nSELECT 1;\n-- migration: 3\n"); })
                .find("store.sql:3: expected '-- migration: 2'"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_migrations("-- migration: one\n"); }).find("store.sql:1"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_migrations("-- header\nCREATE TABLE t(x);\n-- migration: 1\n"); })
                .find("SQL before the first"),
            std::string::npos);
  auto ok = parse_migrations("-- header\n\n-- migration: 1\nA;\n-- migration: 2\nB;\n");
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].sql, "A;\n");
  EXPECT_EQ(ok[1].sql, "B;\n");
}

// --- opening -----------------------------------------------------------------------------------

TEST_F(StoreTest, CreatesWalDatabaseAtLatestVersion) {
  const std::string path = db_path();
  {
    Store store(path);
    EXPECT_EQ(store.path(), path);
    EXPECT_EQ(store.schema_version(), latest_version());
  }
  RawDb raw(path);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM schema_version"), latest_version());
  EXPECT_TRUE(is_iso_utc(raw.text("SELECT applied_at FROM schema_version WHERE version = 1")));
  for (const char* table : {"sweeps", "runs", "run_params", "epochs", "metrics", "metric_info"}) {
    EXPECT_EQ(raw.integer(std::string("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '") +
                          table + "'"),
              1)
        << table;
  }
  for (const char* view : {"epoch_values", "best_epoch", "run_summary", "epoch_metrics",
                           "sweep_leaderboard", "checkpoints"}) {
    EXPECT_EQ(raw.integer(std::string("SELECT COUNT(*) FROM sqlite_master WHERE type = 'view' AND name = '") +
                          view + "'"),
              1)
        << view;
  }
  EXPECT_EQ(raw.integer("SELECT higher_is_better FROM metric_info WHERE name = 'acc1'"), 1);
  EXPECT_EQ(raw.integer("SELECT higher_is_better FROM metric_info WHERE name = 'val_loss'"), 0);
  EXPECT_EQ(raw.integer("SELECT higher_is_better FROM metric_info WHERE name = 'ap_root_25'"), 1);
  EXPECT_EQ(raw.integer("SELECT higher_is_better FROM metric_info WHERE name = 'mrpe_z'"), 0);
}

TEST_F(StoreTest, ReopeningAppliesNothingTwice) {
  const std::string path = db_path();
  { Store first(path); }
  { Store second(path); EXPECT_EQ(second.schema_version(), latest_version()); }
  RawDb raw(path);
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM schema_version"), latest_version());
}

TEST_F(StoreTest, MissingDirectoryIsNamed) {
  const std::string path = (dir_ / "no_such_dir" / "x.sqlite").string();
  const std::string message = message_of([&] { Store store(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find("mkdir -p"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir_ / "no_such_dir"));
}

TEST_F(StoreTest, ParentThatIsAFileIsNamed) {
  std::ofstream(dir_ / "plain.txt") << "not a directory\n";
  const std::string path = (dir_ / "plain.txt" / "x.sqlite").string();
  const std::string message = message_of([&] { Store store(path); });
  EXPECT_NE(message.find("plain.txt is not a directory"), std::string::npos) << message;
}

TEST_F(StoreTest, UnwritableLocationIsAStoreError) {
  // chmod does not stop root, so use a directory no one can create files in.
  const std::string path = "/proc/amptune_store_test_" + std::to_string(::getpid()) + ".sqlite";
  const std::string message = message_of([&] { Store store(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("writable"), std::string::npos) << message;
}

TEST_F(StoreTest, DirectoryAsDatabasePathIsNamed) {
  const std::string message = message_of([&] { Store store(dir_.string()); });
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
}

TEST_F(StoreTest, NonSqliteFileIsRefusedAndLeftAlone) {
  const std::string path = (dir_ / "x.sqlite").string();
  const std::string content = std::string("this is a text file, not a database\n") + std::string(4096, 'x');
  std::ofstream(path, std::ios::binary) << content;
  const std::string message = message_of([&] { Store store(path); });
  EXPECT_NE(message.find(path + " is not an amptune SQLite database ("), std::string::npos) << message;
  std::ifstream in(path, std::ios::binary);
  std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, content);
}

TEST_F(StoreTest, OtherProgramsSqliteIsRefused) {
  const std::string path = (dir_ / "other.sqlite").string();
  { RawDb raw(path); raw.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"); }
  const std::string message = message_of([&] { Store store(path); });
  EXPECT_NE(message.find("not an amptune one"), std::string::npos) << message;
  EXPECT_NE(message.find("notes"), std::string::npos) << message;
  RawDb raw(path);
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM sqlite_master WHERE name = 'runs'"), 0);
}

TEST_F(StoreTest, NewerSchemaIsRefused) {
  const std::string path = db_path();
  { Store store(path); }
  { RawDb raw(path); raw.exec("INSERT INTO schema_version VALUES (99, '2099-01-01T00:00:00.000Z')"); }
  const std::string message = message_of([&] { Store store(path); });
  EXPECT_NE(message.find("was written by a newer amptune (schema 99 > " +
                         std::to_string(latest_version()) + "); upgrade amptune"),
            std::string::npos)
      << message;
  RawDb raw(path);
  raw.exec("DELETE FROM schema_version WHERE version = 99");  // so TearDown can check it
}

TEST_F(StoreTest, MigratesAVersionOneDatabaseKeepingItsRows) {
  const std::string path = db_path();
  auto migrations = parse_migrations(embedded::store_sql);
  {
    RawDb raw(path);
    raw.exec("PRAGMA journal_mode = WAL");
    raw.exec("BEGIN; CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);" +
             migrations[0].sql +
             "INSERT INTO schema_version VALUES (1, '2024-01-01T00:00:00.000Z'); COMMIT;");
    raw.exec(
        "INSERT INTO sweeps (name, created_at, updated_at) VALUES ('old', 't', 't');"
        "INSERT INTO runs (sweep_id, name, cell_index, label, config_json, config_hash, created_at, model, lr)"
        " VALUES (1, 'old/0-aaaaaaaa', 0, 'base', '{}', 'aaaaaaaaaaaa', 't', 'resnet18', 0.1);"
        "INSERT INTO epochs (run_id, epoch, global_step, lr, train_loss, recorded_at) VALUES"
        " (1, 0, 10, 0.1, 2.5, 't'), (1, 1, 20, 0.1, 2.0, 't');"
        "INSERT INTO metrics VALUES (1, 0, 'acc1', 40.0), (1, 1, 'acc1', 55.5);");
    EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM sqlite_master WHERE name = 'best_epoch'"), 0);
  }
  Store store(path);
  EXPECT_EQ(store.schema_version(), latest_version());
  auto run = store.find_run("old/0-aaaaaaaa");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->primary_metric, "acc1");
  EXPECT_EQ(run->epochs_done, 2);
  EXPECT_EQ(run->columns.at("model"), "\"resnet18\"");
  EXPECT_EQ(store.epochs(run->id).at(1).metrics.at("acc1"), 55.5);
  RawDb raw(path);
  EXPECT_EQ(raw.rows("SELECT best_value, best_epoch FROM best_epoch"),
            (std::vector<std::vector<std::string>>{{"55.5", "1"}}));
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM schema_version"), latest_version());
}

// Migration 15 widens the CHECK on runs.status in place (writable_schema): a version-14 database
// keeps its rows, takes 'pruned' and still refuses other words.
TEST_F(StoreTest, MigrationFifteenLetsRunsBePrunedAndKeepsTheirRows) {
  const std::string path = db_path();
  const auto migrations = parse_migrations(embedded::store_sql);
  ASSERT_GE(migrations.size(), 15u);
  {
    RawDb raw(path);
    raw.exec("PRAGMA journal_mode = WAL");
    std::string sql =
        "BEGIN; CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);";
    for (int v = 1; v <= 14; ++v) {
      sql += migrations[v - 1].sql + "\nINSERT INTO schema_version VALUES (" + std::to_string(v) +
             ", 't');";
    }
    raw.exec(sql + "COMMIT;");
    raw.exec(
        "INSERT INTO sweeps (name, created_at, updated_at) VALUES ('old', 't', 't');"
        "INSERT INTO runs (sweep_id, name, cell_index, label, status, config_json, config_hash, "
        "created_at) VALUES (1, 'old/0-aaaaaaaa', 0, 'base', 'done', '{}', 'aaaaaaaaaaaa', 't');");
    EXPECT_THROW(raw.exec("UPDATE runs SET status = 'pruned'"), std::runtime_error);
  }
  Store store(path);
  EXPECT_EQ(store.schema_version(), latest_version());
  EXPECT_EQ(store.find_run("old/0-aaaaaaaa")->status, RunStatus::kDone);
  EXPECT_EQ(store.integrity_check(), "ok");
  RawDb raw(path);
  raw.exec("UPDATE runs SET status = 'pruned'");
  EXPECT_THROW(raw.exec("UPDATE runs SET status = 'finished'"), std::runtime_error);
  EXPECT_EQ(store.find_run("old/0-aaaaaaaa")->status, RunStatus::kPruned);
}

// Migration 19: a database written at schema 18 keeps its runs, which have no work or peak yet
// (zeros, and no row in epoch_mfu); record_run_work fills them, a later start replaces them, and
// the view gives each trained epoch's achieved FLOP/s and MFU.
TEST_F(StoreTest, MigrationNineteenRecordsTheWorkAndPeakOfARun) {
  const std::string path = db_path();
  const auto migrations = parse_migrations(embedded::store_sql);
  ASSERT_GE(migrations.size(), 19u);
  {
    std::string sql =
        "BEGIN; CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);";
    for (int v = 1; v <= 18; ++v) {
      sql += migrations[v - 1].sql + "\nINSERT INTO schema_version VALUES (" + std::to_string(v) +
             ", 't');";
    }
    RawDb raw(path);
    raw.exec("PRAGMA journal_mode = WAL");
    raw.exec(sql + "COMMIT;");
    raw.exec(
        "INSERT INTO sweeps (name, created_at, updated_at) VALUES ('old', 't', 't');"
        "INSERT INTO runs (sweep_id, name, cell_index, label, status, config_json, config_hash, "
        "created_at) VALUES (1, 'old/0-aaaaaaaa', 0, 'base', 'done', '{}', 'aaaaaaaaaaaa', 't');"
        "INSERT INTO epochs (run_id, epoch, global_step, train_fps_mean, recorded_at) VALUES "
        "(1, 0, 10, 500, 't');");
  }
  Store store(path);
  EXPECT_EQ(store.schema_version(), latest_version());
  const RunRow old = *store.find_run("old/0-aaaaaaaa");
  EXPECT_EQ(old.work.train_flops_per_sample, 0);
  EXPECT_EQ(old.work.peak_flops, 0);
  EXPECT_TRUE(old.work.peak_source.empty());
  EXPECT_FALSE(old.work.mfu(500));
  EXPECT_TRUE(store.query("SELECT * FROM epoch_mfu").rows.empty());

  RunWork work{2e6, 1e11, "fp32", "cpu: 2 cores x 16 fp32 lanes (avx512f)"};
  store.record_run_work(old.id, work);
  work.peak_flops = 2e11;  // resumed on a machine twice as fast
  store.record_run_work(old.id, work);
  const RunRow now = *store.find_run(old.id);
  EXPECT_EQ(now.work.train_flops_per_sample, 2e6);
  EXPECT_EQ(now.work.peak_flops, 2e11);
  EXPECT_EQ(now.work.peak_precision, "fp32");
  EXPECT_EQ(now.work.peak_source, work.peak_source);
  EXPECT_DOUBLE_EQ(*now.work.mfu(500), 500 * 2e6 / 2e11);
  const auto view =
      store.query("SELECT run, epoch, train_img_s, achieved_flops, mfu FROM epoch_mfu");
  ASSERT_EQ(view.rows.size(), 1u);
  EXPECT_EQ(*view.rows[0][0], "old/0-aaaaaaaa");
  EXPECT_DOUBLE_EQ(std::stod(*view.rows[0][3]), 1e9);
  EXPECT_DOUBLE_EQ(std::stod(*view.rows[0][4]), 0.005);
  // An unknown peak is NULL (not 0): the run leaves the view.
  store.record_run_work(old.id, {2e6, 0, "fp16", "cuda: X (cc 9.9) is not in the table"});
  EXPECT_EQ(store.find_run(old.id)->work.peak_flops, 0);
  EXPECT_TRUE(store.query("SELECT * FROM epoch_mfu").rows.empty());
  RawDb raw(path);
  EXPECT_THROW(raw.exec("UPDATE runs SET peak_precision = 'fp8'"), std::runtime_error);
  EXPECT_THROW(raw.exec("UPDATE runs SET peak_flops = -1"), std::runtime_error);
}

// Migration 20: a database written at schema 19 keeps its runs (no BLAS, no uncounted ops:
// empty); a start records the BLAS its process ran on with the rest of its provenance (each start
// again: a resume elsewhere replaces it), and the work the ops the count left out.
TEST_F(StoreTest, MigrationTwentyRecordsTheBlasAndTheUncountedOpsOfARun) {
  const std::string path = db_path();
  const auto migrations = parse_migrations(embedded::store_sql);
  ASSERT_GE(migrations.size(), 20u);
  {
    std::string sql =
        "BEGIN; CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);";
    for (int v = 1; v <= 19; ++v) {
      sql += migrations[v - 1].sql + "\nINSERT INTO schema_version VALUES (" + std::to_string(v) +
             ", 't');";
    }
    RawDb raw(path);
    raw.exec("PRAGMA journal_mode = WAL");
    raw.exec(sql + "COMMIT;");
    raw.exec(
        "INSERT INTO sweeps (name, created_at, updated_at) VALUES ('old', 't', 't');"
        "INSERT INTO runs (sweep_id, name, cell_index, label, status, config_json, config_hash, "
        "created_at, allocator) VALUES (1, 'old/0-aaaaaaaa', 0, 'base', 'done', '{}', "
        "'aaaaaaaaaaaa', 't', 'tcmalloc');");
  }
  Store store(path);
  EXPECT_EQ(store.schema_version(), latest_version());
  const RunRow old = *store.find_run("old/0-aaaaaaaa");
  EXPECT_EQ(old.provenance.allocator, "tcmalloc");
  EXPECT_EQ(old.provenance.blas, "");
  EXPECT_EQ(old.work.uncounted_ops, "");

  Provenance p;
  p.host = "alpha";
  p.blas = "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64, OpenMP (/x)";
  store.mark_running(old.id, p);
  EXPECT_EQ(store.find_run(old.id)->provenance.blas, p.blas);
  p.blas = "reference BLAS (netlib, unoptimised: /y)";  // resumed elsewhere
  store.mark_running(old.id, p);
  EXPECT_EQ(store.find_run(old.id)->provenance.blas, p.blas);

  RunWork work{2e6, 1e11, "fp32", "cpu", "aten::_native_multi_head_attention"};
  store.record_run_work(old.id, work);
  EXPECT_EQ(store.find_run(old.id)->work.uncounted_ops, "aten::_native_multi_head_attention");
  work.uncounted_ops = "";  // every product counted: NULL
  store.record_run_work(old.id, work);
  EXPECT_EQ(store.find_run(old.id)->work.uncounted_ops, "");
  EXPECT_EQ(*store.query("SELECT count(*) FROM runs WHERE uncounted_ops IS NULL").rows[0][0], "1");
}

// --- sweeps and runs ---------------------------------------------------------------------------

TEST_F(StoreTest, EnsureSweepIsIdempotentAndUpdatesText) {
  Store store(db_path());
  const int64_t id = store.ensure_sweep("quick", "first", "name: quick\n", "experiments/quick.yaml");
  EXPECT_EQ(store.ensure_sweep("quick", "first", "name: quick\n", "experiments/quick.yaml"), id);
  EXPECT_EQ(store.ensure_sweep("quick", "second", "name: quick\n# edited\n", "e/q.yaml"), id);
  EXPECT_NE(store.ensure_sweep("other", "", "", ""), id);
  RawDb raw(store.path());
  EXPECT_EQ(raw.rows("SELECT description, yaml, source_path FROM sweeps WHERE id = " + std::to_string(id)),
            (std::vector<std::vector<std::string>>{{"second", "name: quick\n# edited\n", "e/q.yaml"}}));
  EXPECT_TRUE(is_iso_utc(raw.text("SELECT created_at FROM sweeps WHERE name = 'quick'")));
  EXPECT_THROW(store.ensure_sweep("", "", "", ""), StoreError);
}

TEST_F(StoreTest, RunRoundTripsEveryField) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("grid", "d", "y", "p");
  RunSpec s = spec("grid", 3, "h3", R"({"optim.lr": 0.05, "schedule.lr_dec_epoch": [17, 21], "amp.opt_level": "O2"})");
  s.columns = {{"model", "\"resnet18\""},     {"dataset", "\"idx:data/fashion\""},
               {"optimizer", "\"sgd\""},      {"lr", "0.05"},
               {"batch_size", "128"},         {"epochs", "3"},
               {"lr_dec_epoch", "[17,21]"},   {"seed", "7"},
               {"primary_metric", "\"val_loss\""}};
  const RunRow created = store.ensure_run(sweep, s);
  EXPECT_GT(created.id, 0);
  EXPECT_EQ(created.sweep_id, sweep);
  EXPECT_EQ(created.sweep_name, "grid");
  EXPECT_EQ(created.name, "grid/3-" + s.config_hash.substr(0, 8));
  EXPECT_EQ(created.cell_index, 3);
  EXPECT_EQ(created.label, "cell 3");
  EXPECT_EQ(created.status, RunStatus::kPending);
  EXPECT_EQ(created.config_json, s.config_json);
  EXPECT_EQ(created.config_hash, s.config_hash);
  EXPECT_EQ(json::parse(created.axes_json), json::parse(s.axes_json));
  EXPECT_EQ(created.epochs_done, 0);
  EXPECT_EQ(created.message, "");
  EXPECT_EQ(created.summary_json, "");
  EXPECT_EQ(created.started_at, "");
  EXPECT_EQ(created.finished_at, "");
  EXPECT_EQ(created.heartbeat_at, "");
  EXPECT_TRUE(is_iso_utc(created.created_at)) << created.created_at;
  EXPECT_EQ(created.primary_metric, "val_loss");
  EXPECT_EQ(created.columns, s.columns);

  const auto by_id = store.find_run(created.id);
  ASSERT_TRUE(by_id);
  EXPECT_EQ(by_id->name, created.name);
  EXPECT_EQ(by_id->columns, s.columns);
  const auto by_text_id = store.find_run(std::to_string(created.id));
  ASSERT_TRUE(by_text_id);
  EXPECT_EQ(by_text_id->id, created.id);
  const auto by_name = store.find_run(created.name);
  ASSERT_TRUE(by_name);
  EXPECT_EQ(by_name->id, created.id);
  EXPECT_FALSE(store.find_run(created.id + 100));
  EXPECT_FALSE(store.find_run("grid/9-deadbeef"));

  RawDb raw(store.path());
  EXPECT_EQ(raw.rows("SELECT key, value_json FROM run_params ORDER BY key"),
            (std::vector<std::vector<std::string>>{
                {"amp.opt_level", "\"O2\""}, {"optim.lr", "0.05"}, {"schedule.lr_dec_epoch", "[17,21]"}}));
  // Readable columns have SQL types a user can compare with.
  EXPECT_EQ(raw.rows("SELECT typeof(lr), typeof(batch_size), typeof(model), lr_dec_epoch FROM runs"),
            (std::vector<std::vector<std::string>>{{"real", "integer", "text", "[17,21]"}}));
}

TEST_F(StoreTest, EnsureRunReturnsTheExistingRow) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("s", "", "", "");
  const RunRow first = store.ensure_run(sweep, spec("s", 0, "a", R"({"seed": 0})"));
  RunSpec again = spec("s", 5, "a", R"({"seed": 0, "x": 1})");
  again.label = "changed";
  const RunRow second = store.ensure_run(sweep, again);
  EXPECT_EQ(second.id, first.id);
  EXPECT_EQ(second.name, first.name);
  EXPECT_EQ(second.label, first.label);
  const RunRow other = store.ensure_run(sweep, spec("s", 1, "b"));
  EXPECT_NE(other.id, first.id);
  // The same config in another sweep is another run.
  const int64_t sweep2 = store.ensure_sweep("t", "", "", "");
  EXPECT_NE(store.ensure_run(sweep2, spec("t", 0, "a")).id, first.id);

  EXPECT_EQ(store.runs().size(), 3u);
  const auto of_s = store.runs(std::string("s"));
  ASSERT_EQ(of_s.size(), 2u);
  EXPECT_EQ(of_s[0].cell_index, 0);
  EXPECT_EQ(of_s[1].cell_index, 1);
  EXPECT_TRUE(store.runs(std::string("nope")).empty());
  RawDb raw(store.path());
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM run_params"), 1);
}

TEST_F(StoreTest, EnsureRunRejectsBadSpecs) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("s", "", "", "");
  RunSpec unknown = spec("s", 0, "a");
  unknown.columns["opt_levle"] = "\"O1\"";
  const std::string message = message_of([&] { store.ensure_run(sweep, unknown); });
  EXPECT_NE(message.find("no setting column 'opt_levle'"), std::string::npos) << message;
  EXPECT_NE(message.find("lr_dec_epoch"), std::string::npos) << message;  // lists the known ones

  RunSpec bad_axes = spec("s", 0, "a", "[1, 2]");
  EXPECT_NE(message_of([&] { store.ensure_run(sweep, bad_axes); }).find("axes_json must be a JSON object"),
            std::string::npos);
  RunSpec bad_value = spec("s", 0, "a");
  bad_value.columns["lr"] = "zero point one";
  EXPECT_NE(message_of([&] { store.ensure_run(sweep, bad_value); }).find("column lr"), std::string::npos);
  RunSpec wrong_sweep = spec("elsewhere", 0, "a");
  EXPECT_NE(message_of([&] { store.ensure_run(sweep, wrong_sweep); }).find("sweep 'elsewhere'"),
            std::string::npos);
  RunSpec short_hash = spec("s", 0, "a");
  short_hash.config_hash = "abc";
  EXPECT_THROW(store.ensure_run(sweep, short_hash), StoreError);
  EXPECT_THROW(store.ensure_run(sweep + 10, spec("", 0, "a")), StoreError);
  EXPECT_TRUE(store.runs().empty());
  const auto settable = store.setting_columns();
  EXPECT_NE(std::find(settable.begin(), settable.end(), "primary_metric"), settable.end());
  EXPECT_EQ(std::find(settable.begin(), settable.end(), "status"), settable.end());
}

// --- status ------------------------------------------------------------------------------------

Provenance provenance(const std::string& host) {
  Provenance p;
  p.amptune_version = "0.1.0";
  p.git_commit = "0123456789abcdef";
  p.git_dirty = true;
  p.torch_version = "1.13.1";
  p.host = host;
  p.threads = 4;
  p.device = "cpu";
  p.command_line = "amptune run experiments/x.yaml";
  return p;
}

TEST_F(StoreTest, RunLifecycleRoundTrips) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("s", "", "", "");
  const int64_t id = store.ensure_run(sweep, spec("s", 0, "a")).id;

  store.mark_running(id, provenance("alpha"));
  RunRow running = *store.find_run(id);
  EXPECT_EQ(running.status, RunStatus::kRunning);
  EXPECT_TRUE(is_iso_utc(running.started_at));
  EXPECT_EQ(running.heartbeat_at, running.started_at);
  EXPECT_EQ(running.finished_at, "");
  EXPECT_EQ(running.provenance.amptune_version, "0.1.0");
  EXPECT_EQ(running.provenance.git_commit, "0123456789abcdef");
  EXPECT_TRUE(running.provenance.git_dirty);
  EXPECT_EQ(running.provenance.torch_version, "1.13.1");
  EXPECT_EQ(running.provenance.host, "alpha");
  EXPECT_EQ(running.provenance.threads, 4);
  EXPECT_EQ(running.provenance.device, "cpu");
  EXPECT_EQ(running.provenance.command_line, "amptune run experiments/x.yaml");

  { RawDb raw(store.path()); raw.exec("UPDATE runs SET heartbeat_at = '2000-01-01T00:00:00.000Z'"); }
  store.heartbeat(id);
  EXPECT_GT(store.find_run(id)->heartbeat_at, "2000-01-01T00:00:00.000Z");

  store.finish_run(id, RunStatus::kFailed, "loader crashed", "");
  RunRow failed = *store.find_run(id);
  EXPECT_EQ(failed.status, RunStatus::kFailed);
  EXPECT_EQ(failed.message, "loader crashed");
  EXPECT_TRUE(is_iso_utc(failed.finished_at));
  // A message quoting text from elsewhere (a crafted checkpoint's) is stored clipped.
  const size_t huge = 1 << 20;
  store.finish_run(id, RunStatus::kFailed, std::string(huge, 'x'), "");
  EXPECT_EQ(store.find_run(id)->message, std::string(log::kMessageBytes, 'x') + "... (" +
                                             std::to_string(huge - log::kMessageBytes) +
                                             " bytes cut)");

  // Resuming keeps the first start time and clears the failure.
  store.mark_running(id, provenance("beta"));
  RunRow resumed = *store.find_run(id);
  EXPECT_EQ(resumed.started_at, running.started_at);
  EXPECT_EQ(resumed.message, "");
  EXPECT_EQ(resumed.finished_at, "");
  EXPECT_EQ(resumed.provenance.host, "beta");

  store.finish_run(id, RunStatus::kDone, "", R"({"acc1": 91.5})");
  RunRow done = *store.find_run(id);
  EXPECT_EQ(done.status, RunStatus::kDone);
  EXPECT_EQ(json::parse(done.summary_json), json::parse(R"({"acc1": 91.5})"));

  EXPECT_THROW(store.finish_run(id, RunStatus::kRunning, "", ""), StoreError);
  EXPECT_THROW(store.finish_run(id, RunStatus::kDone, "", "{not json"), StoreError);
  EXPECT_THROW(store.heartbeat(id + 1), StoreError);
  EXPECT_THROW(store.mark_running(id + 1, provenance("x")), StoreError);
  EXPECT_THROW(store.finish_run(id + 1, RunStatus::kDone, "", ""), StoreError);
}

// A pid of this machine that no process has (a child that exited and was reaped).
int64_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST_F(StoreTest, ClaimOfAGoneProcessOnThisMachineIsStaleAtOnce) {
  const std::string path = db_path();
  Store store(path);
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  ASSERT_TRUE(store.claim_run(id, provenance("a"), 3600));
  const RunRow held = *store.find_run(id);
  ASSERT_TRUE(held.holder);
  EXPECT_EQ(held.holder->pid, ::getpid());
  EXPECT_EQ(held.holder->machine, current_process().machine);
  EXPECT_EQ(held.holder->start_ticks, current_process().start_ticks);
  EXPECT_GT(held.holder->start_ticks, 0);

  // The holder is a process of this machine that is gone; its heartbeat is fresh.
  const int64_t gone = dead_pid();
  EXPECT_FALSE(process_alive(ProcessIdentity{current_process().machine, gone, 0}));
  { RawDb raw(path); raw.exec("UPDATE runs SET claim_pid = " + std::to_string(gone)); }
  EXPECT_TRUE(store.claim_run(id, provenance("b"), 3600));
  EXPECT_EQ(store.find_run(id)->holder->pid, ::getpid());

  // The same pid with another start time is another process (the pid was reused).
  { RawDb raw(path); raw.exec("UPDATE runs SET claim_pid_start = claim_pid_start + 1"); }
  EXPECT_FALSE(process_alive(*store.find_run(id)->holder));
  EXPECT_TRUE(store.claim_run(id, provenance("c"), 3600));
}

// The runner decides a run's turn on a row, then claims it: a run another worker trained and put
// back meanwhile (stopped at --stop-after-epoch) is not won on the stale decision.
TEST_F(StoreTest, AClaimOnARowReadBeforeAnotherWorkerTrainedTheRunFails) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  const RunRow seen = *store.find_run(id);                      // pending, no epoch: "train it"
  ASSERT_TRUE(store.claim_run(id, provenance("other"), 3600));  // another worker's turn
  store.record_epoch(epoch_record(id, 0, {{"acc1", 0.5}}));
  store.release_run(id, "stopped after epoch 0 (--stop-after-epoch)");
  EXPECT_FALSE(store.claim_run(id, provenance("late"), 3600, false, false, seen.epochs_done));
  const RunRow now = *store.find_run(id);
  EXPECT_EQ(now.status, RunStatus::kPending);
  EXPECT_EQ(now.message, "stopped after epoch 0 (--stop-after-epoch)");  // untouched
  EXPECT_TRUE(store.claim_run(id, provenance("late"), 3600, false, false, now.epochs_done));
}

TEST_F(StoreTest, OnlyTheHolderWritesARun) {
  const std::string path = db_path();
  Store store(path);
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  EpochRecord r;
  r.run_id = id;
  r.epoch = 0;
  r.train_loss = 1;
  store.record_epoch(r);  // never claimed: anyone may write (tools, tests)
  ASSERT_TRUE(store.claim_run(id, provenance("a"), 3600));
  { RawDb raw(path); raw.exec("UPDATE runs SET heartbeat_at = '2000-01-01T00:00:00.000Z'"); }
  r.epoch = 1;
  store.record_epoch(r);  // the holder's epoch advances the heartbeat in the same transaction
  EXPECT_GT(store.find_run(id)->heartbeat_at, "2000-01-01T00:00:00.000Z");
  store.heartbeat(id);

  // Another process (this machine's pid 1, alive) took the run over.
  { RawDb raw(path); raw.exec("UPDATE runs SET claim_pid = 1, claim_pid_start = 0, host = 'b'"); }
  r.epoch = 2;
  EXPECT_THROW(store.record_epoch(r), ClaimLostError);
  EXPECT_THROW(store.heartbeat(id), ClaimLostError);
  EXPECT_THROW(store.release_run(id, "interrupted"), ClaimLostError);
  EXPECT_THROW(store.truncate_after(id, 0), ClaimLostError);
  try {
    store.finish_run(id, RunStatus::kFailed, "x", "");
    ADD_FAILURE() << "finish_run of a run another process holds";
  } catch (const ClaimLostError& e) {
    EXPECT_NE(std::string(e.what()).find("taken over by process 1 on b"), std::string::npos)
        << e.what();
  }
  const RunRow after = *store.find_run(id);
  EXPECT_EQ(after.status, RunStatus::kRunning);
  EXPECT_EQ(after.epochs_done, 2);  // epoch 2 was not written
  EXPECT_EQ(store.epochs(id).size(), 2u);
}

// prune_run ends a held run as pruned with its decision; a pruned run is claimable only to
// continue it (continue_pruned), and promote_run puts it back to pending once, with the decision.
TEST_F(StoreTest, PrunedRunsStopWithTheirDecisionAndArePromotedOnce) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  ASSERT_TRUE(store.claim_run(id, provenance("a"), 3600));
  EpochRecord r;
  r.run_id = id;
  r.epoch = 0;
  r.metrics["acc1"] = 10;
  store.record_epoch(r);
  PruneDecisionRow stop;
  stop.run_id = id;
  stop.epoch = 0;
  stop.action = PruneAction::kStop;
  stop.rule = PruneRule::kAsha;
  stop.metric = "acc1";
  stop.rung = 0;
  stop.value = 10;
  stop.threshold = std::numeric_limits<double>::quiet_NaN();
  stop.compared_json = R"([{"run_id":7,"value":12.5}])";
  stop.reason = "waits";
  PruneDecisionRow wrong = stop;
  wrong.action = PruneAction::kContinue;
  EXPECT_THROW(store.prune_run(wrong), StoreError);
  store.prune_run(stop);
  RunRow pruned = *store.find_run(id);
  EXPECT_EQ(pruned.status, RunStatus::kPruned);
  EXPECT_EQ(pruned.message, "waits");
  EXPECT_FALSE(pruned.finished_at.empty());
  EXPECT_FALSE(store.claim_run(id, provenance("a"), 3600, /*retry_failed=*/true));
  PruneDecisionRow go = stop;
  go.action = PruneAction::kContinue;
  go.threshold = 9;
  go.rung = -1;
  go.reason = "promoted";
  EXPECT_TRUE(store.promote_run(go));
  EXPECT_FALSE(store.promote_run(go)) << "promoted once";
  EXPECT_EQ(store.find_run(id)->status, RunStatus::kPending);
  EXPECT_EQ(store.find_run(id)->message, "promoted");
  const auto decisions = store.prune_decisions(id);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(to_string(decisions[0].action), "stop");
  EXPECT_EQ(decisions[0].rung, 0);
  EXPECT_TRUE(std::isnan(decisions[0].threshold));
  EXPECT_EQ(decisions[0].compared_json, R"([{"run_id":7,"value":12.5}])");
  EXPECT_FALSE(decisions[0].decided_at.empty());
  EXPECT_EQ(to_string(decisions[1].action), "continue");
  EXPECT_EQ(decisions[1].rung, -1);
  EXPECT_EQ(decisions[1].threshold, 9);
  // A pruned run is claimable to continue it (amptune resume).
  store.prune_run(stop);  // this process still holds the claim
  EXPECT_TRUE(store.claim_run(id, provenance("a"), 3600, false, /*continue_pruned=*/true));
}

// A prune_decisions row of another shape (a database edited by hand or crafted, opened
// directly): reading it is a StoreError naming the file, the table, the row and the column,
// never a value a caller then fails on (show crashed with a JSON type_error, exit 1).
TEST_F(StoreTest, PruneDecisionsOfAnotherShapeAreRefusedNamingTheRowAndColumn) {
  const std::string path = db_path();
  int64_t id = 0;
  {
    Store store(path);
    id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
    ASSERT_TRUE(store.claim_run(id, provenance("a"), 3600));
    PruneDecisionRow stop;
    stop.run_id = id;
    stop.action = PruneAction::kStop;
    stop.rule = PruneRule::kAsha;
    stop.metric = "acc1";
    stop.rung = 0;
    stop.compared_json = R"([{"run_id":7,"value":12.5},{"run_id":8,"value":null}])";
    store.prune_run(stop);
    ASSERT_EQ(store.prune_decisions(id).size(), 1u);
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"compared_json = '{\"run_id\": 7}'", "column compared_json is not a JSON array"},
      {"compared_json = '[{\"run_id\": \"7\", \"value\": 1}]'",
       "column compared_json entry 0 is not {\"run_id\": <integer>"},
      {"compared_json = '[{\"run_id\": 7, \"value\": 1}, 7]'", "column compared_json entry 1"},
      {"compared_json = '[{\"run_id\": 7, \"value\": \"high\"}]'", "column compared_json entry 0"},
      {"compared_json = 'not json'", "column compared_json is not JSON: 'not json'"},
      {"rung = 'abc'", "column rung holds 'abc', not an integer"},
      {"rung = 4294967296", "column rung holds 4294967296, outside [0, 2147483647]"},
      {"epoch = -3", "column epoch holds -3, outside [0, 2147483647]"},
      {"value = 'x'", "column value holds 'x', not a number"},
      {"rule = 'hyperband'", "column rule is not a word amptune writes there: 'hyperband'"},
      {"threshold = 'y'", "column threshold holds 'y', not a number"},
  };
  for (const auto& [change, expected] : cases) {
    {
      RawDb raw(path);
      raw.exec(
          "PRAGMA ignore_check_constraints = ON; UPDATE prune_decisions SET compared_json "
          "= '[]', rung = 0, epoch = 0, value = 1, threshold = 2, rule = 'asha'; "
          "UPDATE prune_decisions SET " +
          change);
    }
    const std::string message = message_of([&] { Store(path).prune_decisions(id); });
    EXPECT_NE(message.find(path + ": table prune_decisions, row 1, " + expected),
              std::string::npos)
        << change << ": " << message;
  }
}

// Every reader of runs, epochs, metrics, diagnostics and the tune tables checks what it reads
// (a database edited or crafted, opened directly): a value of another type, range or JSON
// shape is a StoreError naming the file, the table, the row and the column. Before, they were
// read as 0, cast to int, or handed on for a caller to fail on (compare, report: exit 1).
TEST_F(StoreTest, ReadersRefuseValuesOfAnotherShapeNamingTheRowAndColumn) {
  const std::string path = db_path();
  int64_t id = 0, search = 0;
  {
    Store store(path);
    const int64_t sweep = store.ensure_sweep("s", "", "", "");
    id = store.ensure_run(sweep, spec("s", 0, "a")).id;
    EpochRecord r;
    r.run_id = id;
    r.metrics["acc1"] = 5;
    r.scale_events = {ScaleEvent{1, 65536.0, ScaleReason::kInit}};
    store.record_epoch(r);
    store.record_initial_metrics(id, {{"acc1", 25.0}});
    Diagnosis d;
    d.run_id = id;
    d.batches = 1;
    DiagnosticRow forward;
    forward.kind = DiagnosticKind::kForward;
    forward.module = "conv1";
    forward.dtype = TensorDtype::kFp16;
    d.rows = {forward};
    d.advice = {{AdviceRule::kActivationOverflow, "conv1", "keep it in fp32"}};
    store.record_diagnosis(d);
    TuneSearchRow t;
    t.sweep_id = sweep;
    t.block_json = "{}";
    t.metric = "acc1";
    t.reference_run_id = t.start_run_id = id;
    search = store.ensure_tune_search(t).id;
    store.record_tune_round({search, 1, TuneRoundKind::kSearch, id, 0, 0, ""});
    TuneCandidateRow c;
    c.search_id = search;
    c.round = 1;
    c.move = TuneMoveKind::kLossScale;
    c.change_json = R"({"amp.loss_scale":"dynamic"})";
    c.run_id = id;
    store.record_tune_candidate(c);
  }
  const auto runs = [&](const Store& s) { s.runs(); };
  const auto epochs = [&](const Store& s) { s.epochs(id); };
  const auto values = [&](const Store& s) { s.metric_values("s", "acc1"); };
  const auto modules = [&](const Store& s) { s.module_errors("s"); };
  const auto searches = [&](const Store& s) { s.tune_searches("s"); };
  const auto rounds = [&](const Store& s) { s.tune_rounds(search); };
  const auto candidates = [&](const Store& s) { s.tune_candidates(search); };
  const auto events = [&](const Store& s) { s.scale_events(id); };
  const auto sweep_events = [&](const Store& s) { s.scale_events("s", 10); };
  const auto initial = [&](const Store& s) { s.initial_metrics(id); };
  const auto advice = [&](const Store& s) { s.diagnosis_advice(id, 0); };
  struct Case {
    std::string change;
    std::function<void(const Store&)> read;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"UPDATE runs SET config_json = '[1]'", runs,
       "table runs, row 1, column config_json is not a JSON object"},
      {"UPDATE runs SET axes_json = 'oops'", runs,
       "table runs, row 1, column axes_json is not JSON: 'oops'"},
      {"UPDATE runs SET summary_json = '{'", runs,
       "table runs, row 1, column summary_json is not JSON"},
      {"UPDATE runs SET status = 'bogus'", runs,
       "table runs, row 1, column status holds 'bogus', not a run status"},
      {"UPDATE runs SET cell_index = 'abc'", runs,
       "table runs, row 1, column cell_index holds 'abc', not an integer"},
      {"UPDATE runs SET threads = 4294967296", runs,
       "table runs, row 1, column threads holds 4294967296, outside"},
      {"UPDATE epochs SET epoch = 2147483647", runs,
       "table runs, row 1, column epochs_done (its last epoch + 1) holds 2147483648"},
      {"UPDATE epochs SET lr = 'fast'", epochs,
       "table epochs, row 1, column lr holds 'fast', not a number"},
      {"UPDATE epochs SET global_step = -5", epochs,
       "table epochs, row 1, column global_step holds -5, outside"},
      {"UPDATE metrics SET value = 'high'", epochs,
       "table metrics, row 1, column value holds 'high', not a number"},
      {"UPDATE metrics SET value = 'high'", values,
       "table metrics, row 1, column value holds 'high'"},
      {"UPDATE diagnostics SET cosine = 'near'", modules,
       "table diagnostics, row 1, column cosine holds 'near', not a number"},
      {"UPDATE diagnostics SET numel = 'many'", modules,
       "table diagnostics, row 1, column numel holds 'many', not an integer"},
      {"UPDATE tune_searches SET block_json = '[]'", searches,
       "table tune_searches, row 1, column block_json is not a JSON object"},
      {"UPDATE tune_searches SET epochs_spent = 'x'", searches,
       "table tune_searches, row 1, column epochs_spent holds 'x'"},
      {"UPDATE tune_searches SET status = 'maybe'", searches,
       "table tune_searches, row 1, column status is not a word amptune writes there: 'maybe'"},
      {"UPDATE tune_rounds SET kind = 'guess'", rounds,
       "table tune_rounds, row 1, column kind is not a word amptune writes there: 'guess'"},
      {"UPDATE tune_candidates SET outcome = 'great'", candidates,
       "table tune_candidates, row 1, column outcome is not a word amptune writes there: 'great'"},
      {"UPDATE tune_candidates SET move = 'teleport'", candidates,
       "table tune_candidates, row 1, column move is not a word amptune writes there: 'teleport'"},
      {"UPDATE tune_candidates SET advice_rule = 'hunch'", candidates,
       "table tune_candidates, row 1, column advice_rule is not a word amptune writes there: "
       "'hunch'"},
      {"UPDATE diagnosis_advice SET rule = 'hunch'", advice,
       "table diagnosis_advice, row 1, column rule is not a word amptune writes there: 'hunch'"},
      {"UPDATE tune_rounds SET fork_epoch = 2147483647", rounds,
       "table tune_rounds, row 1, column fork_epoch holds 2147483647, outside [-1, 2147483646]"},
      {"UPDATE tune_candidates SET change_json = '\"dynamic\"'", candidates,
       "table tune_candidates, row 1, column change_json is not a JSON object"},
      {"UPDATE tune_candidates SET rung = 3000000000", candidates,
       "table tune_candidates, row 1, column rung holds 3000000000"},
      {"UPDATE tune_candidates SET value = 'good'", candidates,
       "table tune_candidates, row 1, column value holds 'good', not a number"},
      {"UPDATE loss_scale_events SET scale = 'big'", events,
       "table loss_scale_events, row 1, column scale holds 'big', not a number"},
      {"UPDATE loss_scale_events SET reason = 'panic'", events,
       "table loss_scale_events, row 1, column reason is not a word amptune writes there: 'panic'"},
      {"UPDATE diagnostics SET dtype = 'fp8'", modules,
       "table diagnostics, row 1, column dtype is not a word amptune writes there: 'fp8'"},
      {"UPDATE loss_scale_events SET global_step = -1", sweep_events,
       "table loss_scale_events, row 1, column global_step holds -1, outside"},
      {"UPDATE initial_metrics SET value = 'x'", initial,
       "table initial_metrics, row 1, column value holds 'x', not a number"},
      // Nested 300,000 deep (600 KB, over the size bound too) and 100 deep (valid, small): the
      // depth is checked before parsing, so no later copy or dump of it recurses that deep.
      {"UPDATE runs SET axes_json = replace(hex(zeroblob(300000)), '00', '[') || "
       "replace(hex(zeroblob(300000)), '00', ']')",
       runs, "table runs, row 1, column axes_json holds 600000 bytes of JSON, more than the 262144"},
      {"UPDATE runs SET axes_json = '{\"a\":' || replace(hex(zeroblob(100)), '00', '[') || "
       "replace(hex(zeroblob(100)), '00', ']') || '}'",
       runs, "table runs, row 1, column axes_json holds JSON nested more than 64 deep"},
      {"UPDATE runs SET config_json = '{\"x\": \"' || hex(zeroblob(200000)) || '\"}'", runs,
       "table runs, row 1, column config_json holds 400009 bytes of JSON, more than the 262144"},
      {"UPDATE tune_candidates SET change_json = '{\"a\":' || "
       "replace(hex(zeroblob(1000)), '00', '{\"b\":') || '1' || "
       "replace(hex(zeroblob(1000)), '00', '}') || '}'",
       candidates, "table tune_candidates, row 1, column change_json holds JSON nested more than 64"},
      {"UPDATE runs SET label = hex(zeroblob(600000))", runs,
       "listing runs: column label holds a value of 1200000 bytes, more than the 1048576 "
       "amptune reads"},
  };
  {
    RawDb raw(path);
    raw.exec(
        "CREATE TABLE saved_runs AS SELECT * FROM runs; CREATE TABLE saved_epochs AS SELECT "
        "* FROM epochs; CREATE TABLE saved_metrics AS SELECT * FROM metrics;"
        "CREATE TABLE saved_diagnostics AS SELECT * FROM diagnostics;"
        "CREATE TABLE saved_diagnosis_advice AS SELECT * FROM diagnosis_advice;"
        "CREATE TABLE saved_tune_searches AS SELECT * FROM tune_searches;"
        "CREATE TABLE saved_tune_rounds AS SELECT * FROM tune_rounds;"
        "CREATE TABLE saved_tune_candidates AS SELECT * FROM tune_candidates;"
        "CREATE TABLE saved_loss_scale_events AS SELECT * FROM loss_scale_events;"
        "CREATE TABLE saved_initial_metrics AS SELECT * FROM initial_metrics;");
  }
  for (const Case& c : cases) {
    {
      RawDb raw(path);
      std::string restore = "PRAGMA foreign_keys = OFF; PRAGMA ignore_check_constraints = ON;";
      for (const char* t : {"runs", "epochs", "metrics", "diagnostics", "diagnosis_advice",
                            "tune_searches", "tune_rounds", "tune_candidates",
                            "loss_scale_events", "initial_metrics"}) {
        restore += std::string("DELETE FROM ") + t + "; INSERT INTO " + t +
                   " SELECT * FROM saved_" + t + ";";
      }
      raw.exec(restore + c.change);
    }
    const std::string message = message_of([&] { c.read(Store(path)); });
    EXPECT_NE(message.find(path + ": " + c.expected), std::string::npos)
        << c.change << ": " << message;
  }
}

// prune_pending_run stops a run released at an epoch (held last by another process) once: a
// second process deciding the same finds it pruned and writes nothing.
TEST_F(StoreTest, PrunePendingRunStopsAReleasedRunOnce) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  PruneDecisionRow stop;
  stop.run_id = id;
  stop.epoch = 0;
  stop.action = PruneAction::kStop;
  stop.rule = PruneRule::kAsha;
  stop.metric = "acc1";
  stop.reason = "tune round 1";
  ASSERT_TRUE(store.claim_run(id, provenance("a"), 3600));
  EXPECT_FALSE(store.prune_pending_run(stop)) << "a running run is not pruned this way";
  store.release_run(id, "stopped after epoch 0 as asked");
  EXPECT_TRUE(store.prune_pending_run(stop));
  EXPECT_FALSE(store.prune_pending_run(stop));
  EXPECT_EQ(store.find_run(id)->status, RunStatus::kPruned);
  EXPECT_EQ(store.prune_decisions(id).size(), 1u);
}

// The rows of a tune search (migration 16): written once whoever writes them first, read back
// in order, the view tune_path joining them with the runs.
TEST_F(StoreTest, TuneSearchRoundsAndCandidatesAndTheirPath) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("t", "", "", "");
  const int64_t ref = store.ensure_run(sweep, spec("t", 0, "ref")).id;
  const int64_t start = store.ensure_run(sweep, spec("t", 1, "start")).id;
  const int64_t cand = store.ensure_run(sweep, spec("t", 2, "cand")).id;
  TuneSearchRow row;
  row.sweep_id = sweep;
  row.block_json = R"({"tune.metric":"acc1"})";
  row.metric = "acc1";
  row.reference_run_id = ref;
  row.start_run_id = start;
  const TuneSearchRow first = store.ensure_tune_search(row);
  EXPECT_GT(first.id, 0);
  EXPECT_EQ(to_string(first.status), "searching");
  EXPECT_EQ(first.sweep_name, "t");
  EXPECT_EQ(store.ensure_tune_search(row).id, first.id) << "found again";
  row.block_json = R"({"tune.metric":"acc5"})";
  EXPECT_NE(store.ensure_tune_search(row).id, first.id) << "another block, another search";
  store.record_tune_round({first.id, 1, TuneRoundKind::kSearch, start, 0, 1, "note"});
  store.record_tune_round(
      {first.id, 1, TuneRoundKind::kSearch, start, 5, 5, "ignored"});  // already there
  store.record_tune_round({first.id, 2, TuneRoundKind::kBisect, cand, -1, std::nullopt, ""});
  TuneCandidateRow c;
  c.search_id = first.id;
  c.round = 1;
  c.seq = 0;
  c.move = TuneMoveKind::kFp32Modules;
  c.change_json = R"({"amp.fp32_modules":["conv1"]})";
  c.reason = "overflow";
  c.advice_rule = AdviceRule::kActivationOverflow;
  c.advice_module = "conv1";
  c.run_id = cand;
  c.parent_run_id = start;
  c.fork_epoch = 0;
  store.record_tune_candidate(c);
  c.value = 0.5;
  c.reference_value = 0.6;
  c.rung = 1;
  c.outcome = CandidateOutcome::kWithin;
  store.update_tune_candidate(c);
  TuneCandidateRow bad = c;
  bad.round = 9;  // no such round
  EXPECT_THROW(store.record_tune_candidate(bad), StoreError);
  const auto rounds = store.tune_rounds(first.id);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0].note, "note");
  EXPECT_EQ(rounds[0].diagnosis_epoch, 1);
  EXPECT_FALSE(rounds[1].diagnosis_epoch);
  EXPECT_EQ(to_string(rounds[1].kind), "bisect");
  const auto candidates = store.tune_candidates(first.id);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(to_string(candidates[0].outcome), "within");
  EXPECT_EQ(candidates[0].rung, 1);
  EXPECT_EQ(candidates[0].value, 0.5);
  EXPECT_EQ(candidates[0].move, TuneMoveKind::kFp32Modules);
  EXPECT_EQ(candidates[0].advice_rule, AdviceRule::kActivationOverflow);
  EXPECT_EQ(candidates[0].advice_module, "conv1");
  EXPECT_EQ(candidates[0].parent_run_id, start);
  TuneSearchRow done = first;
  done.status = TuneStatus::kAnswered;
  done.answer_run_id = cand;
  done.answer_yaml = "amp.fp32_modules: [conv1]\n";
  done.epochs_spent = 9;
  done.grid_epochs = 15;
  store.finish_tune_search(done);
  const auto searches = store.tune_searches("t");
  ASSERT_EQ(searches.size(), 2u);
  EXPECT_EQ(to_string(searches[0].status), "answered");
  EXPECT_EQ(searches[0].answer_run_id, cand);
  EXPECT_EQ(searches[0].grid_epochs, 15);
  EXPECT_FALSE(searches[0].finished_at.empty());
  const auto path = store.query(
      "SELECT round, move, advice_module, run, outcome, is_answer FROM tune_path "
      "WHERE sweep = 't'");
  ASSERT_EQ(path.rows.size(), 1u);
  EXPECT_EQ(path.rows[0][1], "fp32_modules");
  EXPECT_EQ(path.rows[0][4], "within");
  EXPECT_EQ(path.rows[0][5], "1");
  // The advice of a diagnosis: unset without one, in order with one.
  EXPECT_FALSE(store.diagnosis_advice(start, 0));
  Diagnosis d;
  d.run_id = start;
  d.epoch = 0;
  d.batches = 1;
  d.advice = {{AdviceRule::kActivationOverflow, "conv1", "keep it"},
              {AdviceRule::kCastPoint, "bbox", "remove it"}};
  store.record_diagnosis(d);
  const auto advice = store.diagnosis_advice(start, 0);
  ASSERT_TRUE(advice);
  ASSERT_EQ(advice->size(), 2u);
  EXPECT_EQ((*advice)[1].rule, AdviceRule::kCastPoint);
  EXPECT_EQ((*advice)[1].module, "bbox");
  // The rule is stored as its word (the column sqlite3 users read).
  EXPECT_EQ(store.query("SELECT rule FROM diagnosis_advice WHERE seq = 1").rows[0][0],
            "cast_point");
}

// Migration 18 widens tune_rounds' checks: round 0 and the kinds union, confirm and reference
// are taken, a database written at schema 16 keeps its rows, and one whose constraint was edited
// is refused naming the migration (nothing applied).
TEST_F(StoreTest, MigrationEighteenTakesTheNewRoundKinds) {
  const auto migrations = parse_migrations(embedded::store_sql);
  ASSERT_GE(migrations.size(), 18u);
  auto schema_16 = [&](const std::string& path, bool edited) {
    std::string sql =
        "CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);";
    for (size_t m = 0; m < 16; ++m) {
      std::string step = migrations[m].sql;
      if (edited && m == 15) {
        step.replace(step.find("CHECK (round >= 1)"), 18, "CHECK (round >= 2-1)");
      }
      sql += step + "INSERT INTO schema_version VALUES (" + std::to_string(m + 1) + ", 't');";
    }
    sql += "INSERT INTO sweeps (id, name, created_at, updated_at) VALUES (1, 't', 't', 't');"
           "INSERT INTO runs (id, sweep_id, name, cell_index, label, status, config_json, "
           "config_hash, created_at) VALUES (1, 1, 't/1', 0, 'a', 'done', '{}', 'hash0001', 't');"
           "INSERT INTO tune_searches (id, sweep_id, block_json, metric, higher_is_better, "
           "reference_run_id, start_run_id, created_at) VALUES (1, 1, '{}', 'acc1', 1, 1, 1, 't');"
           "INSERT INTO tune_rounds (search_id, round, kind, start_run_id, fork_epoch) "
           "VALUES (1, 1, 'search', 1, -1);";
    raw_exec(path, sql);
  };
  const std::string old_db = (dir_ / "v16.sqlite").string();
  schema_16(old_db, false);
  {
    Store store(old_db);
    EXPECT_EQ(store.schema_version(), migrations.back().version);
    store.record_tune_round({1, 0, TuneRoundKind::kReference, 1, -1, std::nullopt, "seeds"});
    store.record_tune_round({1, 2, TuneRoundKind::kUnion, 1, -1, std::nullopt, ""});
    store.record_tune_round({1, 3, TuneRoundKind::kConfirm, 1, -1, std::nullopt, ""});
    const auto rounds = store.tune_rounds(1);
    ASSERT_EQ(rounds.size(), 4u);
    EXPECT_EQ(to_string(rounds[0].kind), "reference");
    EXPECT_EQ(to_string(rounds[1].kind), "search") << "the row of schema 16 is kept";
    EXPECT_EQ(to_string(rounds[2].kind), "union");
    raw_exec(old_db,
             "INSERT OR IGNORE INTO tune_rounds (search_id, round, kind, start_run_id, "
             "fork_epoch) VALUES (1, 4, 'guess', 1, -1)");
    EXPECT_EQ(store.tune_rounds(1).size(), 4u) << "the check still refuses other kinds";
  }
  const std::string edited = (dir_ / "edited.sqlite").string();
  schema_16(edited, true);
  try {
    Store store(edited);
    FAIL() << "an edited constraint was migrated";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("migration 18"), std::string::npos) << e.what();
  }
}

// metric_values reads a sweep's values of one metric; with_nulls adds the NaNs stored as NULL (the
// prune rules rank them worst) and, for an epochs column, the NULL ones too.
TEST_F(StoreTest, MetricValuesWithAndWithoutTheNaNs) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  EpochRecord r;
  r.run_id = id;
  r.epoch = 0;
  r.train_loss = 2;
  r.metrics["acc1"] = 5;
  store.record_epoch(r);
  r.epoch = 1;
  r.train_loss = std::numeric_limits<double>::quiet_NaN();
  r.metrics["acc1"] = std::numeric_limits<double>::quiet_NaN();
  store.record_epoch(r);
  r.epoch = 2;
  r.metrics.clear();  // not evaluated: no row at all
  store.record_epoch(r);
  for (const char* metric : {"acc1", "train_loss"}) {
    const auto finite = store.metric_values("s", metric);
    ASSERT_EQ(finite.size(), 1u) << metric;
    const auto all = store.metric_values("s", metric, /*with_nulls=*/true);
    const size_t expected = std::string(metric) == "acc1" ? 2u : 3u;  // epoch 2 has a loss row
    ASSERT_EQ(all.size(), expected) << metric;
    EXPECT_EQ(all[0].epoch, 0);
    EXPECT_TRUE(std::isnan(all[1].value)) << metric;
  }
}

TEST_F(StoreTest, StatusWordsRoundTrip) {
  for (RunStatus status : {RunStatus::kPending, RunStatus::kRunning, RunStatus::kDone,
                           RunStatus::kFailed, RunStatus::kDiverged, RunStatus::kPruned}) {
    EXPECT_EQ(parse_status(to_string(status)), status);
  }
  EXPECT_THROW(parse_status("finished"), StoreError);
}

TEST_F(StoreTest, ClaimRunHasOneWinner) {
  const std::string path = db_path();
  Store a(path);
  Store b(path);  // a second connection, as a second worker process would have
  const int64_t sweep = a.ensure_sweep("s", "", "", "");
  const int64_t id = a.ensure_run(sweep, spec("s", 0, "a")).id;

  EXPECT_TRUE(a.claim_run(id, provenance("a"), 3600));
  EXPECT_FALSE(b.claim_run(id, provenance("b"), 3600));  // fresh heartbeat: a holds it
  EXPECT_EQ(b.find_run(id)->provenance.host, "a");

  // Held by a live process of this machine (this one): an old heartbeat does not make it stale.
  { RawDb raw(path); raw.exec("UPDATE runs SET heartbeat_at = '2000-01-01T00:00:00.000Z'"); }
  EXPECT_FALSE(b.claim_run(id, provenance("b"), 3600));
  // Held by a process of another host: only the heartbeat tells, and it is old.
  { RawDb raw(path); raw.exec("UPDATE runs SET claim_machine = 'another-host'"); }
  EXPECT_TRUE(b.claim_run(id, provenance("b"), 3600));  // a's worker is presumed dead
  RunRow taken = *a.find_run(id);
  EXPECT_EQ(taken.provenance.host, "b");
  EXPECT_EQ(taken.status, RunStatus::kRunning);

  a.finish_run(id, RunStatus::kFailed, "oom", "");
  EXPECT_FALSE(a.claim_run(id, provenance("a"), 0));
  EXPECT_TRUE(a.claim_run(id, provenance("a"), 3600, /*retry_failed=*/true));
  EXPECT_EQ(a.find_run(id)->message, "");

  a.finish_run(id, RunStatus::kDone, "", "{}");
  EXPECT_FALSE(b.claim_run(id, provenance("b"), 0, true));
  a.finish_run(id, RunStatus::kDiverged, "loss is NaN", "{}");
  EXPECT_FALSE(b.claim_run(id, provenance("b"), 0, true));
  EXPECT_EQ(a.find_run(id)->status, RunStatus::kDiverged);

  EXPECT_THROW(a.claim_run(id + 1, provenance("a"), 0), StoreError);
}

// --- epochs ------------------------------------------------------------------------------------

TEST_F(StoreTest, EpochRoundTripsEveryField) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("s", "", "", "");
  const int64_t id = store.ensure_run(sweep, spec("s", 0, "a")).id;
  EpochRecord r;
  r.run_id = id;
  r.epoch = 0;
  r.global_step = 469;
  r.lr = 0.0125;
  r.train_loss = std::numeric_limits<double>::quiet_NaN();  // a diverged epoch
  r.train_fps_mean = 1234.5;
  r.train_fps_min = 1000.25;
  r.train_fps_max = 1500.75;
  r.epoch_seconds = 48.5;
  r.skipped_samples = 3;
  r.metrics = {{"acc1", 12.5}, {"acc5", 50.0}, {"val_loss", std::numeric_limits<double>::infinity()},
               {"loss_scale", 65536.0}};
  r.checkpoint = CheckpointFile{"results/ckpt/s/0/epoch_000.pt", 123456789012, sha_like("c")};
  store.record_epoch(r);
  EpochRecord second = epoch_record(id, 1, {{"acc1", 20}});
  store.record_epoch(second);

  const auto rows = store.epochs(id);
  ASSERT_EQ(rows.size(), 2u);
  const EpochRow& e = rows[0];
  EXPECT_EQ(e.epoch, 0);
  EXPECT_EQ(e.global_step, 469);
  EXPECT_EQ(e.lr, 0.0125);
  EXPECT_TRUE(std::isnan(e.train_loss));
  EXPECT_EQ(e.train_fps_mean, 1234.5);
  EXPECT_EQ(e.train_fps_min, 1000.25);
  EXPECT_EQ(e.train_fps_max, 1500.75);
  EXPECT_EQ(e.epoch_seconds, 48.5);
  EXPECT_EQ(e.skipped_samples, 3);
  ASSERT_EQ(e.metrics.size(), 4u);
  EXPECT_EQ(e.metrics.at("acc1"), 12.5);
  EXPECT_EQ(e.metrics.at("acc5"), 50.0);
  EXPECT_TRUE(std::isinf(e.metrics.at("val_loss")));
  EXPECT_EQ(e.metrics.at("loss_scale"), 65536.0);
  ASSERT_TRUE(e.checkpoint);
  EXPECT_EQ(e.checkpoint->path, "results/ckpt/s/0/epoch_000.pt");
  EXPECT_EQ(e.checkpoint->bytes, 123456789012);
  EXPECT_EQ(e.checkpoint->sha256, sha_like("c"));
  EXPECT_TRUE(is_iso_utc(e.recorded_at));
  EXPECT_FALSE(rows[1].checkpoint);
  EXPECT_EQ(rows[1].metrics, (std::map<std::string, double>{{"acc1", 20}}));
  EXPECT_EQ(store.find_run(id)->epochs_done, 2);
}

TEST_F(StoreTest, EpochTimeBreakdownAndProfileTraceRoundTrip) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  EpochRecord r = epoch_record(id, 0, {{"acc1", 10}});
  r.times = EpochTimes{0.25, 1.5, 2.75, 0.125, 3.0, 0.5, -1, 4.25};
  r.profile_trace = "results/ckpt/s/1/profile_steps_3-4.json";
  store.record_epoch(r);
  store.record_epoch(epoch_record(id, 1, {}));  // measured nothing: NULL columns
  store.set_epoch_db_seconds(id, 0, 0.0625);
  EXPECT_THROW(store.set_epoch_db_seconds(id, 7, 1.0), StoreError);  // no such epoch

  const auto rows = store.epochs(id);
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_TRUE(rows[0].times);
  const EpochTimes& t = *rows[0].times;
  EXPECT_EQ(t.data_wait, 0.25);
  EXPECT_EQ(t.forward, 1.5);
  EXPECT_EQ(t.backward, 2.75);
  EXPECT_EQ(t.optimizer, 0.125);
  EXPECT_EQ(t.eval, 3.0);
  EXPECT_EQ(t.checkpoint, 0.5);
  EXPECT_EQ(t.db, 0.0625);
  EXPECT_EQ(t.startup, 4.25);
  EXPECT_EQ(t.inside_epoch(), 0.25 + 1.5 + 2.75 + 0.125 + 3.0);
  EXPECT_EQ(rows[0].profile_trace, "results/ckpt/s/1/profile_steps_3-4.json");
  EXPECT_FALSE(rows[1].times);
  EXPECT_EQ(rows[1].profile_trace, "");
}

TEST_F(StoreTest, RerecordingAnEpochReplacesItsMetrics) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  store.record_epoch(epoch_record(id, 0, {{"acc1", 10}, {"acc5", 30}}));
  store.record_epoch(epoch_record(id, 0, {{"acc1", 11}}));
  const auto rows = store.epochs(id);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].metrics, (std::map<std::string, double>{{"acc1", 11}}));
}

TEST_F(StoreTest, FailureInsideRecordEpochLeavesNoPartialEpoch) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  store.record_epoch(epoch_record(id, 0, {{"acc1", 10}, {"acc5", 30}}, true));

  // "acc1" is inserted before the bad name fails its CHECK: all of it must roll back.
  const std::string message =
      message_of([&] { store.record_epoch(epoch_record(id, 1, {{"acc1", 15}, {"zz bad name", 1}}, true)); });
  EXPECT_NE(message.find("epoch 1 of run"), std::string::npos) << message;
  EXPECT_NE(message.find("metric name 'zz bad name' is not allowed"), std::string::npos) << message;
  EXPECT_NE(message.find("lowercase identifiers"), std::string::npos) << message;

  // Replacing epoch 0 with a record that fails keeps the old epoch 0 as it was.
  EXPECT_THROW(store.record_epoch(epoch_record(id, 0, {{"acc1", 99}, {"train_loss", 1}})), StoreError);
  // A run that does not exist.
  EXPECT_THROW(store.record_epoch(epoch_record(id + 1, 0, {{"acc1", 1}})), StoreError);

  const auto rows = store.epochs(id);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].metrics, (std::map<std::string, double>{{"acc1", 10}, {"acc5", 30}}));
  EXPECT_TRUE(rows[0].checkpoint);
  RawDb raw(store.path());
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM epochs"), 1);
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM metrics"), 2);
  // The connection is usable afterwards (no transaction left open).
  store.record_epoch(epoch_record(id, 1, {{"acc1", 15}}));
  EXPECT_EQ(store.epochs(id).size(), 2u);
}

TEST_F(StoreTest, TruncateAfterReturnsKeptCheckpointsAndDropsMetrics) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  const int64_t other = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 1, "b")).id;
  for (int epoch = 0; epoch < 4; ++epoch) {
    store.record_epoch(epoch_record(id, epoch, {{"acc1", 10.0 + epoch}}, true));
    store.record_epoch(epoch_record(other, epoch, {{"acc1", 1.0}}, true));
  }
  store.forget_checkpoint(id, 2);  // retention already deleted that file
  const auto files = store.truncate_after(id, 1);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, "ckpt/run" + std::to_string(id) + "_e3.pt");
  EXPECT_EQ(files[0].bytes, 1003);
  EXPECT_EQ(files[0].sha256, sha_like("ckpt3"));

  const auto rows = store.epochs(id);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].epoch, 1);
  EXPECT_EQ(store.find_run(id)->epochs_done, 2);
  EXPECT_EQ(store.epochs(other).size(), 4u);
  RawDb raw(store.path());
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM metrics WHERE run_id = " + std::to_string(id)), 2);
  EXPECT_TRUE(store.truncate_after(id, 5).empty());
  EXPECT_THROW(store.truncate_after(other + 1, 0), StoreError);
}

TEST_F(StoreTest, InitialMetricsSurviveTruncationAndFeedVsInitial) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("s", "", "", "");
  const int64_t id = store.ensure_run(sweep, spec("s", 0, "a")).id;
  const int64_t only = store.ensure_run(sweep, spec("s", 1, "b")).id;
  EXPECT_TRUE(store.initial_metrics(id).empty());
  store.record_initial_metrics(id, {{"acc1", 5}, {"val_loss", 3}, {"stale", 1}});
  store.record_initial_metrics(id, {{"acc1", 10}, {"val_loss", 2.5}});  // replaces every row
  EXPECT_EQ(store.initial_metrics(id),
            (std::map<std::string, double>{{"acc1", 10}, {"val_loss", 2.5}}));
  for (int epoch = 0; epoch < 3; ++epoch) {
    store.record_epoch(epoch_record(id, epoch, {{"acc1", 20.0 + epoch}, {"val_loss", 2.0}}));
  }
  // An evaluation-only run: epoch 0 with global_step 0, its evaluation in both tables.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EpochRecord eval = epoch_record(only, 0, {{"acc1", 12}, {"val_loss", 2.4}});
  eval.global_step = 0;
  eval.lr = eval.train_loss = eval.train_fps_mean = eval.train_fps_min = eval.train_fps_max = nan;
  eval.initial_metrics = eval.metrics;
  store.record_epoch(eval);
  EXPECT_EQ(store.initial_metrics(only), eval.metrics);
  const auto row = store.epochs(only).at(0);
  EXPECT_EQ(row.global_step, 0);
  EXPECT_TRUE(std::isnan(row.train_loss));
  EXPECT_TRUE(std::isnan(row.lr));

  RawDb raw(store.path());
  const std::string rows_sql =
      "SELECT run_id, metric, initial_value, best_value, last_value, last_epoch, change "
      "FROM vs_initial ORDER BY run_id, metric";
  const std::string a = std::to_string(id), b = std::to_string(only);
  EXPECT_EQ(raw.rows(rows_sql), (std::vector<std::vector<std::string>>{
                                    {a, "acc1", "10.0", "22.0", "22.0", "2", "12.0"},
                                    {a, "val_loss", "2.5", "2.0", "2.0", "2", "-0.5"},
                                    {b, "acc1", "12.0", "NULL", "NULL", "NULL", "NULL"},
                                    {b, "val_loss", "2.4", "NULL", "NULL", "NULL", "NULL"}}));
  // A resume truncates epochs; the starting point stays.
  store.truncate_after(id, 0);
  EXPECT_EQ(store.initial_metrics(id).at("acc1"), 10);
  EXPECT_EQ(raw.rows(rows_sql).at(0),
            (std::vector<std::string>{a, "acc1", "10.0", "20.0", "20.0", "0", "10.0"}));
  // Names as in metrics; a bad one writes nothing.
  EXPECT_THROW(store.record_initial_metrics(id, {{"acc1", 1}, {"Bad-Name", 1}}), StoreError);
  EXPECT_EQ(store.initial_metrics(id).at("acc1"), 10);
}

TEST_F(StoreTest, ForgetCheckpointKeepsTheMetrics) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  store.record_epoch(epoch_record(id, 0, {{"acc1", 10}}, true));
  store.record_epoch(epoch_record(id, 1, {{"acc1", 12}}, false));
  store.forget_checkpoint(id, 0);
  const auto rows = store.epochs(id);
  EXPECT_FALSE(rows[0].checkpoint);
  EXPECT_EQ(rows[0].metrics.at("acc1"), 10);
  EXPECT_THROW(store.forget_checkpoint(id, 1), StoreError);  // never had one
  EXPECT_THROW(store.forget_checkpoint(id, 7), StoreError);
  RawDb raw(store.path());
  auto view = raw.rows("SELECT epoch, deleted_at IS NOT NULL, path FROM checkpoints");
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0][0], "0");
  EXPECT_EQ(view[0][1], "1");
}

// --- views -------------------------------------------------------------------------------------

TEST_F(StoreTest, ViewsPickTheWinnerWhenHigherIsBetter) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("acc", "", "", "");
  const std::vector<std::vector<double>> curves = {{50, 70, 65}, {60, 72, 71}, {80, 75, 90}};
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    RunSpec s = spec("acc", i, "acc" + std::to_string(i));
    s.columns = {{"model", "\"resnet18\""}, {"lr", std::to_string(0.1 * (i + 1))}};
    ids.push_back(store.ensure_run(sweep, s).id);
    for (int epoch = 0; epoch < 3; ++epoch) {
      store.record_epoch(epoch_record(ids[i], epoch, {{"acc1", curves[i][epoch]}, {"val_loss", 1.0}}));
    }
  }
  store.ensure_run(sweep, spec("acc", 3, "not-started"));
  RawDb raw(store.path());
  EXPECT_EQ(raw.rows("SELECT run_id, best_value, best_epoch FROM best_epoch ORDER BY run_id"),
            (std::vector<std::vector<std::string>>{{std::to_string(ids[0]), "70.0", "1"},
                                                   {std::to_string(ids[1]), "72.0", "1"},
                                                   {std::to_string(ids[2]), "90.0", "2"}}));
  auto board = raw.rows("SELECT rank, run_id, epochs_done FROM sweep_leaderboard");
  ASSERT_EQ(board.size(), 4u);
  EXPECT_EQ(board[0], (std::vector<std::string>{"1", std::to_string(ids[2]), "3"}));
  EXPECT_EQ(board[1], (std::vector<std::string>{"2", std::to_string(ids[1]), "3"}));
  EXPECT_EQ(board[2], (std::vector<std::string>{"3", std::to_string(ids[0]), "3"}));
  EXPECT_EQ(board[3][0], "NULL");
  EXPECT_EQ(board[3][2], "0");
  auto summary = raw.rows("SELECT run_id, model, best_value, best_epoch, last_value, epochs_done, "
                          "mean_fps, total_seconds FROM run_summary");
  ASSERT_EQ(summary.size(), 4u);
  EXPECT_EQ(summary[0], (std::vector<std::string>{std::to_string(ids[2]), "resnet18", "90.0", "2", "90.0",
                                                  "3", "101.0", "30.0"}));
  EXPECT_EQ(summary[1][4], "71.0");  // last epoch's value, not the best
  // Ties share a rank; the earliest epoch reaching the best counts.
  store.record_epoch(epoch_record(ids[1], 3, {{"acc1", 90}}));
  EXPECT_EQ(raw.rows("SELECT rank, run_id FROM sweep_leaderboard WHERE rank = 1 ORDER BY run_id"),
            (std::vector<std::vector<std::string>>{{"1", std::to_string(ids[1])},
                                                   {"1", std::to_string(ids[2])}}));
}

TEST_F(StoreTest, ViewsPickTheWinnerWhenLowerIsBetter) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("loss", "", "", "");
  const int64_t other_sweep = store.ensure_sweep("other", "", "", "");
  std::vector<int64_t> ids;
  const std::vector<std::vector<double>> curves = {{3.0, 2.0, 2.5}, {2.8, 1.5, 1.9}, {4.0, 3.0, 2.2}};
  for (int i = 0; i < 3; ++i) {
    RunSpec s = spec("loss", i, "loss" + std::to_string(i));
    s.columns = {{"primary_metric", "\"val_loss\""}};
    ids.push_back(store.ensure_run(sweep, s).id);
    for (int epoch = 0; epoch < 3; ++epoch) {
      // acc1 disagrees with val_loss on purpose: the view must rank by val_loss.
      store.record_epoch(epoch_record(ids[i], epoch, {{"val_loss", curves[i][epoch]}, {"acc1", 10.0 * i}}));
    }
  }
  // A run ranked by an epochs column (train_loss, lower is better), in another sweep.
  RunSpec t = spec("other", 0, "t");
  t.columns = {{"primary_metric", "\"train_loss\""}};
  const int64_t train_id = store.ensure_run(other_sweep, t).id;
  for (int epoch = 0; epoch < 3; ++epoch) store.record_epoch(epoch_record(train_id, epoch, {}));

  RawDb raw(store.path());
  EXPECT_EQ(raw.rows("SELECT sweep, rank, run_id, metric, best_value, best_epoch FROM sweep_leaderboard"),
            (std::vector<std::vector<std::string>>{
                {"loss", "1", std::to_string(ids[1]), "val_loss", "1.5", "1"},
                {"loss", "2", std::to_string(ids[0]), "val_loss", "2.0", "1"},
                {"loss", "3", std::to_string(ids[2]), "val_loss", "2.2", "2"},
                {"other", "1", std::to_string(train_id), "train_loss", "1.8", "2"}}));
  EXPECT_EQ(raw.text("SELECT run_id FROM run_summary WHERE sweep = 'loss' LIMIT 1"), std::to_string(ids[1]));
  EXPECT_EQ(raw.text("SELECT higher_is_better FROM best_epoch WHERE run_id = " + std::to_string(ids[1])), "0");
}

TEST_F(StoreTest, EpochMetricsViewIsWide) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  store.record_epoch(epoch_record(id, 0, {{"acc1", 10}, {"acc5", 30}, {"val_loss", 2.5}, {"loss_scale", 1024}}));
  store.record_epoch(epoch_record(id, 1, {{"acc1", 20}}));
  RawDb raw(store.path());
  EXPECT_EQ(raw.rows("SELECT epoch, lr, train_loss, acc1, acc5, val_loss, loss_scale, train_fps_mean FROM epoch_metrics"),
            (std::vector<std::vector<std::string>>{{"0", "0.1", "2.0", "10.0", "30.0", "2.5", "1024.0", "100.0"},
                                                   {"1", "0.1", "1.9", "20.0", "NULL", "NULL", "NULL", "101.0"}}));
}

// --- migration 3: mixed-precision columns and loss-scale events ------------------------------

TEST_F(StoreTest, MigrationThreeAddsPrecisionColumnsAndScaleEvents) {
  Store store(db_path());
  EXPECT_GE(store.schema_version(), 3);
  auto s = spec("amp", 0, "amp0");
  s.columns = {{"opt_level", "\"O2\""}, {"dtype", "\"fp16\""}, {"loss_scale", "128.0"},
               {"backend", "\"emulate\""}};
  const int64_t sweep = store.ensure_sweep("amp", "", "", "");
  const int64_t id = store.ensure_run(sweep, s).id;
  auto d = spec("amp", 1, "amp1");
  d.columns = {{"opt_level", "\"O1\""}, {"loss_scale", "\"dynamic\""}};
  const int64_t dyn = store.ensure_run(sweep, d).id;
  auto run = store.find_run(id);
  EXPECT_EQ(run->columns.at("opt_level"), "\"O2\"");
  EXPECT_EQ(run->columns.at("loss_scale"), "128.0");
  EXPECT_EQ(run->columns.at("backend"), "\"emulate\"");
  EXPECT_EQ(store.find_run(dyn)->columns.at("loss_scale"), "\"dynamic\"");

  for (int epoch = 0; epoch < 3; ++epoch) {
    auto r = epoch_record(dyn, epoch, {{"loss_scale", 32768.0}});
    if (epoch == 0)
      r.scale_events = {{0, 65536.0, ScaleReason::kInit}, {1, 32768.0, ScaleReason::kOverflow}};
    if (epoch == 1) r.scale_events = {{150, 65536.0, ScaleReason::kGrowth}};
    if (epoch == 2) r.scale_events = {{250, 32768.0, ScaleReason::kOverflow}};
    store.record_epoch(r);
  }
  auto events = store.scale_events(dyn);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].global_step, 1);
  EXPECT_EQ(events[1].scale, 32768.0);
  EXPECT_EQ(events[1].reason, ScaleReason::kOverflow);
  RawDb raw(store.path());
  EXPECT_EQ(raw.rows("SELECT run, opt_level, loss_scale_setting, global_step, scale, reason "
                     "FROM loss_scale_trajectory WHERE global_step >= 150"),
            (std::vector<std::vector<std::string>>{
                {"amp/1-" + sha_like("amp1").substr(0, 8), "O1", "dynamic", "150", "65536.0",
                 "growth"},
                {"amp/1-" + sha_like("amp1").substr(0, 8), "O1", "dynamic", "250", "32768.0",
                 "overflow"}}));
  // Re-recording an epoch replaces its events; truncating drops later epochs' events.
  auto again = epoch_record(dyn, 1, {});
  again.scale_events = {{160, 131072.0, ScaleReason::kGrowth}};
  store.record_epoch(again);
  EXPECT_EQ(store.scale_events(dyn).at(2).global_step, 160);
  store.truncate_after(dyn, 0);
  EXPECT_EQ(store.scale_events(dyn).size(), 2u);
  // A bad event (two at one step) is refused, and the epoch is not half-written. (A reason
  // other than the three is no value of ScaleReason; one read from a database is refused:
  // ReadersRefuseValuesOfAnotherShapeNamingTheRowAndColumn.)
  auto bad = epoch_record(dyn, 1, {});
  bad.scale_events = {{170, 2.0, ScaleReason::kGrowth}, {170, 4.0, ScaleReason::kGrowth}};
  EXPECT_THROW(store.record_epoch(bad), StoreError);
  EXPECT_EQ(store.epochs(dyn).size(), 1u);
}

}  // namespace
}  // namespace amptune::store

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

// Forks of forks: the lineage view walks every ancestor, each cut at the epoch its child forked
// from; the fork row round-trips its origin; a fork in another sweep is refused.
TEST_F(StoreTest, ForkRowsAndRecursiveLineage) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("lin", "", "", "");
  const int64_t root = store.ensure_run(sweep, spec("lin", 0, "root")).id;
  for (int e = 0; e < 4; ++e) store.record_epoch(epoch_record(root, e, {{"acc1", 10.0 + e}}, true));
  RunSpec child_spec = spec("lin", 0, "child");
  child_spec.fork = ForkOrigin{root, 1, R"({"optim.lr":0.01})", "optim.lr: 0.1 -> 0.01", false};
  const RunRow child = store.ensure_run(sweep, child_spec);
  ASSERT_TRUE(child.fork);
  EXPECT_EQ(child.fork->parent_run_id, root);
  EXPECT_EQ(child.fork->parent_epoch, 1);
  EXPECT_EQ(child.fork->overrides_json, R"({"optim.lr":0.01})");
  EXPECT_EQ(child.fork->changes, "optim.lr: 0.1 -> 0.01");
  EXPECT_FALSE(child.fork->reset_optimizer);
  EXPECT_FALSE(store.find_run(root)->fork);
  for (int e = 2; e < 4; ++e) store.record_epoch(epoch_record(child.id, e, {{"acc1", 20.0 + e}}, true));
  RunSpec grand_spec = spec("lin", 0, "grandchild");
  grand_spec.fork = ForkOrigin{child.id, 2, "{}", "", true};
  const RunRow grand = store.ensure_run(sweep, grand_spec);
  EXPECT_TRUE(grand.fork->reset_optimizer);
  store.record_epoch(epoch_record(grand.id, 3, {{"acc1", 33.0}}));
  RawDb raw(store.path());
  const std::string r = std::to_string(root), c = std::to_string(child.id);
  const std::string g = std::to_string(grand.id);
  EXPECT_EQ(raw.rows("SELECT epoch, source_run_id, value FROM lineage WHERE run_id = " + g),
            (std::vector<std::vector<std::string>>{
                {"0", r, "10.0"}, {"1", r, "11.0"}, {"2", c, "22.0"}, {"3", g, "33.0"}}));
  EXPECT_EQ(raw.rows("SELECT count(*) FROM lineage WHERE run_id = " + r)[0][0], "4");
  EXPECT_EQ(raw.rows("SELECT fork_id, parent_id, parent_epoch, parent_at_fork, parent_last, fork_last "
                     "FROM fork_vs_parent ORDER BY fork_id"),
            (std::vector<std::vector<std::string>>{{c, r, "1", "11.0", "13.0", "23.0"},
                                                   {g, c, "2", "22.0", "23.0", "33.0"}}));
  const int64_t other = store.ensure_sweep("other", "", "", "");
  RunSpec stray = spec("other", 0, "stray");
  stray.fork = ForkOrigin{root, 1, "{}", "", false};
  EXPECT_THROW(store.ensure_run(other, stray), StoreError);
  stray.fork = ForkOrigin{root, 1, "[1]", "", false};
  EXPECT_THROW(store.ensure_run(sweep, stray), StoreError);
}

}  // namespace
}  // namespace amptune::store

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

// A database whose table amptune reads was replaced by a view (a recursive one returns rows
// forever; SQLite finds a view "EPOCHS" for `FROM epochs`), or that lacks one, is refused
// when it is opened, read-write or read-only, naming the file and the object, before any reader
// runs: before, status, list, show, compare and report on such a file never ended.
TEST_F(StoreTest, ATableReplacedByAViewIsRefusedWhenOpened) {
  const std::string path = db_path();
  {
    Store store(path);
    store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a"));
  }
  const std::string saved = db_path("saved.sqlite");
  fs::copy_file(path, saved);
  struct Case {
    std::string craft;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"PRAGMA foreign_keys = OFF; DROP TABLE loss_scale_events; DROP TABLE metrics; "
       "DROP TABLE epochs; CREATE VIEW EPOCHS AS WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL "
       "SELECT n + 1 FROM x) SELECT n AS run_id, n AS epoch, n AS global_step FROM x",
       "epochs is a view, not a table (\"EPOCHS\" in its schema)"},
      {"PRAGMA foreign_keys = OFF; DROP TABLE run_params; CREATE VIEW Run_Params AS "
       "SELECT 1 AS run_id",
       "run_params is a view, not a table (\"Run_Params\" in its schema)"},
      {"PRAGMA foreign_keys = OFF; DROP TABLE diagnosis_advice", "it has no table diagnosis_advice"},
  };
  for (const Case& c : cases) {
    fs::copy_file(saved, path, fs::copy_options::overwrite_existing);
    RawDb(path).exec(c.craft);
    EXPECT_NE(message_of([&] { Store store(path); }).find(path + ": " + c.expected),
              std::string::npos)
        << c.craft << ": " << message_of([&] { Store store(path); });
    EXPECT_NE(message_of([&] { Store::open_read_only(path); }).find(path + ": " + c.expected),
              std::string::npos)
        << c.craft;
  }
  // The user's own tables, views and triggers beside amptune's are left alone.
  fs::copy_file(saved, path, fs::copy_options::overwrite_existing);
  RawDb(path).exec("CREATE TABLE notes (t TEXT); CREATE VIEW my_runs AS SELECT name FROM runs;"
                   "CREATE TRIGGER noted AFTER INSERT ON epochs BEGIN INSERT INTO notes VALUES "
                   "('epoch'); END");
  EXPECT_EQ(Store(path).runs().size(), 1u);
  EXPECT_EQ(Store::open_read_only(path)->runs().size(), 1u);
}

// A run's metric directions reach metric_info, which the views rank by: a custom model's mse,
// lower is better, makes the run's best epoch its lowest mse. A name the database ranks the
// other way is a ConfigError naming both directions, and nothing of that run is written.
TEST_F(StoreTest, ARunsMetricDirectionsAreRecordedAndConflictsRefused) {
  Store store(db_path());
  const int64_t sweep = store.ensure_sweep("s", "", "", "");
  RunSpec custom = spec("s", 0, "a");
  custom.columns["primary_metric"] = "\"mse\"";
  custom.metric_directions = {{"mse", false}, {"train_loss", false}};
  const int64_t id = store.ensure_run(sweep, custom).id;
  store.record_epoch(epoch_record(id, 0, {{"mse", 2.61}}));
  store.record_epoch(epoch_record(id, 1, {{"mse", 0.876}}));
  store.record_epoch(epoch_record(id, 2, {{"mse", 1.5}}));
  EXPECT_EQ(store.higher_is_better("mse"), false);
  const auto best = store.query("SELECT best_value FROM run_summary WHERE run_id = ?1",
                                {std::to_string(id)});
  ASSERT_EQ(best.rows.size(), 1u);
  EXPECT_EQ(best.rows[0][0], std::optional<std::string>("0.876"));

  RunSpec other = spec("s", 1, "b");
  other.metric_directions = {{"mse", true}};
  const std::string message =
      testing::message_of<ConfigError>([&] { store.ensure_run(sweep, other); });
  EXPECT_NE(message.find("metric mse: the run's model says higher is better, but the database "
                         "already ranks mse lower-is-better"),
            std::string::npos)
      << message;
  EXPECT_EQ(store.runs().size(), 1u);
}

// metric_name_problem and the metrics table's CHECK (migration 1) agree on every name the CHECK
// judges, and the names amptune records itself are refused for a model's metrics too.
TEST_F(StoreTest, MetricNamesAreRefusedAsTheMetricsTablesCheckRefusesThem) {
  Store store(db_path());
  const int64_t id = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec("s", 0, "a")).id;
  store.record_epoch(epoch_record(id, 0, {}));
  std::vector<std::string> names = {"mse", "acc1", "a_1", "x", "train_loss", "epoch", "lr",
                                    "global_step", "train_fps_mean", "train_fps_min",
                                    "train_fps_max", "epoch_seconds", "skipped_samples", "",
                                    "Bad'Name", "MSE", "1st", "_x", "a-b", "a b", "é"};
  for (const std::string& name : names) {
    bool stored = true;
    try {
      store.record_metrics(id, 0, {{name, 1.0}});
    } catch (const StoreError&) {
      stored = false;
    }
    EXPECT_EQ(metric_name_problem(name).empty(), stored) << "'" << name << "'";
  }
  for (const std::string& own : amptune_metric_names()) {
    EXPECT_NE(metric_name_problem(own), "") << own;
    EXPECT_NE(metric_name_problem(own).find("amptune records itself"), std::string::npos);
  }
  EXPECT_NE(metric_name_problem(std::string(65, 'a')), "");
}

}  // namespace
}  // namespace amptune::store

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

// detail::schema_tables, read from the migrations' text, names the tables a database migrated to
// each version has (the statements run here; the code parts of migrations create no table).
TEST_F(StoreTest, SchemaTablesAreWhatTheMigrationsCreate) {
  const std::vector<Migration> migrations = parse_migrations(embedded::store_sql);
  RawDb raw((dir_ / "migrated.sqlite").string());  // not a Store: no versions recorded
  raw.exec("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL)");
  for (const Migration& m : migrations) {
    raw.exec(m.sql);
    std::set<std::string> tables;
    for (const auto& row : raw.rows("SELECT lower(name) FROM sqlite_master WHERE type = 'table' "
                                    "AND name NOT LIKE 'sqlite_%'")) {
      tables.insert(row.at(0));
    }
    EXPECT_EQ(detail::schema_tables(m.version), tables) << "migration " << m.version;
  }
}

}  // namespace
}  // namespace amptune::store
