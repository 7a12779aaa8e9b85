#include "store/store.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/embedded.h"
#include "core/error.h"
#include "store/internal.h"
#include "store/migrations.h"
#include "store/sqlite.h"

namespace amptune::store {

using sql::exec;
using sql::SqliteError;
using sql::Statement;
using sql::write_transaction;
using detail::guarded;
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

bool table_exists(sqlite3* db, const std::string& name) {
  Statement statement(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  statement.bind(1, name);
  return statement.step();
}

int read_schema_version(sqlite3* db) {
  if (!table_exists(db, "schema_version")) return 0;
  Statement statement(db, "SELECT COALESCE(MAX(version), 0) FROM schema_version");
  statement.step();
  return static_cast<int>(statement.column_int(0));
}

int latest_schema_version() {
  static const int latest = [] {
    const std::vector<Migration> migrations = parse_migrations(embedded::store_sql);
    return migrations.empty() ? 0 : migrations.back().version;
  }();
  return latest;
}

}  // namespace detail

namespace {

using json = nlohmann::json;

// Columns of runs that are not settings: written by the store itself.
const std::set<std::string>& reserved_run_columns() {
  static const std::set<std::string> names = {
      "id",         "sweep_id",      "name",          "cell_index",   "label",
      "status",     "config_json",   "config_hash",   "axes_json",    "message",
      "summary_json", "started_at",  "finished_at",   "heartbeat_at", "created_at",
      "amptune_version", "git_commit", "git_dirty",   "torch_version", "host",
      "threads",    "device",        "command_line",
      "parent_run_id", "parent_epoch", "fork_overrides", "fork_changes", "reset_optimizer",
      "claim_machine", "claim_pid", "claim_pid_start", "world_size", "global_batch",
      "allocator", "data_fingerprint", "legacy_config_hash"};
  return names;
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

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::string quote_identifier(const std::string& name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

bool is_json_type(const std::string& declared) { return upper(declared).find("JSON") != std::string::npos; }
bool is_bool_type(const std::string& declared) { return upper(declared).find("BOOL") != std::string::npos; }

// Binds a RunSpec::columns value (JSON text) to a column of the given declared type.
void bind_setting(Statement& statement, int index, const json& value, const std::string& declared) {
  if (value.is_null()) {
    statement.bind_null(index);
  } else if (is_json_type(declared)) {
    statement.bind(index, value.dump());
  } else if (value.is_boolean()) {
    statement.bind(index, value.get<bool>());
  } else if (value.is_number_integer() || value.is_number_unsigned()) {
    statement.bind(index, value.get<int64_t>());
  } else if (value.is_number_float()) {
    statement.bind(index, value.get<double>());
  } else if (value.is_string()) {
    statement.bind(index, value.get<std::string>());
  } else {
    statement.bind(index, value.dump());  // array / object in a non-JSON column
  }
}

// Reads a setting column back as JSON text.
std::string read_setting(const Statement& statement, int column, const std::string& declared) {
  switch (statement.column_type(column)) {
    case SQLITE_INTEGER: {
      int64_t value = statement.column_int(column);
      if (is_bool_type(declared)) return value ? "true" : "false";
      return std::to_string(value);
    }
    case SQLITE_FLOAT:
      return json(statement.column_double(column)).dump();
    case SQLITE_TEXT:
      if (is_json_type(declared)) return statement.column_text(column);
      return json(statement.column_text(column)).dump();
    default:
      return json(statement.column_text(column)).dump();  // BLOB: not written by amptune
  }
}

bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

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

// Runs an insert of metric `name`; a name the table's CHECK refuses is a StoreError prefixed with
// `where` that says which names are allowed.
void run_metric_insert(Statement& insert, const std::string& where, const std::string& name) {
  try {
    insert.run();
  } catch (const SqliteError& error) {
    if (error.code() != SQLITE_CONSTRAINT_CHECK) throw;
    throw StoreError(where + ": metric name '" + name + "' is not allowed (" + error.what() +
                     "); metric names are lowercase identifiers [a-z][a-z0-9_]*, and lr, "
                     "train_loss, train_fps_*, epoch_seconds, skipped_samples, global_step "
                     "go in their EpochRecord fields");
  }
}

// Sets metric rows of an epoch (inserted, or replacing a value of the same name). A name the
// table's CHECK refuses is a StoreError prefixed with `where` that says which names are allowed.
void write_metrics(sqlite3* db, const std::string& where, int64_t run_id, int epoch,
                   const std::map<std::string, double>& metrics) {
  Statement upsert(db,
                   "INSERT INTO metrics (run_id, epoch, name, value) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT (run_id, epoch, name) DO UPDATE SET value = excluded.value");
  for (const auto& [name, value] : metrics) {
    upsert.reset().bind(1, run_id).bind(2, epoch).bind(3, name).bind(4, value);
    run_metric_insert(upsert, where, name);
  }
}

// Replaces the run's initial_metrics rows (migration 9) with `metrics`.
void write_initial_metrics(sqlite3* db, const std::string& where, int64_t run_id,
                           const std::map<std::string, double>& metrics) {
  Statement remove(db, "DELETE FROM initial_metrics WHERE run_id = ?");
  remove.bind(1, run_id).run();
  Statement insert(db, "INSERT INTO initial_metrics (run_id, name, value) VALUES (?, ?, ?)");
  for (const auto& [name, value] : metrics) {
    insert.reset().bind(1, run_id).bind(2, name).bind(3, value);
    run_metric_insert(insert, where, name);
  }
}

constexpr const char* kRunSelect =
    "SELECT r.*, s.name AS sweep_name, "
    "(SELECT COALESCE(MAX(e.epoch) + 1, 0) FROM epochs e WHERE e.run_id = r.id) AS epochs_done "
    "FROM runs r JOIN sweeps s ON s.id = r.sweep_id ";

}  // namespace

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::kPending: return "pending";
    case RunStatus::kRunning: return "running";
    case RunStatus::kDone: return "done";
    case RunStatus::kFailed: return "failed";
    case RunStatus::kDiverged: return "diverged";
  }
  throw StoreError("unknown run status value " + std::to_string(static_cast<int>(status)));
}

RunStatus parse_status(const std::string& text) {
  if (text == "pending") return RunStatus::kPending;
  if (text == "running") return RunStatus::kRunning;
  if (text == "done") return RunStatus::kDone;
  if (text == "failed") return RunStatus::kFailed;
  if (text == "diverged") return RunStatus::kDiverged;
  throw StoreError("unknown run status '" + text +
                   "'; expected pending, running, done, failed or diverged");
}

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
    guarded(path_, "opening", [&] {
      sqlite3_busy_timeout(db_, 10000);
      sqlite3_extended_result_codes(db_, 1);
      // The first statement reads the header: a file that is not SQLite fails here (NOTADB).
      {
        Statement mode(db_, "PRAGMA journal_mode = WAL");
        mode.step();
      }
      exec(db_, "PRAGMA foreign_keys = ON");
      // NORMAL in WAL mode: a commit survives a crash of the process; a power cut may lose the
      // last commits but never corrupts the file. Checkpoint files are fsynced before their
      // epoch row commits, so a lost commit leaves only an orphan file (garbage by design), never
      // a row pointing at a missing file.
      exec(db_, "PRAGMA synchronous = NORMAL");
    });
    const std::vector<Migration> migrations = parse_migrations(embedded::store_sql);
    const int latest = migrations.empty() ? 0 : migrations.back().version;
    guarded(path_, "migrating the schema", [&] {
      int current = read_schema_version(db_);
      if (current == 0) {
        Statement tables(db_,
                         "SELECT group_concat(name, ', ') FROM sqlite_master "
                         "WHERE type = 'table' AND name NOT LIKE 'sqlite_%'");
        tables.step();
        std::string names = tables.column_text(0);
        if (!names.empty()) {
          throw StoreError(path_ + " is an SQLite database but not an amptune one (it has tables " +
                           names + " and no schema_version); choose another database path");
        }
      }
      for (const Migration& migration : migrations) {
        if (migration.version <= current) continue;
        write_transaction(db_, [&] {
          exec(db_,
               "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, "
               "applied_at TEXT NOT NULL)");
          current = read_schema_version(db_);  // another process may have migrated meanwhile
          if (current > latest) return;
          if (migration.version <= current) return;
          exec(db_, migration.sql);
          if (migration.version == detail::kRehashMigration) detail::rehash_runs(db_, path_);
          Statement record(db_, "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)");
          record.bind(1, migration.version).bind(2, now_utc()).run();
          current = migration.version;
        });
        if (current > latest) break;
      }
      if (current > latest) {
        throw StoreError(path_ + " was written by a newer amptune (schema " +
                         std::to_string(current) + " > " + std::to_string(latest) +
                         "); upgrade amptune");
      }
    });
    guarded(path_, "reading the runs table", [&] {
      Statement info(db_, "SELECT name, type FROM pragma_table_info('runs') ORDER BY cid");
      while (info.step()) {
        std::string name = info.column_text(0);
        if (!reserved_run_columns().count(name)) {
          setting_columns_.emplace_back(name, info.column_text(1));
        }
      }
    });
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

Store::~Store() {
  if (db_) sqlite3_close_v2(db_);
}

int Store::schema_version() const {
  return guarded(path_, "reading the schema version", [&] { return read_schema_version(db_); });
}

std::string Store::database_id() const {
  return guarded(path_, "reading the database id", [&] {
    Statement select(db_, "SELECT id FROM database_identity LIMIT 1");
    if (!select.step()) throw StoreError(path_ + " has no database id (table database_identity)");
    return select.column_text(0);
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

// --- sweeps and runs -------------------------------------------------------------------------

int64_t Store::ensure_sweep(const std::string& name, const std::string& description,
                            const std::string& yaml_text, const std::string& source_path) {
  if (name.empty()) throw StoreError(path_ + ": a sweep needs a name (the `name:` key of its YAML)");
  return guarded(path_, "saving sweep '" + name + "'", [&] {
    return write_transaction(db_, [&] {
      std::string now = now_utc();
      Statement upsert(db_,
                       "INSERT INTO sweeps (name, description, yaml, source_path, created_at, "
                       "updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5) "
                       "ON CONFLICT (name) DO UPDATE SET description = excluded.description, "
                       "yaml = excluded.yaml, source_path = excluded.source_path, "
                       "updated_at = excluded.updated_at "
                       "WHERE description IS NOT excluded.description OR yaml IS NOT excluded.yaml "
                       "OR source_path IS NOT excluded.source_path");
      upsert.bind(1, name).bind(2, description).bind(3, yaml_text).bind(4, source_path).bind(5, now);
      upsert.run();
      Statement id(db_, "SELECT id FROM sweeps WHERE name = ?");
      id.bind(1, name);
      id.step();
      return id.column_int(0);
    });
  });
}

namespace {

RunRow read_run(const Statement& row,
                const std::vector<std::pair<std::string, std::string>>& setting_columns) {
  RunRow run;
  std::map<std::string, std::string> declared(setting_columns.begin(), setting_columns.end());
  for (int column = 0; column < row.column_count(); ++column) {
    const std::string name = row.column_name(column);
    if (name == "id") run.id = row.column_int(column);
    else if (name == "sweep_id") run.sweep_id = row.column_int(column);
    else if (name == "sweep_name") run.sweep_name = row.column_text(column);
    else if (name == "name") run.name = row.column_text(column);
    else if (name == "cell_index") run.cell_index = static_cast<int>(row.column_int(column));
    else if (name == "label") run.label = row.column_text(column);
    else if (name == "status") run.status = parse_status(row.column_text(column));
    else if (name == "config_json") run.config_json = row.column_text(column);
    else if (name == "config_hash") run.config_hash = row.column_text(column);
    else if (name == "data_fingerprint") run.data_fingerprint = row.column_text(column);
    else if (name == "legacy_config_hash") run.legacy_config_hash = row.column_text(column);
    else if (name == "axes_json") run.axes_json = row.column_text(column);
    else if (name == "epochs_done") run.epochs_done = static_cast<int>(row.column_int(column));
    else if (name == "message") run.message = row.column_text(column);
    else if (name == "summary_json") run.summary_json = row.column_text(column);
    else if (name == "started_at") run.started_at = row.column_text(column);
    else if (name == "finished_at") run.finished_at = row.column_text(column);
    else if (name == "heartbeat_at") run.heartbeat_at = row.column_text(column);
    else if (name == "created_at") run.created_at = row.column_text(column);
    else if (name == "amptune_version") run.provenance.amptune_version = row.column_text(column);
    else if (name == "git_commit") run.provenance.git_commit = row.column_text(column);
    else if (name == "git_dirty") run.provenance.git_dirty = row.column_int(column) != 0;
    else if (name == "torch_version") run.provenance.torch_version = row.column_text(column);
    else if (name == "host") run.provenance.host = row.column_text(column);
    else if (name == "allocator") run.provenance.allocator = row.column_text(column);
    else if (name == "threads") {
      if (!row.is_null(column)) run.provenance.threads = static_cast<int>(row.column_int(column));
    } else if (name == "world_size") {
      if (!row.is_null(column)) run.provenance.world_size = static_cast<int>(row.column_int(column));
    } else if (name == "global_batch") {
      if (!row.is_null(column)) run.provenance.global_batch = row.column_int(column);
    } else if (name == "device") run.provenance.device = row.column_text(column);
    else if (name == "command_line") run.provenance.command_line = row.column_text(column);
    else if (name == "claim_pid") {
      if (!row.is_null(column)) {
        if (!run.holder) run.holder.emplace();
        run.holder->pid = row.column_int(column);
      }
    } else if (name == "claim_machine" || name == "claim_pid_start") {
      // read after the loop (claim_pid decides whether the run has a holder)
    }
    else if (name == "parent_run_id") {
      if (!row.is_null(column)) {
        if (!run.fork) run.fork.emplace();
        run.fork->parent_run_id = row.column_int(column);
      }
    } else if (name == "parent_epoch" || name == "fork_overrides" || name == "fork_changes" ||
               name == "reset_optimizer") {
      // read after the loop (parent_run_id decides whether the run is a fork)
    } else if (auto it = declared.find(name); it != declared.end()) {
      if (name == "primary_metric") run.primary_metric = row.column_text(column);
      if (!row.is_null(column)) run.columns[name] = read_setting(row, column, it->second);
    }
  }
  if (run.fork) {
    for (int column = 0; column < row.column_count(); ++column) {
      const std::string name = row.column_name(column);
      if (name == "parent_epoch") run.fork->parent_epoch = static_cast<int>(row.column_int(column));
      else if (name == "fork_overrides") run.fork->overrides_json = row.column_text(column);
      else if (name == "fork_changes") run.fork->changes = row.column_text(column);
      else if (name == "reset_optimizer") run.fork->reset_optimizer = row.column_int(column) != 0;
    }
  }
  if (run.holder) {
    for (int column = 0; column < row.column_count(); ++column) {
      const std::string name = row.column_name(column);
      if (name == "claim_machine") run.holder->machine = row.column_text(column);
      else if (name == "claim_pid_start") run.holder->start_ticks = row.column_int(column);
    }
  }
  return run;
}

// The run of `sweep_id` that `spec` identifies: the one with its identity, else a run recorded
// before data fingerprints (migration 12) whose config hash is spec.config_key and whose data
// are not yet known (it takes spec's fingerprint when ensure_run updates it) or are spec's.
std::optional<int64_t> find_identity(sqlite3* db, int64_t sweep_id, const RunSpec& spec) {
  Statement exact(db, "SELECT id FROM runs WHERE sweep_id = ? AND config_hash = ?");
  exact.bind(1, sweep_id).bind(2, spec.config_hash);
  if (exact.step()) return exact.column_int(0);
  if (spec.config_key.empty() || spec.config_key == spec.config_hash) return std::nullopt;
  Statement legacy(db,
                   "SELECT id FROM runs WHERE sweep_id = ? AND config_hash = ? AND "
                   "(data_fingerprint IS NULL OR data_fingerprint = ?)");
  legacy.bind(1, sweep_id).bind(2, spec.config_key).bind(3, spec.data_fingerprint);
  if (legacy.step()) return legacy.column_int(0);
  return std::nullopt;
}

}  // namespace

RunRow Store::ensure_run(int64_t sweep_id, const RunSpec& spec) {
  const std::string what = "creating run " + std::to_string(spec.cell_index) + " of sweep " +
                           (spec.sweep_name.empty() ? std::to_string(sweep_id) : spec.sweep_name);
  auto fail = [&](const std::string& why) -> void { throw StoreError(path_ + ": " + what + ": " + why); };
  if (spec.config_hash.size() < 8) fail("config_hash '" + spec.config_hash + "' is shorter than 8 characters");
  if (spec.cell_index < 0) fail("cell_index must be >= 0");
  if (!json::accept(spec.config_json)) fail("config_json is not valid JSON");
  if (spec.fork) {
    if (spec.fork->parent_epoch < 0) fail("fork parent_epoch must be >= 0");
    if (!json::accept(spec.fork->overrides_json) || !json::parse(spec.fork->overrides_json).is_object()) {
      fail("fork overrides must be a JSON object, got " + spec.fork->overrides_json);
    }
  }
  json axes = json::object();
  if (!spec.axes_json.empty()) {
    if (!json::accept(spec.axes_json)) fail("axes_json is not valid JSON: " + spec.axes_json);
    axes = json::parse(spec.axes_json);
    if (!axes.is_object()) fail("axes_json must be a JSON object, got " + spec.axes_json);
  }
  std::map<std::string, std::string> declared(setting_columns_.begin(), setting_columns_.end());
  std::vector<std::pair<std::string, json>> settings;
  for (const auto& [column, text] : spec.columns) {
    auto it = declared.find(column);
    if (it == declared.end()) {
      std::string known;
      for (const auto& c : setting_columns_) known += (known.empty() ? "" : ", ") + c.first;
      fail("runs has no setting column '" + column + "' (schema " +
           std::to_string(schema_version()) + "; known: " + known +
           "); add it with a migration in schemas/store.sql");
    }
    if (!json::accept(text)) fail("value of column " + column + " is not JSON text: " + text);
    settings.emplace_back(column, json::parse(text));
  }

  return guarded(path_, what, [&] {
    return write_transaction(db_, [&] {
      Statement sweep(db_, "SELECT name FROM sweeps WHERE id = ?");
      sweep.bind(1, sweep_id);
      if (!sweep.step()) fail("no sweep has id " + std::to_string(sweep_id));
      const std::string sweep_name = sweep.column_text(0);
      if (!spec.sweep_name.empty() && spec.sweep_name != sweep_name) {
        fail("RunSpec names sweep '" + spec.sweep_name + "' but sweep " + std::to_string(sweep_id) +
             " is '" + sweep_name + "'");
      }

      if (const std::optional<int64_t> id = find_identity(db_, sweep_id, spec)) {
        // The same run. What it is does not change; how and where it executes may (another
        // checkpoint.dir, thread count, a copy of the data at another path): the config this
        // invocation planned is the one it trains with.
        Statement update(db_,
                         "UPDATE runs SET config_json = ?1, data_fingerprint = "
                         "COALESCE(data_fingerprint, NULLIF(?2, '')) WHERE id = ?3 AND "
                         "(config_json IS NOT ?1 OR (data_fingerprint IS NULL AND ?2 <> ''))");
        // (no write, so no page change, when nothing differs: the common case of a sweep run again)
        update.bind(1, spec.config_json).bind(2, spec.data_fingerprint).bind(3, *id).run();
        Statement found(db_, std::string(kRunSelect) + "WHERE r.id = ?");
        found.bind(1, *id);
        found.step();
        return read_run(found, setting_columns_);
      }

      if (spec.fork) {
        Statement parent(db_, "SELECT sweep_id FROM runs WHERE id = ?");
        parent.bind(1, spec.fork->parent_run_id);
        if (!parent.step()) fail("fork parent run " + std::to_string(spec.fork->parent_run_id) + " does not exist");
        if (parent.column_int(0) != sweep_id) fail("a fork must belong to its parent's sweep");
      }
      std::string columns = "sweep_id, name, cell_index, label, config_json, config_hash, "
                            "axes_json, created_at, parent_run_id, parent_epoch, fork_overrides, "
                            "fork_changes, reset_optimizer, data_fingerprint";
      std::string values = "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, '')";
      for (const auto& setting : settings) {
        columns += ", " + quote_identifier(setting.first);
        values += ", ?";
      }
      Statement insert(db_, "INSERT INTO runs (" + columns + ") VALUES (" + values + ")");
      const std::string name = sweep_name + "/" + std::to_string(spec.cell_index) + "-" +
                               spec.config_hash.substr(0, 8);
      insert.bind(1, sweep_id).bind(2, name).bind(3, spec.cell_index).bind(4, spec.label);
      insert.bind(5, spec.config_json).bind(6, spec.config_hash).bind(7, axes.dump());
      insert.bind(8, now_utc());
      if (spec.fork) {
        insert.bind(9, spec.fork->parent_run_id).bind(10, spec.fork->parent_epoch);
        insert.bind(11, spec.fork->overrides_json).bind(12, spec.fork->changes);
        insert.bind(13, spec.fork->reset_optimizer ? 1 : 0);
      } else {
        for (int i = 9; i <= 13; ++i) insert.bind_null(i);
      }
      insert.bind(14, spec.data_fingerprint);
      int index = 15;
      for (const auto& setting : settings) {
        bind_setting(insert, index++, setting.second, declared[setting.first]);
      }
      insert.run();
      const int64_t run_id = sqlite3_last_insert_rowid(db_);

      Statement param(db_, "INSERT INTO run_params (run_id, key, value_json) VALUES (?, ?, ?)");
      for (const auto& [key, value] : axes.items()) {
        param.reset().bind(1, run_id).bind(2, key).bind(3, value.dump());
        param.run();
      }

      Statement created(db_, std::string(kRunSelect) + "WHERE r.id = ?");
      created.bind(1, run_id);
      created.step();
      return read_run(created, setting_columns_);
    });
  });
}

std::optional<RunRow> Store::find_run(int64_t id) const {
  return guarded(path_, "reading run " + std::to_string(id), [&]() -> std::optional<RunRow> {
    Statement statement(db_, std::string(kRunSelect) + "WHERE r.id = ?");
    statement.bind(1, id);
    if (!statement.step()) return std::nullopt;
    return read_run(statement, setting_columns_);
  });
}

std::optional<RunRow> Store::find_run(const std::string& id_or_name) const {
  if (all_digits(id_or_name) && id_or_name.size() < 19) return find_run(std::stoll(id_or_name));
  return guarded(path_, "reading run " + id_or_name, [&]() -> std::optional<RunRow> {
    Statement statement(db_, std::string(kRunSelect) + "WHERE r.name = ?");
    statement.bind(1, id_or_name);
    if (!statement.step()) return std::nullopt;
    return read_run(statement, setting_columns_);
  });
}

std::vector<RunRow> Store::runs(const std::optional<std::string>& sweep_name) const {
  return guarded(path_, "listing runs", [&] {
    std::vector<RunRow> rows;
    Statement statement(db_, std::string(kRunSelect) +
                                 (sweep_name ? "WHERE s.name = ? " : "") +
                                 "ORDER BY s.id, r.cell_index, r.id");
    if (sweep_name) statement.bind(1, *sweep_name);
    while (statement.step()) rows.push_back(read_run(statement, setting_columns_));
    return rows;
  });
}

// --- run status ------------------------------------------------------------------------------

namespace {

constexpr const char* kProvenanceAssignments =
    "amptune_version = ?3, git_commit = ?4, git_dirty = ?5, torch_version = ?6, host = ?7, "
    "threads = ?8, device = ?9, command_line = ?10, claim_machine = ?11, claim_pid = ?12, "
    "claim_pid_start = ?13, world_size = ?14, global_batch = ?15, allocator = ?16";

// Binds ?1 = now, ?2 = run id, ?3..?10 and ?14..?16 = provenance, ?11..?13 = this process as
// the holder.
void bind_provenance(Statement& statement, const std::string& now, int64_t run_id,
                     const Provenance& provenance) {
  statement.bind(1, now).bind(2, run_id);
  statement.bind(3, provenance.amptune_version).bind(4, provenance.git_commit);
  statement.bind(5, provenance.git_dirty).bind(6, provenance.torch_version);
  statement.bind(7, provenance.host).bind(8, provenance.threads).bind(9, provenance.device);
  statement.bind(10, provenance.command_line);
  const ProcessIdentity self = current_process();
  statement.bind(11, self.machine).bind(12, self.pid).bind(13, self.start_ticks);
  statement.bind(14, provenance.world_size).bind(15, provenance.global_batch);
  statement.bind(16, provenance.allocator);
}

[[noreturn]] void no_such_run(const std::string& path, int64_t run_id, const std::string& action) {
  throw StoreError(path + ": " + action + ": no run has id " + std::to_string(run_id) +
                   "; list the runs with `amptune status`");
}

// status -> running with this process as the holder: started_at kept (set when unset),
// heartbeat now, message and finished_at cleared, provenance stored.
void mark_running_by_this_process(sqlite3* db, const std::string& now, int64_t run_id,
                                  const Provenance& provenance) {
  Statement update(db, std::string("UPDATE runs SET status = 'running', "
                                   "started_at = COALESCE(started_at, ?1), heartbeat_at = ?1, "
                                   "finished_at = NULL, message = '', ") +
                           kProvenanceAssignments + " WHERE id = ?2");
  bind_provenance(update, now, run_id, provenance);
  update.run();
}

void require_run(sqlite3* db, const std::string& path, int64_t run_id, const std::string& action) {
  Statement statement(db, "SELECT 1 FROM runs WHERE id = ?");
  statement.bind(1, run_id);
  if (!statement.step()) no_such_run(path, run_id, action);
}

void touch_heartbeat(sqlite3* db, int64_t run_id, const std::string& now) {
  Statement update(db, "UPDATE runs SET heartbeat_at = ? WHERE id = ?");
  update.bind(1, now).bind(2, run_id).run();
}

// What claim_run and the writers need of a run row: status, heartbeat and holder.
struct Holding {
  std::string status;
  std::string heartbeat_at;
  std::optional<ProcessIdentity> holder;
  std::string host;  // provenance host of the holder, for messages
};

Holding read_holding(sqlite3* db, const std::string& path, int64_t run_id,
                     const std::string& action) {
  Statement select(db,
                   "SELECT status, COALESCE(heartbeat_at, ''), claim_machine, claim_pid, "
                   "claim_pid_start, COALESCE(host, '') FROM runs WHERE id = ?");
  select.bind(1, run_id);
  if (!select.step()) no_such_run(path, run_id, action);
  Holding h;
  h.status = select.column_text(0);
  h.heartbeat_at = select.column_text(1);
  if (!select.is_null(3)) {
    h.holder = ProcessIdentity{select.column_text(2), select.column_int(3), select.column_int(4)};
  }
  h.host = select.column_text(5);
  return h;
}

// Throws ClaimLostError when a process other than this one holds the run (inside the write
// transaction, before anything is written).
void require_holder(sqlite3* db, const std::string& path, int64_t run_id,
                    const std::string& action) {
  const Holding h = read_holding(db, path, run_id, action);
  if (!h.holder || *h.holder == current_process()) return;
  throw ClaimLostError(path + ": " + action + ": run " + std::to_string(run_id) +
                       " was taken over by process " + std::to_string(h.holder->pid) + " on " +
                       (h.host.empty() ? "another host" : h.host) +
                       " (this process was presumed dead); this process stops working on it");
}

}  // namespace

void Store::mark_running(int64_t run_id, const Provenance& provenance) {
  const std::string action = "marking run " + std::to_string(run_id) + " running";
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_run(db_, path_, run_id, action);
      mark_running_by_this_process(db_, now_utc(), run_id, provenance);
    });
  });
}

