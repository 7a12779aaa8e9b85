// Store: runs (ensure_run, find_run, runs, fork_epochs) and holding them (claims, heartbeats,
// finish, release); the run checks the other writers share (store/internal.h).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "store/columns.h"
#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {

using sql::Statement;
using detail::guarded;
using detail::guarded_write;
using detail::now_utc;

namespace {

using json = nlohmann::json;
using SettingColumns = std::vector<std::pair<std::string, std::string>>;  // name, declared type

// Whether `name` is a column of runs the store writes itself, not a setting (columns.h).
bool is_reserved_run_column(const std::string& name) {
  const detail::Column* column = detail::table("runs").find(name);
  return column && !column->setting;
}

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

bool is_json_type(const std::string& declared) { return upper(declared).find("JSON") != std::string::npos; }

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

bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

constexpr const char* kRunSelect =
    "SELECT r.*, s.name AS sweep_name, "
    "(SELECT COALESCE(MAX(e.epoch) + 1, 0) FROM epochs e WHERE e.run_id = r.id) AS epochs_done "
    "FROM runs r JOIN sweeps s ON s.id = r.sweep_id ";

// The JSON columns of a run read from `path`, checked to be what amptune writes: config_json,
// axes_json and a fork's overrides JSON objects, summary_json JSON when there is one. Every
// reader of runs gets them so (compare, report, tune, show), so none parses them unchecked.
void check_run_json(const std::string& path, const records::RunRow& run) {
  auto object = [&](const char* column, const std::string& text) {
    detail::json_object_column(path, {"runs", run.id, column}, text);
  };
  object("config_json", run.config_json);
  object("axes_json", run.axes_json);
  if (run.fork && !run.fork->overrides_json.empty()) {
    object("fork_overrides", run.fork->overrides_json);
  }
  if (!run.summary_json.empty()) {
    detail::json_column(path, {"runs", run.id, "summary_json"}, run.summary_json);
  }
}

// A run of `row` (kRunSelect): each column of runs into its member of RunRow (its descriptor's
// fill, columns.h), the JSON columns checked.
records::RunRow read_run(const detail::Row& row) {
  records::RunRow run;
  run.id = row.id();
  auto is_set = [&](const char* column) {
    return row.index(column) >= 0 && !row.is_null(column);
  };
  if (is_set("parent_run_id")) run.fork.emplace();
  if (is_set("claim_pid")) run.holder.emplace();
  run.sweep_name = row.text("sweep_name");
  run.epochs_done = static_cast<int>(
      detail::int_column(row.path(), row.statement(), row.index("epochs_done"),
                         {"runs", run.id, "epochs_done (its last epoch + 1)"}, 0, detail::kMaxInt));
  for (int column = 0; column < row.size(); ++column) {
    const detail::Value value = row.value(column);
    if (value.column() && value.column()->fill) value.column()->fill(value, run);
  }
  check_run_json(row.path(), run);
  return run;
}

// The runs kRunSelect + `sql` finds, read by read_run.
std::vector<records::RunRow> read_runs(const std::string& path, Statement& select) {
  const detail::Row row(path, detail::table("runs"), select, "id");
  return sql::read_rows(select, [&](const Statement&) { return read_run(row); });
}

// The run kRunSelect + `where` finds with `key` bound to ?1, if any.
template <class Key>
std::optional<records::RunRow> select_run(sqlite3* db, const std::string& path, const char* where,
                                          const Key& key) {
  Statement select(db, std::string(kRunSelect) + where, key);
  std::vector<records::RunRow> runs = read_runs(path, select);
  if (runs.empty()) return std::nullopt;
  return std::move(runs.front());
}

// The run of `sweep_id` that `spec` identifies: the one with its identity, else a run recorded
// before data fingerprints (migration 12) whose config hash is spec.config_key and whose data
// are not yet known (it takes spec's fingerprint when ensure_run updates it) or are spec's.
std::optional<int64_t> find_identity(sqlite3* db, int64_t sweep_id, const records::RunSpec& spec) {
  const char* by_identity = "SELECT id FROM runs WHERE sweep_id = ? AND config_hash = ?";
  if (auto id = sql::query_one<int64_t>(db, by_identity, sweep_id, spec.config_hash)) return id;
  if (spec.config_key.empty() || spec.config_key == spec.config_hash) return std::nullopt;
  return sql::query_one<int64_t>(db,
                                 "SELECT id FROM runs WHERE sweep_id = ? AND config_hash = ? AND "
                                 "(data_fingerprint IS NULL OR data_fingerprint = ?)",
                                 sweep_id, spec.config_key, spec.data_fingerprint);
}

[[noreturn]] void no_such_run(const std::string& path, int64_t run_id, const std::string& action) {
  throw StoreError(path + ": " + action + ": no run has id " + std::to_string(run_id) +
                   "; list the runs with `amptune status`");
}

// status -> running with this process as the holder: started_at kept (set when unset),
// heartbeat now, message and finished_at cleared, provenance stored.
void mark_running_by_this_process(sqlite3* db, const std::string& now, int64_t run_id,
                                  const records::Provenance& p) {
  const ProcessIdentity self = current_process();
  sql::run(db,
           "UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?1), "
           "heartbeat_at = ?1, finished_at = NULL, message = '', amptune_version = ?3, "
           "git_commit = ?4, git_dirty = ?5, torch_version = ?6, host = ?7, threads = ?8, "
           "device = ?9, command_line = ?10, claim_machine = ?11, claim_pid = ?12, "
           "claim_pid_start = ?13, world_size = ?14, global_batch = ?15, allocator = ?16, "
           "blas = ?17 WHERE id = ?2",
           now, run_id, p.amptune_version, p.git_commit, p.git_dirty, p.torch_version, p.host,
           p.threads, p.device, p.command_line, self.machine, self.pid, self.start_ticks,
           p.world_size, p.global_batch, p.allocator, p.blas);
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
                   "claim_pid_start, COALESCE(host, '') FROM runs WHERE id = ?",
                   run_id);
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

}  // namespace

