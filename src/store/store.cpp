// Store: opening, migrating and checking the database, sweeps; the helpers every part of the
// store shares (store/internal.h). Runs and claims: runs.cpp; epochs and metrics: epochs.cpp;
// diagnoses: diagnoses.cpp; reads of the query side: queries.cpp; merge: merge.cpp.
#include "store/store.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/embedded.h"
#include "core/error.h"
#include "store/internal.h"
#include "store/migrations.h"
#include "store/sqlite.h"

namespace amptune::store {

using sql::exec;
using sql::SqliteError;
using sql::Statement;
using detail::guarded;
using detail::now_utc;
using detail::parent_directory;
using detail::read_schema_version;

namespace fs = std::filesystem;

namespace detail {

std::string parent_directory(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? std::string(".") : dir.string();
}

[[noreturn]] void rethrow_with_context(const std::string& path, const std::string& action,
                                       const SqliteError& error) {
  std::string hint;
  switch (error.primary_code()) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      hint = "; another process held the database for more than 10 s, retry when it is done";
      break;
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      hint = "; check that " + path + " and its directory " + parent_directory(path) +
             " are writable";
      break;
    case SQLITE_FULL:
      hint = "; the disk is full, free space and retry";
      break;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      throw StoreError(path + " is not an amptune SQLite database (" + error.what() +
                       "); move it away or choose another database path");
    default:
      break;
  }
  throw StoreError(path + ": " + action + ": " + error.what() + hint);
}

std::string iso_utc(std::chrono::system_clock::time_point time) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  int millis = static_cast<int>(ms % 1000);
  if (millis < 0) {
    millis += 1000;
    seconds -= 1;
  }
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[40];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buffer, millis);
  return out;
}

std::string now_utc() { return iso_utc(std::chrono::system_clock::now()); }

std::string quote_identifier(const std::string& name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

bool same_name(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
           return std::tolower(x) == std::tolower(y);
         });
}

