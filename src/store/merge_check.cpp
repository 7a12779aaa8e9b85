// check_merge_input (store.h): whether a database can be merged at all, checked before anything
// is written: an SQLite file that passes quick_check, of amptune's schema at a version this build
// knows, whose tables are tables, whose values have the types and ranges the readers take
// (store/columns.h) and the sizes they read, without ids twice or forks in a circle.
#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/columns.h"
#include "store/internal.h"
#include "store/merge_internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {
namespace merging {

Input::Input(const std::string& path) {
  const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw StoreError("cannot open " + path + " to merge it: " + message +
                     "; check that it and its directory are readable");
  }
  sql::bound_work(db_);
  sqlite3_busy_timeout(db_, 10000);
  sqlite3_extended_result_codes(db_, 1);
  // Another machine's file: no SQL function in its schema (views, defaults) runs trusted, and
  // nothing may corrupt it even by accident.
  sqlite3_db_config(db_, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db_, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
}

void rethrow_reading(const std::string& path, const std::string& action,
                     const sql::SqliteError& error) {
  if (error.primary_code() == SQLITE_NOTADB) {
    throw StoreError(path + " is not an SQLite database (" + error.what() +
                     "); it cannot be merged: leave it out");
  }
  if (error.primary_code() == SQLITE_CORRUPT) {
    throw StoreError(path + " is corrupt (" + error.what() +
                     "); it cannot be merged: restore it or leave it out");
  }
  throw StoreError(path + ": " + action + ": " + error.what());
}

}  // namespace merging

