// The pruning rules (app/prune/prune_rules.h) on hand-made tables: ASHA's rungs, promotions of the
// top 1/eta, fewer than eta cells, ties, late arrivals that make a stopped cell promotable, NaN /
// infinite values, failed cells, a metric where lower is better, grace_epochs; the median rule's
// min_cells, best-so-far, ties and NaN; rule none; settings and table checks. The same rules
// against Optuna itself: prune_reference_test.cpp.
#include "app/prune/prune_rules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/errors.h"

namespace amptune::app {
namespace {

using Basis = PruneDecision::Basis;
using Status = PruneCell::Status;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A cell whose values[e] is its value at epoch e.
PruneCell cell(int64_t id, std::vector<double> values, Status status = Status::kRunning) {
  PruneCell c;
  c.id = id;
  c.status = status;
  for (size_t e = 0; e < values.size(); ++e) c.values[static_cast<int>(e)] = values[e];
  return c;
}

PruneSettings asha(int eta = 3, int grace = 1, bool higher_is_better = true) {
  PruneSettings s;
  s.wait_for_arrivals = false;  // the rule as Optuna has it; asha_waiting: amptune's default
  s.rule = PruneRule::kAsha;
  s.metric = higher_is_better ? "acc1" : "mrpe";
  s.higher_is_better = higher_is_better;
  s.grace_epochs = grace;
  s.eta = eta;
  return s;
}

PruneSettings median(int min_cells = 3, int grace = 1, bool higher_is_better = true) {
  PruneSettings s = asha(3, grace, higher_is_better);
  s.rule = PruneRule::kMedian;
  s.min_cells = min_cells;
  return s;
}

std::vector<int64_t> ids_of(const std::vector<PruneComparand>& cells) {
  std::vector<int64_t> ids;
  for (const PruneComparand& c : cells) ids.push_back(c.id);
  return ids;
}

std::vector<int64_t> ids_of(const std::vector<PruneDecision>& decisions) {
  std::vector<int64_t> ids;
  for (const PruneDecision& d : decisions) ids.push_back(d.cell_id);
  return ids;
}

using Ids = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------
// ASHA

TEST(PruneAsha, RungsStandAfterGraceTimesPowersOfEta) {
  EXPECT_EQ(rung_epochs(asha(3, 1), 27), (std::vector<int>{0, 2, 8, 26}));
  EXPECT_EQ(rung_epochs(asha(3, 1), 26), (std::vector<int>{0, 2, 8}));
  EXPECT_EQ(rung_epochs(asha(2, 2), 20), (std::vector<int>{1, 3, 7, 15}));
  EXPECT_EQ(rung_epochs(asha(4, 5), 4), (std::vector<int>{}));
  // Every epoch on a rung is decided, every other one is not.
  const PruneTable t = {cell(1, std::vector<double>(12, 0.5))};
  for (int e = 0; e < 12; ++e) {
    const PruneDecision d = decide_prune(t, asha(2, 3), 1, e);
    const bool on_rung = e == 2 || e == 5 || e == 11;
    EXPECT_EQ(d.basis, on_rung ? Basis::kCompared
                       : e < 2 ? Basis::kBeforeGrace
                               : Basis::kBetweenRungs)
        << e;
    EXPECT_EQ(d.rung, e == 2 ? 0 : e == 5 ? 1 : e == 11 ? 2 : -1) << e;
    EXPECT_FALSE(d.stop);
  }
  EXPECT_EQ(decide_prune(t, asha(2, 3), 1, 3).reason,
            "epoch 3 (4 epochs trained) ends no rung; the next rung stands after 6 epochs");
  EXPECT_EQ(decide_prune(t, asha(2, 3), 1, 1).reason,
            "2 epochs trained: no decision before grace_epochs 3");
}

TEST(PruneAsha, TheFirstCellAtARungContinues) {
  const PruneDecision d = decide_prune({cell(7, {0.1})}, asha(), 7, 0);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.basis, Basis::kCompared);
  EXPECT_EQ(d.rung, 0);
  EXPECT_EQ(d.keep, 1);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.threshold, 0.1);
  EXPECT_TRUE(d.others.empty());
}

TEST(PruneAsha, WithFewerThanEtaCellsOnlyTheBestSoFarContinues) {
  // Optuna's promotable_idx == -1 case: n / eta == 0, so the best of the n continues.
  PruneTable t = {cell(1, {0.5}), cell(2, {0.4})};
  PruneDecision d = decide_prune(t, asha(3), 2, 0);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.keep, 1);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.threshold, 0.5);
  EXPECT_EQ(d.reason,
            "acc1 0.4 after 1 epoch (rung 0) is not in the top 1/3 of 2 cells there: rank 2, "
            "fewer than eta there, only the best continues, needs >= 0.5");
  t.push_back(cell(3, {0.6}));
  d = decide_prune(t, asha(3), 3, 0);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.keep, 1);  // 3 / 3
  EXPECT_EQ(d.threshold, 0.6);
}

