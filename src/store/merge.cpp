// Store::merge (store.h "Merging databases"): the copying, input after input, in one transaction
// on the target; which copy of a cell is kept is merge_runs.cpp's, whether an input can be merged
// merge_check.cpp's (merge_internal.h).
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/internal.h"
#include "store/merge_internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {
namespace merging {

using detail::quote_identifier;
using detail::same_name;
using sql::SqliteError;
using sql::Statement;

std::vector<DbColumn> columns_of(sqlite3* db, const std::string& table) {
  Statement info(db, "SELECT name, \"notnull\", dflt_value FROM pragma_table_info(?) ORDER BY cid",
                 table);
  std::vector<DbColumn> columns;
  while (info.step()) {
    columns.push_back({info.column_text(0), info.column_int(1) != 0, info.column_text(2)});
  }
  return columns;
}

// The columns of `table` both databases have, in the target's order, without those in `skip`.
std::vector<std::string> shared_columns(const std::vector<DbColumn>& target,
                                        const std::vector<DbColumn>& input,
                                        const std::vector<std::string>& skip) {
  std::vector<std::string> names;
  for (const DbColumn& c : target) {
    bool in_input = false;
    for (const DbColumn& i : input) in_input = in_input || same_name(i.name, c.name);
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

namespace {

// The columns of the target's `table` that SQLite's constraint message is about: those it names
// ("NOT NULL constraint failed: runs.label", "UNIQUE constraint failed: run_params.run_id,
// run_params.key", "CHECK constraint failed: status IN (...)"; a named CHECK by its name's
// words, metric_name_is_identifier... -> name), else, for "FOREIGN KEY constraint failed", the
// columns of the table's foreign keys.
std::string constraint_columns(sqlite3* target, const std::string& table,
                               const std::string& message) {
  const size_t failed = message.find("failed");
  const std::string text =
      message.substr(0, message.find(" [in: ")).substr(failed == std::string::npos ? 0 : failed);
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

}  // namespace

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

}  // namespace merging

namespace {

namespace fs = std::filesystem;
using detail::quote_identifier;
using detail::same_name;
using merging::column_list;
using merging::columns_of;
using merging::copy_row;
using merging::DbColumn;
using merging::index_of;
using merging::Input;
using merging::placeholders;
using merging::reading_input;
using merging::shared_columns;
using merging::Target;
using sql::exec;
using sql::Statement;

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
        select_(in,
                "SELECT " + column_list(columns) + ", rowid FROM " + table + " WHERE run_id = ?"),
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
  // With `selection` (Store::copy_runs): its runs only, from an input this process trusts.
  Merger(sqlite3* db, std::string path, records::MergeReport& report,
         const records::CheckpointLayout& layout, const merging::Selection* selection = nullptr)
      : db_(db), path_(std::move(path)), report_(report), layout_(layout), selection_(selection) {}

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
  const std::vector<DbColumn>& target_columns(const std::string& table) {
    auto it = target_columns_.find(table);
    if (it == target_columns_.end()) {
      it = target_columns_.emplace(table, columns_of(db_, table)).first;
    }
    return it->second;
  }

  void merge_metric_info(sqlite3* in, const std::string& path) {
    const std::vector<DbColumn> input = columns_of(in, "metric_info");
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

  // The input's runs into the target (merging::RunMerge); sets copied_ and run_ids_ for
  // copy_children.
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
          detail::bad_value(
              input, cell,
              "names run " + entry["run_id"].dump() + ", which the file does not have");
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
    // Each copied input run's own checkpoint folders (the layout's rule, from its row).
    std::unordered_map<int64_t, std::vector<std::string>> own_dirs;
    if (!selection_) {
      Statement config(in, "SELECT id, config_json FROM runs");
      while (config.step()) {
        std::vector<std::string>& dirs = own_dirs[config.column_int(0)];
        for (const std::string& dir :
             layout_.run_dirs(input, config.column_int(0), config.column_text(1))) {
          dirs.push_back(absolute_normal(dir));
        }
      }
    }
    Statement disown(db_,
                     "UPDATE epochs SET checkpoint_deleted_at = ? WHERE run_id = ? AND epoch = ?");
    for (const std::string table :
         {"run_params", "epochs", "metrics", "loss_scale_events", "initial_metrics", "diagnoses",
          "diagnostics", "diagnosis_advice", "fp8_diagnostics", "prune_decisions"}) {
      // A selection's decisions compare runs it may not hold.
      if (selection_ && table == "prune_decisions") continue;
      const std::vector<DbColumn> columns = columns_of(in, table);
      if (columns.empty()) continue;  // an older schema
      // prune_decisions rows get new ids here (their order, by id, is kept).
      const auto names = shared_columns(
          target_columns(table), columns,
          table == "prune_decisions" ? std::vector<std::string>{"id"} : std::vector<std::string>{});
      ChildCopier copier(in, db_, input, table, names, remap_compared(input, names));
      const int path_at = index_of(names, "checkpoint_path");
      const int deleted_at = index_of(names, "checkpoint_deleted_at");
      const int epoch_at = index_of(names, "epoch");
      const int sha_at = index_of(names, "checkpoint_sha256");
      for (const auto& [from, to] : copied) {
        const int64_t rows = copier.copy(from, to, [&, to = to, from = from](const Statement& row) {
          if (path_at < 0 || row.is_null(path_at)) return;
          if (deleted_at >= 0 && !row.is_null(deleted_at)) return;
          const auto known = known_.find({to, row.column_int(epoch_at)});
          const bool known_file =
              known != known_.end() && known->second.first == row.column_text(path_at) &&
              sha_at >= 0 && known->second.second == row.column_text(sha_at);
          if (!selection_ && !known_file &&
              !own_checkpoint(layout_, row.column_text(path_at), own_dirs[from])) {
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
  const records::CheckpointLayout&
      layout_;  // where input runs keep their checkpoints (train's rule)
  std::map<std::string, std::vector<DbColumn>> target_columns_;
  const merging::Selection* selection_;
  // Target runs written by this merge -> the input their copy came from (for conflicts).
  std::unordered_map<int64_t, std::string> origins_;
  merging::KnownCheckpoints known_;
  Target target_{db_, path_, report_, origins_, known_};
  // Input run, target run: the runs of the current input whose rows merge_runs took.
  std::vector<std::pair<int64_t, int64_t>> copied_;
  // Every run of the current input -> its target run (copied, kept or unchanged).
  std::unordered_map<int64_t, int64_t> run_ids_;
};

void Merger::merge_runs(sqlite3* in, const std::string& input,
                        const std::unordered_map<int64_t, int64_t>& sweeps,
                        records::MergeCount& count, int version) {
  merging::RunMerge runs(target_, target_columns("runs"), in, input, sweeps, count, version,
                         selection_);
  copied_ = runs.merge();
  run_ids_ = runs.ids();
}

}  // namespace

records::MergeReport Store::copy_runs(
    const std::string& source, const std::vector<int64_t>& runs,
    const std::function<std::string(const std::string&)>& config) {
  const int version = detail::guarded(source, "reading its schema version", [&] {
    return detail::read_schema_version(merging::Input(source).db());
  });
  if (version != schema_version()) {
    throw StoreError(source + " (schema " + std::to_string(version) + ") and " + path_ +
                     " (schema " + std::to_string(schema_version()) +
                     ") differ in schema; copy runs between databases of one amptune");
  }
  records::MergeReport report;
  const merging::Selection selection{runs, config};
  records::CheckpointLayout trusted;  // not asked: paths are copied as recorded
  detail::guarded(path_, "copying runs of " + source + " into it", [&] {
    sql::write_transaction(db_, [&] {
      Merger merger(db_, path_, report, trusted, &selection);
      report.inputs.push_back(merger.merge(source, version));
    });
  });
  return report;
}

records::MergeReport Store::merge(const std::vector<std::string>& inputs,
                                  const records::CheckpointLayout& layout) {
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
