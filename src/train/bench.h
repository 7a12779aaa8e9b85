// Throughput measurements of one config, side by side in one process: the data loader alone,
// then training steps (loader + forward + backward + optimizer). Nothing is recorded.
#pragma once

#include <cstdint>

namespace amptune {
class Config;
}

namespace amptune::train {

struct BenchResult {
  int threads = 0;
  int64_t steps = 0;        // timed steps (after `warmup`)
  double loader_fps = 0;    // images/s of the loader alone
  double train_fps = 0;     // images/s of full training steps
  double step_ms = 0;       // mean training step time
};

// Times `steps` batches after `warmup` untimed ones, for both measurements.
BenchResult bench(const Config& config, int64_t steps, int64_t warmup, int threads_override);

}  // namespace amptune::train
