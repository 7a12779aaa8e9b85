// Store::merge and check_merge_input (store.h "Merging databases").
//
// The inputs are read through read-only connections of their own rather than ATTACHed: ATTACH is
// not allowed inside a transaction and SQLite attaches at most 10 databases, while a merge of
// 100 shards must be one transaction on the target. Rows are copied column by column as SQLite
// holds them (Statement::bind_column), over the columns the input and the target share, so an
// input of an older schema merges too.
#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {
namespace {

namespace fs = std::filesystem;
using sql::exec;
using sql::SqliteError;
using sql::Statement;
using detail::quote_identifier;
using detail::same_name;

// A read-only connection to an input database.
class Input {
 public:
  explicit Input(const std::string& path) {
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
  ~Input() { sqlite3_close_v2(db_); }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;
  sqlite3* db() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

// A failure reading the input at `path` as a StoreError that names it.
template <class F>
auto reading_input(const std::string& path, const std::string& action, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const SqliteError& error) {
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
}

struct Column {
  std::string name;
  bool not_null = false;
  std::string default_sql;  // the declared DEFAULT expression, "" when none
};

std::vector<Column> columns_of(sqlite3* db, const std::string& table) {
  Statement info(db, "SELECT name, \"notnull\", dflt_value FROM pragma_table_info(?) ORDER BY cid",
                 table);
  std::vector<Column> columns;
  while (info.step()) {
    columns.push_back({info.column_text(0), info.column_int(1) != 0, info.column_text(2)});
  }
  return columns;
}

// The columns of `table` both databases have, in the target's order, without those in `skip`.
std::vector<std::string> shared_columns(const std::vector<Column>& target,
                                        const std::vector<Column>& input,
                                        const std::vector<std::string>& skip = {}) {
  std::vector<std::string> names;
  for (const Column& c : target) {
    bool in_input = false;
    for (const Column& i : input) in_input = in_input || same_name(i.name, c.name);
    bool skipped = false;
    for (const std::string& s : skip) skipped = skipped || same_name(s, c.name);
    if (in_input && !skipped) names.push_back(c.name);
  }
  return names;
}

std::string column_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + quote_identifier(n);
  return out;
}

std::string placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i ? ", ?" : "?";
  return out;
}

int index_of(const std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (same_name(names[i], name)) return static_cast<int>(i);
  }
  return -1;
}

// The columns of the target's `table` that SQLite's constraint message is about: those it names
// ("NOT NULL constraint failed: runs.label", "UNIQUE constraint failed: run_params.run_id,
// run_params.key", "CHECK constraint failed: status IN (...)"; a named CHECK by its name's
// words, metric_name_is_identifier... -> name), else, for "FOREIGN KEY constraint failed", the
// columns of the table's foreign keys.
std::string constraint_columns(sqlite3* target, const std::string& table,
                               const std::string& message) {
  const size_t failed = message.find("failed");
  const std::string text = message.substr(0, message.find(" [in: ")).substr(
      failed == std::string::npos ? 0 : failed);
  std::vector<std::string> columns;
  Statement info(target, "SELECT name FROM pragma_table_info(?) ORDER BY cid", table);
  while (info.step()) columns.push_back(info.column_text(0));
  auto named = [&](bool split_on_underscore) {
    std::string found, word;
    for (size_t i = 0; i <= text.size(); ++i) {
      const unsigned char c = i < text.size() ? static_cast<unsigned char>(text[i]) : ' ';
      if (std::isalnum(c) || (c == '_' && !split_on_underscore)) {
        word += static_cast<char>(c);
        continue;
      }
      if (index_of(columns, word) >= 0 && found.find(word) == std::string::npos) {
        found += (found.empty() ? "" : ", ") + word;
      }
      word.clear();
    }
    return found;
  };
  std::string found = named(false);
  if (found.empty()) found = named(true);
  if (found.empty()) {
    Statement keys(target, "SELECT \"from\" FROM pragma_foreign_key_list(?)", table);
    while (keys.step()) found += (found.empty() ? "" : ", ") + keys.column_text(0);
  }
  return found.empty() ? "(not named by SQLite)" : found;
}

// Runs `write`, which copies row `row` of the input's `table`: a constraint of the target's
// schema the row breaks (CHECK, NOT NULL, UNIQUE, FOREIGN KEY) is a StoreError naming the input,
// the table, the row and the column, not the bare SQLite message about the target.
void copy_row(sqlite3* target, const std::string& input, const std::string& table, int64_t row,
              Statement& write) {
  try {
    write.run();
  } catch (const SqliteError& error) {
    if (error.primary_code() != SQLITE_CONSTRAINT) throw;
    const std::string message = error.what();
    detail::bad_value(input, {table, row, constraint_columns(target, table, message)},
                      "breaks the schema (" + message.substr(0, message.find(" [in: ")) + ")");
  }
}

// One copy of a run: what decides which of two copies of a cell is kept.
struct Copy {
  int64_t id = 0;
  std::string name, status, started_at, last_recorded;
  int epochs = 0;
  bool settled() const { return records::is_settled(records::parse_status(status)); }
  bool same_as(const Copy& o) const {
    return epochs == o.epochs && status == o.status && started_at == o.started_at &&
           last_recorded == o.last_recorded;
  }
};

// Copies the rows of one run's dependent table (run_params, epochs, ...) from an input.
class ChildCopier {
 public:
  // Called with each input row (its rowid last) and the insert it is bound to, before it runs:
  // rebinds what the target must hold otherwise.
  using Rewrite = std::function<void(const Statement& row, int64_t rowid, Statement& insert)>;

