// A c10d process group for one run (docs/DISTRIBUTED.md): Gloo over CPU tensors, NCCL over CUDA
// tensors, built over the cluster's store with the run's dist.* settings. Every operation is
// collective - all ranks call it, in the same order - and throws RankLostError naming the
// lost rank when a peer is gone or dist.timeout_s passes; an error of the operation itself is an
// EnvironmentError naming it and the tensor. Every dtype a module can hold goes through: one the
// backend does not carry (Gloo: bool, bfloat16, ...) is broadcast as its bytes and summed in
// float32. Internal to src/dist and src/train.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/words.h"
#include "dist/cluster.h"

namespace amptune::dist {

// kGloo or kNccl for dist.backend `backend` on `device` (auto: nccl on CUDA, gloo on a CPU).
// Throws ConfigError for nccl without a CUDA device or without NCCL in this build,
// EnvironmentError for gloo without it.
DistBackend resolve_backend(DistBackend backend, const torch::Device& device);

class ProcessGroup {
 public:
  enum class Op { kSum, kMin, kMax };

  // `name` keeps the keys of this group apart from others on the same store (one per run).
  ProcessGroup(Cluster& cluster, const std::string& name, DistBackend backend,
               double timeout_seconds, const torch::Device& device);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  DistBackend backend() const { return backend_; }  // kGloo or kNccl
  const torch::Device& device() const { return device_; }

  // An all-reduce in flight; wait() blocks until it is done (or throws RankLostError).
  class Pending {
   public:
    Pending();
    ~Pending();
    Pending(Pending&&) noexcept;
    Pending& operator=(Pending&&) noexcept;
    void wait();
    bool started() const;

   private:
    friend class ProcessGroup;
    struct Work;
    std::unique_ptr<Work> work_;
    const ProcessGroup* group_ = nullptr;
  };

  // Sums `tensor` in place over the ranks, asynchronously.
  Pending allreduce_async(torch::Tensor& tensor);
  void allreduce(torch::Tensor& tensor, Op op = Op::kSum);
  // Every rank gets rank `root`'s tensor (same shape and dtype everywhere).
  void broadcast(torch::Tensor& tensor, int root = 0);
  // Every rank gets rank `root`'s bytes (any length).
  void broadcast_bytes(std::string& bytes, int root = 0);
  // Every rank's bytes, by rank.
  std::vector<std::string> allgather_bytes(const std::string& mine);

  // Rethrows a collective's failure as RankLostError naming who this rank lost.
  [[noreturn]] void lost(const std::exception& e) const;

 private:
  // A collective `op` of the tensor `what` failed with `e`: lost() when it was submitted and `e`
  // is a lost peer's failure (transport, timeout), else EnvironmentError naming the operation and
  // the tensor - an error of the collective is never reported as a lost rank.
  [[noreturn]] void failed(const std::string& op, const std::string& what, const std::exception& e,
                           bool submitted) const;
  // `tensor`, or a float32 copy of it when the backend does not sum its dtype (bfloat16).
  // EnvironmentError for a dtype that has no sum (bool, complex).
  torch::Tensor summable(const torch::Tensor& tensor, const std::string& op) const;

  class Impl;
  Cluster& cluster_;
  DistBackend backend_;
  torch::Device device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amptune::dist
