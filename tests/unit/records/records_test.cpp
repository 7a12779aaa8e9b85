// The plain records: what a run status says about its training (the one place that groups
// statuses), and the round trips of the status and advice-rule words.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

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

// The advice rules' words (the stored column diagnosis_advice.rule, docs/AMP.md "Advice rules"):
// each rule's word reads back to it, in priority order; another word is unset.
TEST(AdviceRuleTest, EveryRuleRoundTripsThroughItsWord) {
  std::vector<std::string> words;
  for (AdviceRule r : kAdviceRules) {
    EXPECT_EQ(parse_advice_rule(to_string(r)), r) << to_string(r);
    words.push_back(to_string(r));
  }
  EXPECT_EQ(words, (std::vector<std::string>{"activation_overflow", "gradient_underflow",
                                             "gradient_overflow", "batchnorm_low_precision",
                                             "first_departure", "cast_point", "fp8_keep_out",
                                             "fp8_current_scaling", "fp8_raise_margin",
                                             "fp8_shorten_history"}));
  for (const char* word : {"", "overflow", "Activation_overflow", "cast_point "}) {
    EXPECT_FALSE(parse_advice_rule(word)) << word;
  }
}

}  // namespace
}  // namespace amptune::records
