// Store: epochs and what hangs off them (metrics, loss-scale events, checkpoint references), the
// initial weights' metrics, and the metrics of an evaluated checkpoint.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "store/columns.h"
#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {

using sql::SqliteError;
using sql::Statement;
using detail::guarded;
using detail::guarded_write;
using detail::require_holder;

namespace {

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
                     "go in their records::EpochRecord fields");
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
    run_metric_insert(upsert.bind_all(run_id, epoch, name, value), where, name);
  }
}

// Replaces the run's initial_metrics rows (migration 9) with `metrics`.
void write_initial_metrics(sqlite3* db, const std::string& where, int64_t run_id,
                           const std::map<std::string, double>& metrics) {
  sql::run(db, "DELETE FROM initial_metrics WHERE run_id = ?", run_id);
  Statement insert(db, "INSERT INTO initial_metrics (run_id, name, value) VALUES (?, ?, ?)");
  for (const auto& [name, value] : metrics) {
    run_metric_insert(insert.bind_all(run_id, name, value), where, name);
  }
}

// A measured time of EpochTimes; negative (not measured) is NULL.
std::optional<double> measured(double seconds) {
  if (seconds < 0) return std::nullopt;
  return seconds;
}

}  // namespace

void Store::record_epoch(const records::EpochRecord& record) {
  const std::string action = "recording epoch " + std::to_string(record.epoch) + " of run " +
                             std::to_string(record.run_id);
  guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, record.run_id, action);
    // Delete first (metrics cascade) rather than INSERT OR REPLACE, whose implicit delete
    // would leave the old epoch's metrics behind.
    sql::run(db_, "DELETE FROM epochs WHERE run_id = ? AND epoch = ?", record.run_id, record.epoch);

    const std::string now = detail::now_utc();
    Statement insert(db_,
                     "INSERT INTO epochs (run_id, epoch, global_step, lr, train_loss, "
                     "train_fps_mean, train_fps_min, train_fps_max, epoch_seconds, "
                     "skipped_samples, recorded_at, profile_trace, checkpoint_path, "
                     "checkpoint_bytes, checkpoint_sha256, data_wait_seconds, forward_seconds, "
                     "backward_seconds, optimizer_seconds, eval_seconds, checkpoint_seconds, "
                     "db_seconds, startup_seconds) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?, ?, ?, ?, ?, "
                     "?, ?, ?, ?, ?)");
    insert.bind_all(record.run_id, record.epoch, record.global_step, record.lr, record.train_loss,
                    record.train_fps_mean, record.train_fps_min, record.train_fps_max,
                    record.epoch_seconds, record.skipped_samples, now, record.profile_trace);
    if (record.checkpoint) {  // else NULL, as the times below
      const records::CheckpointFile& c = *record.checkpoint;
      insert.bind(13, c.path).bind(14, c.bytes).bind(15, c.sha256);
    }
    if (record.times) {
      const records::EpochTimes& t = *record.times;
      insert.bind(16, t.data_wait).bind(17, t.forward).bind(18, t.backward);
      insert.bind(19, t.optimizer).bind(20, t.eval).bind(21, t.checkpoint);
      insert.bind(22, measured(t.db)).bind(23, measured(t.startup));
    }
    insert.run();
    detail::touch_heartbeat(db_, record.run_id, now);

    write_metrics(db_, path_ + ": " + action, record.run_id, record.epoch, record.metrics);
    if (!record.initial_metrics.empty()) {
      write_initial_metrics(db_, path_ + ": " + action, record.run_id, record.initial_metrics);
    }
    // The epoch row was deleted above, and its loss_scale_events with it (cascade).
    Statement event(db_,
                    "INSERT INTO loss_scale_events (run_id, epoch, global_step, scale, reason) "
                    "VALUES (?, ?, ?, ?, ?)");
    for (const auto& e : record.scale_events) {
      event.bind_all(record.run_id, record.epoch, e.global_step, e.scale, to_string(e.reason))
          .run();
    }
  });
}