bool Store::claim_run(int64_t run_id, const Provenance& provenance, double stale_after_seconds,
                      bool retry_failed) {
  const std::string action = "claiming run " + std::to_string(run_id);
  return guarded(path_, action, [&] {
    // In an IMMEDIATE transaction no other writer can interleave between the read and the write.
    return write_transaction(db_, [&] {
      const Holding h = read_holding(db_, path_, run_id, action);
      const auto now = std::chrono::system_clock::now();
      bool claimable = h.status == "pending" || (retry_failed && h.status == "failed");
      if (h.status == "running") {
        const std::optional<bool> alive = h.holder ? alive_if_local(*h.holder) : std::nullopt;
        if (alive) {
          claimable = !*alive;  // same pid space: we know whether it lives
        } else {
          const auto stale =
              now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::duration<double>(std::max(0.0, stale_after_seconds)));
          claimable = h.heartbeat_at < iso_utc(stale);
        }
      }
      if (!claimable) return false;
      mark_running_by_this_process(db_, iso_utc(now), run_id, provenance);
      return true;
    });
  });
}

void Store::heartbeat(int64_t run_id) {
  const std::string action = "heartbeat of run " + std::to_string(run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_holder(db_, path_, run_id, action);
      touch_heartbeat(db_, run_id, now_utc());
    });
  });
}

