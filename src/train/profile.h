// profile.steps (docs/PERFORMANCE.md "Profiling steps"): a Chrome-trace JSON of a range of a
// run's training steps from LibTorch's profiler, written beside the run's checkpoints and
// recorded on the epoch row (epochs.profile_trace). Opens in chrome://tracing and Perfetto.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

namespace amptune {
struct ProfileSettings;
}

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace amptune::train {

// Training steps by their 0-based index in the run (the optimizer steps done before it), both
// ends included.
struct StepRange {
  int64_t first = 0, last = 0;
};

// profile.steps: nullopt when [] (off). ConfigError naming the key unless [first, last] with
// 0 <= first <= last.
std::optional<StepRange> profile_steps(const ProfileSettings& profile);

// Traces the steps of `range` (none when nullopt) of one process and writes the trace into
// `dir` as profile_steps_FIRST-LAST.json (atomically: temp file, rename). A range that crosses
// the end of an epoch is cut there (finish()); the steps of the next epochs are not traced.
class StepProfiler {
 public:
  StepProfiler(std::optional<StepRange> range, std::string dir);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Before training step `step` (0-based index in the run): starts tracing at range.first.
  void begin_step(int64_t step);
  // After step `step`: at range.last stops and writes the trace; returns its path, else "".
  std::string end_step(int64_t step);
  // At the end of an epoch: stops a trace still running and writes it; returns its path or "".
  std::string finish();

 private:
  std::string write();
  std::optional<StepRange> range_;
  std::string dir_;
  std::ostringstream events_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;
  int64_t traced_first_ = -1, traced_last_ = -1;
  bool done_ = false;
};

}  // namespace amptune::train
