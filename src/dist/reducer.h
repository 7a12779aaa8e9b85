// Gradient averaging of data-parallel training, as PyTorch DDP's Reducer: parameters go into
// buckets of about dist.bucket_mb MiB, the first one at most 1 MiB (in reverse order, the order
// backward produces gradients, one dtype and device per bucket); a gradient hook copies each gradient into its bucket and,
// when the bucket is complete, starts its all-reduce while backward goes on (overlap). finish()
// waits for every bucket and writes the averages back into the parameters' .grad. With
// `one_buffer` (amp.combine_grad) there is one flat buffer per dtype and one all-reduce after
// backward; without `overlap` every bucket is reduced after backward. Internal to src/train.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist/group.h"

namespace amptune::dist {

struct ReducerOptions {
  double bucket_mb = 25;
  bool overlap = true;
  bool one_buffer = false;
};

// Rank 0's values of `buffers` (BatchNorm running statistics) on every rank, one broadcast per
// dtype: what DDP does before each forward (broadcast_buffers=True), so evaluation and
// checkpoints see the same statistics on every rank.
void broadcast_buffers(ProcessGroup& group, const std::vector<torch::Tensor>& buffers);

// Every rank's maximum of each of `amaxes` (FP8 amaxes of one step, the same count in the same
// order on every rank), in place; a NaN on any rank (an overflowed step's) gives NaN, as one
// process taking the maximum over the same tensors would keep it.
void allreduce_amax(ProcessGroup& group, std::vector<float>& amaxes);

// The union over the ranks of `names` (each rank's list; names hold no '\0'), sorted, by one
// all-gather: for sets that should agree but may not (the FP8 slots of a rank that quantised
// nothing in its first step).
std::vector<std::string> union_over_ranks(ProcessGroup& group,
                                          const std::vector<std::string>& names);

class GradReducer {
 public:
  // `params` must outlive the reducer; hooks are removed by the destructor.
  GradReducer(ProcessGroup& group, std::vector<torch::Tensor> params, ReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before each backward.
  void prepare();
  // After backward: starts the buckets not started yet, waits for all, and sets each
  // parameter's .grad to the mean over the ranks (a parameter without a gradient on this rank
  // keeps none). Returns the seconds spent here (communication backward did not hide).
  double finish();

  size_t buckets() const { return buckets_.size(); }

 private:
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;  // in the bucket's flat buffer
    bool ready = false;
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<size_t> params;
    size_t pending = 0;  // parameters whose gradient has not arrived yet
    ProcessGroup::Pending work;
  };
  void on_grad(size_t index, const torch::Tensor& grad);
  void launch(Bucket& bucket);

  ProcessGroup& group_;
  std::vector<torch::Tensor> params_;
  ReducerOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hooks_;  // hook handles by parameter (overlap only)
  bool in_backward_ = false;
};

}  // namespace amptune::dist
