#include "train/profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "core/settings.h"

namespace amptune::train {
namespace fs = std::filesystem;

std::optional<StepRange> profile_steps(const ProfileSettings& profile) {
  const std::vector<int64_t>& steps = profile.steps;
  if (steps.empty()) return std::nullopt;
  if (steps.size() != 2 || steps[0] < 0 || steps[1] < steps[0]) {
    std::string got;
    for (int64_t s : steps) got += (got.empty() ? "" : ", ") + std::to_string(s);
    throw ConfigError(
        "profile.steps must be [first, last] with 0 <= first <= last (training "
        "steps, 0-based, both included) or [] for none, got [" +
        got + "]");
  }
  return StepRange{steps[0], steps[1]};
}

StepProfiler::StepProfiler(std::optional<StepRange> range, std::string dir)
    : range_(range), dir_(std::move(dir)) {}

StepProfiler::~StepProfiler() = default;  // a trace still running is dropped, not written

void StepProfiler::begin_step(int64_t step) {
  if (!range_ || done_ || recording_ || step < range_->first || step > range_->last) return;
  // The legacy profiler writes Chrome-trace events of every operator (with input shapes) into
  // events_ when recording_ is destroyed.
  traced_first_ = step;
  recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(events_);
}

std::string StepProfiler::end_step(int64_t step) {
  if (!recording_) return "";
  traced_last_ = step;
  return step >= range_->last ? write() : "";
}

std::string StepProfiler::finish() { return recording_ ? write() : ""; }

std::string StepProfiler::write() {
  recording_.reset();  // stops the profiler and writes the events
  done_ = true;
  char name[64];
  std::snprintf(name, sizeof name, "profile_steps_%lld-%lld.json",
                static_cast<long long>(traced_first_), static_cast<long long>(traced_last_));
  const fs::path path = fs::path(dir_) / name;
  try {
    write_file_atomic(path.string(), events_.str());
  } catch (const EnvironmentError& e) {
    throw CheckpointError(std::string("the profile trace: ") + e.what());
  }
  events_.str("");
  return path.string();
}

}  // namespace amptune::train
