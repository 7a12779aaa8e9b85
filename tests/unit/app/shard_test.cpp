// Shards of a sweep (app/shard.h): the partition of the cells (complete, disjoint, stable when
// the sweep grows, forks with their parents), --shard parsing from the text and from a Slurm
// array or Kubernetes indexed job's environment.
#include "app/shard.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "app/runner.h"
#include "core/error.h"
#include "support/scratch.h"

namespace amptune::app {
namespace {

using testing::ScratchDir;

// A sweep over a (missing) IDX data set; planned without data.
std::string sweep_text(const std::string& extra) {
  return "name: shards\nbase:\n"
         "  model: {name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, "
         "small_input: true}\n"
         "  data: {format: idx, root: /nonexistent, mean: [0.3], std: [0.3]}\n"
         "  schedule.epochs: 3\n" +
         extra;
}

// Config hash -> cell index of each shard's plan.
std::vector<std::map<std::string, int>> shard_plans(const std::string& path, int n) {
  std::vector<std::map<std::string, int>> shards(n);
  for (int k = 0; k < n; ++k) {
    for (const Cell& cell : plan_sweep(path, {}, {}, false, 1, Shard{k, n}).cells) {
      shards[k][cell.hash] = cell.index;
    }
  }
  return shards;
}

TEST(Shard, PartitionIsCompleteAndDisjoint) {
  ScratchDir dir;
  const std::string path =
      dir.write("s.yaml", sweep_text("grid:\n  optim.lr: [0.01, 0.02, 0.05, 0.1, 0.2]\n"
                                     "  amp.opt_level: [O0, O1, O2]\nrepeat: 4\n"));
  const Plan whole = plan_sweep(path, {}, {}, false);
  ASSERT_EQ(whole.cells.size(), 60u);
  for (int n : {1, 2, 3, 7, 60, 100}) {
    std::map<std::string, int> seen;  // hash -> shard
    for (int k = 0; k < n; ++k) {
      const Plan plan = plan_sweep(path, {}, {}, false, 1, Shard{k, n});
      EXPECT_EQ(plan.only_cells, 60u);
      ASSERT_TRUE(plan.shard);
      for (const Cell& cell : plan.cells) {
        EXPECT_TRUE(seen.emplace(cell.hash, k).second)
            << "cell " << cell.index << " in shards " << seen[cell.hash] << " and " << k;
        EXPECT_EQ(shard_of(cell.hash, n), k);
      }
    }
    EXPECT_EQ(seen.size(), 60u) << n << " shards";
  }
  // Spread: 60 cells over 3 shards, each gets some (binomial; the hashes are fixed, so this is
  // a fixed outcome, not a flaky one).
  for (const auto& shard : shard_plans(path, 3)) EXPECT_GE(shard.size(), 10u);
}

TEST(Shard, ACellKeepsItsShardWhenTheSweepGains) {
  ScratchDir dir;
  const std::string small =
      dir.write("small.yaml", sweep_text("grid:\n  optim.lr: [0.1, 0.2, 0.3]\n"
                                         "  amp.opt_level: [O0, O1]\nrepeat: [1, 2]\n"));
  // More values on every axis, one inserted before the old ones: every old cell moves to
  // another index, but its config (and so its hash and shard) is unchanged.
  const std::string grown =
      dir.write("grown.yaml", sweep_text("grid:\n  optim.lr: [0.05, 0.1, 0.2, 0.3, 0.4]\n"
                                         "  amp.opt_level: [O0, O1, O2]\nrepeat: [1, 2, 3]\n"));
  const int n = 4;
  const auto before = shard_plans(small, n);
  const auto after = shard_plans(grown, n);
  int moved_index = 0, kept = 0;
  for (int k = 0; k < n; ++k) {
    for (const auto& [hash, index] : before[k]) {
      const auto found = after[k].find(hash);
      ASSERT_NE(found, after[k].end()) << "cell " << index << " left shard " << k;
      moved_index += found->second != index;
      ++kept;
    }
  }
  EXPECT_EQ(kept, 12);
  EXPECT_EQ(moved_index, 12);  // a partition by index would have reshuffled every cell
  size_t total = 0;
  for (const auto& shard : after) total += shard.size();
  EXPECT_EQ(total, 45u);
}

TEST(Shard, ForksGoWithTheirParentsShard) {
  ScratchDir dir;
  const std::string path = dir.write(
      "s.yaml", sweep_text("grid:\n  optim.lr: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]\n"
                           "forks:\n  - from: {epoch: 1}\n    grid: {optim.momentum: [0.5, 0.8]}\n"
                           "  - from: {where: {optim.lr: 0.3}, epoch: 0}\n"
                           "    set: {optim.lr: 0.01}\n"));
  const int n = 3;
  size_t forks = 0, cells = 0;
  for (int k = 0; k < n; ++k) {
    const Plan plan = plan_sweep(path, {}, {}, false, 1, Shard{k, n});
    cells += plan.cells.size();
    forks += plan.forks.size();
    size_t expected = 0;
    for (const Cell& cell : plan.cells) expected += cell.index == 2 ? 3 : 2;
    EXPECT_EQ(plan.forks.size(), expected) << "shard " << k;
    for (const PlannedFork& fork : plan.forks) {
      ASSERT_LT(fork.parent, plan.cells.size());
      EXPECT_EQ(shard_of(plan.cells[fork.parent].hash, n), k);
    }
  }
  EXPECT_EQ(cells, 6u);
  EXPECT_EQ(forks, 6u * 2u + 1u);
}

TEST(Shard, OnlyThenShardAndAnEmptyShardIsNoError) {
  ScratchDir dir;
  const std::string path = dir.write("s.yaml", sweep_text("grid:\n  optim.lr: [0.1, 0.2]\n"));
  // 2 cells in 50 shards: most shards are empty, which plans to nothing rather than failing.
  int empty = 0;
  size_t total = 0;
  for (int k = 0; k < 50; ++k) {
    const Plan plan = plan_sweep(path, {}, {"optim.lr=0.2"}, false, 1, Shard{k, 50});
    EXPECT_EQ(plan.only_cells, 1u);
    empty += plan.cells.empty();
    total += plan.cells.size();
  }
  EXPECT_EQ(total, 1u);
  EXPECT_EQ(empty, 49);
  EXPECT_THROW(plan_sweep(path, {}, {"optim.lr=0.7"}, false, 1, Shard{0, 2}), UsageError);
}

// An environment made of `vars` (the test's input, not the process's).
dist::GetEnv env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(const std::string& text, const dist::GetEnv& env) {
  try {
    const Shard shard = parse_shard(text, env);
    return "parsed as " + shard.text();
  } catch (const UsageError& e) {
    return e.what();
  }
}

TEST(Shard, ParsesExplicitShards) {
  const auto none = env_of({});
  EXPECT_EQ(parse_shard("0/1", none).text(), "0/1");
  const Shard s = parse_shard("2/5", none);
  EXPECT_EQ(s.k, 2);
  EXPECT_EQ(s.n, 5);
  for (const std::string bad : {"", "3", "3/3", "-1/3", "1/0", "a/3", "1/b", "1/3/4", "1 /3"}) {
    const std::string message = error_of(bad, none);
    EXPECT_NE(message.find("--shard"), std::string::npos) << bad << ": " << message;
    EXPECT_EQ(message.find("parsed as"), std::string::npos) << bad << ": " << message;
  }
  EXPECT_NE(error_of("3/3", none).find("0/3 .. 2/3"), std::string::npos);
  EXPECT_EQ(shard_db_path("tiny", Shard{1, 3}), "results/tiny.shard-1-of-3.sqlite");
}

TEST(Shard, AutoReadsASlurmArrayJob) {
  // sbatch --array=1-4: ids 1..4, min 1, count 4 -> shards 0..3 of 4
  auto task = [](const std::string& id) {
    return env_of({{"SLURM_ARRAY_TASK_ID", id},
                   {"SLURM_ARRAY_TASK_MIN", "1"},
                   {"SLURM_ARRAY_TASK_MAX", "4"},
                   {"SLURM_ARRAY_TASK_COUNT", "4"}});
  };
  EXPECT_EQ(parse_shard("auto", task("1")).text(), "0/4");
  EXPECT_EQ(parse_shard("auto", task("4")).text(), "3/4");
  EXPECT_EQ(parse_shard("auto/4", task("3")).text(), "2/4");
  EXPECT_NE(error_of("auto/5", task("3")).find("SLURM_ARRAY_TASK_COUNT 4"), std::string::npos);
  // --array=0-8:2 (ids 0, 2, .. 8; count 5): not a contiguous range
  const std::string gap = error_of("auto", env_of({{"SLURM_ARRAY_TASK_ID", "8"},
                                                   {"SLURM_ARRAY_TASK_MIN", "0"},
                                                   {"SLURM_ARRAY_TASK_COUNT", "5"}}));
  EXPECT_NE(gap.find("contiguous"), std::string::npos) << gap;
  const std::string junk =
      error_of("auto", env_of({{"SLURM_ARRAY_TASK_ID", "x1"}, {"SLURM_ARRAY_TASK_COUNT", "5"}}));
  EXPECT_NE(junk.find("SLURM_ARRAY_TASK_ID='x1'"), std::string::npos) << junk;
  EXPECT_NE(error_of("auto", env_of({{"SLURM_ARRAY_TASK_ID", "1"}})).find("SLURM_ARRAY_TASK_COUNT"),
            std::string::npos);
}

TEST(Shard, AutoReadsAKubernetesIndexedJobWithN) {
  const auto pod = env_of({{"JOB_COMPLETION_INDEX", "2"}});
  EXPECT_EQ(parse_shard("auto/3", pod).text(), "2/3");
  EXPECT_NE(error_of("auto", pod).find("auto/N"), std::string::npos);
  EXPECT_NE(error_of("auto/2", pod).find("JOB_COMPLETION_INDEX 2 is not below N = 2"),
            std::string::npos);
  // empty counts as unset
  const std::string neither = error_of("auto/3", env_of({{"SLURM_ARRAY_TASK_ID", ""}}));
  EXPECT_NE(neither.find("neither SLURM_ARRAY_TASK_ID"), std::string::npos) << neither;
}

TEST(Shard, ShardOfIsAFunctionOfTheHashAlone) {
  EXPECT_EQ(shard_of("anything", 1), 0);
  EXPECT_THROW(shard_of("x", 0), UsageError);
  std::vector<int> counts(4);
  for (int i = 0; i < 4000; ++i) {
    const std::string hash = "cell-" + std::to_string(i);
    const int s = shard_of(hash, 4);
    ASSERT_EQ(s, shard_of(hash, 4));
    ++counts.at(s);
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 120);  // binomial sd ~27
}

}  // namespace
}  // namespace amptune::app
