// Unit tests of the store's SQLite wrapper (src/store/sqlite.h): binding a statement's
// parameters in one call, and the helpers run / exists / query_one / read_rows. An in-memory
// database each.
#include "store/sqlite.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/process.h"

namespace amptune::store::sql {
namespace {

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sqlite3_open(":memory:", &db_), SQLITE_OK);
    exec(db_, "CREATE TABLE t (i INTEGER, r REAL, s TEXT)");
  }
  void TearDown() override { sqlite3_close(db_); }

  sqlite3* db_ = nullptr;
};

TEST_F(SqliteTest, BindAllBindsInOrderAndRunReturnsTheRowsChanged) {
  EXPECT_EQ(run(db_, "INSERT INTO t (i, r, s) VALUES (?, ?, ?)", int64_t{7}, 0.5, "seven"), 1);
  EXPECT_EQ(run(db_, "INSERT INTO t (i, r, s) VALUES (?3, ?2, ?1)", std::string("eight"), 1.5, 8),
            1);
  Statement select(db_, "SELECT i, r, s FROM t WHERE i >= ? ORDER BY i", 7);
  ASSERT_TRUE(select.step());
  EXPECT_EQ(select.column_int(0), 7);
  EXPECT_EQ(select.column_double(1), 0.5);
  EXPECT_EQ(select.column_text(2), "seven");
  ASSERT_TRUE(select.step());
  EXPECT_EQ(select.column_int(0), 8);
  EXPECT_EQ(select.column_text(2), "eight");
  EXPECT_FALSE(select.step());
  EXPECT_EQ(run(db_, "UPDATE t SET s = 'x'"), 2);
  EXPECT_EQ(run(db_, "DELETE FROM t WHERE i = ?", 99), 0);
}

TEST_F(SqliteTest, BindAllClearsTheBindingsOfTheLastRunAndUnsetOnesAreNull) {
  Statement insert(db_, "INSERT INTO t (i, r, s) VALUES (?, ?, ?)");
  insert.bind_all(1, 1.0, "one").run();
  insert.bind_all(2).run();  // ?2 and ?3 not given: NULL, not the previous row's values
  EXPECT_EQ(query_one<int64_t>(db_, "SELECT count(*) FROM t WHERE r IS NULL AND s IS NULL"), 1);
  EXPECT_EQ(query_one<int64_t>(db_, "SELECT count(*) FROM t"), 2);
}

TEST_F(SqliteTest, OptionalsNulloptAndNanBindNull) {
  const std::optional<double> none;
  const std::optional<std::string> text = "t";
  run(db_, "INSERT INTO t (i, r, s) VALUES (?, ?, ?)", std::nullopt, none, text);
  run(db_, "INSERT INTO t (i, r, s) VALUES (?, ?, ?)", std::optional<int64_t>(3),
      std::numeric_limits<double>::quiet_NaN(), std::nullopt);
  EXPECT_TRUE(exists(db_, "SELECT 1 FROM t WHERE i IS NULL AND r IS NULL AND s = 't'"));
  EXPECT_TRUE(exists(db_, "SELECT 1 FROM t WHERE i = 3 AND r IS NULL AND s IS NULL"));
}

TEST_F(SqliteTest, ExistsAndQueryOneReadTheFirstRow) {
  run(db_, "INSERT INTO t (i, r, s) VALUES (1, 2.5, 'a'), (2, NULL, NULL)");
  EXPECT_TRUE(exists(db_, "SELECT 1 FROM t WHERE s = ?", "a"));
  EXPECT_FALSE(exists(db_, "SELECT 1 FROM t WHERE s = ?", "b"));
  EXPECT_EQ(query_one<std::string>(db_, "SELECT s FROM t WHERE i = ?", 1), "a");
  EXPECT_EQ(query_one<double>(db_, "SELECT r FROM t WHERE i = ?", 1), 2.5);
  EXPECT_EQ(query_one<int>(db_, "SELECT i FROM t WHERE s = ?", "a"), 1);
  EXPECT_EQ(query_one<bool>(db_, "SELECT i = 2 FROM t WHERE i = 2"), true);
  EXPECT_EQ(query_one<int64_t>(db_, "SELECT i FROM t WHERE i = ?", 3), std::nullopt);
  // A row whose value is NULL reads as column_* does: "", NaN, 0.
  EXPECT_EQ(query_one<std::string>(db_, "SELECT s FROM t WHERE i = 2"), "");
  EXPECT_TRUE(std::isnan(query_one<double>(db_, "SELECT r FROM t WHERE i = 2").value()));
}

