#include "eval/classification_metrics.h"

namespace amptune::eval {

ClassificationCounts& ClassificationCounts::operator+=(const ClassificationCounts& other) {
  samples += other.samples;
  top1 += other.top1;
  top5 += other.top5;
  loss_sum += other.loss_sum;
  return *this;
}

std::map<std::string, double> ClassificationCounts::metrics() const {
  std::map<std::string, double> m;
  m["val_samples"] = static_cast<double>(samples);
  if (samples > 0) {
    const double n = static_cast<double>(samples);
    m["acc1"] = 100.0 * static_cast<double>(top1) / n;
    m["acc5"] = 100.0 * static_cast<double>(top5) / n;
    m["val_loss"] = loss_sum / n;
  }
  return m;
}

}  // namespace amptune::eval