  ChildCopier(sqlite3* in, sqlite3* out, const std::string& input, const std::string& table,
              const std::vector<std::string>& columns, Rewrite rewrite = nullptr)
      : out_(out),
        input_(input),
        table_(table),
        select_(in, "SELECT " + column_list(columns) + ", rowid FROM " + table +
                        " WHERE run_id = ?"),
        insert_(out, "INSERT INTO " + table + " (" + column_list(columns) + ") VALUES (" +
                         placeholders(columns.size()) + ")"),
        columns_(columns),
        run_column_(index_of(columns, "run_id")),
        rewrite_(std::move(rewrite)) {}

  // Copies the rows of input run `from` as rows of target run `to`; calls row(select) for each.
  template <class F>
  int64_t copy(int64_t from, int64_t to, F&& row) {
    int64_t rows = 0;
    select_.bind_all(from);
    while (select_.step()) {
      insert_.reset();
      for (size_t c = 0; c < columns_.size(); ++c) {
        const int at = static_cast<int>(c);
        if (at == run_column_) {
          insert_.bind(at + 1, to);
        } else {
          insert_.bind_column(at + 1, select_, at);
        }
      }
      const int64_t rowid = select_.column_int(static_cast<int>(columns_.size()));
      if (rewrite_) rewrite_(select_, rowid, insert_);
      copy_row(out_, input_, table_, rowid, insert_);
      row(select_);
      ++rows;
    }
    return rows;
  }

 private:
  sqlite3* out_;
  std::string input_, table_;
  Statement select_, insert_;
  std::vector<std::string> columns_;
  int run_column_;
  Rewrite rewrite_;
};

// An absolute, lexically normal spelling of `path` (relative to the working directory).
std::string absolute_normal(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  return (ec ? fs::path(path) : absolute).lexically_normal().string();
}

// The folders an input run's checkpoints may lie in: <checkpoint.dir>/<run id> from its config,
// and <the input's default root>/<run id> (`layout`, train's rule).
std::vector<std::string> own_checkpoint_dirs(const records::CheckpointLayout& layout,
                                             const std::string& input, int64_t run_id,
                                             const std::string& config_json) {
  const std::string id = std::to_string(run_id);
  std::vector<std::string> dirs = {
      absolute_normal((fs::path(layout.default_root(input)) / id).string())};
  const nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  if (config.is_object() && config.contains("checkpoint") && config["checkpoint"].is_object()) {
    const nlohmann::json& dir = config["checkpoint"].value("dir", nlohmann::json());
    if (dir.is_string() && !dir.get<std::string>().empty()) {
      dirs.push_back(absolute_normal((fs::path(dir.get<std::string>()) / id).string()));
    }
  }
  return dirs;
}

// Whether `path` is a checkpoint file amptune could have written into one of `dirs`: directly in
// it, with a checkpoint's name (`layout`).
bool own_checkpoint(const records::CheckpointLayout& layout, const std::string& path,
                    const std::vector<std::string>& dirs) {
  const fs::path file(absolute_normal(path));
  if (!layout.is_checkpoint_name(file.filename().string())) return false;
  const std::string parent = file.parent_path().string();
  return std::find(dirs.begin(), dirs.end(), parent) != dirs.end();
}

// The merge into one target connection, input after input, inside the caller's transaction.
class Merger {
 public:
  Merger(sqlite3* db, std::string path, records::MergeReport& report, const records::CheckpointLayout& layout)
      : db_(db), path_(std::move(path)), report_(report), layout_(layout) {}

  records::MergeCount merge(const std::string& input, int version) {
    Input in(input);
    records::MergeCount count;
    count.path = input;
    count.schema_version = version;
    reading_input(input, "reading it", [&] {
      exec(in.db(), "BEGIN");  // one snapshot of the input
      merge_metric_info(in.db(), input);
      const std::unordered_map<int64_t, int64_t> sweeps = merge_sweeps(in.db(), count);
      merge_runs(in.db(), input, sweeps, count, version);
      copy_children(in.db(), input, count);
      exec(in.db(), "COMMIT");
    });
    return count;
  }

 private:
  class RunMerge;  // merge_runs's work on one input (below)

  const std::vector<Column>& target_columns(const std::string& table) {
    auto it = target_columns_.find(table);
    if (it == target_columns_.end()) {
      it = target_columns_.emplace(table, columns_of(db_, table)).first;
    }
    return it->second;
  }

  void merge_metric_info(sqlite3* in, const std::string& path) {
    const std::vector<Column> input = columns_of(in, "metric_info");
    if (input.empty()) return;  // schema 1
    const auto names = shared_columns(target_columns("metric_info"), input);
    Statement select(in, "SELECT " + column_list(names) + ", rowid FROM metric_info");
    Statement insert(db_, "INSERT OR IGNORE INTO metric_info (" + column_list(names) +
                              ") VALUES (" + placeholders(names.size()) + ")");
    // A name the target ranks the other way is refused: one of the two rankings would be wrong.
    Statement direction(in, "SELECT rowid, name, higher_is_better FROM metric_info");
    Statement target(db_, "SELECT higher_is_better FROM metric_info WHERE name = ?");
    while (direction.step()) {
      target.bind_all(direction.column_text(1));
      if (target.step() && target.column_int(0) != direction.column_int(2)) {
        throw StoreError(path + ": table metric_info, row " +
                         std::to_string(direction.column_int(0)) + ": metric " +
                         direction.column_text(1) + " is ranked the other way than in the " +
                         "target (two models gave the name opposite directions); merge it into "
                         "another database");
      }
    }
    while (select.step()) {
      insert.reset();
      for (size_t c = 0; c < names.size(); ++c) {
        insert.bind_column(static_cast<int>(c) + 1, select, static_cast<int>(c));
      }
      const int64_t rowid = select.column_int(static_cast<int>(names.size()));
      copy_row(db_, path, "metric_info", rowid, insert);
    }
  }

