// When a run has diverged (docs/AMP.md "Divergence"): a rule over the training losses of its
// steps in step order, so the outcome is a property of the steps, not of how they are grouped
// into epochs or of where the run was stopped and continued (`amptune tune` trains candidates to
// a rung and continues them later; every epoch boundary can be a resume).
//
//   static loss scale    the first inf/NaN loss: the inf reached the weights (nothing checks)
//   dynamic loss scale   kMaxNonFiniteLosses inf/NaN losses in a row: each one skips its step
//                        and halves the scale, but the loss is computed before it is scaled,
//                        so a forward pass that overflows is beyond the scale's reach
//
// The state is one number, the streak: the inf/NaN losses in a row so far. A finite loss ends it.
// The trainer records it at the end of every epoch (metric nonfinite_streak, counting earlier
// epochs) and a resumed or forked run starts from the value of the epoch it continues from.
// The scale's value plays no part, not even at its floor (amp.min_loss_scale): whatever the
// scale, it multiplies a loss that is already inf/NaN. Torch-free, header-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace amptune::train {

class DivergenceWatch {
 public:
  // Many times the 16 halvings that bring the dynamic scale from its start (at most 2^16) down
  // to 1, so the run is not stopped while the scale still searches; a few bad batches in a row
  // pass. A forward pass still inf/NaN after that many steps has stopped the training: every
  // step was skipped, the weights did not change.
  static constexpr int64_t kMaxNonFiniteLosses = 100;

  // `streak`: the inf/NaN losses in a row the run continues with (0 from scratch).
  explicit DivergenceWatch(int64_t streak = 0) : streak_(streak) {}

  // One training step's loss, each step once and in order. Returns why the run diverged, or ""
  // to carry on.
  std::string observe(double loss, bool static_scale) {
    if (std::isfinite(loss)) {
      streak_ = 0;
      return "";
    }
    ++streak_;
    if (static_scale) return "train_loss became " + std::to_string(loss) + " (static loss scale)";
    if (streak_ < kMaxNonFiniteLosses) return "";
    return "train_loss was inf/NaN for " + std::to_string(streak_) +
           " steps in a row under dynamic loss scaling (the forward pass itself overflows; "
           "the scale cannot help)";
  }

  // The inf/NaN losses in a row up to the last step observed (0: it was finite).
  int64_t streak() const { return streak_; }

 private:
  int64_t streak_;
};

}  // namespace amptune::train
