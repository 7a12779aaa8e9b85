// The tiny run configuration unit tests build and train: ResNet-18 at width 1/16 with the
// small-input stem, for the 4 classes of 1-channel images of tiny_data.h; plain SGD on the CPU.
// Tests that train add the data.* and schedule.* keys; a test that needs another value sets it.
#pragma once

#include "core/config.h"

namespace amptune::testing {

inline Config tiny_config() {
  Config c;
  c.set("model.name", "resnet18");
  c.set("model.num_classes", 4);
  c.set("model.in_channels", 1);
  c.set("model.width", 0.0625);
  c.set("model.small_input", true);
  c.set("optim.name", "sgd");
  c.set("optim.lr", 0.05);
  c.set("device", "cpu");
  return c;
}

}  // namespace amptune::testing