  // Input sweep id -> target sweep id. A sweep is found by name; its description and YAML are
  // taken from the input when the input's copy was updated later.
  std::unordered_map<int64_t, int64_t> merge_sweeps(sqlite3* in, records::MergeCount& count) {
    const auto names = shared_columns(target_columns("sweeps"), columns_of(in, "sweeps"), {"id"});
    std::unordered_map<int64_t, int64_t> ids;
    Statement select(in, "SELECT id, " + column_list(names) + " FROM sweeps ORDER BY id");
    Statement find(db_, "SELECT id, updated_at FROM sweeps WHERE name = ?");
    Statement insert(db_, "INSERT INTO sweeps (" + column_list(names) + ") VALUES (" +
                              placeholders(names.size()) + ")");
    std::string updates;
    for (const std::string& n : names) {
      if (n != "name" && n != "created_at") {
        updates += (updates.empty() ? "" : ", ") + quote_identifier(n) + " = ?";
      }
    }
    Statement update(db_, "UPDATE sweeps SET " + updates + " WHERE id = ?");
    const int name_at = index_of(names, "name") + 1;
    const int updated_at = index_of(names, "updated_at") + 1;
    while (select.step()) {
      find.bind_all(select.column_text(name_at));
      if (!find.step()) {
        insert.reset();
        for (size_t c = 0; c < names.size(); ++c) {
          insert.bind_column(static_cast<int>(c) + 1, select, static_cast<int>(c) + 1);
        }
        copy_row(db_, count.path, "sweeps", select.column_int(0), insert);
        ids[select.column_int(0)] = sqlite3_last_insert_rowid(db_);
        ++count.sweeps_added;
        continue;
      }
      const int64_t id = find.column_int(0);
      ids[select.column_int(0)] = id;
      if (updated_at > 0 && select.column_text(updated_at) > find.column_text(1)) {
        update.reset();
        int at = 1;
        for (size_t c = 0; c < names.size(); ++c) {
          if (names[c] == "name" || names[c] == "created_at") continue;
          update.bind_column(at++, select, static_cast<int>(c) + 1);
        }
        update.bind(at, id);
        copy_row(db_, count.path, "sweeps", select.column_int(0), update);
      }
    }
    return ids;
  }

  // The identity of the input run in `select` (columns `names` from kFirst on; its parent's input
  // id in column 1): as recorded, or for an input older than migration 12 what that migration
  // gives it (its parent's in `identities`, filled input run by input run).
  // Two input runs whose new identities coincide (they differed only in where they ran) keep
  // theirs for the second, as the migration does (`taken`: "<sweep id> <identity>").
  static std::string identity_of(const Statement& select, const std::vector<std::string>& names,
                                 int first, int version,
                                 std::unordered_map<int64_t, std::string>& identities,
                                 std::set<std::string>& taken) {
    auto column = [&](const char* name) { return first + index_of(names, name); };
    std::string hash = select.column_text(column("config_hash"));
    const std::string sweep = std::to_string(select.column_int(column("sweep_id"))) + " ";
    if (version < detail::kRehashMigration) {
      std::optional<detail::ForkOf> fork;
      if (!select.is_null(1)) {
        const bool reset = index_of(names, "reset_optimizer") >= 0 &&
                           select.column_int(column("reset_optimizer")) != 0;
        fork = detail::ForkOf{identities[select.column_int(1)],
                              static_cast<int>(select.column_int(column("parent_epoch"))), reset};
      }
      std::string why_kept;
      const std::string migrated = detail::migrated_identity(
          select.column_text(column("config_json")), select.column_text(column("name")), fork,
          &why_kept);
      if (!migrated.empty() && !taken.count(sweep + migrated)) hash = migrated;
    }
    taken.insert(sweep + hash);
    identities[select.column_int(0)] = hash;
    return hash;
  }

  // The input's runs into the target (RunMerge); sets copied_ for copy_children.
  void merge_runs(sqlite3* in, const std::string& input,
                  const std::unordered_map<int64_t, int64_t>& sweeps, records::MergeCount& count,
                  int version);

  // For prune_decisions (columns `names`): compared_json checked (detail::compared_runs) and its
  // run ids, the input's, turned into the target's; a run the input does not have is refused.
  ChildCopier::Rewrite remap_compared(const std::string& input,
                                      const std::vector<std::string>& names) const {
    const int at = index_of(names, "compared_json");
    if (at < 0 || index_of(names, "rung") < 0) return nullptr;  // not prune_decisions
    return [this, &input, at](const Statement& row, int64_t rowid, Statement& insert) {
      const detail::Cell cell{"prune_decisions", rowid, "compared_json"};
      nlohmann::json compared = detail::compared_runs(input, cell, row.column_text(at));
      for (nlohmann::json& entry : compared) {
        const auto found = run_ids_.find(entry["run_id"].get<int64_t>());
        if (found == run_ids_.end()) {
          detail::bad_value(input, cell, "names run " + entry["run_id"].dump() +
                                             ", which the file does not have");
        }
        entry["run_id"] = found->second;
      }
      insert.bind(at + 1, compared.dump());
    };
  }

