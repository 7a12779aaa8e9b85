#include "train/schedule.h"

#include <cmath>

#include "core/settings.h"

namespace amptune::train {

Schedule Schedule::from(const Settings& settings) {
  Schedule s;
  s.lr0 = settings.optim.lr;
  s.policy = settings.schedule.lr_policy;
  s.lr_dec_epoch = settings.schedule.lr_dec_epoch;
  s.lr_dec_factor = settings.schedule.lr_dec_factor;
  s.warmup_epochs = settings.schedule.warmup_epochs;
  s.epochs = settings.schedule.epochs;
  return s;
}

double Schedule::lr_at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  const double spe = static_cast<double>(steps_per_epoch > 0 ? steps_per_epoch : 1);
  const double position = static_cast<double>(epoch) * spe + static_cast<double>(step);
  double lr = lr0;
  if (policy == LrPolicy::kCosine) {
    const double total = static_cast<double>(epochs) * spe;
    lr = 0.5 * lr0 * (1.0 + std::cos(M_PI * position / total));
  } else {
    int decays = 0;
    for (int64_t d : lr_dec_epoch) decays += d <= epoch ? 1 : 0;
    lr = lr0 / std::pow(lr_dec_factor, decays);
  }
  const double warmup_steps = warmup_epochs * spe;
  if (warmup_steps > 0 && position < warmup_steps) lr *= (position + 1.0) / warmup_steps;
  return lr;
}

}  // namespace amptune::train