namespace detail {

SettingColumns read_setting_columns(sqlite3* db) {
  SettingColumns columns;
  Statement info(db, "SELECT name, type FROM pragma_table_info('runs') ORDER BY cid");
  while (info.step()) {
    std::string name = info.column_text(0);
    if (!is_reserved_run_column(name)) columns.emplace_back(name, info.column_text(1));
  }
  return columns;
}

void require_run(sqlite3* db, const std::string& path, int64_t run_id, const std::string& action) {
  if (!sql::exists(db, "SELECT 1 FROM runs WHERE id = ?", run_id)) {
    no_such_run(path, run_id, action);
  }
}

void require_holder(sqlite3* db, const std::string& path, int64_t run_id,
                    const std::string& action) {
  const Holding h = read_holding(db, path, run_id, action);
  if (!h.holder || *h.holder == current_process()) return;
  throw records::ClaimLostError(path + ": " + action + ": run " + std::to_string(run_id) +
                       " was taken over by process " + std::to_string(h.holder->pid) + " on " +
                       (h.host.empty() ? "another host" : h.host) +
                       " (this process was presumed dead); this process stops working on it");
}

void touch_heartbeat(sqlite3* db, int64_t run_id, const std::string& now) {
  sql::run(db, "UPDATE runs SET heartbeat_at = ? WHERE id = ?", now, run_id);
}

}  // namespace detail

using detail::require_holder;
using detail::require_run;

// --- runs ------------------------------------------------------------------------------------

