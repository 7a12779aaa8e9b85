// Learning-rate schedule: a pure function of the position in training, so a resumed run needs
// no schedule state beyond (epoch, step).
#pragma once

#include <cstdint>
#include <vector>

#include "core/words.h"

namespace amptune {
struct Settings;
}

namespace amptune::train {

struct Schedule {
  double lr0 = 0.1;
  LrPolicy policy = LrPolicy::kStep;
  std::vector<int64_t> lr_dec_epoch;
  double lr_dec_factor = 10;
  double warmup_epochs = 0;
  int64_t epochs = 1;

  static Schedule from(const Settings& settings);  // optim.lr and schedule.*
  // lr for the step `step` (0-based) of epoch `epoch` with `steps_per_epoch` steps.
  // step: lr0 / factor^(#{d in lr_dec_epoch : d <= epoch}); cosine: 0.5 lr0 (1 + cos(pi t)) with
  // t = global position / total steps. Warm-up multiplies by (position + 1) / warm-up steps.
  double lr_at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const;
};

}  // namespace amptune::train