  // run_params, epochs (with their checkpoint references), metrics, loss-scale events, initial
  // metrics and diagnoses of the copied runs; tables before the tables that reference them.
  void copy_children(sqlite3* in, const std::string& input, records::MergeCount& count) {
    const auto& copied = copied_;
    // Each copied input run's own checkpoint folders (own_checkpoint_dirs).
    std::unordered_map<int64_t, std::vector<std::string>> own_dirs;
    {
      Statement config(in, "SELECT id, config_json FROM runs");
      while (config.step()) {
        own_dirs[config.column_int(0)] =
            own_checkpoint_dirs(layout_, input, config.column_int(0), config.column_text(1));
      }
    }
    Statement disown(db_,
                     "UPDATE epochs SET checkpoint_deleted_at = ? WHERE run_id = ? AND epoch = ?");
    for (const std::string table :
         {"run_params", "epochs", "metrics", "loss_scale_events", "initial_metrics", "diagnoses",
          "diagnostics", "diagnosis_advice", "prune_decisions"}) {
      const std::vector<Column> columns = columns_of(in, table);
      if (columns.empty()) continue;  // an older schema
      // prune_decisions rows get new ids here (their order, by id, is kept).
      const auto names = shared_columns(
          target_columns(table), columns,
          table == "prune_decisions" ? std::vector<std::string>{"id"} : std::vector<std::string>{});
      ChildCopier copier(in, db_, input, table, names, remap_compared(input, names));
      const int path_at = index_of(names, "checkpoint_path");
      const int deleted_at = index_of(names, "checkpoint_deleted_at");
      const int epoch_at = index_of(names, "epoch");
      for (const auto& [from, to] : copied) {
        const int64_t rows = copier.copy(from, to, [&, to = to, from = from](const Statement& row) {
          if (path_at < 0 || row.is_null(path_at)) return;
          if (deleted_at >= 0 && !row.is_null(deleted_at)) return;
          if (!own_checkpoint(layout_, row.column_text(path_at), own_dirs[from])) {
            if (report_.foreign_checkpoints++ == 0) {
              report_.first_foreign = row.column_text(path_at);
            }
            disown.bind_all(detail::now_utc(), to, row.column_int(epoch_at)).run();
            return;
          }
          ++report_.checkpoints;
          std::error_code ec;
          if (fs::exists(row.column_text(path_at), ec)) return;
          if (report_.missing_checkpoints++ == 0) report_.first_missing = row.column_text(path_at);
        });
        if (table == "epochs") count.epochs += rows;
      }
    }
  }

  sqlite3* db_;
  std::string path_;
  records::MergeReport& report_;
  const records::CheckpointLayout& layout_;  // where input runs keep their checkpoints (train's rule)
  std::map<std::string, std::vector<Column>> target_columns_;
  // Target runs written by this merge -> the input their copy came from (for conflicts).
  std::unordered_map<int64_t, std::string> origins_;
  // Input run, target run: the runs of the current input whose rows merge_runs took.
  std::vector<std::pair<int64_t, int64_t>> copied_;
  // Every run of the current input -> its target run (copied, kept or unchanged).
  std::unordered_map<int64_t, int64_t> run_ids_;
};

// The columns of runs an older input lacks, as ", col = DEFAULT" assignments: a copy that
// replaces a target run gets their defaults.
std::string missing_column_defaults(const std::vector<Column>& target,
                                    const std::vector<std::string>& names) {
  std::string defaults;
  for (const Column& c : target) {
    if (c.name == "id" || index_of(names, c.name) >= 0) continue;
    if (c.not_null && c.default_sql.empty()) continue;  // cannot happen for ADD COLUMN
    defaults +=
        ", " + quote_identifier(c.name) + " = " + (c.default_sql.empty() ? "NULL" : c.default_sql);
  }
  return defaults;
}

std::string assignments(const std::vector<std::string>& names) {
  std::string out;
  for (size_t c = 0; c < names.size(); ++c) {
    out += (c ? ", " : "") + quote_identifier(names[c]) + " = ?";
  }
  return out;
}

// The input's runs, each with its parent (NULL before migration 4), started_at, epoch count and
// last epoch time, then the columns `names` (RunMerge::kFirst on).
std::string input_runs_sql(const std::vector<Column>& input,
                           const std::vector<std::string>& names) {
  bool forks = false;  // migration 4
  for (const Column& c : input) forks = forks || same_name(c.name, "parent_run_id");
  return std::string("SELECT r.id, ") + (forks ? "r.parent_run_id" : "NULL") +
         ", COALESCE(r.started_at, ''), "
         "(SELECT COUNT(*) FROM epochs e WHERE e.run_id = r.id), "
         "(SELECT COALESCE(MAX(e.recorded_at), '') FROM epochs e "
         "WHERE e.run_id = r.id), " +
         column_list(names) + " FROM runs r ORDER BY r.id";
}