TEST(PruneAsha, TheTopOneOverEtaContinueWithTheirEvidence) {
  // Six cells at rung 1 (epoch 2, eta 3): the best 6 / 3 = 2 continue.
  PruneTable t;
  const std::vector<double> at_rung = {0.30, 0.70, 0.10, 0.50, 0.60, 0.20};
  for (int i = 0; i < 6; ++i) t.push_back(cell(i + 1, {0.0, 0.0, at_rung[i]}));
  std::vector<int64_t> continuing;
  for (int i = 0; i < 6; ++i) {
    const PruneDecision d = decide_prune(t, asha(3), i + 1, 2);
    EXPECT_EQ(d.basis, Basis::kCompared);
    EXPECT_EQ(d.rung, 1);
    EXPECT_EQ(d.keep, 2);
    EXPECT_EQ(d.threshold, 0.60);
    EXPECT_EQ(d.value, at_rung[i]);
    EXPECT_EQ(d.others.size(), 5u);
    if (!d.stop) continuing.push_back(d.cell_id);
  }
  EXPECT_EQ(continuing, (Ids{2, 5}));
  const PruneDecision d = decide_prune(t, asha(3), 4, 2);  // 0.5: third
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(ids_of(d.others), (Ids{2, 5, 1, 6, 3}));  // best first
  EXPECT_EQ(d.others[0].value, 0.70);
  EXPECT_EQ(d.reason,
            "acc1 0.5 after 3 epochs (rung 1) is not in the top 1/3 of 6 cells there: rank 3, "
            "the best 2 continue, needs >= 0.6");
}

TEST(PruneAsha, OnlyValuesAtTheRungCountAndLaterOnesAreIgnored) {
  // Cell 3 has not reached the rung (epoch 2) yet; cell 2's later epochs do not matter.
  const PruneTable t = {cell(1, {0.9, 0.9, 0.4}), cell(2, {0.1, 0.1, 0.5, 0.9, 0.9}),
                        cell(3, {1.0, 1.0})};
  const PruneDecision d = decide_prune(t, asha(3), 1, 2);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(ids_of(d.others), (Ids{2}));
  EXPECT_EQ(d.threshold, 0.5);
}

TEST(PruneAsha, TiesWithTheLastKeptCellContinue) {
  // eta 2, four cells: keep 2, but the three that tie at 0.5 all reach the threshold.
  const PruneTable t = {cell(1, {0.5}), cell(2, {0.3}), cell(3, {0.5}), cell(4, {0.5})};
  int continuing = 0;
  for (int64_t id : {1, 2, 3, 4}) {
    const PruneDecision d = decide_prune(t, asha(2), id, 0);
    EXPECT_EQ(d.keep, 2);
    EXPECT_EQ(d.threshold, 0.5);
    EXPECT_EQ(d.rank, id == 2 ? 4 : 1);
    continuing += !d.stop;
  }
  EXPECT_EQ(continuing, 3);
  // Equal values are listed by id.
  EXPECT_EQ(ids_of(decide_prune(t, asha(2), 2, 0).others), (Ids{1, 3, 4}));
}

TEST(PruneAsha, ANanOrInfiniteValueAtARungStopsTheCell) {
  for (double bad : {kNaN, kInf, -kInf}) {
    for (bool higher : {true, false}) {
      const PruneDecision d =
          decide_prune({cell(1, {bad}), cell(2, {0.5})}, asha(2, 1, higher), 1, 0);
      EXPECT_TRUE(d.stop) << bad;
      EXPECT_EQ(d.basis, Basis::kNotFinite);
      EXPECT_EQ(ids_of(d.others), (Ids{2}));
      // Alone at the rung too: a broken run never continues.
      EXPECT_TRUE(decide_prune({cell(1, {bad})}, asha(2, 1, higher), 1, 0).stop);
    }
  }
  // Between rungs a NaN decides nothing (the next rung will).
  EXPECT_FALSE(decide_prune({cell(1, {0.5, kNaN})}, asha(3), 1, 1).stop);
  EXPECT_EQ(decide_prune({cell(1, {kNaN})}, asha(3), 1, 0).reason,
            "acc1 NaN after 1 epoch (rung 0): a NaN or infinite value ranks worst");
}