namespace {

// The columns of a loss_scale_events row that read_scale_event reads.
constexpr const char* kScaleEventColumns =
    "e.global_step, e.scale, e.reason, e.rowid AS row_id";

// A loss_scale_events row (kScaleEventColumns), its numbers checked as they are read.
records::ScaleEvent read_scale_event(const detail::Row& row) {
  return records::ScaleEvent{row.integer("global_step"), row.number("scale"),
                             row.word("reason", parse_scale_reason)};
}

detail::Row scale_event_row(const std::string& path, const Statement& select) {
  return detail::Row(path, detail::table("loss_scale_events"), select, "row_id");
}

}  // namespace

std::vector<records::ScaleEvent> Store::scale_events(int64_t run_id) const {
  return guarded(path_, "reading loss-scale events of run " + std::to_string(run_id), [&] {
    Statement select(db_,
                     std::string("SELECT ") + kScaleEventColumns +
                         " FROM loss_scale_events e WHERE e.run_id = ? ORDER BY e.global_step",
                     run_id);
    const detail::Row row = scale_event_row(path_, select);
    return sql::read_rows(select, [&](const Statement&) { return read_scale_event(row); });
  });
}

namespace {

// The columns of an epoch row that read_epoch reads (its rowid, for error messages).
constexpr const char* kEpochColumns =
    "e.epoch, e.global_step, e.lr, e.train_loss, e.train_fps_mean, e.train_fps_min, "
    "e.train_fps_max, e.epoch_seconds, e.skipped_samples, e.checkpoint_path, "
    "e.checkpoint_bytes, e.checkpoint_sha256, e.checkpoint_deleted_at, e.recorded_at, "
    "e.data_wait_seconds, e.forward_seconds, e.backward_seconds, e.optimizer_seconds, "
    "e.eval_seconds, e.checkpoint_seconds, e.db_seconds, e.startup_seconds, e.profile_trace, "
    "e.rowid AS row_id";

detail::Row epoch_row(const std::string& path, const Statement& select) {
  return detail::Row(path, detail::table("epochs"), select, "row_id");
}

// An epochs row (without its metrics) from kEpochColumns, its numbers checked as they are read.
records::EpochRow read_epoch(const detail::Row& row) {
  records::EpochRow e;
  e.epoch = row.small("epoch");
  e.global_step = row.integer("global_step");
  e.lr = row.number("lr");
  e.train_loss = row.number("train_loss");
  e.train_fps_mean = row.number("train_fps_mean");
  e.train_fps_min = row.number("train_fps_min");
  e.train_fps_max = row.number("train_fps_max");
  e.epoch_seconds = row.number("epoch_seconds");
  e.skipped_samples = row.integer("skipped_samples");
  if (!row.is_null("checkpoint_path") && row.is_null("checkpoint_deleted_at")) {
    const int64_t bytes = row.is_null("checkpoint_bytes") ? 0 : row.integer("checkpoint_bytes");
    e.checkpoint = records::CheckpointFile{row.text("checkpoint_path"), bytes,
                                           row.text("checkpoint_sha256")};
  }
  e.recorded_at = row.text("recorded_at");
  if (!row.is_null("data_wait_seconds")) {
    auto seconds = [&](const char* column) {
      return row.is_null(column) ? -1.0 : row.number(column);
    };
    e.times = records::EpochTimes{seconds("data_wait_seconds"),  seconds("forward_seconds"),
                                  seconds("backward_seconds"),   seconds("optimizer_seconds"),
                                  seconds("eval_seconds"),       seconds("checkpoint_seconds"),
                                  seconds("db_seconds"),         seconds("startup_seconds")};
  }
  if (!row.is_null("profile_trace")) e.profile_trace = row.text("profile_trace");
  return e;
}

// "WITH picked AS (...) ": the first ?2 runs of the sweep named ?1 (in runs(sweep)'s order) for
// which `condition` on r.id holds, with their cell_index.
std::string first_runs_where(const std::string& condition) {
  return "WITH picked AS (SELECT r.id, r.cell_index FROM runs r JOIN sweeps s ON s.id = "
         "r.sweep_id WHERE s.name = ?1 AND " +
         condition + " ORDER BY r.cell_index, r.id LIMIT ?2) ";
}

// The rows of `select`, whose column 0 is a run id, grouped by run in their order; `read` reads
// one row's item.
template <typename Read>
auto group_by_run(Statement& select, Read read)
    -> std::vector<std::pair<int64_t, std::vector<decltype(read(select))>>> {
  std::vector<std::pair<int64_t, std::vector<decltype(read(select))>>> runs;
  while (select.step()) {
    const int64_t id = select.column_int(0);
    if (runs.empty() || runs.back().first != id) runs.push_back({id, {}});
    runs.back().second.push_back(read(select));
  }
  return runs;
}

}  // namespace