namespace {

// A run spec as ensure_run takes it: its setting columns parsed (each one the runs table
// declares) and its axes; `fail` throws naming what was wrong.
struct CheckedSpec {
  json axes = json::object();
  std::vector<std::pair<std::string, json>> settings;
};

CheckedSpec check_spec(const records::RunSpec& spec, const SettingColumns& setting_columns,
                       int schema_version, const std::function<void(const std::string&)>& fail) {
  if (spec.config_hash.size() < 8) {
    fail("config_hash '" + spec.config_hash + "' is shorter than 8 characters");
  }
  if (spec.cell_index < 0) fail("cell_index must be >= 0");
  // amptune never stores what its readers refuse (internal.h kMaxJsonBytes).
  for (const auto& [column, text] : {std::pair<const char*, const std::string&>{
                                         "config_json", spec.config_json},
                                     {"axes_json", spec.axes_json}}) {
    if (text.size() > detail::kMaxJsonBytes) {
      throw ConfigError("the run's " + std::string(column) + " would be " +
                        std::to_string(text.size()) + " bytes, more than the " +
                        std::to_string(detail::kMaxJsonBytes) +
                        " amptune stores: a value of the sweep is far too long; shorten it");
    }
  }
  if (!json::accept(spec.config_json)) fail("config_json is not valid JSON");
  if (spec.fork) {
    if (spec.fork->parent_epoch < 0) fail("fork parent_epoch must be >= 0");
    if (!json::accept(spec.fork->overrides_json) ||
        !json::parse(spec.fork->overrides_json).is_object()) {
      fail("fork overrides must be a JSON object, got " + spec.fork->overrides_json);
    }
  }
  CheckedSpec out;
  if (!spec.axes_json.empty()) {
    if (!json::accept(spec.axes_json)) fail("axes_json is not valid JSON: " + spec.axes_json);
    out.axes = json::parse(spec.axes_json);
    if (!out.axes.is_object()) fail("axes_json must be a JSON object, got " + spec.axes_json);
  }
  const std::map<std::string, std::string> declared(setting_columns.begin(), setting_columns.end());
  for (const auto& [column, text] : spec.columns) {
    if (!declared.count(column)) {
      std::string known;
      for (const auto& c : setting_columns) known += (known.empty() ? "" : ", ") + c.first;
      fail("runs has no setting column '" + column + "' (schema " +
           std::to_string(schema_version) + "; known: " + known +
           "); add it with a migration in schemas/store.sql");
    }
    if (!json::accept(text)) fail("value of column " + column + " is not JSON text: " + text);
    out.settings.emplace_back(column, json::parse(text));
  }
  return out;
}

// The run's metric directions into metric_info (RunSpec::metric_directions), inside the
// caller's transaction: new names inserted; a name held with the other direction is a
// ConfigError naming both.
void record_metric_directions(sqlite3* db, const records::RunSpec& spec) {
  Statement known(db, "SELECT higher_is_better FROM metric_info WHERE name = ?");
  Statement insert(db,
                   "INSERT INTO metric_info (name, higher_is_better, description) "
                   "VALUES (?, ?, ?)");
  const auto word = [](bool higher) { return higher ? "higher" : "lower"; };
  for (const auto& [name, higher] : spec.metric_directions) {
    known.bind_all(name);
    if (!known.step()) {
      insert.bind_all(name, higher ? 1 : 0, "declared by the model of sweep " + spec.sweep_name)
          .run();
    } else if ((known.column_int(0) != 0) != higher) {
      throw ConfigError("metric " + name + ": the run's model says " + word(higher) +
                        " is better, but the database already ranks " + name + " " +
                        word(known.column_int(0) != 0) + "-is-better (table metric_info): a " +
                        "metric name has one direction in a database; rename the model's metric "
                        "or use another --db");
    }
  }
}

}  // namespace

records::RunRow Store::ensure_run(int64_t sweep_id, const records::RunSpec& spec) {
  const std::string what = "creating run " + std::to_string(spec.cell_index) + " of sweep " +
                           (spec.sweep_name.empty() ? std::to_string(sweep_id) : spec.sweep_name);
  auto fail = [&](const std::string& why) -> void {
    throw StoreError(path_ + ": " + what + ": " + why);
  };
  const CheckedSpec checked = check_spec(spec, setting_columns_, schema_version(), fail);
  const json& axes = checked.axes;
  const auto& settings = checked.settings;
  std::map<std::string, std::string> declared(setting_columns_.begin(), setting_columns_.end());

  return guarded_write(path_, db_, what, [&] {
    const auto sweep_name =
        sql::query_one<std::string>(db_, "SELECT name FROM sweeps WHERE id = ?", sweep_id);
    if (!sweep_name) fail("no sweep has id " + std::to_string(sweep_id));
    if (!spec.sweep_name.empty() && spec.sweep_name != *sweep_name) {
      fail("RunSpec names sweep '" + spec.sweep_name + "' but sweep " + std::to_string(sweep_id) +
           " is '" + *sweep_name + "'");
    }

    record_metric_directions(db_, spec);
    if (const std::optional<int64_t> id = find_identity(db_, sweep_id, spec)) {
      // The same run. What it is does not change; how and where it executes may (another
      // checkpoint.dir, thread count, a copy of the data at another path): the config this
      // invocation planned is the one it trains with.
      // (no write, so no page change, when nothing differs: the common case of a sweep run again)
      sql::run(db_,
               "UPDATE runs SET config_json = ?1, data_fingerprint = "
               "COALESCE(data_fingerprint, NULLIF(?2, '')) WHERE id = ?3 AND "
               "(config_json IS NOT ?1 OR (data_fingerprint IS NULL AND ?2 <> ''))",
               spec.config_json, spec.data_fingerprint, *id);
      return select_run(db_, path_, "WHERE r.id = ?", *id).value();
    }

    if (spec.fork) {
      const auto parent_sweep = sql::query_one<int64_t>(
          db_, "SELECT sweep_id FROM runs WHERE id = ?", spec.fork->parent_run_id);
      if (!parent_sweep) {
        fail("fork parent run " + std::to_string(spec.fork->parent_run_id) + " does not exist");
      }
      if (*parent_sweep != sweep_id) fail("a fork must belong to its parent's sweep");
    }
    std::string columns = "sweep_id, name, cell_index, label, config_json, config_hash, "
                          "axes_json, created_at, data_fingerprint, parent_run_id, parent_epoch, "
                          "fork_overrides, fork_changes, reset_optimizer";
    std::string values = "?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?, ?, ?, ?";
    for (const auto& setting : settings) {
      columns += ", " + detail::quote_identifier(setting.first);
      values += ", ?";
    }
    Statement insert(db_, "INSERT INTO runs (" + columns + ") VALUES (" + values + ")");
    const std::string name = *sweep_name + "/" + std::to_string(spec.cell_index) + "-" +
                             spec.config_hash.substr(0, 8);
    insert.bind_all(sweep_id, name, spec.cell_index, spec.label, spec.config_json,
                    spec.config_hash, axes.dump(), now_utc(), spec.data_fingerprint);
    if (spec.fork) {  // else NULL
      insert.bind(10, spec.fork->parent_run_id).bind(11, spec.fork->parent_epoch);
      insert.bind(12, spec.fork->overrides_json).bind(13, spec.fork->changes);
      insert.bind(14, spec.fork->reset_optimizer ? 1 : 0);
    }
    int index = 15;
    for (const auto& setting : settings) {
      bind_setting(insert, index++, setting.second, declared[setting.first]);
    }
    insert.run();
    const int64_t run_id = sqlite3_last_insert_rowid(db_);

    Statement param(db_, "INSERT INTO run_params (run_id, key, value_json) VALUES (?, ?, ?)");
    for (const auto& [key, value] : axes.items()) param.bind_all(run_id, key, value.dump()).run();

    return select_run(db_, path_, "WHERE r.id = ?", run_id).value();
  });
}

