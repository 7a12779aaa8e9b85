// Store: the decisions of a sweep's prune: rule (table prune_decisions, migration 15) and the
// pruned status they give a run.
#include <limits>
#include <string>
#include <vector>

#include "store/columns.h"
#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {

using sql::Statement;

namespace {

void insert_decision(sqlite3* db, const records::PruneDecisionRow& d) {
  sql::run(db,
           "INSERT INTO prune_decisions (run_id, epoch, action, rule, metric, rung, value, "
           "threshold, compared_json, reason, decided_at) "
           "VALUES (?, ?, ?, ?, ?, NULLIF(?, -1), ?, ?, ?, ?, ?)",
           d.run_id, d.epoch, to_string(d.action), to_string(d.rule), d.metric, d.rung, d.value,
           d.threshold, d.compared_json, d.reason, detail::now_utc());
}

}  // namespace

void Store::prune_run(const records::PruneDecisionRow& decision) {
  const std::string action = "pruning run " + std::to_string(decision.run_id);
  if (decision.action != records::PruneAction::kStop) {
    throw StoreError(path_ + ": " + action + ": a run is pruned by a decision to stop");
  }
  detail::guarded_write(path_, db_, action, [&] {
    detail::require_holder(db_, path_, decision.run_id, action);
    insert_decision(db_, decision);
    sql::run(db_,
             "UPDATE runs SET status = 'pruned', message = ?1, finished_at = ?2, "
             "heartbeat_at = ?2 WHERE id = ?3",
             decision.reason, detail::now_utc(), decision.run_id);
  });
}

bool Store::prune_pending_run(const records::PruneDecisionRow& decision) {
  const std::string action = "pruning run " + std::to_string(decision.run_id);
  if (decision.action != records::PruneAction::kStop) {
    throw StoreError(path_ + ": " + action + ": a run is pruned by a decision to stop");
  }
  return detail::guarded_write(path_, db_, action, [&] {
    detail::require_run(db_, path_, decision.run_id, action);
    if (!sql::exists(db_, "SELECT 1 FROM runs WHERE id = ? AND status = 'pending'",
                     decision.run_id)) {
      return false;
    }
    insert_decision(db_, decision);
    sql::run(db_, "UPDATE runs SET status = 'pruned', message = ?1, finished_at = ?2 WHERE id = ?3",
             decision.reason, detail::now_utc(), decision.run_id);
    return true;
  });
}

bool Store::promote_run(const records::PruneDecisionRow& decision) {
  const std::string action = "continuing pruned run " + std::to_string(decision.run_id);
  if (decision.action != records::PruneAction::kContinue) {
    throw StoreError(path_ + ": " + action + ": a pruned run continues by a decision to continue");
  }
  return detail::guarded_write(path_, db_, action, [&] {
    detail::require_run(db_, path_, decision.run_id, action);
    const bool pruned =
        sql::exists(db_, "SELECT 1 FROM runs WHERE id = ? AND status = 'pruned'", decision.run_id);
    if (!pruned) return false;
    insert_decision(db_, decision);
    sql::run(db_,
             "UPDATE runs SET status = 'pending', message = ?, finished_at = NULL WHERE id = ?",
             decision.reason, decision.run_id);
    return true;
  });
}

namespace {

// A prune_decisions row (Store::prune_decisions's columns), its numbers and JSON checked as they
// are read.
records::PruneDecisionRow read_decision(const detail::Row& row) {
  records::PruneDecisionRow d;
  d.run_id = row.integer("run_id");
  d.epoch = row.small("epoch");
  d.action = row.word("action", records::parse_prune_action);
  d.rule = row.word("rule", parse_prune_rule);
  d.metric = row.text("metric");
  d.rung = row.small("rung", -1);
  d.value = row.number("value");
  d.threshold = row.number("threshold");
  d.compared_json = row.text("compared_json");
  detail::compared_runs(row.path(), row.cell("compared_json"), d.compared_json);
  d.reason = row.text("reason");
  d.decided_at = row.text("decided_at");
  return d;
}

}  // namespace

std::vector<records::PruneDecisionRow> Store::prune_decisions(int64_t run_id) const {
  return detail::guarded(
      path_, "reading the prune decisions of run " + std::to_string(run_id), [&] {
        Statement select(db_,
                         "SELECT id, run_id, epoch, action, rule, metric, rung, value, "
                         "threshold, compared_json, reason, decided_at FROM prune_decisions "
                         "WHERE run_id = ? ORDER BY id",
                         run_id);
        const detail::Row row(path_, detail::table("prune_decisions"), select, "id");
        return sql::read_rows(select, [&](const Statement&) { return read_decision(row); });
      });
}

namespace detail {

nlohmann::json compared_runs(const std::string& path, const Cell& cell, const std::string& text) {
  nlohmann::json compared = json_column(path, cell, text);
  if (!compared.is_array()) bad_value(path, cell, "is not a JSON array: '" + text.substr(0, 40) + "'");
  for (size_t i = 0; i < compared.size(); ++i) {
    const nlohmann::json& entry = compared[i];
    const bool ok = entry.is_object() && entry.size() == 2 && entry.contains("run_id") &&
                    entry["run_id"].is_number_integer() && entry.contains("value") &&
                    (entry["value"].is_number() || entry["value"].is_null());
    if (!ok) {
      bad_value(path, cell,
                "entry " + std::to_string(i) + " is not {\"run_id\": <integer>, \"value\": "
                "<number or null>}: '" + entry.dump().substr(0, 40) + "'");
    }
  }
  return compared;
}

}  // namespace detail

}  // namespace amptune::store