TEST(PruneAsha, NanAndInfiniteValuesOfOthersRankWorstAndCount) {
  // eta 2: with the NaN cell the rung holds 4 cells, so the best 2 continue and 0.55 is second.
  // (Optuna never records a NaN at a rung: there 3 cells, keep 1, and 0.55 would stop.)
  PruneTable t = {cell(1, {kNaN}), cell(2, {0.5}), cell(3, {0.6}), cell(4, {0.55})};
  PruneDecision d = decide_prune(t, asha(2), 4, 0);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.keep, 2);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(ids_of(d.others), (Ids{3, 2, 1}));
  EXPECT_TRUE(std::isnan(d.others[2].value));
  // An accuracy of +inf is no winner: it ranks below 0.5, for either direction.
  t = {cell(1, {kInf}), cell(2, {0.5})};
  d = decide_prune(t, asha(2), 2, 0);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.threshold, 0.5);
  t = {cell(1, {-kInf}), cell(2, {0.5})};
  EXPECT_FALSE(decide_prune(t, asha(2, 1, false), 2, 0).stop);
  // When the last kept cell is itself NaN, every finite value reaches it.
  t = {cell(1, {0.9}),  cell(2, {kNaN}), cell(3, {kNaN}),
       cell(4, {kNaN}), cell(5, {kNaN}), cell(6, {0.1})};
  d = decide_prune(t, asha(2), 6, 0);  // keep 3 of 6: 0.9, 0.1 and a NaN
  EXPECT_FALSE(d.stop);
  EXPECT_TRUE(std::isnan(d.threshold));
  EXPECT_NE(d.reason.find("needs >= NaN (ranks worst)"), std::string::npos) << d.reason;
}

TEST(PruneAsha, FailedCellsCountOnlyWhereTheyHaveAValue) {
  // Cell 2 failed before the rung at epoch 2: it does not count there; cell 3 failed after it.
  const PruneTable t = {cell(1, {0.1, 0.1, 0.4}), cell(2, {0.9, 0.9}, Status::kFailed),
                        cell(3, {0.1, 0.1, 0.5, 0.5}, Status::kFailed)};
  const PruneDecision d = decide_prune(t, asha(3), 1, 2);
  EXPECT_EQ(ids_of(d.others), (Ids{3}));
  EXPECT_TRUE(d.stop);
  // Every status counts where it has a value: done, pruned, diverged.
  const PruneTable all = {cell(1, {0.4}), cell(2, {0.5}, Status::kDone),
                          cell(3, {0.5}, Status::kPruned), cell(4, {kNaN}, Status::kDiverged)};
  EXPECT_EQ(ids_of(decide_prune(all, asha(3), 1, 0).others), (Ids{2, 3, 4}));
}

TEST(PruneAsha, LowerIsBetter) {
  // mrpe in mm: the smallest values win.
  const PruneTable t = {cell(1, {120}), cell(2, {80}),  cell(3, {300}),
                        cell(4, {95}),  cell(5, {110}), cell(6, {200})};
  std::vector<int64_t> continuing;
  for (int64_t id = 1; id <= 6; ++id) {
    const PruneDecision d = decide_prune(t, asha(3, 1, false), id, 0);
    EXPECT_EQ(d.threshold, 95);
    if (!d.stop) continuing.push_back(id);
  }
  EXPECT_EQ(continuing, (Ids{2, 4}));
  const PruneDecision d = decide_prune(t, asha(3, 1, false), 5, 0);
  EXPECT_EQ(ids_of(d.others), (Ids{2, 4, 1, 6, 3}));
  EXPECT_EQ(d.reason,
            "mrpe 110 after 1 epoch (rung 0) is not in the top 1/3 of 6 cells there: rank 3, "
            "the best 2 continue, needs <= 95");
}

TEST(PruneAsha, GraceEpochsMoveEveryRung) {
  // grace 2, eta 2: rungs after 2, 4, 8 epochs (epochs 1, 3, 7).
  const PruneTable t = {cell(1, {0.9, 0.9, 0.9, 0.9}), cell(2, {0.1, 0.1, 0.1, 0.1})};
  EXPECT_EQ(decide_prune(t, asha(2, 2), 2, 0).basis, Basis::kBeforeGrace);
  EXPECT_TRUE(decide_prune(t, asha(2, 2), 2, 1).stop);
  EXPECT_EQ(decide_prune(t, asha(2, 2), 2, 2).basis, Basis::kBetweenRungs);
  const PruneDecision d = decide_prune(t, asha(2, 2), 2, 3);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.rung, 1);
}

TEST(PruneAsha, AStoppedCellIsPromotedOnceEnoughWorseCellsReachItsRung) {
  // eta 3. Cell 1 arrives first and continues; cell 2 (0.4) is second of two and stops.
  PruneTable t = {cell(1, {0.5}), cell(2, {0.4}, Status::kPruned)};
  EXPECT_TRUE(decide_prune(t, asha(3), 2, 0).stop);
  EXPECT_TRUE(promotable_cells(t, asha(3)).empty());
  // Cells 3..5 arrive worse; with 5 cells the top 1 continue: cell 2 still waits.
  t.push_back(cell(3, {0.3}, Status::kPruned));
  t.push_back(cell(4, {0.2}, Status::kPruned));
  t.push_back(cell(5, {0.1}, Status::kPruned));
  EXPECT_TRUE(promotable_cells(t, asha(3)).empty());
  // The sixth makes the top 2: cell 2 is promoted, with the evidence of that decision.
  t.push_back(cell(6, {0.05}));
  const std::vector<PruneDecision> p = promotable_cells(t, asha(3));
  ASSERT_EQ(ids_of(p), (Ids{2}));
  EXPECT_FALSE(p[0].stop);
  EXPECT_EQ(p[0].epoch, 0);
  EXPECT_EQ(p[0].rung, 0);
  EXPECT_EQ(p[0].keep, 2);
  EXPECT_EQ(p[0].rank, 2);
  EXPECT_EQ(p[0].threshold, 0.4);
  EXPECT_EQ(ids_of(p[0].others), (Ids{1, 3, 4, 5, 6}));
  // A promoted cell that trained on is no longer pruned: it is not listed again.
  t[1] = cell(2, {0.4, 0.45}, Status::kRunning);
  EXPECT_TRUE(promotable_cells(t, asha(3)).empty());
}

