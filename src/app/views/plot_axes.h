// Axis ticks shared by the report's gnuplot plots (app/views/report.h) and the live view's SVG
// plots (web/svg.h), so both label an axis the same way: a handful of ticks whatever the range. A
// loss scale that ran from 2^13 down to 2^-31 gets ticks every 8 powers of two (2^16, 2^8, ...
// 2^-32), not all 45 of them. No torch.
#pragma once

#include <string>
#include <vector>

namespace amptune::app {

struct Tick {
  double value = 0;
  std::string label;  // "2^-8", "1e-06", "0.25"
};

// Ticks at powers of two covering [lo, hi] (both > 0; hi >= lo): exponents that are multiples of
// the smallest step of 1, 2, 4, 8, ... that leaves at most `max_ticks` ticks over the range
// widened to whole steps;
// labels "2^k". The first tick is at or below lo, the last at or above hi; a range within one
// step gets a tick a step below and one above it.
std::vector<Tick> log2_ticks(double lo, double hi, int max_ticks = 7);
// The same at powers of ten (steps 1, 2, 3, 5, 10, ... decades), labelled as %g prints them
// ("1e-06", "0.01", "100").
std::vector<Tick> log10_ticks(double lo, double hi, int max_ticks = 7);
// Ticks at 1, 2 or 5 x 10^k covering [lo, hi], at most about `max_ticks`; labels as %g prints
// them with the step's precision. lo == hi gives ticks around the value.
std::vector<Tick> linear_ticks(double lo, double hi, int max_ticks = 6);

}  // namespace amptune::app