bool table_exists(sqlite3* db, const std::string& name) {
  return sql::exists(
      db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", name);
}

[[noreturn]] void bad_value(const std::string& path, const Cell& cell, const std::string& what) {
  throw StoreError(path + ": table " + cell.table + ", row " + std::to_string(cell.row) +
                   ", column " + cell.column + " " + what +
                   " (amptune never writes that: the database was edited or crafted); correct "
                   "or delete that row, or leave the database out");
}

int64_t int_column(const std::string& path, const Statement& row, int column, const Cell& cell,
                   int64_t min, int64_t max) {
  if (row.column_type(column) != SQLITE_INTEGER) {
    bad_value(path, cell, "holds '" + row.column_text(column).substr(0, 40) + "', not an integer");
  }
  const int64_t value = row.column_int(column);
  if (value < min || value > max) {
    bad_value(path, cell, "holds " + std::to_string(value) + ", outside [" +
                              std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

double real_column(const std::string& path, const Statement& row, int column, const Cell& cell) {
  const int type = row.column_type(column);
  if (type != SQLITE_FLOAT && type != SQLITE_INTEGER && type != SQLITE_NULL) {
    bad_value(path, cell, "holds '" + row.column_text(column).substr(0, 40) + "', not a number");
  }
  return row.column_double(column);
}

bool is_json_column(const std::string& column) {
  const std::string suffix = "_json";
  return column == "fork_overrides" ||
         (column.size() > suffix.size() &&
          column.compare(column.size() - suffix.size(), suffix.size(), suffix) == 0);
}

size_t max_value_bytes(const std::string& column) {
  return is_json_column(column) ? kMaxJsonBytes : sql::kMaxTextBytes;
}

namespace {
// The deepest nesting of arrays and objects in `text`, counted outside strings; stops counting
// past `limit` (one pass, no recursion).
int json_depth(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}
}  // namespace

nlohmann::json json_column(const std::string& path, const Cell& cell, const std::string& text) {
  if (text.size() > kMaxJsonBytes) {
    bad_value(path, cell,
              "holds " + std::to_string(text.size()) + " bytes of JSON, more than the " +
                  std::to_string(kMaxJsonBytes) + " amptune reads");
  }
  if (json_depth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    bad_value(path, cell, "holds JSON nested more than " + std::to_string(kMaxJsonDepth) +
                              " deep");
  }
  nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded()) bad_value(path, cell, "is not JSON: '" + text.substr(0, 40) + "'");
  return value;
}

nlohmann::json json_object_column(const std::string& path, const Cell& cell,
                                  const std::string& text) {
  nlohmann::json value = json_column(path, cell, text);
  if (!value.is_object()) {
    bad_value(path, cell, "is not a JSON object: '" + text.substr(0, 40) + "'");
  }
  return value;
}

int read_schema_version(sqlite3* db) {
  if (!table_exists(db, "schema_version")) return 0;
  return sql::query_one<int>(db, "SELECT COALESCE(MAX(version), 0) FROM schema_version").value();
}

int latest_schema_version() {
  static const int latest = [] {
    const std::vector<Migration> migrations = parse_migrations(embedded::store_sql);
    return migrations.empty() ? 0 : migrations.back().version;
  }();
  return latest;
}

const std::set<std::string>& schema_tables(int version) {
  static std::mutex mutex;
  static std::map<int, std::set<std::string>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(version); it != cache.end()) return it->second;
  // Statements outside comments: CREATE TABLE [IF NOT EXISTS] name and DROP TABLE [IF EXISTS]
  // name, in order (SQLite's words are case-insensitive, a name may be quoted).
  static const std::regex statement(
      R"((CREATE|DROP)\s+TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?["`\[]?(\w+))",
      std::regex::icase);
  std::set<std::string> tables = {"schema_version"};
  for (const Migration& m : parse_migrations(embedded::store_sql)) {
    if (m.version > version) break;
    std::string code;  // the migration without its -- comments
    std::istringstream lines(m.sql);
    for (std::string line; std::getline(lines, line);) {
      code += line.substr(0, line.find("--")) + "\n";
    }
    for (std::sregex_iterator it(code.begin(), code.end(), statement), end; it != end; ++it) {
      std::string name = (*it)[2];
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      const bool create = std::toupper(static_cast<unsigned char>((*it)[1].str()[0])) == 'C';
      if (create) tables.insert(name);
      else tables.erase(name);
    }
  }
  return cache.emplace(version, std::move(tables)).first->second;
}

void widen_checks(sqlite3* db, const std::string& path, int migration, const std::string& table,
                  const std::vector<std::pair<std::string, std::string>>& changes) {
  std::string sql =
      sql::query_one<std::string>(db,
                                  "SELECT sql FROM sqlite_master WHERE type = 'table' AND "
                                  "name = ? COLLATE NOCASE",
                                  table)
          .value_or("");
  const std::string where = path + ": migration " + std::to_string(migration) + ": ";
  for (const auto& [before, after] : changes) {
    const size_t at = sql.find(before);
    if (at == std::string::npos || sql.find(before, at + 1) != std::string::npos) {
      throw StoreError(where + "the " + table + " table's constraint is not the one amptune " +
                       "created (" + before + " not found once); the database was edited");
    }
    sql = sql.substr(0, at) + after + sql.substr(at + before.size());
  }
  const int64_t version = sql::query_one<int64_t>(db, "PRAGMA schema_version").value();
  sql::exec(db, "PRAGMA writable_schema = ON");
  try {
    sql::run(db, "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND "
             "name = ? COLLATE NOCASE", sql, table);
    sql::exec(db, "PRAGMA schema_version = " + std::to_string(version + 1));
  } catch (...) {
    sql::exec(db, "PRAGMA writable_schema = OFF");
    throw;
  }
  sql::exec(db, "PRAGMA writable_schema = OFF");
  const std::string check =
      sql::query_one<std::string>(db, "PRAGMA integrity_check").value_or("no answer");
  if (check != "ok") throw StoreError(where + "the schema is left inconsistent: " + check);
}

}  // namespace detail

namespace {

// Checks, before sqlite creates anything, that the database can live at `path`.
void check_location(const std::string& path) {
  if (path.empty()) throw StoreError("the database path is empty; pass a file such as results/amptune.sqlite");
  if (path == ":memory:") return;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    throw StoreError("cannot open database " + path +
                     ": it is a directory; pass a file inside it, e.g. " +
                     (fs::path(path) / "amptune.sqlite").string());
  }
  if (fs::exists(path, error)) return;  // sqlite reports what is wrong with an existing file
  std::string dir = parent_directory(path);
  auto status = fs::status(dir, error);
  if (!fs::exists(status)) {
    throw StoreError("cannot create database " + path + ": directory " + dir +
                     " does not exist; create it (mkdir -p " + dir +
                     ") or choose another database path");
  }
  if (!fs::is_directory(status)) {
    throw StoreError("cannot create database " + path + ": " + dir +
                     " is not a directory; choose another database path");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw StoreError("cannot create database " + path + ": directory " + dir +
                     " is not writable; fix its permissions or choose another database path");
  }
}

// The connection's settings: busy timeout, extended error codes, WAL, foreign keys, synchronous.
void configure_connection(sqlite3* db) {
  sql::bound_work(db);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_extended_result_codes(db, 1);
  // The first statement reads the header: a file that is not SQLite fails here (NOTADB).
  Statement(db, "PRAGMA journal_mode = WAL").step();
  exec(db, "PRAGMA foreign_keys = ON");
  // NORMAL in WAL mode: a commit survives a crash of the process; a power cut may lose the
  // last commits but never corrupts the file. Checkpoint files are fsynced before their
  // epoch row commits, so a lost commit leaves only an orphan file (garbage by design), never
  // a row pointing at a missing file.
  exec(db, "PRAGMA synchronous = NORMAL");
}

// Refuses `path` when, without a schema version, it holds tables: another program's database.
void refuse_foreign_database(sqlite3* db, const std::string& path) {
  const std::string names =
      sql::query_one<std::string>(db,
                                  "SELECT group_concat(name, ', ') FROM sqlite_master "
                                  "WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
          .value();
  if (!names.empty()) {
    throw StoreError(path + " is an SQLite database but not an amptune one (it has tables " +
                     names + " and no schema_version); choose another database path");
  }
}

// The table of applied migrations, made before the first.
constexpr const char* kCreateSchemaVersion =
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, "
    "applied_at TEXT NOT NULL)";

// Migration `m`'s SQL and what it needs done in code (runs re-hashed; CHECK constraints of
// older tables widened), inside the caller's transaction.
void apply_migration(sqlite3* db, const std::string& path, const Migration& m) {
  exec(db, m.sql);
  if (m.version == detail::kRehashMigration) detail::rehash_runs(db, path);
  if (m.version == detail::kPrunedStatusMigration) {
    detail::widen_checks(db, path, m.version, "runs",
                         {{"'failed', 'diverged')", "'failed', 'diverged', 'pruned')"}});
  }
  if (m.version == detail::kTuneRoundsMigration) {
    detail::widen_checks(
        db, path, m.version, "tune_rounds",
        {{"CHECK (round >= 1)", "CHECK (round >= 0)"},
         {"CHECK (kind IN ('search', 'bisect'))",
          "CHECK (kind IN ('search', 'union', 'bisect', 'confirm', 'reference'))"}});
  }
  sql::run(db, "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", m.version,
           now_utc());
}

// Brings the database at `path` to the latest schema, one migration per transaction (another
// process may migrate at the same time: each re-reads the version inside its transaction).
// StoreError for a database of another program or of a newer amptune.
void migrate(sqlite3* db, const std::string& path) {
  const std::vector<Migration> migrations = parse_migrations(embedded::store_sql);
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  int current = read_schema_version(db);
  if (current == 0) refuse_foreign_database(db, path);
  for (const Migration& migration : migrations) {
    if (migration.version <= current) continue;
    sql::write_transaction(db, [&] {
      exec(db, kCreateSchemaVersion);
      current = read_schema_version(db);  // another process may have migrated meanwhile
      if (current > latest) return;
      if (migration.version <= current) return;
      apply_migration(db, path, migration);
      current = migration.version;
    });
    if (current > latest) break;
  }
  if (current > latest) {
    throw StoreError(path + " was written by a newer amptune (schema " + std::to_string(current) +
                     " > " + std::to_string(latest) + "); upgrade amptune");
  }
}

// Refuses a database of schema `version` in which a table amptune's migrations create is
// missing or not an ordinary table (a view, possibly recursive, or a virtual table: a view
// EPOCHS, which SQLite finds for `FROM epochs`, would make every reader of epochs run forever).
// Names are matched as SQLite matches them, without regard to case. The user's own extra
// tables, views and triggers are left alone (a trigger runs only on a write, whose statements
// bound_work bounds like any other).
void check_schema_objects(sqlite3* db, const std::string& path, int version) {
  const auto crafted = [&](const std::string& what) {
    throw StoreError(path + ": " + what +
                     " (an amptune database never holds that: it was edited or crafted); "
                     "restore the database from a copy, or leave it out");
  };
  for (const std::string& table : detail::schema_tables(version)) {
    Statement kind(db,
                   "SELECT type, name, sql LIKE 'CREATE VIRTUAL%' FROM sqlite_master "
                   "WHERE name = ? COLLATE NOCASE",
                   table);
    if (!kind.step()) crafted("it has no table " + table);
    const std::string what = kind.column_int(2) ? "virtual table" : kind.column_text(0);
    if (what != "table") {
      crafted(table + " is a " + what + ", not a table (\"" + kind.column_text(1) +
              "\" in its schema)");
    }
  }
}

}  // namespace

// --- opening and migrating -------------------------------------------------------------------

Store::Store(const std::string& path) : Store(path, path) {}

std::unique_ptr<Store> Store::in_memory(const std::string& name) {
  return std::unique_ptr<Store>(new Store(":memory:", name));
}

Store::Store(const std::string& open_path, const std::string& name) : path_(name) {
  check_location(open_path);
  int rc = sqlite3_open_v2(open_path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw StoreError("cannot open or create database " + path_ + ": " + message +
                     "; check that the file and its directory " + parent_directory(path_) +
                     " are writable");
  }
  try {
    guarded(path_, "opening", [&] { configure_connection(db_); });
    guarded(path_, "checking the schema", [&] {
      // Before migrating too: a migration reads tables (migration 12 every run), and a table
      // replaced by a recursive view would have it read forever.
      const int version = read_schema_version(db_);
      if (version > 0 && version <= detail::latest_schema_version()) {
        check_schema_objects(db_, path_, version);
      }
    });
    guarded(path_, "migrating the schema", [&] { migrate(db_, path_); });
    guarded(path_, "checking the schema",
            [&] { check_schema_objects(db_, path_, read_schema_version(db_)); });
    guarded(path_, "reading the runs table",
            [&] { setting_columns_ = detail::read_setting_columns(db_); });
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

Store::Store(const std::string& path, ReadOnly) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw StoreError("database " + path + " does not exist; run a sweep first or pass --db FILE");
  }
  const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw StoreError("cannot open database " + path + " to read it: " + message);
  }
  try {
    guarded(path_, "opening it read-only", [&] {
      sql::bound_work(db_);
      sqlite3_busy_timeout(db_, 10000);
      sqlite3_extended_result_codes(db_, 1);
      exec(db_, "PRAGMA query_only = ON");
      const int current = read_schema_version(db_);  // NOTADB here for a file that is not SQLite
      const int latest = detail::latest_schema_version();
      if (current < 1 || !detail::table_exists(db_, "runs")) {
        throw StoreError(path_ + " is not an amptune database (no schema_version or runs table)");
      }
      if (current > latest) {
        throw StoreError(path_ + " was written by a newer amptune (schema " +
                         std::to_string(current) + " > " + std::to_string(latest) +
                         "); upgrade amptune");
      }
      if (current < latest) {
        throw StoreError(path_ + " has schema " + std::to_string(current) +
                         ", this amptune reads " + std::to_string(latest) +
                         "; migrate it once with a command that writes " +
                         "it (amptune status --db " + path_ + ")");
      }
      check_schema_objects(db_, path_, current);
      setting_columns_ = detail::read_setting_columns(db_);
    });
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

std::unique_ptr<Store> Store::open_read_only(const std::string& path) {
  return std::unique_ptr<Store>(new Store(path, ReadOnly{}));
}

Store::~Store() {
  if (db_) sqlite3_close_v2(db_);
}

int Store::schema_version() const {
  return guarded(path_, "reading the schema version", [&] { return read_schema_version(db_); });
}

std::string Store::database_id() const {
  return guarded(path_, "reading the database id", [&] {
    const auto id = sql::query_one<std::string>(db_, "SELECT id FROM database_identity LIMIT 1");
    if (!id) throw StoreError(path_ + " has no database id (table database_identity)");
    return *id;
  });
}

std::vector<std::string> Store::setting_columns() const {
  std::vector<std::string> names;
  for (const auto& column : setting_columns_) names.push_back(column.first);
  return names;
}

std::string Store::integrity_check() const {
  return guarded(path_, "checking integrity", [&] {
    std::string problems;
    {
      Statement check(db_, "PRAGMA integrity_check");
      while (check.step()) {
        std::string line = check.column_text(0);
        if (line == "ok") continue;
        problems += (problems.empty() ? "" : "; ") + line;
      }
    }
    Statement foreign(db_, "PRAGMA foreign_key_check");
    while (foreign.step()) {
      problems += (problems.empty() ? "" : "; ") + std::string("row ") +
                  foreign.column_text(1) + " of " + foreign.column_text(0) +
                  " references a missing row of " + foreign.column_text(2);
    }
    return problems.empty() ? std::string("ok") : problems;
  });
}

// --- sweeps ----------------------------------------------------------------------------------

int64_t Store::ensure_sweep(const std::string& name, const std::string& description,
                            const std::string& yaml_text, const std::string& source_path) {
  if (name.empty()) throw StoreError(path_ + ": a sweep needs a name (the `name:` key of its YAML)");
  return detail::guarded_write(path_, db_, "saving sweep '" + name + "'", [&] {
    sql::run(db_,
             "INSERT INTO sweeps (name, description, yaml, source_path, created_at, "
             "updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5) "
             "ON CONFLICT (name) DO UPDATE SET description = excluded.description, "
             "yaml = excluded.yaml, source_path = excluded.source_path, "
             "updated_at = excluded.updated_at "
             "WHERE description IS NOT excluded.description OR yaml IS NOT excluded.yaml "
             "OR source_path IS NOT excluded.source_path",
             name, description, yaml_text, source_path, now_utc());
    return sql::query_one<int64_t>(db_, "SELECT id FROM sweeps WHERE name = ?", name).value();
  });
}

}  // namespace amptune::store
