// Classification metrics (acc1, acc5, val_loss) from counts. Counts add up, so the counts of the
// batches of a set, or of shards of a set evaluated apart, combine into the metrics of the whole
// set exactly. Torch-free: the task counts hits per batch, this turns counts into metrics.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace amptune::eval {

struct ClassificationCounts {
  int64_t samples = 0;
  int64_t top1 = 0;      // samples whose highest logit is the label
  int64_t top5 = 0;      // samples whose label is among the 5 highest (all, with <= 5 classes)
  double loss_sum = 0;   // summed cross-entropy (nats)

  ClassificationCounts& operator+=(const ClassificationCounts& other);
  // val_samples always; acc1 and acc5 (percent) and val_loss (mean) when samples > 0.
  std::map<std::string, double> metrics() const;
};

}  // namespace amptune::eval