void Store::finish_run(int64_t run_id, RunStatus status, const std::string& message,
                       const std::string& summary_json) {
  const std::string action = "finishing run " + std::to_string(run_id) + " as " + to_string(status);
  if (status == RunStatus::kPending || status == RunStatus::kRunning) {
    throw StoreError(path_ + ": " + action + ": a run finishes as done, failed or diverged");
  }
  if (!summary_json.empty() && !json::accept(summary_json)) {
    throw StoreError(path_ + ": " + action + ": the summary is not valid JSON: " + summary_json);
  }
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_holder(db_, path_, run_id, action);
      const std::string now = now_utc();
      Statement update(db_,
                       "UPDATE runs SET status = ?1, message = ?2, summary_json = ?3, "
                       "finished_at = ?4, heartbeat_at = ?4 WHERE id = ?5");
      update.bind(1, to_string(status)).bind(2, message).bind_text_or_null(3, summary_json);
      update.bind(4, now).bind(5, run_id).run();
    });
  });
}

void Store::release_run(int64_t run_id, const std::string& message) {
  const std::string action = "releasing run " + std::to_string(run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_holder(db_, path_, run_id, action);
      Statement update(db_,
                       "UPDATE runs SET status = 'pending', message = ?1, heartbeat_at = ?2 "
                       "WHERE id = ?3");
      update.bind(1, message).bind(2, now_utc()).bind(3, run_id).run();
    });
  });
}