TEST(PruneAsha, TheExampleOfDocsPruning) {
  // docs/PRUNING.md "ASHA": eta 3, cells A..F (ids 1..6) reach rung 0 in this order.
  const std::vector<double> acc1 = {0.5, 0.4, 0.6, 0.3, 0.2, 0.1};
  const std::vector<int> keep = {1, 1, 1, 1, 1, 2};
  const std::vector<double> threshold = {0.5, 0.5, 0.6, 0.6, 0.6, 0.5};
  const std::vector<bool> stop = {false, true, false, true, true, true};
  PruneTable t;
  for (int i = 0; i < 6; ++i) {
    t.push_back(cell(i + 1, {acc1[i]}));
    const PruneDecision d = decide_prune(t, asha(3), i + 1, 0);
    EXPECT_EQ(d.keep, keep[i]) << i;
    EXPECT_EQ(d.threshold, threshold[i]) << i;
    EXPECT_EQ(d.stop, stop[i]) << i;
    if (d.stop) t.back().status = Status::kPruned;
  }
  EXPECT_TRUE(promotable_cells(t, asha(3)).empty());  // B waits
  for (int i = 7; i <= 9; ++i) t.push_back(cell(i, {0.1}, Status::kPruned));
  const std::vector<PruneDecision> p = promotable_cells(t, asha(3));
  ASSERT_EQ(ids_of(p), (Ids{2}));
  EXPECT_EQ(p[0].keep, 3);
  EXPECT_EQ(p[0].threshold, 0.4);
}

TEST(PruneAsha, PromotionJudgesTheLastRungACellReached) {
  // Cell 1 was stopped at epoch 4 by other settings (no rung of grace 1, eta 3: epochs 0, 2, 8):
  // it is judged at rung 1 (epoch 2), where it is the best of three.
  PruneTable t = {cell(1, {0.1, 0.1, 0.9, 0.1, 0.1}, Status::kPruned), cell(2, {0.5, 0.5, 0.5}),
                  cell(3, {0.6, 0.6, 0.6})};
  std::vector<PruneDecision> p = promotable_cells(t, asha(3));
  ASSERT_EQ(ids_of(p), (Ids{1}));
  EXPECT_EQ(p[0].epoch, 2);
  EXPECT_EQ(p[0].rung, 1);
  // At rung 1 it is the worst of three: it stays stopped.
  t[0] = cell(1, {0.1, 0.1, 0.1, 0.9, 0.9}, Status::kPruned);
  EXPECT_TRUE(promotable_cells(t, asha(3)).empty());
  // A cell stopped before the first rung (grace 3) continues; one with no epoch too.
  t = {cell(1, {0.1}, Status::kPruned), cell(2, {}, Status::kPruned), cell(3, {0.9, 0.9, 0.9})};
  p = promotable_cells(t, asha(3, 3));
  ASSERT_EQ(ids_of(p), (Ids{1, 2}));
  EXPECT_EQ(p[0].basis, Basis::kBeforeGrace);
  EXPECT_EQ(p[1].basis, Basis::kNoValue);
  EXPECT_EQ(p[1].epoch, -1);
}

TEST(PruneAsha, ACellWithANanAtItsRungIsNeverPromoted) {
  PruneTable t = {cell(1, {kNaN}, Status::kPruned)};
  for (int i = 2; i < 20; ++i) t.push_back(cell(i, {0.01 * i}, Status::kPruned));
  const std::vector<PruneDecision> p = promotable_cells(t, asha(3));
  // 19 cells, the best 6 (ids 14..19) hold the top; the ones among them that are pruned are
  // listed, the NaN cell is not.
  EXPECT_EQ(ids_of(p), (Ids{14, 15, 16, 17, 18, 19}));
}

