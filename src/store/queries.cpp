// Store: reads — the read-only ad-hoc query, and the typed reads of the query side (sweep_names,
// higher_is_better, metric_names, metric_values, run_totals, lineage) that amptune compare /
// report / status use.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "store/columns.h"
#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {

using sql::Statement;
using detail::guarded;

// --- read-only ad-hoc query ----------------------------------------------------------------------

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

// --- typed reads of the query side --------------------------------------------------------------

namespace {

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
    Statement select(db_, "SELECT name FROM sweeps ORDER BY name");
    return sql::read_rows(select, [](const Statement& row) { return row.column_text(0); });
  });
}

std::optional<bool> Store::higher_is_better(const std::string& metric) const {
  return guarded(path_, "reading metric_info of '" + metric + "'", [&] {
    return sql::query_one<bool>(db_, "SELECT higher_is_better FROM metric_info WHERE name = ?",
                                metric);
  });
}

std::vector<std::string> Store::metric_names(const std::string& sweep) const {
  return guarded(path_, "listing the metrics of sweep '" + sweep + "'", [&] {
    std::set<std::string> names(std::begin(records::kEpochColumnMetrics),
                                std::end(records::kEpochColumnMetrics));
    Statement select(db_,
                     std::string("SELECT DISTINCT m.name FROM metrics m WHERE m.run_id IN ") +
                         kRunsOfSweep,
                     sweep);
    while (select.step()) names.insert(select.column_text(0));
    return std::vector<std::string>(names.begin(), names.end());
  });
}

std::vector<Store::MetricValue> Store::metric_values(const std::string& sweep,
                                                     const std::string& metric,
                                                     bool with_nulls) const {
  return guarded(path_, "reading " + metric + " of sweep '" + sweep + "'", [&] {
    // The column name spliced in is one of records::kEpochColumnMetrics, never the caller's text.
    const bool in_epochs = records::is_epoch_column_metric(metric);
    const std::string sql =
        in_epochs ? "SELECT e.run_id, e.epoch, e." + metric + ", e.rowid AS row_id FROM epochs e "
                        "WHERE (e." + metric + " IS NOT NULL OR ?3) AND e.run_id IN " +
                        kRunsOfSweep + " ORDER BY e.run_id, e.epoch"
                  : std::string("SELECT m.run_id, m.epoch, m.value, m.rowid AS row_id FROM "
                                "metrics m WHERE m.name = ?2 AND (m.value IS NOT NULL OR ?3) AND "
                                "m.run_id IN ") +
                        kRunsOfSweep + " ORDER BY m.run_id, m.epoch";
    Statement select(db_, sql);
    select.bind(1, sweep);
    select.bind(2, in_epochs ? std::string() : metric);
    select.bind(3, static_cast<int64_t>(with_nulls));
    const detail::Row row(path_, detail::table(in_epochs ? "epochs" : "metrics"), select,
                          "row_id");
    const std::string value = in_epochs ? metric : "value";
    return sql::read_rows(select, [&](const Statement&) {
      return MetricValue{row.integer("run_id"), row.small("epoch"),
                         row.number(value)};  // NULL (a NaN stored) -> NaN
    });
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
                     "WHERE s.name = ? GROUP BY r.id ORDER BY r.cell_index, r.id",
                     sweep);
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

}  // namespace amptune::store
