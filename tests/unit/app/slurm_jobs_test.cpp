// Job states of `tune --slurm` (app/tune/slurm_jobs.h) parsed from recorded squeue and sacct
// outputs (Slurm 22.05: `squeue -h -r -t all -j ID -o '%i|%T'`, `sacct -j ID -X -n -P -o
// JobID,State,ExitCode`).
#include "app/tune/slurm_jobs.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace amptune::app {
namespace {

TEST(SlurmJobs, EveryDocumentedStateIsReadAndEndedOrNot) {
  struct Case {
    const char* word;
    JobState state;
    bool ended;
  };
  const Case cases[] = {
      {"PENDING", JobState::kPending, false},
      {"RUNNING", JobState::kRunning, false},
      {"SUSPENDED", JobState::kSuspended, false},
      {"COMPLETING", JobState::kCompleting, false},
      {"CONFIGURING", JobState::kConfiguring, false},
      {"REQUEUED", JobState::kRequeued, false},
      {"COMPLETED", JobState::kCompleted, true},
      {"FAILED", JobState::kFailed, true},
      {"CANCELLED", JobState::kCancelled, true},
      {"CANCELLED by 123", JobState::kCancelled, true},
      {"CANCELLED+", JobState::kCancelled, true},
      {"TIMEOUT", JobState::kTimeout, true},
      {"NODE_FAIL", JobState::kNodeFail, true},
      {"PREEMPTED", JobState::kPreempted, true},
      {"OUT_OF_MEMORY", JobState::kOutOfMemory, true},
      {"OUT_OF_ME+", JobState::kOther, false},  // cut by a narrow column: not judged
      {"BOOT_FAIL", JobState::kBootFail, true},
      {"DEADLINE", JobState::kDeadline, true},
      {" completed ", JobState::kCompleted, true},
      {"CD", JobState::kCompleted, true},
      {"PD", JobState::kPending, false},
      {"SOMETHING_NEW", JobState::kOther, false},
      {"", JobState::kOther, false}};
  for (const Case& c : cases) {
    EXPECT_EQ(parse_job_state(c.word), c.state) << "'" << c.word << "'";
    EXPECT_EQ(job_ended(parse_job_state(c.word)), c.ended) << "'" << c.word << "'";
  }
}

TEST(SlurmJobs, SqueueLinesOfAnArrayJobExpandPendingRanges) {
  // squeue -r lists running tasks one by one and the pending ones of a throttled array as a range.
  const std::string out =
      "4711_0|RUNNING\n"
      "4711_1|COMPLETING\n"
      "4711_[2-4,7%2]|PENDING\n"
      "\n";
  const std::vector<TaskState> tasks = parse_job_lines(out);
  ASSERT_EQ(tasks.size(), 6u);
  EXPECT_EQ(tasks[0].job_id, "4711");
  EXPECT_EQ(tasks[0].task, 0);
  EXPECT_EQ(tasks[0].state, JobState::kRunning);
  EXPECT_EQ(tasks[1].state, JobState::kCompleting);
  std::vector<int> pending;
  for (size_t i = 2; i < tasks.size(); ++i) {
    EXPECT_EQ(tasks[i].state, JobState::kPending);
    pending.push_back(tasks[i].task);
  }
  EXPECT_EQ(pending, (std::vector<int>{2, 3, 4, 7}));
}

TEST(SlurmJobs, SacctLinesOfEndedTasksKeepTheirWordsAndSkipSteps) {
  const std::string out =
      "812_0|COMPLETED|0:0\n"
      "812_0.batch|COMPLETED|0:0\n"
      "812_1|FAILED|8:0\n"
      "812_2|CANCELLED by 1000|0:15\n"
      "812_3|TIMEOUT|0:0\n"
      "812_4|NODE_FAIL|0:0\n"
      "812_5|PREEMPTED|0:0\n"
      "812_6|OUT_OF_MEMORY|0:125\n"
      "812_7.extern|COMPLETED|0:0\n"
      "813|COMPLETED|0:0\n";
  const std::vector<TaskState> tasks = parse_job_lines(out);
  ASSERT_EQ(tasks.size(), 8u);
  const JobState expected[] = {JobState::kCompleted,  JobState::kFailed,   JobState::kCancelled,
                               JobState::kTimeout,    JobState::kNodeFail, JobState::kPreempted,
                               JobState::kOutOfMemory};
  for (int k = 0; k < 7; ++k) {
    EXPECT_EQ(tasks[k].task, k);
    EXPECT_EQ(tasks[k].state, expected[k]) << tasks[k].word;
    EXPECT_TRUE(job_ended(tasks[k].state)) << tasks[k].word;
  }
  EXPECT_EQ(tasks[2].word, "CANCELLED by 1000");
  EXPECT_EQ(tasks[7].job_id, "813");  // no array
  EXPECT_EQ(tasks[7].task, -1);
}

TEST(SlurmJobs, ALineThatIsNoJobLineIsRefusedNamingIt) {
  for (const char* bad : {"slurm_load_jobs error: Invalid job id specified", "abc_1|RUNNING",
                          "12_x|RUNNING", "12_[1-]|PENDING"}) {
    try {
      parse_job_lines(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const EnvironmentError& e) {
      EXPECT_NE(std::string(e.what()).find("not a job line"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace amptune::app
