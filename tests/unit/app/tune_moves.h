// What the tests of the tune rules (tune_test.cpp, tune_fp8_test.cpp) share: moves as text.
#pragma once

#include <string>
#include <vector>

#include "app/tune/tune_rules.h"

namespace amptune::app {

// "move key=value key=value" per move, in order.
inline std::vector<std::string> describe(const std::vector<TuneMove>& moves) {
  std::vector<std::string> out;
  for (const TuneMove& m : moves) {
    std::string line = to_string(m.move);
    for (const auto& [key, value] : m.change) line += " " + key + "=" + flow_yaml(value);
    out.push_back(line);
  }
  return out;
}

}  // namespace amptune::app
