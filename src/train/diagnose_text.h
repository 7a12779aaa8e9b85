// How diagnose's advice texts print numbers (train/diagnose.cpp, train/diagnose_fp8.cpp): one
// rule for both. Internal to train/.
#pragma once

#include <sstream>
#include <string>

namespace amptune::train {

// A share as a percentage of 3 significant digits: "12.5%".
inline std::string percent(double share) {
  std::ostringstream s;
  s.precision(3);
  s << share * 100 << "%";
  return s.str();
}

// A value of 4 significant digits.
inline std::string number(double v) {
  std::ostringstream s;
  s.precision(4);
  s << v;
  return s.str();
}

}  // namespace amptune::train
