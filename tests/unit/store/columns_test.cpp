// The store's column descriptors (store/columns.h) against the schema they describe: every
// table of a freshly migrated database, column by column (PRAGMA table_info), and the checker on
// planted mismatches so that it can fail; the metrics that are columns of epochs
// (records::kEpochColumnMetrics) against what schemas/store.sql's views and the metrics table's
// CHECK treat as such.
#include "store/columns.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "records/records.h"
#include "store/store.h"
#include "support/scratch.h"

namespace amptune::store {
namespace {

namespace fs = std::filesystem;

// A raw connection to a database file, closed with the object.
class Raw {
 public:
  explicit Raw(const std::string& path) { sqlite3_open(path.c_str(), &db_); }
  ~Raw() { sqlite3_close(db_); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  sqlite3* db() const { return db_; }
  // Runs `sql`; its error message, "" when it ran.
  std::string exec(const std::string& sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    const std::string message = rc == SQLITE_OK ? "" : (error ? error : "failed");
    sqlite3_free(error);
    return message;
  }
  // The first column of the first row of `sql` as text; "NULL" for NULL, "" for no row.
  std::string text(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr), SQLITE_OK) << sql;
    std::string out;
    if (sqlite3_step(statement) == SQLITE_ROW) {
      const unsigned char* value = sqlite3_column_text(statement, 0);
      out = value ? reinterpret_cast<const char*>(value) : "NULL";
    }
    sqlite3_finalize(statement);
    return out;
  }
  std::set<std::string> column(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr), SQLITE_OK) << sql;
    std::set<std::string> out;
    while (sqlite3_step(statement) == SQLITE_ROW) {
      out.insert(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)));
    }
    sqlite3_finalize(statement);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

class StoreColumns : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::path(testing::scratch_dir()) / "fresh.sqlite").string();
    Store{path_};  // created and migrated to the latest schema
  }
  std::string path_;
};

std::string lines(const std::vector<std::string>& problems) {
  std::string out;
  for (const std::string& p : problems) out += p + "\n";
  return out;
}

bool has_line(const std::vector<std::string>& problems, const std::string& line) {
  return std::find(problems.begin(), problems.end(), line) != problems.end();
}

TEST_F(StoreColumns, DescribeEveryTableOfAFreshDatabase) {
  Raw raw(path_);
  const std::vector<std::string> problems = detail::schema_differences(raw.db(), detail::tables());
  EXPECT_TRUE(problems.empty()) << "store/columns.cpp and schemas/store.sql disagree:\n"
                                << lines(problems);
  // The checker read something: every table and column of the database was compared.
  EXPECT_EQ(raw.text("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                     "name NOT LIKE 'sqlite_%'"),
            std::to_string(detail::tables().size()));
}

TEST_F(StoreColumns, TheCheckerFindsEachKindOfMismatch) {
  Raw raw(path_);
  std::vector<detail::Table> planted = detail::tables();
  auto table = [&](const char* name) -> detail::Table& {
    return *std::find_if(planted.begin(), planted.end(),
                         [&](const detail::Table& t) { return std::string(t.name) == name; });
  };
  table("runs").columns.push_back({"bogus", detail::ColumnType::kText, false});
  std::vector<detail::Column>& epochs = table("epochs").columns;
  epochs.erase(std::find_if(epochs.begin(), epochs.end(),
                            [](const detail::Column& c) { return std::string(c.name) == "lr"; }));
  for (detail::Column& c : table("metrics").columns) {
    if (std::string(c.name) == "value") c.not_null = true;
    if (std::string(c.name) == "name") c.type = detail::ColumnType::kInteger;
  }
  planted.erase(std::find_if(planted.begin(), planted.end(), [](const detail::Table& t) {
    return std::string(t.name) == "tune_rounds";
  }));
  planted.push_back({"no_such_table", {{"id", detail::ColumnType::kInteger, true}}});

  const std::vector<std::string> problems = detail::schema_differences(raw.db(), planted);
  EXPECT_EQ(problems.size(), 6u) << lines(problems);
  for (const char* expected :
       {"runs.bogus is described but not in the schema",
        "epochs.lr is in the schema but not described",
        "metrics.value may be NULL in the schema, described otherwise",
        "metrics.name is declared 'TEXT', described 'INTEGER'",
        "table tune_rounds is not described", "table no_such_table is not in the schema"}) {
    EXPECT_TRUE(has_line(problems, expected)) << expected << " not in:\n" << lines(problems);
  }
}

TEST_F(StoreColumns, SettingColumnsAreTheRunsColumnsTheStoreDoesNotWriteItself) {
  std::set<std::string> described;
  for (const detail::Column& c : detail::table("runs").columns) {
    if (c.setting) described.insert(c.name);
    // Every column of runs is read into a RunRow: a member of its own or, a setting, its columns.
    if (std::string(c.name) != "id") {
      EXPECT_NE(c.fill, nullptr) << "runs." << c.name;
    }
  }
  const std::vector<std::string> settings = Store(path_).setting_columns();
  EXPECT_EQ(std::set<std::string>(settings.begin(), settings.end()), described);
  EXPECT_TRUE(described.count("opt_level"));
  EXPECT_FALSE(described.count("config_json"));
}

}  // namespace

