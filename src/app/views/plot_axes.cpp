#include "app/views/plot_axes.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "app/views/table.h"

namespace amptune::app {
namespace {

// Ticks at base^k for k multiples of a step, covering [lo, hi].
std::vector<Tick> power_ticks(double lo, double hi, int max_ticks, double base) {
  const double log_base = std::log(base);
  const long first = static_cast<long>(std::floor(std::log(lo) / log_base + 1e-9));
  const long last = static_cast<long>(std::ceil(std::log(hi) / log_base - 1e-9));
  // Steps a reader counts in: powers of two on a log2 axis, 1-2-3-5 x 10^k on a log10 one.
  const std::vector<long> steps = base == 2 ? std::vector<long>{1, 2, 4, 8, 16, 32, 64, 128, 256}
                                            : std::vector<long>{1, 2, 3, 5, 10, 20, 50, 100};
  auto count = [&](long s) {
    const long a = static_cast<long>(std::floor(static_cast<double>(first) / s));
    const long b = static_cast<long>(std::ceil(static_cast<double>(last) / s));
    return b - a + 1;
  };
  long step = steps.back();
  for (long s : steps) {
    if (count(s) <= std::max(max_ticks, 2)) {
      step = s;
      break;
    }
  }
  std::vector<Tick> ticks;
  long a = static_cast<long>(std::floor(static_cast<double>(first) / step));
  long b = static_cast<long>(std::ceil(static_cast<double>(last) / step));
  if (a == b) --a, ++b;  // one value: a tick below and above it, so the axis has a range
  for (long i = a; i <= b; ++i) {
    const long k = i * step;
    const double value = std::pow(base, static_cast<double>(k));
    ticks.push_back({value, base == 2 ? "2^" + std::to_string(k) : significant(value, 6)});
  }
  return ticks;
}

}  // namespace

std::vector<Tick> log2_ticks(double lo, double hi, int max_ticks) {
  return power_ticks(lo, hi, max_ticks, 2);
}

std::vector<Tick> log10_ticks(double lo, double hi, int max_ticks) {
  return power_ticks(lo, hi, max_ticks, 10);
}

std::vector<Tick> linear_ticks(double lo, double hi, int max_ticks) {
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(max_ticks - 1, 1);
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<Tick> ticks;
  const double first = std::floor(lo / step + 1e-9) * step;
  for (double v = first; v <= hi + step * 0.999; v += step) {
    const double value = std::abs(v) < step * 1e-9 ? 0 : v;  // no "-1.38778e-17" for zero
    ticks.push_back({value, significant(value, 6)});
  }
  return ticks;
}

}  // namespace amptune::app
