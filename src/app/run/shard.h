// Shards of a sweep (`amptune run SWEEP.yaml --shard K/N`): N machines each train a disjoint part
// of the sweep's cells into a database of their own, and `amptune merge` joins the databases.
//
// The partition (plan_shards): the sweep's cells in cell order, in rounds of N; in each round
// every shard gets one cell, each cell the shard it prefers most (a pseudo-random order of the N
// shards drawn from its config hash) among those still free in the round. So
//  - every cell is in exactly one shard of N (complete and disjoint), and shard sizes differ by
//    at most one (8 cells on 3 shards: 3, 3, 2), after every prefix of the cells too;
//  - a cell's shard depends only on the cells before it in cell order, N and config hashes that
//    hold no path, thread count or checkpoint folder (docs/CONFIG.md "Identity"): --set
//    checkpoint.dir=... per node, another thread count or data path never move a cell;
//  - cells added after the existing ones in cell order keep every existing cell on its shard:
//    values appended to the first axis of the sweep (the slowest-varying; axes are in file
//    order), more seeds when repeat is the first axis, a new value of a one-axis sweep. Values
//    appended to a later axis insert cells between existing ones and move the cells after the
//    first insertion that no longer fall in the same round (18 % of the cells over random grids
//    of 1-3 axes and 2-7 shards, docs/SLURM.md). Declare the axis a sweep will grow along first.
//    Changing N reshuffles: keep N for the life of a sweep;
//  - a fork is trained in its parent's shard (its checkpoint is there);
//  - `amptune run --dry-run --shard K/N` lists a shard's cells, and --dry-run and `amptune slurm`
//    print every shard's cell count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/launch.h"  // GetEnv (torch-free header)

namespace amptune::app {

struct Shard {
  int k = 0;  // 0 <= k < n
  int n = 1;
  std::string text() const;  // "1/3"
};

// The shard (0..n-1) of every cell among n shards, by the rule above: `config_hashes` are the
// sweep's cells' Cell::hash in cell order (all cells, before --only). Throws UsageError for n < 1.
std::vector<int> plan_shards(const std::vector<std::string>& config_hashes, int n);
// Cells per shard of a plan_shards result with n shards.
std::vector<int> shard_sizes(const std::vector<int>& shards, int n);

// Parses --shard:
//   "K/N"     explicit;
//   "auto"    K = SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, N = SLURM_ARRAY_TASK_COUNT (a Slurm
//             array job; the array must be a contiguous range such as --array=0-7 or 1-8);
//   "auto/N"  K from SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, else from JOB_COMPLETION_INDEX
//             (a Kubernetes indexed job, which does not tell N), N as given; under Slurm N must
//             equal SLURM_ARRAY_TASK_COUNT.
// Throws UsageError naming the text or the environment variable, its value and what to pass.
Shard parse_shard(const std::string& text, const launch::GetEnv& env = launch::process_env());

// Default database of a shard: results/<sweep>.shard-K-of-N.sqlite.
std::string shard_db_path(const std::string& sweep_name, const Shard& shard);

}  // namespace amptune::app
