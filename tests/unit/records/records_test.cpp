// The plain records: what a run status says about its training (the one place that groups
// statuses), and the status words' round trip.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "records/records.h"

namespace amptune::records {
namespace {

TEST(RunStatusTest, GroupsAreNestedAndNameEveryStatusOnce) {
  std::set<RunStatus> complete, settled, finished;
  for (RunStatus s : kRunStatuses) {
    if (is_complete(s)) complete.insert(s);
    if (is_settled(s)) settled.insert(s);
    if (is_finished(s)) finished.insert(s);
  }
  EXPECT_EQ(complete, (std::set<RunStatus>{RunStatus::kDone, RunStatus::kDiverged}));
  EXPECT_EQ(settled,
            (std::set<RunStatus>{RunStatus::kDone, RunStatus::kDiverged, RunStatus::kPruned}));
  EXPECT_EQ(finished, (std::set<RunStatus>{RunStatus::kDone, RunStatus::kDiverged,
                                           RunStatus::kPruned, RunStatus::kFailed}));
  // pending and running are neither: a worker may still train them.
  EXPECT_FALSE(is_finished(RunStatus::kPending));
  EXPECT_FALSE(is_finished(RunStatus::kRunning));
}

TEST(RunStatusTest, EveryStatusRoundTripsThroughItsWord) {
  std::set<std::string> words;
  for (RunStatus s : kRunStatuses) {
    EXPECT_EQ(parse_status(to_string(s)), s);
    words.insert(to_string(s));
  }
  EXPECT_EQ(words.size(), std::size(kRunStatuses));
  EXPECT_THROW(parse_status("finished"), StoreError);
}

}  // namespace
}  // namespace amptune::records