// --- epochs ----------------------------------------------------------------------------------

void Store::record_epoch(const EpochRecord& record) {
  const std::string action =
      "recording epoch " + std::to_string(record.epoch) + " of run " + std::to_string(record.run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_holder(db_, path_, record.run_id, action);
      // Delete first (metrics cascade) rather than INSERT OR REPLACE, whose implicit delete
      // would leave the old epoch's metrics behind.
      Statement remove(db_, "DELETE FROM epochs WHERE run_id = ? AND epoch = ?");
      remove.bind(1, record.run_id).bind(2, record.epoch).run();

      Statement insert(db_,
                       "INSERT INTO epochs (run_id, epoch, global_step, lr, train_loss, "
                       "train_fps_mean, train_fps_min, train_fps_max, epoch_seconds, "
                       "skipped_samples, checkpoint_path, checkpoint_bytes, checkpoint_sha256, "
                       "recorded_at, data_wait_seconds, forward_seconds, backward_seconds, "
                       "optimizer_seconds, eval_seconds, checkpoint_seconds, db_seconds, "
                       "startup_seconds, profile_trace) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      insert.bind(1, record.run_id).bind(2, record.epoch).bind(3, record.global_step);
      insert.bind(4, record.lr).bind(5, record.train_loss).bind(6, record.train_fps_mean);
      insert.bind(7, record.train_fps_min).bind(8, record.train_fps_max);
      insert.bind(9, record.epoch_seconds).bind(10, record.skipped_samples);
      if (record.checkpoint) {
        insert.bind(11, record.checkpoint->path).bind(12, record.checkpoint->bytes);
        insert.bind(13, record.checkpoint->sha256);
      } else {
        insert.bind_null(11).bind_null(12).bind_null(13);
      }
      if (record.times) {
        const EpochTimes& t = *record.times;
        insert.bind(15, t.data_wait).bind(16, t.forward).bind(17, t.backward);
        insert.bind(18, t.optimizer).bind(19, t.eval).bind(20, t.checkpoint);
        const double none = std::numeric_limits<double>::quiet_NaN();  // bound as NULL
        insert.bind(21, t.db >= 0 ? t.db : none).bind(22, t.startup >= 0 ? t.startup : none);
      } else {
        for (int c = 15; c <= 22; ++c) insert.bind_null(c);
      }
      if (record.profile_trace.empty()) {
        insert.bind_null(23);
      } else {
        insert.bind(23, record.profile_trace);
      }
      const std::string now = now_utc();
      insert.bind(14, now).run();
      touch_heartbeat(db_, record.run_id, now);

      write_metrics(db_, path_ + ": " + action, record.run_id, record.epoch, record.metrics);
      if (!record.initial_metrics.empty()) {
        write_initial_metrics(db_, path_ + ": " + action, record.run_id, record.initial_metrics);
      }
      // The epoch row was deleted above, and its loss_scale_events with it (cascade).
      Statement event(db_,
                      "INSERT INTO loss_scale_events (run_id, epoch, global_step, scale, reason) "
                      "VALUES (?, ?, ?, ?, ?)");
      for (const auto& e : record.scale_events) {
        event.reset().bind(1, record.run_id).bind(2, record.epoch).bind(3, e.global_step);
        event.bind(4, e.scale).bind(5, e.reason).run();
      }
    });
  });
}