// One input's runs into the target. Each input run is added, replaces the target's copy of its
// cell (same sweep, same identity) or loses to it (a MergeConflict either way); forks are linked
// to their parents once every input run has its target id.
class Merger::RunMerge {
 public:
  RunMerge(Merger& merger, sqlite3* in, const std::string& input,
           const std::unordered_map<int64_t, int64_t>& sweeps, records::MergeCount& count, int version)
      : merger_(merger),
        input_(input),
        sweeps_(sweeps),
        count_(count),
        version_(version),
        target_(merger.target_columns("runs")),
        input_columns_(columns_of(in, "runs")),
        names_(shared_columns(target_, input_columns_, {"id"})),
        insert_(merger.db_, "INSERT INTO runs (" + column_list(names_) + ") VALUES (" +
                                placeholders(names_.size()) + ")"),
        update_(merger.db_, "UPDATE runs SET " + assignments(names_) +
                                missing_column_defaults(target_, names_) + " WHERE id = ?"),
        find_(merger.db_,
              "SELECT r.id, r.name, r.status, COALESCE(r.started_at, ''), "
              "(SELECT COUNT(*) FROM epochs e WHERE e.run_id = r.id), "
              "(SELECT COALESCE(MAX(e.recorded_at), '') FROM epochs e WHERE e.run_id = r.id) "
              "FROM runs r WHERE r.sweep_id = ? AND r.config_hash = ?"),
        same_name_(merger.db_, "SELECT config_hash FROM runs WHERE name = ? AND id IS NOT ?"),
        drop_epochs_(merger.db_, "DELETE FROM epochs WHERE run_id = ?"),
        drop_params_(merger.db_, "DELETE FROM run_params WHERE run_id = ?"),
        drop_diagnoses_(merger.db_, "DELETE FROM diagnoses WHERE run_id = ?"),
        drop_initial_(merger.db_, "DELETE FROM initial_metrics WHERE run_id = ?"),
        drop_decisions_(merger.db_, "DELETE FROM prune_decisions WHERE run_id = ?"),
        select_(in, input_runs_sql(input_columns_, names_)),
        set_legacy_(merger.db_, "UPDATE runs SET legacy_config_hash = ? WHERE id = ?") {}

  // Returns the input run, target run pairs whose rows copy_children copies.
  std::vector<std::pair<int64_t, int64_t>> merge() {
    while (select_.step()) merge_run();
    link_forks();
    return std::move(copied_);
  }
  // Every input run -> its target run; after merge().
  const std::unordered_map<int64_t, int64_t>& ids() const { return ids_; }

 private:
  static constexpr int kFirst = 5;  // of the shared columns in select_
  int at(const std::string& name) const { return kFirst + index_of(names_, name); }

  // The input run select_ is on.
  void merge_run() {
    const Copy mine = input_copy();
    const auto sweep = sweeps_.find(select_.column_int(at("sweep_id")));
    if (sweep == sweeps_.end()) {
      throw StoreError(input_ + ": run " + mine.name + " belongs to no sweep of the file");
    }
    const std::string hash = identity_of(select_, names_, kFirst, version_, identities_, taken_);
    const std::optional<Copy> theirs = target_copy(sweep->second, hash);
    if (theirs) {
      ids_[mine.id] = theirs->id;
      if (mine.same_as(*theirs)) {
        ++count_.runs_unchanged;
        return;
      }
      if (!settle_conflict(mine, *theirs)) {
        ++count_.runs_kept;
        return;
      }
    }
    check_name_is_free(mine, theirs, hash);
    const int64_t target_id = write_run(theirs, sweep->second, hash);
    if (hash != select_.column_text(at("config_hash"))) {  // re-hashed as migration 12 does
      set_legacy_.bind_all(select_.column_text(at("config_hash")), target_id).run();
    }
    ids_[mine.id] = target_id;
    merger_.origins_[target_id] = input_;
    copied_.emplace_back(mine.id, target_id);
    if (!select_.is_null(1)) parents_.emplace_back(target_id, select_.column_int(1));
  }

  Copy input_copy() const {
    Copy mine;
    mine.id = select_.column_int(0);
    mine.started_at = select_.column_text(2);
    mine.epochs = static_cast<int>(select_.column_int(3));
    mine.last_recorded = select_.column_text(4);
    mine.name = select_.column_text(at("name"));
    mine.status = select_.column_text(at("status"));
    return mine;
  }

  // The target's copy of the cell (sweep, identity), if it has one.
  std::optional<Copy> target_copy(int64_t sweep_id, const std::string& hash) {
    find_.bind_all(sweep_id, hash);
    if (!find_.step()) return std::nullopt;
    return Copy{find_.column_int(0),  find_.column_text(1), find_.column_text(2),
                find_.column_text(3), find_.column_text(5), static_cast<int>(find_.column_int(4))};
  }

  // Two different copies of one cell: the one with more epochs is kept, at equal epochs a
  // settled one (records::is_settled) over one that is not, else the target's. Reports the conflict; true when the
  // input's copy is kept.
  bool settle_conflict(const Copy& mine, const Copy& theirs) {
    const bool take = mine.epochs > theirs.epochs ||
                      (mine.epochs == theirs.epochs && mine.settled() && !theirs.settled());
    const auto origin = merger_.origins_.find(theirs.id);
    const std::string their_file =
        origin == merger_.origins_.end() ? merger_.path_ : origin->second;
    records::MergeConflict conflict;
    conflict.run = take ? mine.name : theirs.name;
    conflict.kept_from = take ? input_ : their_file;
    conflict.dropped_from = take ? their_file : input_;
    conflict.kept_epochs = take ? mine.epochs : theirs.epochs;
    conflict.dropped_epochs = take ? theirs.epochs : mine.epochs;
    conflict.kept_status = take ? mine.status : theirs.status;
    conflict.dropped_status = take ? theirs.status : mine.status;
    merger_.report_.conflicts.push_back(conflict);
    return take;
  }

