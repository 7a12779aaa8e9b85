#include "train/recorder.h"

#include <algorithm>

#include "core/log.h"
#include "core/process.h"
#include "train/retention.h"

namespace amptune::train {

void Recorder::request_stop(const StopRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!requested_) requested_ = request;
}

std::optional<StopRequest> Recorder::stop_request() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (requested_) return requested_;
  }
  if (amptune::stop_requested()) return StopRequest{Outcome::kInterrupted, ""};
  return own_stop_request();
}

void FollowerRecorder::end(Ending ending, const std::string& message, const std::string&) {
  if (ending == Ending::kFailed) {
    log::warn("run " + run_name_ + " failed on rank " + std::to_string(rank_) + ": " + message);
  }
}

std::vector<records::EpochRow> MemoryRecorder::epochs_of(int64_t run_id) {
  const auto it = others.find(run_id);
  return it == others.end() ? std::vector<records::EpochRow>{} : it->second.second;
}

std::optional<RunInput> MemoryRecorder::find_run(int64_t run_id) {
  const auto it = others.find(run_id);
  if (it == others.end()) return std::nullopt;
  return it->second.first;
}

void MemoryRecorder::forget_after(int64_t epoch) {
  const auto first = std::find_if(rows_.begin(), rows_.end(),
                                  [epoch](const records::EpochRow& r) { return r.epoch > epoch; });
  for (auto it = first; it != rows_.end(); ++it) {
    if (it->checkpoint && !dir_.empty()) remove_own_checkpoint(it->checkpoint->path, dir_);
  }
  rows_.erase(first, rows_.end());
}

void MemoryRecorder::record_epoch(records::EpochRecord& record) {
  records::EpochRow row;
  row.epoch = record.epoch;
  row.global_step = record.global_step;
  row.lr = record.lr;
  row.train_loss = record.train_loss;
  row.train_fps_mean = record.train_fps_mean;
  row.train_fps_min = record.train_fps_min;
  row.train_fps_max = record.train_fps_max;
  row.epoch_seconds = record.epoch_seconds;
  row.skipped_samples = record.skipped_samples;
  row.metrics = record.metrics;
  row.checkpoint = record.checkpoint;
  row.times = record.times;
  row.profile_trace = record.profile_trace;
  if (!record.initial_metrics.empty()) initial_metrics = record.initial_metrics;
  rows_.push_back(std::move(row));
}

}  // namespace amptune::train
