// Shards of a sweep (`amptune run SWEEP.yaml --shard K/N`): N machines each train a disjoint part
// of the sweep's cells into a database of their own, and `amptune merge` joins the databases.
//
// The partition: cell -> shard (first 64 bits of sha256(config hash)) mod N. It depends on
// nothing but the cell's own config hash, so
//  - every cell is in exactly one shard of N (complete and disjoint);
//  - a cell keeps its shard when the sweep gains values or cells (another value of an axis, more
//    seeds, a new zip entry): the cells it had are unchanged and their hashes with them, so each
//    shard's database goes on holding its own cells and nothing is trained twice. A change that
//    changes every cell's config (a new key in base, a new axis, another --set) makes new cells,
//    as it does without shards. Changing N reshuffles: keep N for the life of a sweep;
//  - a fork is trained in its parent's shard (its checkpoint is there);
//  - shards are balanced only on average (binomially: a 6-cell sweep in 3 shards may give one
//    shard none); `amptune run --dry-run --shard K/N` lists a shard's cells.
// K counts from 0 (Slurm array task ids minus the array's first id; Kubernetes'
// JOB_COMPLETION_INDEX).
#pragma once

#include <cstdint>
#include <string>

#include "dist/launch.h"  // GetEnv (torch-free header)

namespace amptune::app {

struct Shard {
  int k = 0;  // 0 <= k < n
  int n = 1;
  std::string text() const;  // "1/3"
};

// The shard (0..n-1) of the cell with this config hash among n shards. n >= 1.
int shard_of(const std::string& config_hash, int n);

// Parses --shard:
//   "K/N"     explicit;
//   "auto"    K = SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, N = SLURM_ARRAY_TASK_COUNT (a Slurm
//             array job; the array must be a contiguous range such as --array=0-7 or 1-8);
//   "auto/N"  K from SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, else from JOB_COMPLETION_INDEX
//             (a Kubernetes indexed job, which does not tell N), N as given; under Slurm N must
//             equal SLURM_ARRAY_TASK_COUNT.
// Throws UsageError naming the text or the environment variable, its value and what to pass.
Shard parse_shard(const std::string& text, const dist::GetEnv& env = dist::process_env());

// Default database of a shard: results/<sweep>.shard-K-of-N.sqlite.
std::string shard_db_path(const std::string& sweep_name, const Shard& shard);

}  // namespace amptune::app
