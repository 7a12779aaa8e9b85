// Which checkpoints a run keeps (keep_last / keep_best / keep_epochs / fork parents). Garbage
// collection against a database: tests/unit/app/checkpoint_folders_test.cpp.
#include "train/retention.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace amptune::train {
namespace {

std::vector<records::EpochRow> rows_with(const std::vector<double>& acc1) {
  std::vector<records::EpochRow> rows;
  for (size_t i = 0; i < acc1.size(); ++i) {
    records::EpochRow r;
    r.epoch = static_cast<int>(i);
    r.metrics["acc1"] = acc1[i];
    r.checkpoint = records::CheckpointFile{"e" + std::to_string(i), 1, "x"};
    rows.push_back(r);
  }
  return rows;
}

TEST(TrainRetention, NothingSetKeepsEverything) {
  auto rows = rows_with({1, 2, 3});
  EXPECT_EQ(retained_epochs(rows, RetentionPolicy{}, {}), (std::set<int>{0, 1, 2}));
}

TEST(TrainRetention, KeepLastBestEpochsAndForkParents) {
  auto rows = rows_with({50, 90, 10, 20, 30, 40});
  RetentionPolicy p;
  p.keep_last = 1;
  EXPECT_EQ(retained_epochs(rows, p, {}), (std::set<int>{5}));
  p.keep_last = 2;
  p.keep_best = 1;
  EXPECT_EQ(retained_epochs(rows, p, {}), (std::set<int>{1, 4, 5}));
  p.keep_epochs = {0, 3, 17};  // 17: no such epoch, ignored
  EXPECT_EQ(retained_epochs(rows, p, {}), (std::set<int>{0, 1, 3, 4, 5}));
  EXPECT_EQ(retained_epochs(rows, p, {2}), (std::set<int>{0, 1, 2, 3, 4, 5}));
  // Lower is better (e.g. MRPE): the best is the smallest.
  RetentionPolicy low;
  low.keep_last = 1;
  low.keep_best = 1;
  low.higher_is_better = false;
  EXPECT_EQ(retained_epochs(rows, low, {}), (std::set<int>{2, 5}));
  // Rows whose file is already gone are never returned.
  rows[3].checkpoint.reset();
  EXPECT_EQ(retained_epochs(rows, p, {}), (std::set<int>{0, 1, 4, 5}));
}

}  // namespace
}  // namespace amptune::train
