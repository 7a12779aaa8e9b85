// Private to src/store: what the three parts of Store::merge share (store.h "Merging databases").
//   merge_check.cpp  check_merge_input: whether an input can be merged at all (its structure, the
//                    types and ranges of columns.h, its size bounds), before anything is written
//   merge_runs.cpp   RunMerge: which copy of each cell the target keeps (conflicts, identities of
//                    older schemas, forks linked)
//   merge.cpp        Store::merge: the copying, input after input, in one transaction
//
// The inputs are read through read-only connections of their own rather than ATTACHed: ATTACH is
// not allowed inside a transaction and SQLite attaches at most 10 databases, while a merge of
// 100 shards must be one transaction on the target. Rows are copied column by column as SQLite
// holds them (Statement::bind_column), over the columns the input and the target share, so an
// input of an older schema merges too.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "records/records.h"
#include "store/sqlite.h"

namespace amptune::store::merging {

// A read-only connection to an input database: defensive, no SQL function of its schema trusted.
class Input {
 public:
  explicit Input(const std::string& path);
  ~Input() { sqlite3_close_v2(db_); }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;
  sqlite3* db() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

// A failure reading the input at `path` while doing `action`, as a StoreError that names it
// (not a database, corrupt: leave it out).
[[noreturn]] void rethrow_reading(const std::string& path, const std::string& action,
                                  const sql::SqliteError& error);
template <class F>
auto reading_input(const std::string& path, const std::string& action, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const sql::SqliteError& error) {
    rethrow_reading(path, action, error);
  }
}

// A column of a table as one database has it (PRAGMA table_info): older schemas lack some.
struct DbColumn {
  std::string name;
  bool not_null = false;
  std::string default_sql;  // the declared DEFAULT expression, "" when none
};
// The columns of `table` in `db`, in order; none when it has no such table.
std::vector<DbColumn> columns_of(sqlite3* db, const std::string& table);
// The columns of a table both databases have, in the target's order, without those in `skip`.
std::vector<std::string> shared_columns(const std::vector<DbColumn>& target,
                                        const std::vector<DbColumn>& input,
                                        const std::vector<std::string>& skip = {});
// "a", "b" (quoted), and "?, ?" for an INSERT of `names`.
std::string column_list(const std::vector<std::string>& names);
std::string placeholders(size_t n);
// The position of `name` in `names` (same_name), -1 when absent.
int index_of(const std::vector<std::string>& names, const std::string& name);

// Runs `write`, which copies row `row` of the input's `table`: a constraint of the target's
// schema the row breaks (CHECK, NOT NULL, UNIQUE, FOREIGN KEY) is a StoreError naming the input,
// the table, the row and the column, not the bare SQLite message about the target.
void copy_row(sqlite3* target, const std::string& input, const std::string& table, int64_t row,
              sql::Statement& write);

// A checkpoint the target recorded for (target run, epoch) before an input's copy replaced the
// run's rows: its path and sha256. An input row that names the same file keeps it (the target's
// own record, not the input's word), whatever folder it is in.
using KnownCheckpoints = std::map<std::pair<int64_t, int64_t>, std::pair<std::string, std::string>>;

// The target of a merge, as the parts that write it share it.
struct Target {
  sqlite3* db;
  const std::string& path;
  records::MergeReport& report;
  // Target runs written by this merge -> the input their copy came from (for conflicts).
  std::unordered_map<int64_t, std::string>& origins;
  KnownCheckpoints& known;
};

// Store::copy_runs: the runs of the input copied (those of `runs` and their fork ancestors), and
// the rewrite of the config_json of those of `runs` (unset: as they are).
struct Selection {
  std::vector<int64_t> runs;
  std::function<std::string(const std::string&)> config;
};

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

// One input's runs into the target (merge_runs.cpp). Each input run is added, replaces the
// target's copy of its cell (same sweep, same identity) or loses to it (a MergeConflict either
// way); forks are linked to their parents once every input run has its target id.
class RunMerge {
 public:
  // `target_runs`: the target's runs columns; `sweeps`: input sweep id -> target sweep id;
  // `version`: the input's schema version (older than 12: identities as migration 12 makes them).
  RunMerge(const Target& target, const std::vector<DbColumn>& target_runs, sqlite3* in,
           const std::string& input, const std::unordered_map<int64_t, int64_t>& sweeps,
           records::MergeCount& count, int version, const Selection* selection = nullptr);

  // Returns the input run, target run pairs whose rows are to be copied (merge.cpp).
  std::vector<std::pair<int64_t, int64_t>> merge();
  // Every input run -> its target run (copied, kept or unchanged); after merge().
  const std::unordered_map<int64_t, int64_t>& ids() const { return ids_; }

 private:
  static constexpr int kFirst = 5;  // of the shared columns in select_
  int at(const std::string& name) const { return kFirst + index_of(names_, name); }

  void merge_run();
  Copy input_copy() const;
  std::string identity();
  std::optional<Copy> target_copy(int64_t sweep_id, const std::string& hash);
  bool settle_conflict(const Copy& mine, const Copy& theirs);
  void check_name_is_free(const Copy& mine, const std::optional<Copy>& theirs,
                          const std::string& hash);
  int64_t write_run(const std::optional<Copy>& theirs, int64_t sweep_id, const std::string& hash);
  void link_forks();
  // Whether the input run select_ is on is one of selection_->runs with a config rewrite.
  bool rewrites_config() const;

  Target target_;
  const std::string& input_;
  const std::unordered_map<int64_t, int64_t>& sweeps_;  // input sweep id -> target sweep id
  records::MergeCount& count_;
  const int version_;
  const std::vector<DbColumn>& target_columns_;
  const std::vector<DbColumn> input_columns_;
  const std::vector<std::string> names_;  // the columns of runs both have, without id
  // Prepared in the members' order; select_ reads the input, the others the target.
  sql::Statement insert_, update_, find_, same_name_;
  sql::Statement drop_epochs_, drop_params_, drop_diagnoses_, drop_initial_, drop_decisions_;
  sql::Statement select_;  // the input's runs (input_runs_sql)
  sql::Statement set_legacy_;
  sql::Statement known_;  // the target's checkpoints of a run (Target::known)
  const Selection* selection_;
  std::unordered_map<int64_t, int64_t> ids_;             // every input run -> its target run
  std::vector<std::pair<int64_t, int64_t>> copied_;      // input run, target run: rows to copy
  std::vector<std::pair<int64_t, int64_t>> parents_;     // target run, input parent run
  std::unordered_map<int64_t, std::string> identities_;  // input run -> identity
  std::set<std::string> taken_;                          // "<sweep id> <identity>" given out
};

}  // namespace amptune::store::merging
