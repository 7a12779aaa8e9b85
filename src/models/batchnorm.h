// Synchronised BatchNorm (dist.sync_bn, as PyTorch's SyncBatchNorm) without any distributed code:
// the caller hands in the cross-rank sum (a c10d all-reduce, say) as a plain callable.
//
// Every BatchNorm call in src/models goes through batch_norm(). With no ScopedBatchNormSync alive
// on the calling thread, or a module in eval mode, it is exactly bn.forward(x). Otherwise (training
// mode) it normalises with statistics over the batches of ALL ranks, so that 2 ranks x batch B/2
// give what 1 rank x batch B gives:
//   1. local [sum_c x, count] (fp64) -> cross-rank sum -> global mean (count n = sum of N*H*W)
//   2. local sum_c (x - mean)^2 (fp32) -> cross-rank sum -> biased variance (normalisation)
//   y = (x - mean) / sqrt(var + eps) * weight + bias, computed in fp32, returned in x's dtype.
// Both sums are the autograd function cross_rank_sum, whose backward sums the incoming gradient
// over ranks with the same callable, so input gradients are those of the sum of all ranks' losses
// and weight/bias gradients are this rank's share (summing them over ranks, as DDP's all-reduce
// does before averaging, gives the single-process gradient).
//
// Calls of the callable: 2 per BatchNorm forward in training mode, and 2 more per BatchNorm in
// the backward pass when x requires grad (none when it does not). Every rank must therefore run
// the same layers in the same order, with or without grad alike; the backward calls come in the
// autograd engine's order, which is the same on every rank for the same graph. The callable is
// shared with the autograd graph, so backward() may run after the scope has ended (and on
// whichever thread the engine chooses).
//
// Running statistics follow torch's BatchNorm from bn.options: num_batches_tracked += 1, factor =
// momentum, or 1 / num_batches_tracked when momentum is null (cumulative average);
// running_mean <- (1 - f) running_mean + f mean, running_var <- (1 - f) running_var + f var n/(n-1)
// with n the GLOBAL count. affine(false): no weight/bias. track_running_stats(false): global batch
// statistics in training mode, no buffers to update (in eval mode bn.forward uses this rank's
// batch statistics, as PyTorch's SyncBatchNorm does). A global count of 1 per channel throws
// ModelError on every rank (torch refuses one value per channel), and so does an input that is
// not [N, C, H, W]; the buffers are then left as they were.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

#include <functional>
#include <memory>

namespace amptune::models {

// A plain (non-autograd) sum of a tensor over all ranks, e.g. a c10d all-reduce: it may sum in
// place and return its argument, or return a new tensor of the same shape, dtype and device. It
// receives a tensor of its own (never one the caller keeps). Must be called by every rank in the
// same order.
using CrossRankSum = std::function<torch::Tensor(const torch::Tensor&)>;

// While alive on this thread, BatchNorm layers called through batch_norm() in training mode
// normalise with statistics over every rank's batch. Not nestable: constructing a second one on
// the same thread throws std::logic_error, as does an empty callable. Thread-local, like
// amp::ScopedPolicy.
class ScopedBatchNormSync {
 public:
  explicit ScopedBatchNormSync(CrossRankSum sum);
  ~ScopedBatchNormSync();
  ScopedBatchNormSync(const ScopedBatchNormSync&) = delete;
  ScopedBatchNormSync& operator=(const ScopedBatchNormSync&) = delete;

 private:
  std::shared_ptr<const CrossRankSum> sum_;
};

// True while a ScopedBatchNormSync is alive on this thread.
bool batch_norm_sync_active();

// bn.forward(x), or the synchronised version when a ScopedBatchNormSync is alive on this thread
// and bn is training. x: [N, C, H, W] with C = bn.options.num_features(). Also the module's
// mixed-precision boundary (amp/emulate.h): a ModuleCall (amp.fp32_modules, observation), and
// the output as an op in its input's dtype (amp::input_dtype_op); `fp32_input`: x came out of a
// module running in fp32.
torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                         bool fp32_input = false);

}  // namespace amptune::models
