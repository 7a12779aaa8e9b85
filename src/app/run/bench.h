// `amptune bench SWEEP`: throughput of the selected cells of a sweep. In one process
// (train/bench.h: the loader alone, then full training steps), or data-parallel
// (docs/PERFORMANCE.md "Data-parallel linearity"): one cell trained by a job of N processes - the
// real trainer, its gradient buckets and per-step votes - on a scratch database, and what it
// recorded; `amptune bench SWEEP --nproc 1,2` prints the seed's linearity figure fps(N) / (N x
// fps(1)) from these. No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/sweep.h"
#include "train/bench.h"

namespace amptune {
class Config;
}

namespace amptune::app {

struct ParallelBench {
  int nproc = 1;
  double fps = 0;           // images/s of the whole job (the ranks' img/s summed)
  double rank_fps_min = 0;  // the slowest rank's img/s (= fps for one process)
  double rank_fps_max = 0;
  double allreduce_ms = 0;     // per step: communication backward did not hide + the step vote
  double allreduce_share = 0;  // of the step time
};

// Trains `config` for `warmup` + `steps` steps per process (one epoch, no evaluation, the
// first `warmup` steps untimed) with `nproc` processes on this machine (`amptune run --nproc`)
// and `threads` LibTorch threads each (0: the config's). Throws EnvironmentError naming the
// log when the job fails.
ParallelBench bench_data_parallel(const Config& config, int nproc, int64_t steps, int64_t warmup,
                                  int threads);

struct BenchRequest {
  std::string sweep_path;
  std::vector<std::string> sets, only;  // --set / --only (core/sweep.h)
  int64_t steps = 50;                   // timed batches per measurement
  int64_t warmup = 5;                   // untimed batches before timing
  int threads = 0;                      // LibTorch threads per process; 0: the config's
  std::vector<int> nproc;               // data-parallel job sizes; empty: one process
};

struct CellBench {
  Cell cell;
  train::BenchResult one;               // without `nproc`
  std::vector<ParallelBench> parallel;  // one per `nproc` entry, in its order
};

// Loads the sweep (load_sweep with the sets, filter_cells with `only`) and times each selected
// cell, in order. Throws UsageError for steps < 1 or warmup < 0, and as the measurements do.
std::vector<CellBench> bench_sweep(const BenchRequest& request);

}  // namespace amptune::app
