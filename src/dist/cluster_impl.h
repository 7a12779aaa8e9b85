// Internal to src/dist: the c10d store behind a Cluster.
#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/cluster.h"

namespace amptune::dist {

class Cluster::Impl {
 public:
  c10::intrusive_ptr<c10d::Store> store;
  std::chrono::milliseconds timeout{300000};
  int leader_pid = 0;  // a file store's leader (same machine), watched while receiving; else 0
};

}  // namespace amptune::dist
