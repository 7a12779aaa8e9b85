// casts.int32: named tensors that go through int32 and back (truncation toward zero) at the
// place the ported RootNet code cast them (docs/ROOTNET.md "Cast points"; the table:
// train/cast_points.h).
//   train: k_value (batch field k_value before the model), target_coord (coord before the loss),
//          target_vis (vis), have_depth (have_depth), bbox (the batch's processed box);
//   test:  cam_param (the test-time k value, field k_value, before the model), test_bbox (the
//          box used for back-projection, field bbox).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <torch/types.h>

namespace amptune::train {

// All cast point names, train side first.
const std::vector<std::string>& int32_cast_points();

class Int32Casts {
 public:
  Int32Casts() = default;
  // `names`: casts.int32 (CastSettings::int32). Throws ConfigError naming casts.int32 and the
  // known names for an unknown name.
  explicit Int32Casts(const std::vector<std::string>& names);

  bool has(const std::string& name) const { return names_.count(name) > 0; }
  // Applies the train (`train` true) or test cast points to a batch's fields in place; fields a
  // point names but the batch lacks are left alone.
  void apply(std::map<std::string, torch::Tensor>& fields, bool train) const;

 private:
  std::set<std::string> names_;
};

// t -> int32 -> t's dtype (truncation toward zero): 9976.3063 -> 9976, -1.7 -> -1.
torch::Tensor int32_roundtrip(const torch::Tensor& t);

}  // namespace amptune::train