  // A run name names one cell: refuses another target run of the input run's name.
  void check_name_is_free(const Copy& mine, const std::optional<Copy>& theirs,
                          const std::string& hash) {
    same_name_.bind_all(mine.name, theirs ? theirs->id : int64_t{-1});
    if (same_name_.step()) {
      throw StoreError("run " + mine.name + " of " + input_ + " and a run of the same name in " +
                       merger_.path_ + " have different configurations (config hash " + hash +
                       " vs " + same_name_.column_text(0) +
                       "); they cannot be merged into one file");
    }
  }

  // Inserts the input run, or overwrites `theirs` with it and drops its rows; returns its id.
  int64_t write_run(const std::optional<Copy>& theirs, int64_t sweep_id, const std::string& hash) {
    Statement& write = theirs ? update_ : insert_;
    write.reset();
    for (size_t c = 0; c < names_.size(); ++c) {
      const int param = static_cast<int>(c) + 1;
      if (names_[c] == "sweep_id") {
        write.bind(param, sweep_id);
      } else if (names_[c] == "config_hash") {
        write.bind(param, hash);
      } else if (names_[c] == "parent_run_id") {
        write.bind_null(param);  // set in link_forks, once every run of the input has its id
      } else {
        write.bind_column(param, select_, kFirst + static_cast<int>(c));
      }
    }
    const int64_t row = select_.column_int(0);
    if (!theirs) {
      copy_row(merger_.db_, input_, "runs", row, write);
      ++count_.runs_added;
      return sqlite3_last_insert_rowid(merger_.db_);
    }
    write.bind(static_cast<int>(names_.size()) + 1, theirs->id);
    copy_row(merger_.db_, input_, "runs", row, write);
    drop_epochs_.bind_all(theirs->id).run();  // metrics, loss-scale events cascade
    drop_params_.bind_all(theirs->id).run();
    drop_diagnoses_.bind_all(theirs->id).run();  // their rows and advice cascade
    drop_initial_.bind_all(theirs->id).run();
    drop_decisions_.bind_all(theirs->id).run();
    ++count_.runs_replaced;
    return theirs->id;
  }

  void link_forks() {
    Statement set_parent(merger_.db_, "UPDATE runs SET parent_run_id = ? WHERE id = ?");
    for (const auto& [target_id, parent] : parents_) {
      const auto found = ids_.find(parent);
      if (found == ids_.end()) {
        throw StoreError(input_ + ": a fork's parent run " + std::to_string(parent) +
                         " is not in the file (is it corrupt?)");
      }
      set_parent.bind_all(found->second, target_id).run();
    }
  }

  Merger& merger_;
  const std::string& input_;
  const std::unordered_map<int64_t, int64_t>& sweeps_;  // input sweep id -> target sweep id
  records::MergeCount& count_;
  const int version_;
  const std::vector<Column>& target_;
  const std::vector<Column> input_columns_;
  const std::vector<std::string> names_;  // the columns of runs both have, without id
  // Prepared in the members' order; select_ reads the input, the others the target.
  Statement insert_, update_, find_, same_name_;
  Statement drop_epochs_, drop_params_, drop_diagnoses_, drop_initial_, drop_decisions_;
  Statement select_;  // the input's runs (input_runs_sql)
  Statement set_legacy_;
  std::unordered_map<int64_t, int64_t> ids_;             // every input run -> its target run
  std::vector<std::pair<int64_t, int64_t>> copied_;      // input run, target run: rows to copy
  std::vector<std::pair<int64_t, int64_t>> parents_;     // target run, input parent run
  std::unordered_map<int64_t, std::string> identities_;  // input run -> identity
  std::set<std::string> taken_;                          // identity_of's
};

void Merger::merge_runs(sqlite3* in, const std::string& input,
                        const std::unordered_map<int64_t, int64_t>& sweeps, records::MergeCount& count,
                        int version) {
  RunMerge runs(*this, in, input, sweeps, count, version);
  copied_ = runs.merge();
  run_ids_ = runs.ids();
}