// The metrics that are columns of epochs (records::kEpochColumnMetrics) are exactly the ones
// schemas/store.sql's views treat so: epoch_values' UNION names them, and best_epoch, run_results
// and epoch_matrix (their CASE lists) read a primary metric of that name from epochs; the metrics
// table's CHECK refuses rows of those names. Read from the views' output on a fresh database.
TEST(StoreTest, EpochColumnMetricsAreTheViewsOwn) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(testing::scratch_dir()) / "views.sqlite").string();
  {
    Store store(path);
    records::RunSpec spec;
    spec.config_json = "{}";
    spec.config_hash = "0123456789abcdef";
    const records::RunRow run = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec);
    records::EpochRecord record;
    record.run_id = run.id;
    record.global_step = 10;
    record.lr = 0.1;
    record.train_loss = 2;
    record.train_fps_mean = 100;
    record.train_fps_min = 90;
    record.train_fps_max = 110;
    record.epoch_seconds = 5;
    record.skipped_samples = 1;
    record.metrics = {{"acc1", 0.5}};
    record.times = records::EpochTimes{1, 1, 1, 1, 1, 1, 1, 1};
    store.record_epoch(record);
  }
  const std::set<std::string> expected(std::begin(records::kEpochColumnMetrics),
                                       std::end(records::kEpochColumnMetrics));
  Raw raw(path);
  std::set<std::string> unioned = raw.column("SELECT DISTINCT name FROM epoch_values");
  EXPECT_EQ(unioned.erase("acc1"), 1u);
  EXPECT_EQ(unioned, expected) << "epoch_values' UNION";

  // Every numeric column of epochs as the run's primary metric: the views find a value exactly
  // for the epoch-column metrics (no metrics row has such a name).
  std::set<std::string> best, results, matrix;
  for (const detail::Column& c : detail::table("epochs").columns) {
    if (c.type != detail::ColumnType::kReal && c.type != detail::ColumnType::kInteger) continue;
    const std::string name = c.name;
    ASSERT_EQ(raw.exec("UPDATE runs SET primary_metric = '" + name + "'"), "");
    if (raw.text("SELECT best_value FROM best_epoch") != "") best.insert(name);
    if (raw.text("SELECT best_value FROM run_results") != "NULL") results.insert(name);
    if (raw.text("SELECT last_value FROM run_results") == "NULL") results.erase(name);
    if (raw.text("SELECT by_epoch FROM epoch_matrix") != "{}") matrix.insert(name);
    const std::string refused = raw.exec(
        "INSERT INTO metrics (run_id, epoch, name, value) VALUES (1, 0, '" + name + "', 1)");
    const bool is_metric = expected.count(name) != 0;
    if (is_metric) {
      EXPECT_NE(refused.find("CHECK constraint failed"), std::string::npos) << name;
    }
    // records::metric_name_problem keeps out of custom tasks' metrics what the CHECK refuses.
    const bool named_a_column = records::metric_name_problem(name).find(
                                    "is a column of every epoch row") != std::string::npos;
    EXPECT_EQ(named_a_column, !refused.empty()) << name << ": " << refused;
    if (refused.empty()) {
      ASSERT_EQ(raw.exec("DELETE FROM metrics WHERE name = '" + name + "'"), "");
    }
  }
  EXPECT_EQ(best, expected) << "best_epoch";
  EXPECT_EQ(results, expected) << "run_results' CASE lists";
  EXPECT_EQ(matrix, expected) << "epoch_matrix's CASE list";
}

}  // namespace amptune::store
