// Early stopping of losing cells (a sweep's `prune:` block): asynchronous successive halving
// (ASHA) and the median rule, as pure functions of a table of per-epoch metric values. No
// database, no torch: the caller reads the table (one metric, every cell of the sweep) and
// records what comes back, so any process that sees the same rows reaches the same decision.
//
//   app::PruneSettings s{app::PruneRule::kAsha, "acc1", /*higher_is_better=*/true,
//                        /*grace_epochs=*/1, /*eta=*/3, /*min_cells=*/3};
//   app::PruneDecision d = app::decide_prune(table, s, run_id, epoch);  // epoch just recorded
//   if (d.stop) ... record d (its evidence) and stop the run with status pruned
//   for (const app::PruneDecision& p : app::promotable_cells(table, s)) ... continue p.cell_id
//
// Epochs are the store's: 0-based, epoch e is the (e+1)-th trained. Rung k of ASHA stands after
// grace_epochs * eta^k trained epochs, i.e. at epoch grace_epochs * eta^k - 1. The exact rules,
// their ties, NaN handling and the differences from Optuna are in docs/PRUNING.md; in short:
//  - asha: at a rung, the cells with a value there (this one included, whatever their status)
//    are ranked; with n of them the best n / eta (integer division) continue, and so does every
//    cell that ties with the last of them; when n / eta is 0 the cell waits (stops, promoted
//    later) while other cells may still reach the rung, and the best continues once none can
//    (Optuna's SuccessiveHalvingPruner always lets the best so far continue: wait_for_arrivals).
//  - median: from grace_epochs trained epochs on, when at least min_cells other cells have a value
//    at this epoch, the cell stops when its best value so far is worse than the median of theirs
//    at this epoch (Optuna's MedianPruner, over every cell that reached the epoch).
//  - a NaN or infinite value ranks below every finite one: such a cell is stopped at a decision
//    point, and counts as the worst among the others.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/words.h"  // PruneRule

namespace amptune::app {

// A sweep's `prune:` block (schemas/ documents the keys and defaults).
struct PruneSettings {
  PruneRule rule = PruneRule::kNone;
  std::string metric;            // its name, for the reasons; the table holds its values
  bool higher_is_better = true;  // acc1: true; mrpe, val_loss: false
  int grace_epochs = 1;          // >= 1: no decision before this many trained epochs
  int eta = 3;                   // >= 2, asha: the top 1/eta continue at each rung
  int min_cells = 3;             // >= 1, median: other cells needed at the epoch
  // asha: while cells may still reach a rung (running or pending ones below it), only the best
  // n / eta of the n there continue, none while n < eta: the others wait (stop, and are promoted
  // once enough worse cells have arrived); once none can arrive, at least the best continues.
  // false: Optuna's rule, which never resumes a stopped trial - the best so far always continues.
  bool wait_for_arrivals = true;
};
// Throws ConfigError ("prune.eta must be >= 2, got 1") for a value out of range; decide_prune
// and promotable_cells call it.
void validate(const PruneSettings& settings);

// One cell of the sweep as the rules see it.
struct PruneCell {
  enum class Status { kRunning, kDone, kFailed, kDiverged, kPruned };
  int64_t id = 0;  // the run id; unique in a table
  Status status = Status::kRunning;
  std::map<int, double> values;  // epoch (0-based) -> the metric's value; NaN allowed
};
using PruneTable = std::vector<PruneCell>;

// A cell a decision compared with, and its value there (asha: at the rung; median: at the epoch).
struct PruneComparand {
  int64_t id = 0;
  double value = 0;
};

// What a rule says about one cell at one epoch, with its evidence.
struct PruneDecision {
  enum class Basis {
    kRuleNone,      // rule none: nothing is stopped
    kBeforeGrace,   // fewer than grace_epochs epochs trained
    kBetweenRungs,  // asha: the epoch ends no rung
    kNoValue,       // the cell has no value of the metric at the epoch (or no epoch at all)
    kTooFewCells,   // median: fewer than min_cells other cells have a value at the epoch
    kNotFinite,     // the cell's value (median: every value so far) is NaN or infinite: stop
    kCompared,      // compared with `threshold`
  };
  int64_t cell_id = 0;
  int epoch = -1;  // the epoch decided at (promotable_cells: -1 for a cell with no epoch)
  PruneRule rule = PruneRule::kNone;
  bool stop = false;
  Basis basis = Basis::kRuleNone;
  int rung = -1;     // asha at a rung: its index k (the rung stands after grace * eta^k epochs)
  double value = 0;  // asha: the cell's value at the rung; median: its best value up to the epoch
  // kCompared: the value the cell had to reach (asha: that of the last cell within the top
  // 1/eta; median: the median). NaN when that itself is NaN or infinite (it ranks worst, so any
  // finite value reaches it). NaN for the other bases.
  double threshold = 0;
  int keep = 0;  // asha kCompared: how many of the rung's cells the top 1/eta holds, ties aside
  int rank = 0;  // asha kCompared: 1 + how many cells at the rung are strictly better
  // The other cells with a value at the epoch, best first (NaN and infinities last, then by id):
  // those it was compared with; for kTooFewCells and kNotFinite those that were there.
  std::vector<PruneComparand> others;
  std::string reason;  // one line for people: "acc1 0.412 after 3 epochs (rung 1) ..."
};

// The decision for cell `cell_id` of `table` that has just recorded `epoch` (its values up to
// that epoch and every other cell's rows as read now; values of later epochs are ignored). Rule
// none never stops. Throws ConfigError for invalid settings and std::invalid_argument for an
// id not in the table, a negative epoch, or a table that repeats an id.
PruneDecision decide_prune(const PruneTable& table, const PruneSettings& settings, int64_t cell_id,
                           int epoch);

// The cells with status kPruned that the rule, applied now to `table`, lets continue from where
// each stopped, in table order, each with the decision that promotes it. They are judged from
// the lowest rung (epoch) up, and one promoted at a lower rung counts as still to come at the
// higher ones. asha: the decision at
// the last rung the cell reached (a cell stopped at a rung is promoted once enough worse cells
// have reached that rung since; one that reached no rung continues); median: the decision at its
// last epoch (later cells may have lowered the median there); none: every pruned cell. A
// decision that would stop it again leaves it out. Throws as decide_prune does.
std::vector<PruneDecision> promotable_cells(const PruneTable& table, const PruneSettings& settings);

// The epochs (0-based, ascending) below `epochs` at which asha's rungs stand.
std::vector<int> rung_epochs(const PruneSettings& settings, int epochs);

}  // namespace amptune::app