// The SQLite types (typeof) each column merge reads may hold in an input, where the column exists
// (older schemas lack some). A TEXT in an INTEGER column passes SQLite's CHECKs ('abc' >= 0 is
// true), so the types are checked before anything is copied.
struct ColumnTypes {
  const char* table;
  const char* column;
  const char* types;  // SQL list for NOT IN
};
constexpr const char* kNumberOrNull = "'real', 'integer', 'null'";  // NaN is stored as NULL
constexpr ColumnTypes kColumnTypes[] = {
    {"sweeps", "id", "'integer'"},
    {"sweeps", "name", "'text'"},
    {"runs", "id", "'integer'"},
    {"runs", "sweep_id", "'integer'"},
    {"runs", "name", "'text'"},
    {"runs", "cell_index", "'integer'"},
    {"runs", "status", "'text'"},
    {"runs", "config_json", "'text'"},
    {"runs", "config_hash", "'text'"},
    {"runs", "parent_run_id", "'integer', 'null'"},
    {"runs", "parent_epoch", "'integer', 'null'"},
    {"epochs", "run_id", "'integer'"},
    {"epochs", "epoch", "'integer'"},
    {"epochs", "global_step", "'integer'"},
    {"epochs", "lr", "'real', 'integer', 'null'"},
    {"epochs", "train_loss", "'real', 'integer', 'null'"},
    {"epochs", "epoch_seconds", "'real', 'integer', 'null'"},
    {"epochs", "checkpoint_path", "'text', 'null'"},
    {"epochs", "checkpoint_bytes", "'integer', 'null'"},
    {"epochs", "checkpoint_sha256", "'text', 'null'"},
    {"metrics", "run_id", "'integer'"},
    {"metrics", "epoch", "'integer'"},
    {"metrics", "name", "'text'"},
    {"metrics", "value", "'real', 'integer', 'null'"},
    {"run_params", "run_id", "'integer'"},
    {"loss_scale_events", "run_id", "'integer'"},
    {"initial_metrics", "run_id", "'integer'"},
    {"diagnoses", "run_id", "'integer'"},
    {"prune_decisions", "run_id", "'integer'"},
    {"prune_decisions", "epoch", "'integer'"},
    {"prune_decisions", "rung", "'integer', 'null'"},
    {"prune_decisions", "value", "'real', 'integer', 'null'"},
    {"prune_decisions", "threshold", "'real', 'integer', 'null'"},
    {"prune_decisions", "compared_json", "'text'"},
    // The other numbers merge copies: what the readers take (an INTEGER, or a number) or NULL.
    {"runs", "threads", "'integer', 'null'"},
    {"runs", "world_size", "'integer', 'null'"},
    {"runs", "global_batch", "'integer', 'null'"},
    {"runs", "git_dirty", "'integer', 'null'"},
    {"runs", "reset_optimizer", "'integer', 'null'"},
    {"epochs", "skipped_samples", "'integer'"},
    {"loss_scale_events", "epoch", "'integer'"},
    {"loss_scale_events", "global_step", "'integer'"},
    {"loss_scale_events", "scale", "'real', 'integer'"},
    {"initial_metrics", "value", "'real', 'integer', 'null'"},
    {"metric_info", "higher_is_better", "'integer'"},
    {"diagnoses", "epoch", "'integer'"},
    {"diagnoses", "batches", "'integer'"},
    {"diagnostics", "epoch", "'integer'"},
    {"diagnostics", "batch", "'integer'"},
    {"diagnostics", "seq", "'integer'"},
    {"diagnostics", "numel", "'integer'"},
    {"diagnosis_advice", "epoch", "'integer'"},
    {"diagnosis_advice", "seq", "'integer'"},
    {"runs", "train_flops_per_sample", kNumberOrNull},
    {"runs", "peak_flops", kNumberOrNull},
    {"epochs", "train_fps_mean", kNumberOrNull},
    {"epochs", "train_fps_min", kNumberOrNull},
    {"epochs", "train_fps_max", kNumberOrNull},
    {"epochs", "data_wait_seconds", kNumberOrNull},
    {"epochs", "forward_seconds", kNumberOrNull},
    {"epochs", "backward_seconds", kNumberOrNull},
    {"epochs", "optimizer_seconds", kNumberOrNull},
    {"epochs", "eval_seconds", kNumberOrNull},
    {"epochs", "checkpoint_seconds", kNumberOrNull},
    {"epochs", "db_seconds", kNumberOrNull},
    {"epochs", "startup_seconds", kNumberOrNull},
    {"diagnoses", "cosine_min", kNumberOrNull},
    {"diagnoses", "loss_scale", kNumberOrNull},
    {"diagnoses", "seconds", kNumberOrNull},
    {"diagnostics", "cosine", kNumberOrNull},
    {"diagnostics", "max_abs_err", kNumberOrNull},
    {"diagnostics", "max_rel_err", kNumberOrNull},
    {"diagnostics", "frac_rel_err_1e3", kNumberOrNull},
    {"diagnostics", "frac_rel_err_5e3", kNumberOrNull},
    {"diagnostics", "overflow_frac", kNumberOrNull},
    {"diagnostics", "underflow_frac", kNumberOrNull},
    {"diagnostics", "input_nonfinite_frac", kNumberOrNull},
};

// The range of an INTEGER column merge copies: what its reader takes (internal.h kMaxInt,
// kMaxEpoch) and the schema's CHECK says. Refused before the copy, naming the row, rather than by a reader of the target later.
struct ColumnRange {
  const char* table;
  const char* column;
  int64_t min, max;
};
constexpr int64_t kInt = detail::kMaxInt;
constexpr int64_t kEpoch = detail::kMaxEpoch;
constexpr int64_t kInt64 = detail::kMaxInt64;
constexpr ColumnRange kColumnRanges[] = {
    {"runs", "cell_index", 0, kInt},          {"runs", "parent_epoch", 0, kEpoch},
    {"runs", "threads", 0, kInt},             {"runs", "world_size", 0, kInt},
    {"runs", "global_batch", 0, kInt64},      {"runs", "git_dirty", 0, 1},
    {"runs", "reset_optimizer", 0, 1},        {"epochs", "epoch", 0, kEpoch},
    {"epochs", "global_step", 0, kInt64},     {"epochs", "skipped_samples", 0, kInt64},
    {"epochs", "checkpoint_bytes", 0, kInt64}, {"metrics", "epoch", 0, kEpoch},
    {"loss_scale_events", "epoch", 0, kEpoch}, {"loss_scale_events", "global_step", 0, kInt64},
    {"metric_info", "higher_is_better", 0, 1}, {"diagnoses", "epoch", -1, kEpoch},
    {"diagnoses", "batches", 1, kInt},        {"diagnostics", "epoch", -1, kEpoch},
    {"diagnostics", "batch", 0, kInt},        {"diagnostics", "seq", 0, kInt},
    {"diagnostics", "numel", 0, kInt64},      {"diagnosis_advice", "epoch", -1, kEpoch},
    {"diagnosis_advice", "seq", 0, kInt},     {"prune_decisions", "epoch", 0, kInt},
    {"prune_decisions", "rung", 0, kInt},
};