std::vector<records::EpochRow> Store::epochs(int64_t run_id) const {
  return guarded(path_, "reading epochs of run " + std::to_string(run_id), [&] {
    Statement select(db_,
                     std::string("SELECT ") + kEpochColumns +
                         " FROM epochs e WHERE e.run_id = ? ORDER BY e.epoch",
                     run_id);
    const detail::Row epoch = epoch_row(path_, select);
    std::vector<records::EpochRow> rows =
        sql::read_rows(select, [&](const Statement&) { return read_epoch(epoch); });
    Statement metrics(db_,
                      "SELECT epoch, name, value, rowid AS row_id FROM metrics "
                      "WHERE run_id = ? ORDER BY epoch",
                      run_id);
    const detail::Row metric(path_, detail::table("metrics"), metrics, "row_id");
    size_t next = 0;
    while (metrics.step()) {
      const int epoch = metric.small("epoch");
      while (next < rows.size() && rows[next].epoch < epoch) ++next;
      if (next < rows.size() && rows[next].epoch == epoch) {
        rows[next].metrics[metric.text("name")] = metric.number("value");
      }
    }
    return rows;
  });
}

std::vector<std::pair<int64_t, std::vector<records::EpochRow>>> Store::timed_epochs(
    const std::string& sweep, size_t max_runs) const {
  return guarded(path_, "reading the epoch times of sweep '" + sweep + "'", [&] {
    // The first max_runs runs (in runs(sweep)'s order) with a breakdown or a trace, then their
    // epochs: the EXISTS reads each run's epochs through the primary key, nothing is loaded.
    Statement select(db_,
                     first_runs_where("EXISTS (SELECT 1 FROM epochs x WHERE x.run_id = r.id AND "
                                      "(x.data_wait_seconds IS NOT NULL OR x.profile_trace IS "
                                      "NOT NULL))") +
                         "SELECT p.id, " + kEpochColumns +
                         " FROM picked p JOIN epochs e ON e.run_id = p.id "
                         "ORDER BY p.cell_index, p.id, e.epoch",
                     sweep, static_cast<int64_t>(max_runs));
    const detail::Row epoch = epoch_row(path_, select);
    return group_by_run(select, [&](const Statement&) { return read_epoch(epoch); });
  });
}

std::vector<std::pair<int64_t, std::vector<records::ScaleEvent>>> Store::scale_events(
    const std::string& sweep, size_t max_runs) const {
  return guarded(path_, "reading the loss-scale events of sweep '" + sweep + "'", [&] {
    Statement select(db_,
                     first_runs_where("EXISTS (SELECT 1 FROM loss_scale_events x WHERE "
                                      "x.run_id = r.id)") +
                         "SELECT p.id, " + kScaleEventColumns +
                         " FROM picked p JOIN loss_scale_events e ON e.run_id = p.id "
                         "ORDER BY p.cell_index, p.id, e.global_step",
                     sweep, static_cast<int64_t>(max_runs));
    const detail::Row row = scale_event_row(path_, select);
    return group_by_run(select, [&](const Statement&) { return read_scale_event(row); });
  });
}

