// Synchronised BatchNorm: statistics over every rank's batch through a caller-given sum.
#include "models/batchnorm.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <sstream>
#include <stdexcept>
#include <utility>

#include "amp/emulate.h"
#include "core/error.h"

namespace amptune::models {
namespace {

// The callable of the ScopedBatchNormSync alive on this thread, or null.
thread_local std::shared_ptr<const CrossRankSum> t_sum;

// Holds the callable in the autograd context, so backward() can run after the scope has ended.
// saved_data takes IValues only; a capsule carries an arbitrary refcounted object without
// registering a TorchScript class.
struct SumHolder : torch::CustomClassHolder {
  explicit SumHolder(std::shared_ptr<const CrossRankSum> s) : sum(std::move(s)) {}
  std::shared_ptr<const CrossRankSum> sum;
};

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// Hands the callable a copy of its own (an all-reduce sums in place; `t` may be a gradient that
// autograd shares with other paths) and checks what comes back.
torch::Tensor call_sum(const CrossRankSum& sum, const torch::Tensor& t) {
  torch::Tensor out = sum(t.detach().clone(torch::MemoryFormat::Contiguous));
  if (!out.defined() || out.sizes() != t.sizes() || out.scalar_type() != t.scalar_type() ||
      out.device() != t.device()) {
    throw ModelError("sync BatchNorm: the cross-rank sum of a " + shape_of(t) + " " +
                     std::string(c10::toString(t.scalar_type())) +
                     " tensor must return one of the same shape, dtype and device, got " +
                     (out.defined() ? shape_of(out) + " " + c10::toString(out.scalar_type())
                                    : std::string("an undefined tensor")));
  }
  return out;
}

// y = sum over ranks of x; dL/dx = sum over ranks of dL/dy (every rank's loss depends on the
// same y, so the gradient of the total loss with respect to this rank's x gathers all of them).
struct CrossRankSumFunction : torch::autograd::Function<CrossRankSumFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                               const c10::intrusive_ptr<SumHolder>& holder) {
    ctx->saved_data["sum"] = c10::IValue::make_capsule(holder);
    return call_sum(*holder->sum, local);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    // Gradients are materialised (zeros for an unused output), so every rank calls the sum here.
    auto holder =
        c10::static_intrusive_pointer_cast<SumHolder>(ctx->saved_data.at("sum").toCapsule());
    return {call_sum(*holder->sum, grad[0]), torch::Tensor()};
  }
};

torch::Tensor cross_rank_sum(const torch::Tensor& local,
                             const c10::intrusive_ptr<SumHolder>& holder) {
  return CrossRankSumFunction::apply(local, holder);
}

torch::Tensor synchronised(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                           std::shared_ptr<const CrossRankSum> sum) {
  const auto& o = bn.options;
  const int64_t c = o.num_features();
  if (x.dim() != 4 || x.size(1) != c) {
    throw ModelError("sync BatchNorm: expected an input [N, " + std::to_string(c) +
                     ", H, W], got " + shape_of(x));
  }
  auto holder = c10::make_intrusive<SumHolder>(std::move(sum));
  const auto per_channel = [c](const torch::Tensor& t) { return t.view({1, c, 1, 1}); };

  // Pass 1: global count and sum -> mean. fp64 on the wire keeps the count exact past 2^24.
  const torch::Tensor x32 = x.to(torch::kFloat);
  const double local_count = c > 0 ? static_cast<double>(x.numel() / c) : 0.0;
  const torch::Tensor local =
      torch::cat({x32.sum({0, 2, 3}).to(torch::kDouble),
                  torch::full({1}, local_count, x32.options().dtype(torch::kDouble))});
  const torch::Tensor global = cross_rank_sum(local, holder);
  // Every rank sees the same n, so all refuse together (none is left waiting in a sum).
  const double n = global[c].item<double>();
  if (!(n > 1)) {
    throw ModelError(
        "sync BatchNorm: expected more than 1 value per channel over all ranks when "
        "training, got " +
        std::to_string(static_cast<int64_t>(n)) + " (this rank's input " + shape_of(x) + ")");
  }
  const torch::Tensor mean = (global.narrow(0, 0, c) / n).to(torch::kFloat);

  // Pass 2: global sum of squared deviations from the global mean -> biased variance. Two passes
  // avoid E[x^2] - E[x]^2, which cancels badly when |mean| >> std.
  const torch::Tensor centred = x32 - per_channel(mean);
  const torch::Tensor sq = cross_rank_sum(centred.square().sum({0, 2, 3}), holder);
  const torch::Tensor var = sq / n;

  torch::Tensor y = centred * per_channel(torch::rsqrt(var + o.eps()));
  if (o.affine()) {
    y = y * per_channel(bn.weight.to(torch::kFloat)) + per_channel(bn.bias.to(torch::kFloat));
  }

  // Running statistics as torch's BatchNormImplBase::forward and the batch_norm kernel, with the
  // global count. Updated only after both sums succeeded.
  if (o.track_running_stats()) {
    torch::NoGradGuard no_grad;
    double factor = o.momentum().value_or(0.0);
    if (bn.num_batches_tracked.defined()) {
      bn.num_batches_tracked += 1;
      if (!o.momentum()) factor = 1.0 / bn.num_batches_tracked.item<double>();
    }
    const torch::Tensor unbiased = sq.detach() / (n - 1);
    bn.running_mean.copy_(mean.detach() * factor +
                          bn.running_mean.to(torch::kFloat) * (1.0 - factor));
    bn.running_var.copy_(unbiased * factor + bn.running_var.to(torch::kFloat) * (1.0 - factor));
  }
  return y.to(x.scalar_type());
}

}  // namespace

ScopedBatchNormSync::ScopedBatchNormSync(CrossRankSum sum) {
  if (t_sum) throw std::logic_error("ScopedBatchNormSync is not nestable: one is already alive");
  if (!sum) throw std::logic_error("ScopedBatchNormSync needs a cross-rank sum, got an empty one");
  sum_ = std::make_shared<const CrossRankSum>(std::move(sum));
  t_sum = sum_;
}

ScopedBatchNormSync::~ScopedBatchNormSync() { t_sum.reset(); }

bool batch_norm_sync_active() { return t_sum != nullptr; }

torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& in,
                         bool fp32_input) {
  amp::ModuleCall call(bn);  // amp.fp32_modules, observation (amp/emulate.h)
  const torch::Tensor x = call.input(in);
  torch::Tensor y = !t_sum || !bn.is_training() ? bn.forward(x) : synchronised(bn, x, t_sum);
  // An op in its input's dtype (emulation rounds, unless the input was fp32 under O1); y is
  // BatchNorm's fresh output, which its backward does not read: rounded in place.
  return call.output(amp::input_dtype_op_(y, fp32_input || amp::fp32_module(bn)));
}

}  // namespace amptune::models
