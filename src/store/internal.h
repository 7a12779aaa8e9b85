// Private to src/store: what store.cpp and merge.cpp share (error context, schema version).
#pragma once

#include <optional>
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

// Now as ISO-8601 UTC text with milliseconds (the database's timestamps).
std::string now_utc();

// Whether the main schema of `db` has that table.
bool table_exists(sqlite3* db, const std::string& name);
// The highest version recorded in schema_version; 0 without that table.
int read_schema_version(sqlite3* db);
// The last migration of schemas/store.sql (what this build creates).
int latest_schema_version();

// Migration 12's code part (store/rehash.cpp): every run's config_hash recomputed from its
// config_json under the current identity rules, the old one kept in legacy_config_hash; logs how
// many changed. Runs inside the migration's transaction.
constexpr int kRehashMigration = 12;
void rehash_runs(sqlite3* db, const std::string& path);

// A fork as its identity needs it.
struct ForkOf {
  std::string parent_identity;  // the parent's identity after migration 12
  int epoch = 0;
  bool reset_optimizer = false;
};
// The identity migration 12 gives a run recorded before it (runs.config_json, and for a fork its
// parent's new identity); "" with the reason in *why_kept when it keeps its own (a config this
// schema cannot read, a parent not re-hashed). Used by rehash_runs and by merge for inputs of an
// older schema.
std::string migrated_identity(const std::string& config_json, const std::string& run_name,
                              const std::optional<ForkOf>& fork, std::string* why_kept);

}  // namespace amptune::store::detail