TEST(PruneAsha, DecisionsDoNotDependOnTheOrderOfTheTable) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> level(0, 4);
  PruneTable t;
  for (int i = 1; i <= 12; ++i) {
    std::vector<double> v;
    for (int e = 0; e < 9; ++e) v.push_back(level(rng) == 0 ? kNaN : 0.1 * level(rng));
    t.push_back(cell(i * 7 % 13, v, i % 3 == 0 ? Status::kPruned : Status::kRunning));
  }
  for (const PruneSettings& s : {asha(3), asha(2, 2, false), median(2), median(4, 1, false)}) {
    PruneTable shuffled = t;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (const PruneCell& c : t) {
      for (int e = 0; e < 9; ++e) {
        const PruneDecision a = decide_prune(t, s, c.id, e), b = decide_prune(shuffled, s, c.id, e);
        EXPECT_EQ(a.stop, b.stop);
        EXPECT_EQ(a.reason, b.reason);
        EXPECT_EQ(ids_of(a.others), ids_of(b.others));
      }
    }
    std::vector<int64_t> pa = ids_of(promotable_cells(t, s)),
                         pb = ids_of(promotable_cells(shuffled, s));
    std::sort(pa.begin(), pa.end());
    std::sort(pb.begin(), pb.end());
    EXPECT_EQ(pa, pb);
  }
}

// ---------------------------------------------------------------------------------------------
// Median

TEST(PruneMedian, NoDecisionWithFewerThanMinCellsOthersAtTheEpoch) {
  // Cell 4 has no value at epoch 1 and does not count there.
  const PruneTable t = {cell(1, {0.1, 0.1}), cell(2, {0.9, 0.9}), cell(3, {0.8, 0.8}),
                        cell(4, {0.7})};
  PruneDecision d = decide_prune(t, median(3), 1, 1);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.basis, Basis::kTooFewCells);
  EXPECT_EQ(ids_of(d.others), (Ids{2, 3}));
  EXPECT_EQ(d.reason, "only 2 other cells have acc1 at epoch 1, the median rule needs min_cells 3");
  d = decide_prune(t, median(3), 1, 0);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.threshold, 0.8);  // of 0.9, 0.8, 0.7
  EXPECT_TRUE(decide_prune(t, median(2), 1, 1).stop);
}

TEST(PruneMedian, StopsStrictlyBelowTheMedianOfTheOthers) {
  PruneTable t = {cell(1, {0.45}), cell(2, {0.4}), cell(3, {0.5}), cell(4, {0.6})};
  PruneDecision d = decide_prune(t, median(3), 1, 0);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.basis, Basis::kCompared);
  EXPECT_EQ(d.threshold, 0.5);
  EXPECT_EQ(d.value, 0.45);
  EXPECT_EQ(ids_of(d.others), (Ids{4, 3, 2}));
  EXPECT_EQ(d.reason,
            "best acc1 0.45 up to epoch 0 is below the median 0.5 of 3 other cells at epoch 0");
  // A tie with the median continues.
  t[0] = cell(1, {0.5});
  EXPECT_FALSE(decide_prune(t, median(3), 1, 0).stop);
  // An even count: the mean of the middle two (numpy's percentile 50), 0.5 of 0.4 .. 0.7.
  t[0] = cell(1, {0.54});
  t.push_back(cell(5, {0.7}));
  d = decide_prune(t, median(3), 1, 0);
  EXPECT_DOUBLE_EQ(d.threshold, 0.55);
  EXPECT_TRUE(d.stop);
}

TEST(PruneMedian, TheCellsBestValueSoFarIsCompared) {
  // Cell 1 dipped to 0.3 at epoch 1, but its best so far (0.7) is above the others' 0.5.
  const PruneTable t = {cell(1, {0.7, 0.3}), cell(2, {0.5, 0.5}), cell(3, {0.5, 0.5}),
                        cell(4, {0.5, 0.5})};
  PruneDecision d = decide_prune(t, median(3), 1, 1);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.value, 0.7);
  // Lower is better: the smallest so far, 0.3, though the latest value 0.7 is above 0.5.
  const PruneTable lower = {cell(1, {0.3, 0.7}), cell(2, {0.5, 0.5}), cell(3, {0.5, 0.5}),
                            cell(4, {0.5, 0.5})};
  d = decide_prune(lower, median(3, 1, false), 1, 1);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.value, 0.3);
  EXPECT_FALSE(decide_prune(lower, median(3, 1, false), 1, 0).stop);
}

TEST(PruneMedian, GraceEpochs) {
  const PruneTable t = {cell(1, {0.1, 0.1, 0.1}), cell(2, {0.9, 0.9, 0.9}),
                        cell(3, {0.9, 0.9, 0.9}), cell(4, {0.9, 0.9, 0.9})};
  EXPECT_EQ(decide_prune(t, median(3, 3), 1, 1).basis, Basis::kBeforeGrace);
  EXPECT_TRUE(decide_prune(t, median(3, 3), 1, 2).stop);
  EXPECT_TRUE(decide_prune(t, median(3, 1), 1, 0).stop);
}

