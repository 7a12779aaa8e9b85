// Private helpers of src/store: RAII over the sqlite3 C API. Not used outside the store layer.
//
// Every failure throws SqliteError (a StoreError that keeps sqlite's extended result code) with
// sqlite's message and the first line of the statement; Store adds the database path and what it
// was doing.
#pragma once

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"

namespace amptune::store::sql {

class SqliteError : public StoreError {
 public:
  SqliteError(int code, const std::string& what) : StoreError(what), code_(code) {}
  int code() const { return code_; }                 // extended result code
  int primary_code() const { return code_ & 0xff; }  // SQLITE_BUSY, SQLITE_NOTADB, ...

 private:
  int code_;
};

// The most bytes of one TEXT or BLOB value a read takes (Statement::column_text refuses a longer
// one with a StoreError naming the column and the statement): amptune writes none near it.
constexpr size_t kMaxTextBytes = 1024 * 1024;
// The most virtual-machine steps one statement may take, all its rows together, before it is
// interrupted (seconds on these cores; docs/DATABASE.md "How it is written" has the figures):
// a database that makes a query run away (a view, data amptune never writes) ends in a
// StoreError naming the statement, never a hang.
constexpr int kMaxStatementSteps = 250'000'000;
// Installs on `db` the progress handler that interrupts a statement past kMaxStatementSteps,
// or once the calling thread's WorkBound (core/process.h) is passed; such a statement's step()
// then throws SqliteError (SQLITE_INTERRUPT) saying so, or WorkAbandoned for the bound.
void bound_work(sqlite3* db);

// Throws SqliteError for `rc` (not SQLITE_OK / ROW / DONE), reading the message from `db`.
[[noreturn]] void raise(sqlite3* db, int rc, std::string_view sql);

// Runs one or more statements that return no rows we need.
void exec(sqlite3* db, std::string_view sql);

// One prepared statement. Parameters are 1-based, columns 0-based.
//
//   Statement select(db, "SELECT name, value FROM metrics WHERE run_id = ? AND epoch = ?",
//                    run_id, epoch);
//   while (select.step()) use(select.column_text(0), select.column_double(1));
//   insert.bind_all(run_id, name, value).run();  // a statement prepared once, run in a loop
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  // Prepares `sql` and binds `args` to ?1, ?2, ... as bind_all does.
  template <class... Args>
  Statement(sqlite3* db, std::string_view sql, const Args&... args) : Statement(db, sql) {
    bind_all(args...);
  }
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, bool value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, double value);  // NaN is stored as NULL (SQLite has no NaN)
  Statement& bind(int index, std::string_view value);
  Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  Statement& bind_null(int index);
  Statement& bind(int index, std::nullopt_t) { return bind_null(index); }
  template <class T>
  Statement& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind_null(index);
  }
  // reset(), then `args` bound to ?1, ?2, ... in order (parameters not given stay NULL).
  template <class... Args>
  Statement& bind_all(const Args&... args) {
    reset();
    int index = 0;
    (bind(++index, args), ...);
    return *this;
  }
  // "" binds NULL (for optional text columns such as timestamps).
  Statement& bind_text_or_null(int index, const std::string& value);
  // The value of `from`'s column as it is (type and bytes), e.g. from a statement of another
  // connection: copying a row without interpreting it.
  Statement& bind_column(int index, const Statement& from, int column);

  Statement& reset();  // ready to run again, bindings cleared
  bool step();  // true while a row is available
  void run();   // steps to completion, ignoring rows

  int column_count() const;
  std::string column_name(int column) const;
  int column_type(int column) const;  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_NULL
  bool is_null(int column) const { return column_type(column) == SQLITE_NULL; }
  int64_t column_int(int column) const;  // NULL -> 0
  double column_double(int column) const;  // NULL -> NaN
  // NULL -> ""; a value longer than kMaxTextBytes is a SqliteError naming the column.
  std::string column_text(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
  int64_t progress_ = 0;  // progress-handler calls since it was prepared or reset (bound_work)
};

// One statement that returns no rows we need, with `args` bound to ?1, ?2, ...; returns the
// number of rows it inserted, updated or deleted.
template <class... Args>
int run(sqlite3* db, std::string_view sql, const Args&... args) {
  Statement(db, sql, args...).run();
  return sqlite3_changes(db);
}

// Whether the query with `args` bound to ?1, ?2, ... returns a row.
template <class... Args>
bool exists(sqlite3* db, std::string_view sql, const Args&... args) {
  return Statement(db, sql, args...).step();
}

// The first column of the query's first row (`args` bound to ?1, ?2, ...), std::nullopt when it
// returns no row. T: int64_t, int, bool, double or std::string (NULL reads as column_* does).
template <class T, class... Args>
std::optional<T> query_one(sqlite3* db, std::string_view sql, const Args&... args) {
  Statement select(db, sql, args...);
  if (!select.step()) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    return select.column_text(0);
  } else if constexpr (std::is_same_v<T, double>) {
    return select.column_double(0);
  } else if constexpr (std::is_same_v<T, bool>) {
    return select.column_int(0) != 0;
  } else {
    static_assert(std::is_integral_v<T>, "query_one reads int64_t, int, bool, double, std::string");
    return static_cast<T>(select.column_int(0));
  }
}

// Steps `select` to its end and returns read(select) of each row, in order.
template <class Read>
auto read_rows(Statement& select, Read&& read) -> std::vector<decltype(read(select))> {
  std::vector<decltype(read(select))> rows;
  while (select.step()) rows.push_back(read(select));
  return rows;
}

// Runs f() inside BEGIN IMMEDIATE ... COMMIT; any exception rolls back and propagates.
template <class F>
auto write_transaction(sqlite3* db, F&& f) -> decltype(f()) {
  exec(db, "BEGIN IMMEDIATE");
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      exec(db, "COMMIT");
    } else {
      auto result = f();
      exec(db, "COMMIT");
      return result;
    }
  } catch (...) {
    // sqlite may already have rolled back (SQLITE_FULL, SQLITE_IOERR): then autocommit is on.
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

}  // namespace amptune::store::sql
