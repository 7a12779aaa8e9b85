// The processes of one data-parallel job (docs/DISTRIBUTED.md): where this one stands
// (launch::LaunchEnv) and the rendezvous they share: a c10d TCPStore that rank 0 serves, or for --nproc a
// c10d FileStore in the launcher's private directory (nothing listens on a port). Over it the
// leader (rank 0) tells the others which run they train next; each run then builds its own
// process group (dist/group.h) with the run's dist.* settings. No torch in this header: the
// app and CLI layers hold a Cluster.
//
//   auto cluster = dist::Cluster::join(launch::detect_launch());
//   leader:    cluster->publish(message) ...        followers: cluster->receive() ...
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launch/launch.h"

namespace amptune::dist {

// What this build can run on: a c10d Gloo process group (CPU), NCCL (CUDA). Both are detected
// when amptune is configured (libgloo-dev headers, LibTorch's USE_C10D_GLOO / USE_C10D_NCCL).
bool have_gloo();
bool have_nccl();

class Cluster {
 public:
  // Meets every process of `env` at env.master_addr:env.master_port (rank 0 serves the store and
  // waits up to `timeout_seconds` for the others), or in env.rendezvous_file when it is set. Throws EnvironmentError when this build has
  // no c10d process group, naming what is missing, or when the port cannot be served;
  // RankLostError when the others do not arrive in time.
  static std::unique_ptr<Cluster> join(const launch::LaunchEnv& env, double timeout_seconds = 300);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  const launch::LaunchEnv& env() const { return env_; }
  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  bool leader() const { return env_.rank == 0; }

  // The control channel. The leader publishes numbered messages; every other rank receives
  // them in order, waiting as long as the leader's store answers. Throws RankLostError naming
  // the leader when it is gone.
  void publish(const std::string& message);
  std::string receive();
  // Leader: waits until every other rank has received every message published (its store
  // must outlive their last receive()), at most `timeout_seconds`; false when one did not.
  bool await_receipt(double timeout_seconds);

  // A name for the next process group on this cluster's store; every rank creates its groups
  // in the same order, so the names agree.
  std::string next_group_name() { return "group" + std::to_string(groups_++); }

  // "rank 1 (pid 4242 on node07)", as each process recorded itself when it joined.
  std::string describe_rank(int rank) const;
  // Who `rank` lost when a collective failed: the other rank of two, or the others.
  std::string peers_of(int rank) const;

  class Impl;  // the c10d store (dist/cluster_impl.h)
  Impl& impl() { return *impl_; }

 private:
  Cluster(const launch::LaunchEnv& env, std::unique_ptr<Impl> impl);
  launch::LaunchEnv env_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::string> processes_;  // "pid P on H" by rank
  int64_t sent_ = 0, received_ = 0, groups_ = 0;
};

}  // namespace amptune::dist