TEST(PruneMedian, NanValuesRankWorst) {
  // Others 0.6, NaN, NaN: the median falls on a NaN, the worst value, so nothing is below it.
  PruneTable t = {cell(1, {0.1}), cell(2, {0.6}), cell(3, {kNaN}), cell(4, {kNaN})};
  PruneDecision d = decide_prune(t, median(3), 1, 0);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.basis, Basis::kCompared);
  EXPECT_TRUE(std::isnan(d.threshold));
  EXPECT_EQ(ids_of(d.others), (Ids{2, 3, 4}));
  // Others 0.6, 0.5, NaN: the median is 0.5 (Optuna ignores the NaN: 0.55).
  t[3] = cell(4, {0.5});
  d = decide_prune(t, median(3), 1, 0);
  EXPECT_EQ(d.threshold, 0.5);
  EXPECT_TRUE(d.stop);
  t[0] = cell(1, {0.52});
  EXPECT_FALSE(decide_prune(t, median(3), 1, 0).stop);
  // The same for lower is better: NaN sits at the top end.
  t = {cell(1, {25}), cell(2, {10}), cell(3, {20}), cell(4, {kNaN})};
  EXPECT_EQ(decide_prune(t, median(3, 1, false), 1, 0).threshold, 20);
  EXPECT_TRUE(decide_prune(t, median(3, 1, false), 1, 0).stop);
  // A cell whose every value so far is NaN stops; one NaN after a finite value does not decide.
  t = {cell(1, {kNaN, kNaN}), cell(2, {0.5, 0.5}), cell(3, {0.5, 0.5}), cell(4, {0.5, 0.5})};
  d = decide_prune(t, median(3), 1, 1);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.basis, Basis::kNotFinite);
  t[0] = cell(1, {0.6, kNaN});
  EXPECT_FALSE(decide_prune(t, median(3), 1, 1).stop);
  // Stopped whatever the other cells, even with none (after grace_epochs).
  EXPECT_TRUE(decide_prune({cell(1, {kNaN})}, median(3), 1, 0).stop);
  EXPECT_EQ(decide_prune({cell(1, {kNaN, kNaN})}, median(3, 2), 1, 0).basis, Basis::kBeforeGrace);
}

TEST(PruneMedian, LowerIsBetter) {
  PruneTable t = {cell(1, {25}), cell(2, {10}), cell(3, {20}), cell(4, {30})};
  PruneDecision d = decide_prune(t, median(3, 1, false), 1, 0);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.threshold, 20);
  EXPECT_EQ(ids_of(d.others), (Ids{2, 3, 4}));
  EXPECT_EQ(d.reason,
            "best mrpe 25 up to epoch 0 is above the median 20 of 3 other cells at epoch 0");
  t[0] = cell(1, {20});
  EXPECT_FALSE(decide_prune(t, median(3, 1, false), 1, 0).stop);
}

TEST(PruneMedian, EveryCellThatReachedTheEpochCountsWhateverItsStatus) {
  // Optuna takes completed trials only; amptune every cell with a value at the epoch.
  const PruneTable t = {cell(1, {0.45}),
                        cell(2, {0.4}, Status::kPruned),
                        cell(3, {0.5}, Status::kRunning),
                        cell(4, {0.6}, Status::kFailed),
                        cell(5, {0.7}, Status::kDone),
                        cell(6, {}, Status::kDone)};
  const PruneDecision d = decide_prune(t, median(3), 1, 0);
  EXPECT_EQ(ids_of(d.others), (Ids{5, 4, 3, 2}));
  EXPECT_DOUBLE_EQ(d.threshold, 0.55);
  EXPECT_TRUE(d.stop);
}

TEST(PruneMedian, AStoppedCellIsPromotedWhenLaterCellsLowerTheMedianAtItsEpoch) {
  PruneTable t = {cell(1, {0.45, 0.45}, Status::kPruned), cell(2, {0.5, 0.5}), cell(3, {0.5, 0.5}),
                  cell(4, {0.6, 0.6})};
  EXPECT_TRUE(decide_prune(t, median(3), 1, 1).stop);
  EXPECT_TRUE(promotable_cells(t, median(3)).empty());
  t.push_back(cell(5, {0.1, 0.1}));
  t.push_back(cell(6, {0.2}));                          // not at epoch 1: does not count there
  EXPECT_TRUE(promotable_cells(t, median(3)).empty());  // median of 0.6, 0.5, 0.5, 0.1: 0.5
  t.push_back(cell(7, {0.2, 0.2}));
  const std::vector<PruneDecision> p = promotable_cells(t, median(3));  // median 0.2 .. 0.6: 0.5
  EXPECT_TRUE(p.empty());
  t.push_back(cell(8, {0.3, 0.3}));  // 0.1 0.2 0.3 0.5 0.5 0.6: 0.4
  ASSERT_EQ(ids_of(promotable_cells(t, median(3))), (Ids{1}));
  EXPECT_DOUBLE_EQ(promotable_cells(t, median(3))[0].threshold, 0.4);
}

