// A sweep's prune: block (core/sweep.h PruneBlock; docs/PRUNING.md) applied to its runs: the
// rules of app/prune/prune_rules.h fed from the results database, their decisions recorded there.
// The process that records an epoch decides (app/run/store_recorder.h), from the database alone, so
// the rule holds with --workers, with several `amptune run` processes on one database and with
// --nproc (rank 0 decides, the ranks stop together). No torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/prune/prune_rules.h"
#include "core/settings.h"
#include "core/sweep.h"
#include "store/store.h"
#include "train/run_input.h"

namespace amptune::app {

// Resolves a sweep's prune: block against the models of its cells: collects, cell by cell, the
// metric the rule compares (the block's prune.metric, else the model's primary metric) and its
// direction from the model's definition (train::recorded_metrics).
class PrunePlanner {
 public:
  explicit PrunePlanner(const std::optional<PruneBlock>& block);
  // Whether add has anything to check: a block whose rule is not none.
  bool checks_cells() const { return block_ && settings_.rule != PruneRule::kNone; }
  // Checks a planned cell's settings. Throws ConfigError naming prune.metric's file:line when the
  // cell's model does not record the metric (listing those it records), or when the cells'
  // models are judged by different primary metrics and the block names none.
  void add(const Settings& cell);
  // The settings (rule none without a block, or when no cell was added).
  PruneSettings settings() const { return settings_; }

 private:
  std::optional<PruneBlock> block_;
  PruneSettings settings_;
  bool resolved_ = false;
};

// The rule's view of the sweep `sweep` in `store`: every run of it that is a cell (forks are
// not pruned), its status and its values of settings.metric per epoch that has one (NaN where
// it was stored as NULL: a diverged evaluation; none for an epoch that was not evaluated).
PruneTable prune_table(const store::Store& store, const std::string& sweep,
                       const PruneSettings& settings);

// The decision of `settings` about run `run` of its sweep having recorded `epoch` (read from
// `store` now), as the row to record; unset when the run continues (or is a fork).
std::optional<records::PruneDecisionRow> decide_after_epoch(const store::Store& store,
                                                            const train::RunInput& run, int epoch,
                                                            const PruneSettings& settings);

// The pruned cells of `sweep` that `settings` lets continue now (promotable_cells: asha promotes
// a cell stopped at a rung once enough worse cells have reached it; rule none, as --no-prune
// gives, lets every one continue), each with its decision as the row to record (action
// "continue"), by run id.
std::vector<records::PruneDecisionRow> prune_promotions(const store::Store& store,
                                                      const std::string& sweep,
                                                      const PruneSettings& settings);

// A decision of app/prune/prune_rules.h as a row of prune_decisions (action stop or continue).
records::PruneDecisionRow decision_row(const PruneDecision& decision, const PruneSettings& settings,
                                     records::PruneAction action);

}  // namespace amptune::app
