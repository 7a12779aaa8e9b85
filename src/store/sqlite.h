// Private helpers of src/store: RAII over the sqlite3 C API. Not used outside the store layer.
//
// Every failure throws SqliteError (a StoreError that keeps sqlite's extended result code) with
// sqlite's message and the first line of the statement; Store adds the database path and what it
// was doing.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

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

// Throws SqliteError for `rc` (not SQLITE_OK / ROW / DONE), reading the message from `db`.
[[noreturn]] void raise(sqlite3* db, int rc, std::string_view sql);

// Runs one or more statements that return no rows we need.
void exec(sqlite3* db, std::string_view sql);

// One prepared statement. Parameters are 1-based, columns 0-based.
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
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
  std::string column_text(int column) const;  // NULL -> ""

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

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
