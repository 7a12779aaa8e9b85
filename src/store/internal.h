// Private to src/store: what its translation units share (error context, schema version, the
// run checks every writer makes).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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

// guarded() around one write transaction: all or nothing, a failure naming the file and the
// action.
template <class F>
auto guarded_write(const std::string& path, sqlite3* db, const std::string& action, F&& f)
    -> decltype(f()) {
  return guarded(path, action, [&] { return sql::write_transaction(db, f); });
}

// A time as ISO-8601 UTC text with milliseconds (the database's timestamps), and now.
std::string iso_utc(std::chrono::system_clock::time_point time);
std::string now_utc();

// An SQL identifier in double quotes, inner quotes doubled.
std::string quote_identifier(const std::string& name);

// Whether two table or column names name the same thing to SQLite: equal but for the case of
// ASCII letters (SQLite's rule, and COLLATE NOCASE's). Every comparison of a name read from a
// database with one of amptune's goes through this or `= ? COLLATE NOCASE`: a case-sensitive
// one misses a view "EPOCHS" that every query of epochs then reads.
bool same_name(const std::string& a, const std::string& b);

// Whether the main schema of `db` has that table (an ordinary one, not a view).
bool table_exists(sqlite3* db, const std::string& name);
// The highest version recorded in schema_version; 0 without that table.
int read_schema_version(sqlite3* db);
// The last migration of schemas/store.sql (what this build creates).
int latest_schema_version();
// The tables (lower-case) a database of schema `version` has: schema_version and those the
// migrations 1 to `version` create and do not drop, read from their SQL text once per version
// (schemas/store.sql stays the one list; StoreTest.SchemaTablesAreWhatTheMigrationsCreate
// compares it with a database migrated so far).
const std::set<std::string>& schema_tables(int version);

// --- values read back (store.cpp) ---
// Every number and JSON text the store hands on is checked for type and range as it is read (a
// database from elsewhere, or edited by hand, may hold anything its columns' affinity lets in);
// a bad one is a StoreError naming the table, the row and the column, never a crash further up.

// The largest INTEGER the readers (and merge, for what it copies) take where a C++ int holds
// the value (epochs, rungs, indices, counts); an epoch (0-based) one less, so that a run's epoch
// count, its last epoch + 1, is an int too.
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxEpoch = kMaxInt - 1;
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();  // steps, counts, bytes

// A value of the database: its table, row (the id, or the rowid) and column.
struct Cell {
  std::string table;
  int64_t row = 0;
  std::string column;
};
// StoreError "<path>: table T, row R, column C <what>; ..." for a value amptune never writes.
[[noreturn]] void bad_value(const std::string& path, const Cell& cell, const std::string& what);
// The word `text` of `cell` as `parse` reads it (records/records.h parse_*: an enum-like column);
// bad_value when it is none of the words amptune writes there.
template <class Parse>
auto word_column(const std::string& path, const Cell& cell, const std::string& text, Parse parse) {
  const auto value = parse(text);
  if (!value) {
    bad_value(path, cell, "is not a word amptune writes there: '" + text.substr(0, 40) + "'");
  }
  return *value;
}
// Column `column` of `row`: an INTEGER in [min, max], else bad_value.
int64_t int_column(const std::string& path, const sql::Statement& row, int column,
                   const Cell& cell, int64_t min, int64_t max);
// Column `column` of `row` as a number: REAL or INTEGER; NULL reads as NaN; else bad_value.
double real_column(const std::string& path, const sql::Statement& row, int column,
                   const Cell& cell);
// The size of a value amptune reads back (docs/SECURITY.md "Databases from elsewhere"): a JSON
// column (config_json, axes_json, fork_overrides, ...: is_json_column) at most kMaxJsonBytes
// bytes nested at most kMaxJsonDepth deep (amptune writes configs of about 1.6 KB, 4 deep);
// every other text at most sql::kMaxTextBytes (the Statement refuses a longer one on any read).
// Merge refuses an input value past them, the readers a value of a database opened directly, and
// the writers never store one (a run's config past the bound is a ConfigError).
constexpr size_t kMaxJsonBytes = 256 * 1024;
constexpr int kMaxJsonDepth = 64;
bool is_json_column(const std::string& column);
// The bound of `column`'s values: kMaxJsonBytes for a JSON column, else sql::kMaxTextBytes.
size_t max_value_bytes(const std::string& column);
// The JSON text `text` of `cell` parsed; bad_value when it is not JSON, is longer than
// kMaxJsonBytes or nests deeper than kMaxJsonDepth (checked before it is parsed: nlohmann's
// copy and dump recurse, so a value 300,000 deep would overflow the stack of a later reader).
nlohmann::json json_column(const std::string& path, const Cell& cell, const std::string& text);
// json_column, and bad_value unless the value is a JSON object (a config, axes, overrides, a
// tune block or change).
nlohmann::json json_object_column(const std::string& path, const Cell& cell,
                                  const std::string& text);

// --- prune decisions (store/pruning.cpp) ---

// compared_json of a prune_decisions row, parsed and checked to be what amptune writes: an
// array of objects {"run_id": <integer>, "value": <number or null>}; else bad_value.
nlohmann::json compared_runs(const std::string& path, const Cell& cell, const std::string& text);

// --- runs (store/runs.cpp) ---

// The setting columns of the runs table (Store::setting_columns): name, declared type.
std::vector<std::pair<std::string, std::string>> read_setting_columns(sqlite3* db);

// StoreError "<path>: <action>: no run has id N" unless the run exists.
void require_run(sqlite3* db, const std::string& path, int64_t run_id, const std::string& action);
// ClaimLostError when a process other than this one holds the run (called inside the write
// transaction, before anything is written); StoreError when the run does not exist.
void require_holder(sqlite3* db, const std::string& path, int64_t run_id,
                    const std::string& action);
// heartbeat_at = now.
void touch_heartbeat(sqlite3* db, int64_t run_id, const std::string& now);

// Migration 12's code part (store/rehash.cpp): every run's config_hash recomputed from its
// config_json under the current identity rules, the old one kept in legacy_config_hash; logs how
// many changed. Runs inside the migration's transaction.
constexpr int kRehashMigration = 12;
void rehash_runs(sqlite3* db, const std::string& path);

// The code part of migrations that widen CHECK constraints (SQLite cannot alter one): in the
// definition of `table`, each `changes` text (before, after) replaced, by SQLite's documented
// procedure for schema changes that leave every stored row valid (writable_schema,
// schema_version + 1, integrity_check). Runs inside the migration's transaction; StoreError
// naming the migration when a `before` is not found exactly once (the database was edited).
// Migration 15: runs.status takes 'pruned'. Migration 18: tune_rounds takes round 0 and the
// kinds union, confirm and reference.
constexpr int kPrunedStatusMigration = 15;
constexpr int kTuneRoundsMigration = 18;
void widen_checks(sqlite3* db, const std::string& path, int migration, const std::string& table,
                  const std::vector<std::pair<std::string, std::string>>& changes);

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
