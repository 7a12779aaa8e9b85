// app/prune/prune_sweep.h: the prune rules on the results database.
#include "app/prune/prune_sweep.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/settings.h"
#include "train/model_info.h"

namespace amptune::app {

PrunePlanner::PrunePlanner(const std::optional<PruneBlock>& block) : block_(block) {
  if (!block_) return;
  settings_.rule = block_->rule;
  settings_.grace_epochs = static_cast<int>(block_->grace_epochs);
  settings_.eta = static_cast<int>(block_->eta);
  settings_.min_cells = static_cast<int>(block_->min_cells);
}

void PrunePlanner::add(const Settings& run) {
  if (!checks_cells()) return;
  const std::string& model = run.model.name;
  const train::ModelInfo info = train::model_info(run);
  const std::string metric = block_->metric.empty() ? info.primary_metric : block_->metric;
  if (resolved_ && metric != settings_.metric) {
    throw ConfigError(block_->metric_loc.prefix() + "the cells' models are judged by different " +
                      "metrics (" + settings_.metric + ", " + metric + " for " + model +
                      "): name the one to compare with prune.metric");
  }
  std::string recorded;
  for (const train::MetricDef& def : train::recorded_metrics(run)) {
    if (def.name == metric) {
      settings_.metric = metric;
      settings_.higher_is_better = def.higher_is_better;
      resolved_ = true;
      return;
    }
    recorded += (recorded.empty() ? "" : ", ") + def.name;
  }
  throw ConfigError(block_->metric_loc.prefix() + "prune.metric " + metric + " is not a metric " +
                    model + " records; it records " + recorded);
}

namespace {

PruneCell::Status cell_status(records::RunStatus status) {
  switch (status) {
    case records::RunStatus::kDone:
      return PruneCell::Status::kDone;
    case records::RunStatus::kFailed:
      return PruneCell::Status::kFailed;
    case records::RunStatus::kDiverged:
      return PruneCell::Status::kDiverged;
    case records::RunStatus::kPruned:
      return PruneCell::Status::kPruned;
    case records::RunStatus::kPending:
    case records::RunStatus::kRunning:
      break;
  }
  return PruneCell::Status::kRunning;
}

}  // namespace

PruneTable prune_table(const store::Store& store, const std::string& sweep,
                       const PruneSettings& settings) {
  std::map<int64_t, PruneCell> cells;
  for (const records::RunRow& run : store.runs(sweep)) {
    if (run.fork) continue;
    PruneCell& cell = cells[run.id];
    cell.id = run.id;
    cell.status = cell_status(run.status);
  }
  // NULL values (NaN: a diverged evaluation) count, as NaN; an epoch without the metric (not
  // evaluated) has no value and is not decided at.
  for (const auto& v : store.metric_values(sweep, settings.metric, /*with_nulls=*/true)) {
    if (const auto it = cells.find(v.run_id); it != cells.end()) {
      it->second.values[v.epoch] = v.value;
    }
  }
  PruneTable table;
  for (auto& [id, cell] : cells) table.push_back(std::move(cell));
  return table;
}

records::PruneDecisionRow decision_row(const PruneDecision& decision, const PruneSettings& settings,
                                     records::PruneAction action) {
  records::PruneDecisionRow row;
  row.run_id = decision.cell_id;
  row.epoch = decision.epoch;
  row.action = action;
  row.rule = decision.rule;
  row.metric = settings.metric;
  row.rung = decision.rung;
  row.value = decision.value;
  row.threshold = decision.threshold;
  nlohmann::json compared = nlohmann::json::array();
  for (const PruneComparand& other : decision.others) {
    // JSON has no NaN: a value lost to NaN / inf is null.
    compared.push_back(
        {{"run_id", other.id},
         {"value", std::isfinite(other.value) ? nlohmann::json(other.value) : nlohmann::json()}});
  }
  row.compared_json = compared.dump();
  row.reason = decision.reason;
  return row;
}

std::optional<records::PruneDecisionRow> decide_after_epoch(const store::Store& store,
                                                            const train::RunInput& run, int epoch,
                                                            const PruneSettings& settings) {
  if (settings.rule == PruneRule::kNone || run.fork) return std::nullopt;
  const PruneDecision d =
      decide_prune(prune_table(store, run.sweep_name, settings), settings, run.id, epoch);
  if (!d.stop) return std::nullopt;
  return decision_row(d, settings, records::PruneAction::kStop);
}

std::vector<records::PruneDecisionRow> prune_promotions(const store::Store& store,
                                                      const std::string& sweep,
                                                      const PruneSettings& settings) {
  std::vector<records::PruneDecisionRow> rows;
  const PruneTable table = prune_table(store, sweep, settings);
  bool any_pruned = false;
  for (const PruneCell& cell : table)
    any_pruned = any_pruned || cell.status == PruneCell::Status::kPruned;
  if (!any_pruned) return rows;
  for (const PruneDecision& d : promotable_cells(table, settings)) {
    records::PruneDecisionRow row = decision_row(d, settings, records::PruneAction::kContinue);
    if (row.epoch < 0) row.epoch = 0;  // a cell stopped before any epoch: none to decide at
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace amptune::app