std::vector<ScaleEvent> Store::scale_events(int64_t run_id) const {
  return guarded(path_, "reading loss-scale events of run " + std::to_string(run_id), [&] {
    std::vector<ScaleEvent> events;
    Statement select(db_,
                     "SELECT global_step, scale, reason FROM loss_scale_events WHERE run_id = ? "
                     "ORDER BY global_step");
    select.bind(1, run_id);
    while (select.step()) {
      events.push_back(
          ScaleEvent{select.column_int(0), select.column_double(1), select.column_text(2)});
    }
    return events;
  });
}

std::vector<EpochRow> Store::epochs(int64_t run_id) const {
  return guarded(path_, "reading epochs of run " + std::to_string(run_id), [&] {
    std::vector<EpochRow> rows;
    Statement select(db_,
                     "SELECT epoch, global_step, lr, train_loss, train_fps_mean, train_fps_min, "
                     "train_fps_max, epoch_seconds, skipped_samples, checkpoint_path, "
                     "checkpoint_bytes, checkpoint_sha256, checkpoint_deleted_at, recorded_at, "
                     "data_wait_seconds, forward_seconds, backward_seconds, optimizer_seconds, "
                     "eval_seconds, checkpoint_seconds, db_seconds, startup_seconds, "
                     "profile_trace FROM epochs WHERE run_id = ? ORDER BY epoch");
    select.bind(1, run_id);
    while (select.step()) {
      EpochRow row;
      row.epoch = static_cast<int>(select.column_int(0));
      row.global_step = select.column_int(1);
      row.lr = select.column_double(2);
      row.train_loss = select.column_double(3);
      row.train_fps_mean = select.column_double(4);
      row.train_fps_min = select.column_double(5);
      row.train_fps_max = select.column_double(6);
      row.epoch_seconds = select.column_double(7);
      row.skipped_samples = select.column_int(8);
      if (!select.is_null(9) && select.is_null(12)) {
        row.checkpoint = CheckpointFile{select.column_text(9), select.column_int(10),
                                        select.column_text(11)};
      }
      row.recorded_at = select.column_text(13);
      if (!select.is_null(14)) {
        auto seconds = [&](int column) {
          return select.is_null(column) ? -1.0 : select.column_double(column);
        };
        row.times = EpochTimes{seconds(14), seconds(15), seconds(16), seconds(17),
                               seconds(18), seconds(19), seconds(20), seconds(21)};
      }
      if (!select.is_null(22)) row.profile_trace = select.column_text(22);
      rows.push_back(std::move(row));
    }
    Statement metrics(db_, "SELECT epoch, name, value FROM metrics WHERE run_id = ? ORDER BY epoch");
    metrics.bind(1, run_id);
    size_t next = 0;
    while (metrics.step()) {
      const int epoch = static_cast<int>(metrics.column_int(0));
      while (next < rows.size() && rows[next].epoch < epoch) ++next;
      if (next < rows.size() && rows[next].epoch == epoch) {
        rows[next].metrics[metrics.column_text(1)] = metrics.column_double(2);
      }
    }
    return rows;
  });
}

