// Shared by the state-dict tests (weights_test.cpp, python_interop_test.cpp): a scratch
// directory per test, a narrow ResNet, and the message of an expected ModelError.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "models/resnet.h"
#include "support/scratch.h"

namespace amptune::models {

class ModelsWeights : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }
  amptune::testing::ScratchDir dir_;
};

inline ResNetOptions tiny(int depth = 18) {
  ResNetOptions o;
  o.depth = depth;
  o.num_classes = 7;
  o.width = 0.0625;
  return o;
}

// Runs `body` expecting a ModelError; returns its message.
template <typename F>
std::string model_error(F&& body) {
  try {
    body();
  } catch (const ModelError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ModelError thrown";
  return "";
}

}  // namespace amptune::models