std::optional<records::RunRow> Store::find_run(int64_t id) const {
  return guarded(path_, "reading run " + std::to_string(id),
                 [&] { return select_run(db_, path_, "WHERE r.id = ?", id); });
}

std::optional<records::RunRow> Store::find_run(const std::string& id_or_name) const {
  if (all_digits(id_or_name) && id_or_name.size() < 19) return find_run(std::stoll(id_or_name));
  return guarded(path_, "reading run " + id_or_name,
                 [&] {
                   return select_run(db_, path_, "WHERE r.name = ?",
                                     id_or_name);
                 });
}

std::vector<records::RunRow> Store::runs(const std::optional<std::string>& sweep_name) const {
  return guarded(path_, "listing runs", [&] {
    Statement select(db_, std::string(kRunSelect) + (sweep_name ? "WHERE s.name = ? " : "") +
                              "ORDER BY s.id, r.cell_index, r.id");
    if (sweep_name) select.bind(1, *sweep_name);
    return read_runs(path_, select);
  });
}

std::vector<records::RunRow> Store::runs(const std::string& sweep_name, int64_t offset,
                                int64_t limit) const {
  return guarded(path_, "listing runs of " + sweep_name, [&] {
    Statement select(db_,
                     std::string(kRunSelect) +
                         "WHERE s.name = ? ORDER BY s.id, r.cell_index, r.id LIMIT ? OFFSET ?",
                     sweep_name, limit, offset);
    return read_runs(path_, select);
  });
}

int64_t Store::run_count(const std::string& sweep_name) const {
  return guarded(path_, "counting runs of " + sweep_name, [&] {
    return sql::query_one<int64_t>(
               db_,
               "SELECT COUNT(*) FROM runs r JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = ?",
               sweep_name)
        .value_or(0);
  });
}

std::map<std::string, int64_t> Store::run_counts() const {
  return guarded(path_, "counting the runs of each sweep", [&] {
    std::map<std::string, int64_t> counts;
    Statement select(db_,
                     "SELECT s.name, COUNT(r.id) FROM sweeps s LEFT JOIN runs r "
                     "ON r.sweep_id = s.id GROUP BY s.id");
    while (select.step()) counts[select.column_text(0)] = select.column_int(1);
    return counts;
  });
}

std::vector<int> Store::fork_epochs(int64_t run_id) const {
  return guarded(path_, "reading the forks of run " + std::to_string(run_id), [&] {
    Statement select(db_,
                     "SELECT DISTINCT parent_epoch FROM runs WHERE parent_run_id = ? AND "
                     "parent_epoch IS NOT NULL ORDER BY parent_epoch",
                     run_id);
    return sql::read_rows(select,
                          [](const Statement& row) { return static_cast<int>(row.column_int(0)); });
  });
}

