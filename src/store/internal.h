// Private to src/store: what store.cpp and merge.cpp share (error context, schema version).
#pragma once

#include <string>

#include "store/sqlite.h"

namespace amptune::store::detail {

// The directory of a database path ("." for a bare file name).
std::string parent_directory(const std::string& path);

// A sqlite failure while doing `action` on the database at `path` as a StoreError naming both,
// with a hint for the usual causes (busy, read-only, full, not a database).
[[noreturn]] void rethrow_with_context(const std::string& path, const std::string& action,
                                       const sql::SqliteError& error);

// Runs f(), turning a raw sqlite failure into a StoreError naming the file and the action.
template <class F>
auto guarded(const std::string& path, const std::string& action, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const sql::SqliteError& error) {
    rethrow_with_context(path, action, error);
  }
}

// Whether the main schema of `db` has that table.
bool table_exists(sqlite3* db, const std::string& name);
// The highest version recorded in schema_version; 0 without that table.
int read_schema_version(sqlite3* db);
// The last migration of schemas/store.sql (what this build creates).
int latest_schema_version();

}  // namespace amptune::store::detail