TEST_F(SqliteTest, ReadRowsReadsEveryRowInOrder) {
  run(db_, "INSERT INTO t (i, s) VALUES (3, 'c'), (1, 'a'), (2, 'b')");
  Statement select(db_, "SELECT i, s FROM t WHERE i > ? ORDER BY i", 1);
  const auto rows = read_rows(select, [](const Statement& row) {
    return std::to_string(row.column_int(0)) + row.column_text(1);
  });
  EXPECT_EQ(rows, (std::vector<std::string>{"2b", "3c"}));
  Statement none(db_, "SELECT i FROM t WHERE i > 3");
  EXPECT_TRUE(read_rows(none, [](const Statement& row) { return row.column_int(0); }).empty());
}

TEST_F(SqliteTest, AFailureNamesTheStatement) {
  try {
    run(db_, "INSERT INTO missing (i) VALUES (?)", 1);
    FAIL() << "no error";
  } catch (const SqliteError& error) {
    EXPECT_NE(std::string(error.what()).find("INSERT INTO missing"), std::string::npos)
        << error.what();
  }
  // More values than the statement has parameters.
  EXPECT_THROW(run(db_, "DELETE FROM t WHERE i = ?", 1, 2), SqliteError);
}

}  // namespace
}  // namespace amptune::store::sql

namespace amptune::store::sql {
namespace {

// A statement that never ends by itself (a recursive CTE without a bound, as a crafted view can
// hold) is interrupted past kMaxStatementSteps with an error naming the statement; without
// bound_work it would run until killed.
TEST_F(SqliteTest, AStatementThatRunsAwayIsInterruptedNamingIt) {
  bound_work(db_);
  Statement runaway(db_,
                    "WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM x) "
                    "SELECT count(*) FROM x");
  try {
    runaway.step();
    FAIL() << "the statement ended";
  } catch (const SqliteError& e) {
    EXPECT_EQ(e.primary_code(), SQLITE_INTERRUPT);
    EXPECT_NE(std::string(e.what()).find("ran past 250000000 steps"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[in: WITH RECURSIVE x(n)"), std::string::npos)
        << e.what();
  }
  // The connection goes on: a short statement after it runs.
  EXPECT_EQ(query_one<int>(db_, "SELECT 1 + 1"), 2);
}

// Inside a WorkBound whose deadline passes, a long statement stops with WorkAbandoned (a web
// page past its time); the same statement is not stopped by the bound outside the scope.
TEST_F(SqliteTest, AStatementStopsWhenTheThreadsWorkBoundPasses) {
  bound_work(db_);
  const std::string sql =
      "WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM x WHERE n < 200000000) "
      "SELECT count(*) FROM x";
  bool left = false;
  {
    WorkBound bound(std::chrono::steady_clock::now() + std::chrono::hours(1),
                    [&] { return left; });
    left = true;  // the client is gone
    try {
      Statement(db_, sql).step();
      FAIL() << "the statement ended";
    } catch (const WorkAbandoned& e) {
      EXPECT_FALSE(e.timed_out());
    }
  }
  {
    WorkBound bound(std::chrono::steady_clock::now(), nullptr);  // already past
    EXPECT_THROW(Statement(db_, sql).step(), WorkAbandoned);
  }
  EXPECT_EQ(query_one<int>(db_, "SELECT 2 + 2"), 4);
}

// A value longer than kMaxTextBytes is refused as it is read, naming the column.
TEST_F(SqliteTest, AValueLongerThanTheBoundIsRefusedNamingTheColumn) {
  run(db_, "INSERT INTO t (i, s) VALUES (1, ?)", std::string(kMaxTextBytes, 'a'));
  run(db_, "INSERT INTO t (i, s) VALUES (2, ?)", std::string(kMaxTextBytes + 1, 'a'));
  Statement select(db_, "SELECT s AS label FROM t ORDER BY i");
  ASSERT_TRUE(select.step());
  EXPECT_EQ(select.column_text(0).size(), kMaxTextBytes);
  ASSERT_TRUE(select.step());
  try {
    (void)select.column_text(0);
    FAIL() << "read a value past the bound";
  } catch (const SqliteError& e) {
    EXPECT_NE(std::string(e.what()).find("column label holds a value of 1048577 bytes"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace amptune::store::sql
