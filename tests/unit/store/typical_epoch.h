// A typical epoch record, for the store's benchmarks and tests: the rows the trainer writes at
// the end of an epoch of an O1 run (the epoch row with a checkpoint reference, 6 metrics, one
// loss-scale event).
#pragma once

#include <cstdint>
#include <string>

#include "store/store.h"

namespace amptune::store {

inline records::EpochRecord typical_epoch(int64_t run, int epoch,
                                          const std::string& checkpoint_path) {
  records::EpochRecord record;
  record.run_id = run;
  record.epoch = epoch;
  record.global_step = 100 * (epoch + 1);
  record.lr = 0.1;
  record.train_loss = 1.0 / (epoch + 1);
  record.train_fps_mean = 900;
  record.train_fps_min = 850;
  record.train_fps_max = 950;
  record.epoch_seconds = 30;
  record.metrics = {{"acc1", 50.0 + epoch * 0.1}, {"acc5", 80.0},        {"val_loss", 0.5},
                    {"loss_scale", 65536.0},      {"overflow_steps", 1}, {"skipped_steps", 1}};
  record.checkpoint = records::CheckpointFile{checkpoint_path, 46000000, std::string(64, 'a')};
  record.scale_events = {
      records::ScaleEvent{record.global_step - 50, 32768.0, ScaleReason::kOverflow}};
  return record;
}

}  // namespace amptune::store