namespace {

namespace fs = std::filesystem;
using detail::quote_identifier;
using merging::Input;
using merging::reading_input;
using sql::Statement;

// The refusal of an input that holds what an amptune database never does.
[[noreturn]] void crafted(const std::string& path, const std::string& what) {
  throw StoreError(path + " cannot be merged: " + what +
                   " (an amptune database never holds that; it was edited or crafted)");
}

// Refuses an input where a table merge reads (columns.h Table::merged) is a view, a virtual table
// or another object (before anything reads one of them: a recursive view returns rows forever,
// and a view or virtual table would run code of the input's choosing whenever merge reads it).
// SQLite finds "EPOCHS" for epochs, so the names are looked up as it does.
void check_tables_are_tables(sqlite3* in, const std::string& path) {
  for (const detail::Table& table : detail::tables()) {
    if (!table.merged) continue;
    Statement kind(in,
                   "SELECT type, name, sql LIKE 'CREATE VIRTUAL%' FROM sqlite_master "
                   "WHERE name = ? COLLATE NOCASE",
                   std::string(table.name));
    while (kind.step()) {
      const std::string what = kind.column_int(2) ? "virtual table" : kind.column_text(0);
      if (what != "table") {
        crafted(path, std::string(table.name) + " is a " + what + ", not a table (\"" +
                          kind.column_text(1) + "\" in its schema)");
      }
    }
  }
}

// Whether the input's `table` has `column` (older schemas lack some).
bool has_column(sqlite3* in, const std::string& table, const std::string& column) {
  return sql::exists(in, "SELECT 1 FROM pragma_table_info(?) WHERE name = ? COLLATE NOCASE", table,
                     column);
}

// Refuses an input with an INTEGER outside its column's range (columns.h: what the readers take
// and the schema's CHECK says), naming the file, the table, the row and the column, rather than
// a reader of the target later.
void check_ranges(sqlite3* in, const std::string& path) {
  for (const detail::Table& table : detail::tables()) {
    if (!table.merged) continue;
    for (const detail::Column& c : table.columns) {
      if (!c.has_range() || !has_column(in, table.name, c.name)) continue;  // an older schema
      const std::string column = quote_identifier(c.name);
      Statement bad(in,
                    "SELECT rowid, " + column + " FROM " + quote_identifier(table.name) +
                        " WHERE typeof(" + column + ") = 'integer' AND (" + column + " < ? OR " +
                        column + " > ?) LIMIT 1",
                    c.min, c.max);
      if (bad.step()) {  // the readers' rule (int_column) refuses it with their message
        detail::int_column(path, bad, 1, {table.name, bad.column_int(0), c.name}, c.min, c.max);
      }
    }
  }
}

// Refuses an input with a TEXT or BLOB value longer than its column's bound
// (detail::max_value_bytes: JSON columns 256 KiB, other text 1 MiB) in a table merge reads,
// naming the file, the table, the row and the column: every later reader of the target would pay
// for it (a 50 MB config_json took 1.5 GB in each `list`).
void check_sizes(sqlite3* in, const std::string& path) {
  for (const detail::Table& described : detail::tables()) {
    if (!described.merged || !detail::table_exists(in, described.name)) continue;
    const std::string table = described.name;
    std::vector<std::string> columns;
    Statement info(in, "SELECT name FROM pragma_table_info(?)", table);
    while (info.step()) columns.push_back(info.column_text(0));
    for (const std::string& name : columns) {
      const std::string column = quote_identifier(name);
      const auto bound = static_cast<int64_t>(detail::max_value_bytes(name));
      Statement big(in,
                    "SELECT rowid, length(CAST(" + column + " AS BLOB)) FROM " +
                        quote_identifier(table) + " WHERE typeof(" + column +
                        ") IN ('text', 'blob') AND length(CAST(" + column +
                        " AS BLOB)) > ? LIMIT 1",
                    bound);
      if (big.step()) {
        detail::bad_value(path, {table, big.column_int(0), name},
                          "holds " + std::to_string(big.column_int(1)) + " bytes, more than the " +
                              std::to_string(bound) + " amptune reads there");
      }
    }
  }
}

// Refuses an input whose structure merge cannot trust (check_merge_input, after
// check_tables_are_tables): a column value of the wrong type, an id twice, a fork whose parents
// lead back to itself. Throws StoreError naming the file, the table and the row.
void check_structure(sqlite3* in, const std::string& path) {
  auto fail = [&](const std::string& what) { crafted(path, what); };
  for (const detail::Table& table : detail::tables()) {
    if (!table.merged) continue;
    for (const detail::Column& c : table.columns) {
      if (!c.typed || !has_column(in, table.name, c.name)) continue;  // an older schema
      const std::string column = quote_identifier(c.name);
      Statement bad(in, "SELECT rowid, typeof(" + column + ") FROM " +
                            quote_identifier(table.name) + " WHERE typeof(" + column +
                            ") NOT IN (" + c.sqlite_types() + ") LIMIT 1");
      if (bad.step()) {
        fail(std::string(table.name) + "." + c.name + " holds a " + bad.column_text(1) +
             " value (row " + std::to_string(bad.column_int(0)) + ")");
      }
    }
  }
  check_ranges(in, path);
  check_sizes(in, path);
  for (const char* table : {"sweeps", "runs"}) {
    Statement twice(
        in, std::string("SELECT id FROM ") + table + " GROUP BY id HAVING count(*) > 1 LIMIT 1");
    if (twice.step()) {
      fail(std::string(table) + " has id " + std::to_string(twice.column_int(0)) + " twice");
    }
  }
  if (!sql::exists(in,
                   "SELECT 1 FROM pragma_table_info('runs') "
                   "WHERE name = 'parent_run_id' COLLATE NOCASE")) {
    return;
  }
  std::unordered_map<int64_t, int64_t> parent;
  Statement links(in, "SELECT id, parent_run_id FROM runs WHERE parent_run_id IS NOT NULL");
  while (links.step()) parent[links.column_int(0)] = links.column_int(1);
  for (const auto& [run, first] : parent) {
    int64_t at = first;
    for (size_t steps = 0; parent.count(at); at = parent[at]) {
      if (at == run || ++steps > parent.size()) {
        fail("run " + std::to_string(run) + "'s fork parents lead back to itself");
      }
    }
  }
}

}  // namespace

int check_merge_input(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw StoreError("merge input " + path +
                     " does not exist; check the path (a shard's "
                     "database is results/<sweep>.shard-K-of-N.sqlite)");
  }
  if (!fs::is_regular_file(path, ec)) {
    throw StoreError("merge input " + path + " is not a file; pass database files");
  }
  Input in(path);
  return reading_input(path, "checking it", [&] {
    Statement(in.db(), "SELECT count(*) FROM sqlite_master").step();  // NOTADB here
    std::string problems;
    Statement check(in.db(), "PRAGMA quick_check");
    while (check.step()) {
      const std::string line = check.column_text(0);
      if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
    }
    if (!problems.empty()) {
      throw StoreError(path + " is corrupt (quick_check: " + problems +
                       "); it cannot be merged: restore it or leave it out");
    }
    check_tables_are_tables(in.db(), path);
    const int version = detail::read_schema_version(in.db());
    if (version < 1 || !detail::table_exists(in.db(), "runs")) {
      throw StoreError(path +
                       " is not an amptune database (no schema_version or runs table); "
                       "leave it out");
    }
    if (version > detail::latest_schema_version()) {
      throw StoreError(path + " was written by a newer amptune (schema " + std::to_string(version) +
                       " > " + std::to_string(detail::latest_schema_version()) +
                       "); merge it with that amptune, or upgrade this one");
    }
    check_structure(in.db(), path);
    return version;
  });
}

}  // namespace amptune::store