std::vector<CheckpointFile> Store::truncate_after(int64_t run_id, int epoch) {
  const std::string action =
      "dropping epochs after " + std::to_string(epoch) + " of run " + std::to_string(run_id);
  return guarded(path_, action, [&] {
    return write_transaction(db_, [&] {
      require_holder(db_, path_, run_id, action);
      std::vector<CheckpointFile> files;
      Statement select(db_,
                       "SELECT checkpoint_path, checkpoint_bytes, checkpoint_sha256 FROM epochs "
                       "WHERE run_id = ? AND epoch > ? AND checkpoint_path IS NOT NULL "
                       "AND checkpoint_deleted_at IS NULL ORDER BY epoch");
      select.bind(1, run_id).bind(2, epoch);
      while (select.step()) {
        files.push_back({select.column_text(0), select.column_int(1), select.column_text(2)});
      }
      Statement remove(db_, "DELETE FROM epochs WHERE run_id = ? AND epoch > ?");
      remove.bind(1, run_id).bind(2, epoch).run();
      return files;
    });
  });
}

void Store::set_epoch_db_seconds(int64_t run_id, int epoch, double seconds) {
  const std::string action = "recording the database time of epoch " + std::to_string(epoch) +
                             " of run " + std::to_string(run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_holder(db_, path_, run_id, action);
      Statement update(db_, "UPDATE epochs SET db_seconds = ? WHERE run_id = ? AND epoch = ?");
      update.bind(1, seconds).bind(2, run_id).bind(3, epoch).run();
      if (sqlite3_changes(db_) != 1) {
        throw StoreError(path_ + ": " + action + ": that epoch is not recorded");
      }
    });
  });
}

void Store::forget_checkpoint(int64_t run_id, int epoch) {
  const std::string action = "forgetting the checkpoint of epoch " + std::to_string(epoch) +
                             " of run " + std::to_string(run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      Statement update(db_,
                       "UPDATE epochs SET checkpoint_deleted_at = COALESCE(checkpoint_deleted_at, ?) "
                       "WHERE run_id = ? AND epoch = ? AND checkpoint_path IS NOT NULL");
      update.bind(1, now_utc()).bind(2, run_id).bind(3, epoch).run();
      if (sqlite3_changes(db_) != 1) {
        throw StoreError(path_ + ": " + action + ": that epoch has no recorded checkpoint");
      }
    });
  });
}

// --- read-only queries ------------------------------------------------------------------------