// ---------------------------------------------------------------------------------------------
// Rule none, settings, table checks

TEST(PruneNone, NeverStopsAndPromotesEveryPrunedCell) {
  PruneSettings s = asha();
  s.rule = PruneRule::kNone;
  const PruneTable t = {cell(1, {kNaN}, Status::kPruned), cell(2, {0.9}),
                        cell(3, {0.1}, Status::kPruned), cell(4, {}, Status::kPruned),
                        cell(5, {0.1}, Status::kDone)};
  for (int64_t id : {1, 2, 3}) {
    const PruneDecision d = decide_prune(t, s, id, 0);
    EXPECT_FALSE(d.stop);
    EXPECT_EQ(d.basis, Basis::kRuleNone);
    EXPECT_EQ(d.reason, "pruning is off (rule none)");
  }
  EXPECT_EQ(ids_of(promotable_cells(t, s)), (Ids{1, 3, 4}));
}

TEST(PruneSettingsCheck, OutOfRangeValuesAreConfigErrors) {
  PruneSettings s = asha();
  s.eta = 1;
  EXPECT_EQ(testing::message_of<ConfigError>([&] { validate(s); }),
            "prune.eta must be >= 2, got 1");
  s = median();
  s.min_cells = 0;
  EXPECT_EQ(testing::message_of<ConfigError>([&] { decide_prune({cell(1, {1})}, s, 1, 0); }),
            "prune.min_cells must be >= 1, got 0");
  s = asha();
  s.grace_epochs = 0;
  EXPECT_EQ(testing::message_of<ConfigError>([&] { promotable_cells({}, s); }),
            "prune.grace_epochs must be >= 1, got 0");
}

TEST(PruneSettingsCheck, RuleNames) {
  for (PruneRule r : {PruneRule::kNone, PruneRule::kAsha, PruneRule::kMedian}) {
    EXPECT_EQ(parse_prune_rule(to_string(r)), r);
  }
  EXPECT_FALSE(parse_prune_rule("ASHA"));
}

TEST(PruneTableCheck, UnknownAndRepeatedIdsAndNegativeEpochsAreBugs) {
  const PruneTable t = {cell(1, {0.5}), cell(2, {0.5})};
  EXPECT_THROW(decide_prune(t, asha(), 3, 0), std::invalid_argument);
  EXPECT_THROW(decide_prune(t, asha(), 1, -1), std::invalid_argument);
  const PruneTable twice = {cell(1, {0.5}), cell(1, {0.4}, Status::kPruned)};
  EXPECT_THROW(decide_prune(twice, asha(), 1, 0), std::invalid_argument);
  EXPECT_THROW(promotable_cells(twice, asha()), std::invalid_argument);
}

TEST(PruneTableCheck, ACellWithoutAValueAtTheEpochIsNotDecided) {
  PruneCell c;
  c.id = 1;
  c.values = {{0, 0.5}, {2, 0.5}};  // epoch 1 missing (the metric was not recorded there)
  const PruneTable t = {c, cell(2, {0.9, 0.9, 0.9})};
  PruneDecision d = decide_prune(t, median(1), 1, 1);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.basis, Basis::kNoValue);
  EXPECT_EQ(d.reason, "no acc1 value at epoch 1");
  d = decide_prune(t, asha(3), 1, 4);  // epoch 4 is no rung: not a missing value
  EXPECT_EQ(d.basis, Basis::kBetweenRungs);
}

}  // namespace
}  // namespace amptune::app

