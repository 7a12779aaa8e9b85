// Shards of a sweep (app/run/shard.h): the partition of the cells (complete, disjoint, within one
// cell of even, stable when the sweep grows along its first axis, unmoved by where files go,
// forks with their parents), --shard parsing from the text and from a Slurm
// array or Kubernetes indexed job's environment.
#include "app/run/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "app/run/runner.h"
#include "core/error.h"
#include "core/hash.h"
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

// Shard -> cells of a plan_shards result.
std::vector<int> sizes_of(const std::vector<std::string>& hashes, int n) {
  return shard_sizes(plan_shards(hashes, n), n);
}

TEST(Shard, PartitionIsCompleteDisjointAndWithinOneOfEven) {
  ScratchDir dir;
  const std::string path =
      dir.write("s.yaml", sweep_text("grid:\n  optim.lr: [0.01, 0.02, 0.05, 0.1, 0.2]\n"
                                     "  amp.opt_level: [O0, O1, O2]\nrepeat: 4\n"));
  const Plan whole = plan_sweep(path, {}, {}, false);
  ASSERT_EQ(whole.cells.size(), 60u);
  const std::vector<std::string> hashes = cell_hashes(whole.cells);
  for (int n : {1, 2, 3, 7, 60, 100}) {
    const std::vector<int> of = plan_shards(hashes, n);
    std::map<std::string, int> seen;  // hash -> shard
    std::vector<int> sizes(n);
    for (int k = 0; k < n; ++k) {
      const Plan plan = plan_sweep(path, {}, {}, false, 1, Shard{k, n});
      EXPECT_EQ(plan.only_cells, 60u);
      ASSERT_TRUE(plan.shard);
      EXPECT_EQ(plan.shard_sizes, shard_sizes(of, n));
      for (const Cell& cell : plan.cells) {
        EXPECT_TRUE(seen.emplace(cell.hash, k).second)
            << "cell " << cell.index << " in shards " << seen[cell.hash] << " and " << k;
        EXPECT_EQ(of.at(cell.index), k);
      }
      sizes[k] = static_cast<int>(plan.cells.size());
    }
    EXPECT_EQ(seen.size(), 60u) << n << " shards";
    const auto [low, high] = std::minmax_element(sizes.begin(), sizes.end());
    EXPECT_LE(*high - *low, 1) << n << " shards";
  }
}

TEST(Shard, SizesAreWithinOneOfEvenWhereAHashModuloWasNot) {
  // The report that found the defect: 8 cells on 3 shards came out 4 / 2 / 2 by hash modulo.
  for (const auto& [cells, n] : std::vector<std::pair<int, int>>{{8, 3}, {100, 7}, {5, 8}, {1000, 16}}) {
    std::vector<std::string> hashes;
    for (int c = 0; c < cells; ++c) hashes.push_back(sha256_hex("cell " + std::to_string(c)));
    const std::vector<int> sizes = sizes_of(hashes, n);
    int total = 0;
    for (int size : sizes) {
      EXPECT_GE(size, cells / n) << cells << " cells, " << n << " shards";
      EXPECT_LE(size, cells / n + 1) << cells << " cells, " << n << " shards";
      total += size;
    }
    EXPECT_EQ(total, cells);
  }
  EXPECT_EQ(sizes_of({"a", "b", "c"}, 1), std::vector<int>{3});
  EXPECT_THROW(plan_shards({"x"}, 0), UsageError);
}

TEST(Shard, ACellKeepsItsShardWhenTheSweepGainsValuesOnItsFirstAxis) {
  ScratchDir dir;
  const std::string small =
      dir.write("small.yaml", sweep_text("grid:\n  optim.lr: [0.1, 0.2, 0.3]\n"
                                         "  amp.opt_level: [O0, O1]\nrepeat: [1, 2]\n"));
  // Two more learning rates, appended to the first (slowest) axis: the new cells come after the
  // old ones in cell order, so no old cell moves; the shards stay within one of even.
  const std::string grown =
      dir.write("grown.yaml", sweep_text("grid:\n  optim.lr: [0.1, 0.2, 0.3, 0.4, 0.5]\n"
                                         "  amp.opt_level: [O0, O1]\nrepeat: [1, 2]\n"));
  for (int n : {2, 3, 4, 5}) {
    const auto before = shard_plans(small, n);
    const auto after = shard_plans(grown, n);
    size_t kept = 0, total = 0;
    for (int k = 0; k < n; ++k) {
      for (const auto& [hash, index] : before[k]) {
        ASSERT_TRUE(after[k].count(hash)) << "cell " << index << " left shard " << k;
        ++kept;
      }
      total += after[k].size();
      EXPECT_LE(after[k].size(), 20u / n + 1);
      EXPECT_GE(after[k].size(), 20u / n);
    }
    EXPECT_EQ(kept, 12u);
    EXPECT_EQ(total, 20u);
  }
}

TEST(Shard, WhereFilesGoDoesNotMoveACell) {
  // What a user sets per node (its checkpoint folder, threads, loader workers, log interval, a
  // copy of the data elsewhere) changes no cell's hash, so no shard's cells.
  ScratchDir dir;
  const std::string path = dir.write(
      "s.yaml", sweep_text("grid:\n  optim.lr: [0.1, 0.2, 0.3, 0.4]\n  seed: [1, 2]\n"));
  std::vector<std::vector<int>> partitions;
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {}, {"checkpoint.dir=/scratch/node3/ckpt"}, {"threads=7", "data.workers=5"},
           {"log.every_steps=3", "data.root=/elsewhere/copy", "checkpoint.keep_last=2"}}) {
    const Plan plan = plan_sweep(path, sets, {}, false);
    partitions.push_back(plan_shards(cell_hashes(plan.cells), 3));
    EXPECT_EQ(cell_hashes(plan.cells), cell_hashes(plan_sweep(path, {}, {}, false).cells));
  }
  for (const auto& p : partitions) EXPECT_EQ(p, partitions.front());
}

TEST(Shard, ForksGoWithTheirParentsShard) {
  ScratchDir dir;
  const std::string path = dir.write(
      "s.yaml", sweep_text("grid:\n  optim.lr: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]\n"
                           "forks:\n  - from: {epoch: 1}\n    grid: {optim.momentum: [0.5, 0.8]}\n"
                           "  - from: {where: {optim.lr: 0.3}, epoch: 0}\n"
                           "    set: {optim.lr: 0.01}\n"));
  const int n = 3;
  const std::vector<int> of = plan_shards(cell_hashes(plan_sweep(path, {}, {}, false).cells), n);
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
      EXPECT_EQ(of.at(plan.cells[fork.parent].index), k);
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
launch::GetEnv env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(const std::string& text, const launch::GetEnv& env) {
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

}  // namespace
}  // namespace amptune::app