Store::QueryResult Store::query(const std::string& sql_text,
                                const std::vector<std::string>& params) const {
  const std::string first_line = sql_text.substr(0, sql_text.find('\n'));
  return guarded(path_, "querying (" + first_line + ")", [&] {
    sqlite3_stmt* raw = nullptr;
    const char* tail = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql_text.c_str(), static_cast<int>(sql_text.size()), &raw,
                                &tail);
    if (rc != SQLITE_OK) sql::raise(db_, rc, sql_text);
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> statement(raw, sqlite3_finalize);
    if (!raw) throw StoreError(path_ + ": query holds no statement: " + first_line);
    for (const char* p = tail; p && *p; ++p) {
      if (!std::isspace(static_cast<unsigned char>(*p)) && *p != ';') {
        throw StoreError(path_ + ": Store::query runs one statement; the SQL continues with '" +
                         std::string(p).substr(0, 40) + "'");
      }
    }
    if (!sqlite3_stmt_readonly(raw)) {
      throw StoreError(path_ + ": Store::query is read-only; refusing a statement that writes: " +
                       first_line);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      rc = sqlite3_bind_text(raw, static_cast<int>(i + 1), params[i].c_str(),
                             static_cast<int>(params[i].size()), SQLITE_TRANSIENT);
      if (rc != SQLITE_OK) sql::raise(db_, rc, sql_text);
    }
    QueryResult result;
    const int columns = sqlite3_column_count(raw);
    for (int c = 0; c < columns; ++c) result.columns.emplace_back(sqlite3_column_name(raw, c));
    while ((rc = sqlite3_step(raw)) == SQLITE_ROW) {
      std::vector<std::optional<std::string>> row;
      row.reserve(columns);
      for (int c = 0; c < columns; ++c) {
        const int type = sqlite3_column_type(raw, c);
        if (type == SQLITE_NULL) {
          row.emplace_back(std::nullopt);
        } else if (type == SQLITE_FLOAT) {
          // Shortest spelling that reads back as the same double (sqlite's own text has 15
          // significant digits and may not).
          const double value = sqlite3_column_double(raw, c);
          char buffer[40];
          for (int digits = 15; digits <= 17; ++digits) {
            std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
            if (std::strtod(buffer, nullptr) == value) break;
          }
          row.emplace_back(std::string(buffer));
        } else {
          const unsigned char* text = sqlite3_column_text(raw, c);
          row.emplace_back(std::string(reinterpret_cast<const char*>(text),
                                       static_cast<size_t>(sqlite3_column_bytes(raw, c))));
        }
      }
      result.rows.push_back(std::move(row));
    }
    if (rc != SQLITE_DONE) sql::raise(db_, rc, sql_text);
    return result;
  });
}

// --- checkpoint evaluation and retention ------------------------------------------------------

void Store::record_metrics(int64_t run_id, int epoch, const std::map<std::string, double>& metrics) {
  const std::string action = "recording evaluated metrics of epoch " + std::to_string(epoch) +
                             " of run " + std::to_string(run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_run(db_, path_, run_id, action);
      Statement exists(db_, "SELECT 1 FROM epochs WHERE run_id = ? AND epoch = ?");
      exists.bind(1, run_id).bind(2, epoch);
      if (!exists.step()) {
        throw StoreError(path_ + ": " + action + ": run " + std::to_string(run_id) +
                         " has no recorded epoch " + std::to_string(epoch));
      }
      write_metrics(db_, path_ + ": " + action, run_id, epoch, metrics);
    });
  });
}

void Store::record_diagnosis(const Diagnosis& d) {
  const std::string action = "recording the diagnosis of epoch " + std::to_string(d.epoch) +
                             " of run " + std::to_string(d.run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_run(db_, path_, d.run_id, action);
      Statement drop(db_, "DELETE FROM diagnoses WHERE run_id = ? AND epoch = ?");
      drop.bind(1, d.run_id).bind(2, d.epoch).run();  // rows and advice cascade
      Statement head(db_,
                     "INSERT INTO diagnoses (run_id, epoch, against, batches, cosine_min, "
                     "loss_scale, seconds, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
      head.bind(1, d.run_id).bind(2, d.epoch).bind(3, d.against).bind(4, d.batches);
      head.bind(5, d.cosine_min).bind(6, d.loss_scale).bind(7, d.seconds).bind(8, now_utc());
      head.run();
      Statement row(db_,
                    "INSERT INTO diagnostics (run_id, epoch, kind, batch, seq, module, dtype, "
                    "numel, cosine, max_abs_err, max_rel_err, frac_rel_err_1e3, "
                    "frac_rel_err_5e3, overflow_frac, underflow_frac) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      for (const auto& r : d.rows) {
        row.reset().bind(1, d.run_id).bind(2, d.epoch).bind(3, r.kind).bind(4, r.batch);
        row.bind(5, r.seq).bind(6, r.module).bind(7, r.dtype).bind(8, r.numel);
        row.bind(9, r.cosine).bind(10, r.max_abs_err).bind(11, r.max_rel_err);
        row.bind(12, r.frac_rel_err_1e3).bind(13, r.frac_rel_err_5e3);
        row.bind(14, r.overflow_frac).bind(15, r.underflow_frac).run();
      }
      Statement advice(db_,
                       "INSERT INTO diagnosis_advice (run_id, epoch, seq, rule, module, advice) "
                       "VALUES (?, ?, ?, ?, ?, ?)");
      for (size_t i = 0; i < d.advice.size(); ++i) {
        const auto& a = d.advice[i];
        advice.reset().bind(1, d.run_id).bind(2, d.epoch).bind(3, static_cast<int64_t>(i));
        advice.bind(4, a.rule).bind(5, a.module).bind(6, a.advice).run();
      }
    });
  });
}

void Store::record_initial_metrics(int64_t run_id, const std::map<std::string, double>& metrics) {
  const std::string action =
      "recording the evaluation of the initial weights of run " + std::to_string(run_id);
  guarded(path_, action, [&] {
    write_transaction(db_, [&] {
      require_holder(db_, path_, run_id, action);
      write_initial_metrics(db_, path_ + ": " + action, run_id, metrics);
    });
  });
}

std::vector<Store::ModuleError> Store::module_errors(const std::string& sweep) const {
  return guarded(path_, "reading the diagnoses of sweep " + sweep, [&] {
    std::vector<ModuleError> out;
    Statement select(db_,
                     "SELECT d.run_id, d.epoch, d.seq, d.module, MIN(d.dtype), MAX(d.numel), "
                     "COUNT(*), CASE WHEN COUNT(d.cosine) < COUNT(*) THEN NULL ELSE MIN(d.cosine) END, "
                     "MAX(d.max_abs_err), MAX(d.max_rel_err), "
                     "MAX(d.frac_rel_err_1e3), MAX(d.frac_rel_err_5e3), MAX(d.overflow_frac), "
                     "MAX(d.underflow_frac), g.cosine_min FROM diagnostics d "
                     "JOIN diagnoses g ON g.run_id = d.run_id AND g.epoch = d.epoch "
                     "JOIN runs r ON r.id = d.run_id JOIN sweeps s ON s.id = r.sweep_id "
                     "WHERE s.name = ? AND d.kind = 'forward' "
                     "GROUP BY d.run_id, d.epoch, d.seq, d.module ORDER BY d.run_id, d.epoch, d.seq");
    select.bind(1, sweep);
    auto real = [&](int c) { return select.column_double(c); };  // NULL -> NaN
    while (select.step()) {
      ModuleError e;
      e.run_id = select.column_int(0);
      e.epoch = static_cast<int>(select.column_int(1));
      e.worst.kind = "forward";
      e.worst.seq = static_cast<int>(select.column_int(2));
      e.worst.module = select.column_text(3);
      e.worst.dtype = select.column_text(4);
      e.worst.numel = select.column_int(5);
      e.worst.batch = static_cast<int>(select.column_int(6));
      e.worst.cosine = real(7);
      e.worst.max_abs_err = real(8);
      e.worst.max_rel_err = real(9);
      e.worst.frac_rel_err_1e3 = real(10);
      e.worst.frac_rel_err_5e3 = real(11);
      e.worst.overflow_frac = real(12);
      e.worst.underflow_frac = real(13);
      e.cosine_min = real(14);
      out.push_back(std::move(e));
    }
    return out;
  });
}