// --- holding a run ---------------------------------------------------------------------------

void Store::mark_running(int64_t run_id, const records::Provenance& provenance) {
  const std::string action = "marking run " + std::to_string(run_id) + " running";
  guarded_write(path_, db_, action, [&] {
    require_run(db_, path_, run_id, action);
    mark_running_by_this_process(db_, now_utc(), run_id, provenance);
  });
}

bool Store::claim_run(int64_t run_id, const records::Provenance& provenance,
                      double stale_after_seconds, bool retry_failed, bool continue_pruned,
                      std::optional<int> epochs_seen) {
  const std::string action = "claiming run " + std::to_string(run_id);
  // In an IMMEDIATE transaction no other writer can interleave between the read and the write.
  return guarded_write(path_, db_, action, [&] {
    const Holding h = read_holding(db_, path_, run_id, action);
    const auto now = std::chrono::system_clock::now();
    bool claimable = h.status == "pending" || (retry_failed && h.status == "failed") ||
                     (continue_pruned && h.status == "pruned");
    if (h.status == "running") {
      const std::optional<bool> alive = h.holder ? alive_if_local(*h.holder) : std::nullopt;
      if (alive) {
        claimable = !*alive;  // same pid space: we know whether it lives
      } else {
        const auto stale =
            now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                      std::chrono::duration<double>(std::max(0.0, stale_after_seconds)));
        claimable = h.heartbeat_at < detail::iso_utc(stale);
      }
    }
    if (claimable && epochs_seen) {
      claimable = sql::query_one<int64_t>(
                      db_, "SELECT COALESCE(MAX(epoch) + 1, 0) FROM epochs WHERE run_id = ?",
                      run_id) == *epochs_seen;
    }
    if (!claimable) return false;
    mark_running_by_this_process(db_, detail::iso_utc(now), run_id, provenance);
    return true;
  });
}

void Store::heartbeat(int64_t run_id) {
  const std::string action = "heartbeat of run " + std::to_string(run_id);
  guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, run_id, action);
    detail::touch_heartbeat(db_, run_id, now_utc());
  });
}

void Store::record_run_work(int64_t run_id, const records::RunWork& work) {
  const std::string action =
      "recording the training FLOPs and peak of run " + std::to_string(run_id);
  auto known = [](double value) { return value > 0 ? std::optional<double>(value) : std::nullopt; };
  auto text = [](const std::string& value) {
    return value.empty() ? std::nullopt : std::optional<std::string>(value);
  };
  guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, run_id, action);
    Statement(db_,
              "UPDATE runs SET train_flops_per_sample = ?1, peak_flops = ?2, peak_precision = ?3, "
              "peak_source = ?4, uncounted_ops = ?6 WHERE id = ?5",
              known(work.train_flops_per_sample), known(work.peak_flops), text(work.peak_precision),
              text(work.peak_source), run_id, text(work.uncounted_ops))
        .run();
  });
}

void Store::finish_run(int64_t run_id, records::RunStatus status, const std::string& message,
                       const std::string& summary_json) {
  const std::string action = "finishing run " + std::to_string(run_id) + " as " + to_string(status);
  if (status == records::RunStatus::kPending || status == records::RunStatus::kRunning ||
      status == records::RunStatus::kPruned) {
    throw StoreError(path_ + ": " + action +
                     ": a run finishes as done, failed, diverged or pruned (prune_run)");
  }
  if (!summary_json.empty() && !json::accept(summary_json)) {
    throw StoreError(path_ + ": " + action + ": the summary is not valid JSON: " + summary_json);
  }
  guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, run_id, action);
    sql::run(db_,
             "UPDATE runs SET status = ?1, message = ?2, summary_json = NULLIF(?3, ''), "
             "finished_at = ?4, heartbeat_at = ?4 WHERE id = ?5",
             to_string(status), log::clipped(message, log::kMessageBytes), summary_json, now_utc(),
             run_id);
  });
}

void Store::release_run(int64_t run_id, const std::string& message) {
  const std::string action = "releasing run " + std::to_string(run_id);
  guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, run_id, action);
    sql::run(db_,
             "UPDATE runs SET status = 'pending', message = ?1, heartbeat_at = ?2 WHERE id = ?3",
             log::clipped(message, log::kMessageBytes), now_utc(), run_id);
  });
}

}  // namespace amptune::store