std::vector<records::CheckpointFile> Store::truncate_after(int64_t run_id, int epoch) {
  const std::string action =
      "dropping epochs after " + std::to_string(epoch) + " of run " + std::to_string(run_id);
  return guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, run_id, action);
    Statement select(db_,
                     "SELECT checkpoint_path, checkpoint_bytes, checkpoint_sha256 FROM epochs "
                     "WHERE run_id = ? AND epoch > ? AND checkpoint_path IS NOT NULL "
                     "AND checkpoint_deleted_at IS NULL ORDER BY epoch",
                     run_id, epoch);
    const std::vector<records::CheckpointFile> files =
        sql::read_rows(select, [](const Statement& row) {
          return records::CheckpointFile{row.column_text(0), row.column_int(1), row.column_text(2)};
        });
    sql::run(db_, "DELETE FROM epochs WHERE run_id = ? AND epoch > ?", run_id, epoch);
    return files;
  });
}

void Store::set_epoch_db_seconds(int64_t run_id, int epoch, double seconds) {
  const std::string action = "recording the database time of epoch " + std::to_string(epoch) +
                             " of run " + std::to_string(run_id);
  guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, run_id, action);
    if (sql::run(db_, "UPDATE epochs SET db_seconds = ? WHERE run_id = ? AND epoch = ?", seconds,
                 run_id, epoch) != 1) {
      throw StoreError(path_ + ": " + action + ": that epoch is not recorded");
    }
  });
}

void Store::forget_checkpoint(int64_t run_id, int epoch) {
  const std::string action = "forgetting the checkpoint of epoch " + std::to_string(epoch) +
                             " of run " + std::to_string(run_id);
  guarded_write(path_, db_, action, [&] {
    if (sql::run(db_,
                 "UPDATE epochs SET checkpoint_deleted_at = COALESCE(checkpoint_deleted_at, ?) "
                 "WHERE run_id = ? AND epoch = ? AND checkpoint_path IS NOT NULL",
                 detail::now_utc(), run_id, epoch) != 1) {
      throw StoreError(path_ + ": " + action + ": that epoch has no recorded checkpoint");
    }
  });
}

void Store::record_metrics(int64_t run_id, int epoch,
                           const std::map<std::string, double>& metrics) {
  const std::string action = "recording evaluated metrics of epoch " + std::to_string(epoch) +
                             " of run " + std::to_string(run_id);
  guarded_write(path_, db_, action, [&] {
    detail::require_run(db_, path_, run_id, action);
    if (!sql::exists(db_, "SELECT 1 FROM epochs WHERE run_id = ? AND epoch = ?", run_id, epoch)) {
      throw StoreError(path_ + ": " + action + ": run " + std::to_string(run_id) +
                       " has no recorded epoch " + std::to_string(epoch));
    }
    write_metrics(db_, path_ + ": " + action, run_id, epoch, metrics);
  });
}

void Store::record_initial_metrics(int64_t run_id, const std::map<std::string, double>& metrics) {
  const std::string action =
      "recording the evaluation of the initial weights of run " + std::to_string(run_id);
  guarded_write(path_, db_, action, [&] {
    require_holder(db_, path_, run_id, action);
    write_initial_metrics(db_, path_ + ": " + action, run_id, metrics);
  });
}

std::map<std::string, double> Store::initial_metrics(int64_t run_id) const {
  return guarded(path_, "reading the initial metrics of run " + std::to_string(run_id), [&] {
    std::map<std::string, double> metrics;
    Statement select(db_,
                     "SELECT name, value, rowid AS row_id FROM initial_metrics WHERE run_id = ?",
                     run_id);
    const detail::Row row(path_, detail::table("initial_metrics"), select, "row_id");
    while (select.step()) metrics[row.text("name")] = row.number("value");
    return metrics;
  });
}

}  // namespace amptune::store