std::map<std::string, double> Store::initial_metrics(int64_t run_id) const {
  return guarded(path_, "reading the initial metrics of run " + std::to_string(run_id), [&] {
    std::map<std::string, double> metrics;
    Statement select(db_, "SELECT name, value FROM initial_metrics WHERE run_id = ?");
    select.bind(1, run_id);
    while (select.step()) metrics[select.column_text(0)] = select.column_double(1);
    return metrics;
  });
}

std::vector<int> Store::fork_epochs(int64_t run_id) const {
  return guarded(path_, "reading the forks of run " + std::to_string(run_id), [&] {
    std::vector<int> epochs;
    Statement select(db_,
                     "SELECT DISTINCT parent_epoch FROM runs WHERE parent_run_id = ? AND "
                     "parent_epoch IS NOT NULL ORDER BY parent_epoch");
    select.bind(1, run_id);
    while (select.step()) epochs.push_back(static_cast<int>(select.column_int(0)));
    return epochs;
  });
}

// --- typed reads of the query side --------------------------------------------------------------

namespace {

// The epochs columns that the epoch_values view (schemas/store.sql) exposes as values.
const std::set<std::string>& epoch_value_columns() {
  static const std::set<std::string> names = {"train_loss", "lr", "train_fps_mean",
                                              "epoch_seconds"};
  return names;
}

// The ids of the runs of the sweep named ?1.
constexpr const char* kRunsOfSweep =
    "(SELECT r.id FROM runs r JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = ?1)";

std::optional<double> optional_double(const Statement& statement, int column) {
  if (statement.is_null(column)) return std::nullopt;
  return statement.column_double(column);
}

}  // namespace

std::vector<std::string> Store::sweep_names() const {
  return guarded(path_, "listing sweeps", [&] {
    std::vector<std::string> names;
    Statement select(db_, "SELECT name FROM sweeps ORDER BY name");
    while (select.step()) names.push_back(select.column_text(0));
    return names;
  });
}

std::optional<bool> Store::higher_is_better(const std::string& metric) const {
  return guarded(path_, "reading metric_info of '" + metric + "'", [&]() -> std::optional<bool> {
    Statement select(db_, "SELECT higher_is_better FROM metric_info WHERE name = ?");
    select.bind(1, metric);
    if (!select.step()) return std::nullopt;
    return select.column_int(0) != 0;
  });
}

std::vector<std::string> Store::metric_names(const std::string& sweep) const {
  return guarded(path_, "listing the metrics of sweep '" + sweep + "'", [&] {
    std::set<std::string> names = epoch_value_columns();
    Statement select(db_, std::string("SELECT DISTINCT m.name FROM metrics m WHERE m.run_id IN ") +
                              kRunsOfSweep);
    select.bind(1, sweep);
    while (select.step()) names.insert(select.column_text(0));
    return std::vector<std::string>(names.begin(), names.end());
  });
}

std::vector<Store::MetricValue> Store::metric_values(const std::string& sweep,
                                                     const std::string& metric) const {
  return guarded(path_, "reading " + metric + " of sweep '" + sweep + "'", [&] {
    // The column name spliced in is one of epoch_value_columns(), never the caller's text.
    const auto column = epoch_value_columns().find(metric);
    const std::string sql =
        column != epoch_value_columns().end()
            ? "SELECT e.run_id, e.epoch, e." + *column + " FROM epochs e WHERE e." + *column +
                  " IS NOT NULL AND e.run_id IN " + kRunsOfSweep + " ORDER BY e.run_id, e.epoch"
            : std::string(
                  "SELECT m.run_id, m.epoch, m.value FROM metrics m WHERE m.name = ?2 "
                  "AND m.value IS NOT NULL AND m.run_id IN ") +
                  kRunsOfSweep + " ORDER BY m.run_id, m.epoch";
    Statement select(db_, sql);
    select.bind(1, sweep);
    if (column == epoch_value_columns().end()) select.bind(2, metric);
    std::vector<MetricValue> values;
    while (select.step()) {
      values.push_back(
          {select.column_int(0), static_cast<int>(select.column_int(1)), select.column_double(2)});
    }
    return values;
  });
}

std::vector<Store::RunTotals> Store::run_totals(const std::string& sweep) const {
  return guarded(path_, "summing the epochs of sweep '" + sweep + "'", [&] {
    // The epochs join and the per-run metric sums use the (run_id, ...) primary key and the
    // metrics_by_run_name index, so one sweep reads only its own rows.
    Statement select(db_,
                     "SELECT r.id, COUNT(e.epoch), MAX(e.global_step), AVG(e.train_fps_mean), "
                     "(SELECT SUM(m.value) FROM metrics m WHERE m.run_id = r.id AND "
                     "m.name = 'overflow_steps'), "
                     "(SELECT SUM(m.value) FROM metrics m WHERE m.run_id = r.id AND "
                     "m.name = 'skipped_steps') "
                     "FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
                     "LEFT JOIN epochs e ON e.run_id = r.id "
                     "WHERE s.name = ? GROUP BY r.id ORDER BY r.cell_index, r.id");
    select.bind(1, sweep);
    std::vector<RunTotals> totals;
    while (select.step()) {
      RunTotals t;
      t.run_id = select.column_int(0);
      t.epochs = static_cast<int>(select.column_int(1));
      if (!select.is_null(2)) t.last_global_step = select.column_int(2);
      t.mean_fps = optional_double(select, 3);
      t.overflow_steps = optional_double(select, 4);
      t.skipped_steps = optional_double(select, 5);
      totals.push_back(t);
    }
    return totals;
  });
}

std::vector<Store::LineagePoint> Store::lineage(const std::string& sweep) const {
  return guarded(path_, "reading the lineage of sweep '" + sweep + "'", [&] {
    // The view gives the primary metric from the metrics table or, for an epochs column such as
    // train_loss, from the epoch row (migration 13).
    Statement select(db_, std::string("SELECT l.run_id, l.epoch, l.source_run_id, l.train_loss, "
                                      "l.value FROM lineage l WHERE l.run_id IN ") +
                              kRunsOfSweep + " ORDER BY l.run_id, l.epoch");
    select.bind(1, sweep);
    std::vector<LineagePoint> points;
    while (select.step()) {
      points.push_back({select.column_int(0), static_cast<int>(select.column_int(1)),
                        select.column_int(2), select.column_double(3), select.column_double(4)});
    }
    return points;
  });
}

namespace detail {
std::string now_utc() { return iso_utc(std::chrono::system_clock::now()); }
}  // namespace detail

}  // namespace amptune::store