// The tables merge reads; each one an input has must be an ordinary table: a view (a recursive
// one returns rows forever) or a virtual table would run code of the input's choosing whenever
// merge reads it. SQLite finds "EPOCHS" for epochs, so the names are looked up as it does.
constexpr const char* kReadTables[] = {"sweeps",           "runs",
                                       "run_params",       "epochs",
                                       "metrics",          "loss_scale_events",
                                       "metric_info",      "initial_metrics",
                                       "diagnoses",        "diagnostics",
                                       "diagnosis_advice", "prune_decisions",
                                       "schema_version"};

// The refusal of an input that holds what an amptune database never does.
[[noreturn]] void crafted(const std::string& path, const std::string& what) {
  throw StoreError(path + " cannot be merged: " + what +
                   " (an amptune database never holds that; it was edited or crafted)");
}

// Refuses an input where a table merge reads is a view, a virtual table or another object
// (before anything reads one of them: a recursive view returns rows forever).
void check_tables_are_tables(sqlite3* in, const std::string& path) {
  for (const char* table : kReadTables) {
    Statement kind(in,
                   "SELECT type, name, sql LIKE 'CREATE VIRTUAL%' FROM sqlite_master "
                   "WHERE name = ? COLLATE NOCASE",
                   table);
    while (kind.step()) {
      const std::string what = kind.column_int(2) ? "virtual table" : kind.column_text(0);
      if (what != "table") {
        crafted(path, std::string(table) + " is a " + what + ", not a table (\"" +
                          kind.column_text(1) + "\" in its schema)");
      }
    }
  }
}

// Whether the input's `table` has `column` (older schemas lack some).
bool has_column(sqlite3* in, const char* table, const char* column) {
  return sql::exists(in, "SELECT 1 FROM pragma_table_info(?) WHERE name = ? COLLATE NOCASE",
                     table, column);
}

// Refuses an input with an INTEGER outside its column's range (kColumnRanges), naming the
// file, the table, the row and the column.
void check_ranges(sqlite3* in, const std::string& path) {
  for (const ColumnRange& c : kColumnRanges) {
    if (!has_column(in, c.table, c.column)) continue;  // an older schema
    const std::string column = quote_identifier(c.column);
    Statement bad(in, "SELECT rowid, " + column + " FROM " + quote_identifier(c.table) +
                          " WHERE typeof(" + column + ") = 'integer' AND (" + column + " < ? OR " +
                          column + " > ?) LIMIT 1",
                  c.min, c.max);
    if (bad.step()) {  // the readers' rule (int_column) refuses it with their message
      detail::int_column(path, bad, 1, {c.table, bad.column_int(0), c.column}, c.min, c.max);
    }
  }
}

// Refuses an input with a TEXT or BLOB value longer than its column's bound
// (detail::max_value_bytes: JSON columns 256 KiB, other text 1 MiB) in a table merge reads,
// naming the file, the table, the row and the column: every later reader of the target would pay
// for it (a 50 MB config_json took 1.5 GB in each `list`).
void check_sizes(sqlite3* in, const std::string& path) {
  for (const char* table : kReadTables) {
    if (!detail::table_exists(in, table)) continue;
    std::vector<std::string> columns;
    Statement info(in, "SELECT name FROM pragma_table_info(?)", table);
    while (info.step()) columns.push_back(info.column_text(0));
    for (const std::string& name : columns) {
      const std::string column = quote_identifier(name);
      const auto bound = static_cast<int64_t>(detail::max_value_bytes(name));
      Statement big(in, "SELECT rowid, length(CAST(" + column + " AS BLOB)) FROM " +
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
  for (const ColumnTypes& c : kColumnTypes) {
    if (!has_column(in, c.table, c.column)) continue;  // an older schema
    const std::string column = quote_identifier(c.column);
    Statement bad(in, "SELECT rowid, typeof(" + column + ") FROM " + quote_identifier(c.table) +
                          " WHERE typeof(" + column + ") NOT IN (" + c.types + ") LIMIT 1");
    if (bad.step()) {
      fail(std::string(c.table) + "." + c.column + " holds a " + bad.column_text(1) +
           " value (row " + std::to_string(bad.column_int(0)) + ")");
    }
  }
  check_ranges(in, path);
  check_sizes(in, path);
  for (const char* table : {"sweeps", "runs"}) {
    Statement twice(in, std::string("SELECT id FROM ") + table +
                            " GROUP BY id HAVING count(*) > 1 LIMIT 1");
    if (twice.step()) {
      fail(std::string(table) + " has id " + std::to_string(twice.column_int(0)) + " twice");
    }
  }
  if (!sql::exists(in, "SELECT 1 FROM pragma_table_info('runs') "
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

records::MergeReport Store::merge(const std::vector<std::string>& inputs, const records::CheckpointLayout& layout) {
  std::vector<int> versions;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (fs::equivalent(input, path_, ec)) {  // false (an error) for an in-memory database
      throw StoreError(input + " is the database merged into; leave it out of the inputs");
    }
    versions.push_back(check_merge_input(input));
  }
  records::MergeReport report;
  detail::guarded(path_, "merging into it", [&] {
    sql::write_transaction(db_, [&] {
      Merger merger(db_, path_, report, layout);
      for (size_t i = 0; i < inputs.size(); ++i) {
        report.inputs.push_back(merger.merge(inputs[i], versions[i]));
      }
    });
  });
  return report;
}

}  // namespace amptune::store