namespace amptune::app {
namespace {

// amptune's asha (wait_for_arrivals, the default): while cells may still reach a rung, a cell
// goes on only when it is sure to stay in the top 1/eta however they do; the waiting cells are
// promoted as cells arrive, and the best continues once none can arrive.
TEST(PruneAshaWaiting, FewerThanEtaCellsWaitWhileOthersMayStillArrive) {
  PruneSettings s;
  s.rule = PruneRule::kAsha;
  s.metric = "acc1";
  s.eta = 3;
  PruneTable t = {cell(1, {0.5}), cell(2, {}), cell(3, {})};  // 2 and 3 have not trained yet
  PruneDecision d = decide_prune(t, s, 1, 0);
  EXPECT_TRUE(d.stop) << "the best of one cell waits: two more may come";
  EXPECT_EQ(d.keep, 0);
  EXPECT_TRUE(std::isnan(d.threshold));
  EXPECT_EQ(d.reason,
            "acc1 0.5 after 1 epoch (rung 0) waits: rank 1 of 1 there with 2 cells still to "
            "come; it goes on once it is sure to stay in the top 1/3");
  t[0].status = Status::kPruned;
  t[1].values[0] = 0.3;
  EXPECT_TRUE(decide_prune(t, s, 2, 0).stop);
  t[1].status = Status::kPruned;
  EXPECT_TRUE(promotable_cells(t, s).empty()) << "cell 3 may still arrive";
  // The third arrives: 3 / 3 = 1 continues, the best of the three.
  t[2].values[0] = 0.4;
  d = decide_prune(t, s, 3, 0);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.keep, 1);
  EXPECT_EQ(d.threshold, 0.5);
  t[2].status = Status::kPruned;
  const std::vector<PruneDecision> promoted = promotable_cells(t, s);
  ASSERT_EQ(promoted.size(), 1u);
  EXPECT_EQ(promoted[0].cell_id, 1);
  EXPECT_FALSE(promoted[0].stop);
}

TEST(PruneAshaWaiting, ACompleteRungLetsTheBestContinue) {
  PruneSettings s;
  s.rule = PruneRule::kAsha;
  s.metric = "mrpe";
  s.higher_is_better = false;
  s.eta = 3;
  // Two cells at rung 1 (epoch 2), the third stopped at rung 0 and done ones elsewhere: none
  // can arrive, so the best of the two (lower mrpe) continues.
  const PruneTable t = {cell(1, {90, 80, 70}, Status::kPruned), cell(2, {95, 85, 60}),
                        cell(3, {99}, Status::kPruned)};
  const PruneDecision d = decide_prune(t, s, 2, 2);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.keep, 1);
  EXPECT_EQ(d.threshold, 60);
  const std::vector<PruneDecision> none = promotable_cells(t, s);
  EXPECT_TRUE(none.empty()) << "cell 1 is second of two at rung 1, cell 3 third of three at 0";
}

// Cells promoted at a lower rung are still to come at the higher ones: the best cell waiting at
// rung 1 is not promoted alongside the two that go on from rung 0 (it would have gone on alone).
TEST(PruneAshaWaiting, CellsPromotedAtALowerRungAreStillToComeHigherUp) {
  PruneSettings s;
  s.rule = PruneRule::kAsha;
  s.metric = "acc1";
  s.eta = 3;
  PruneTable t;
  t.push_back(cell(1, {0.9, 0.5, 0.6}, Status::kPruned));  // waited at rung 1 (epoch 2)
  t.push_back(cell(2, {0.8}, Status::kPruned));            // second and third at rung 0
  t.push_back(cell(3, {0.7}, Status::kPruned));
  for (int i = 4; i <= 9; ++i) t.push_back(cell(i, {0.1 * (i - 3)}, Status::kPruned));
  std::vector<int64_t> promoted;
  for (const PruneDecision& p : promotable_cells(t, s)) promoted.push_back(p.cell_id);
  EXPECT_EQ(promoted, (Ids{2, 3}));
  // Once they have reached rung 1 and are worse there, cell 1 goes on.
  t[1].values[1] = 0.1;
  t[1].values[2] = 0.2;
  t[2].values[1] = 0.1;
  t[2].values[2] = 0.3;
  promoted.clear();
  for (const PruneDecision& p : promotable_cells(t, s)) promoted.push_back(p.cell_id);
  EXPECT_EQ(promoted, (Ids{1}));
}

TEST(PruneAshaWaiting, ACellSureToStayInTheTopGoesOnBeforeTheOthersArrive) {
  PruneSettings s;
  s.rule = PruneRule::kAsha;
  s.metric = "acc1";
  s.eta = 3;
  // Nine cells, seven at rung 0, two to come: the final top 1/3 is 3 cells, so the best of the
  // seven is sure to stay in it (1 + 2 <= 3), the second is not (2 + 2 > 3).
  PruneTable t;
  for (int i = 1; i <= 7; ++i) t.push_back(cell(i, {0.1 * i}));
  t.push_back(cell(8, {}));
  t.push_back(cell(9, {}));
  PruneDecision d = decide_prune(t, s, 7, 0);
  EXPECT_FALSE(d.stop) << d.reason;
  EXPECT_EQ(d.keep, 1);
  d = decide_prune(t, s, 6, 0);
  EXPECT_TRUE(d.stop) << d.reason;
  EXPECT_NE(d.reason.find("waits"), std::string::npos) << d.reason;
  // Sorted arrivals, each better than all before it (the order in which Optuna's rule trains
  // every cell on): the first six wait; the seventh, eighth and ninth are each sure to stay in
  // the final top 3 and go on, and no waiting cell is promotable after that.
  PruneTable sorted;
  for (int i = 1; i <= 9; ++i) sorted.push_back(cell(i, {}));
  for (int i = 1; i <= 9; ++i) {
    sorted[i - 1].values[0] = 0.1 * i;
    const PruneDecision at = decide_prune(sorted, s, i, 0);
    EXPECT_EQ(at.stop, i < 7) << at.reason;
    if (at.stop) sorted[i - 1].status = Status::kPruned;
  }
  EXPECT_TRUE(promotable_cells(sorted, s).empty());
}

}  // namespace
}  // namespace amptune::app
