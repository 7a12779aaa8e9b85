// train/diagnose.h forward_work: the multiply-accumulates of one training sample's forward
// pass, in all and in fp32, counted through LibTorch's RecordFunction callbacks (MFU, and the
// objective "precision" of amptune tune).
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "amp/emulate.h"
#include "amp/fp8.h"
#include "amp/fp8_gemm.h"
#include "amp/module_marks.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "train/diagnose.h"
#include "train/task.h"

namespace amptune::train {

namespace {

// The multiply-accumulates of a graph's ops, seen through LibTorch's RecordFunction callbacks (as
// its profiler sees them), whatever wrote the graph: amptune's models, a TorchScript file, a
// functional call in either. An op of the table below is counted from its operands' shapes, and
// the ops it calls in turn (linear's addmm, matmul's bmm, lstm's linear, a convolution's
// backend) are not counted again. An op the table does not name is not counted itself; the
// table's ops it calls are (einsum's bmm, a cell written in Python). The fused kernels of
// attention and transformer layers, oneDNN's RNN and quantized kernels count through the
// table's ops they call, if any; one that computed with none of them (its products inside its
// own kernel) is named in ForwardWork::uncounted.
enum class OpClass {
  kOther,
  kConv,
  kConvTranspose,
  kConvolution,
  kLinear,
  kMatmul,
  kMm,
  kBmm,
  kAddmm,
  kBaddbmm,
  kMv,
  kAddmv,
  kDot,
  kAddr,
  kRnn,
  kRnnCell,
  kAttention,
  kOpaque
};

OpClass op_class(const char* qualified) {
  static const std::map<std::string, OpClass> table = {
      {"conv1d", OpClass::kConv},
      {"conv2d", OpClass::kConv},
      {"conv3d", OpClass::kConv},
      {"conv_transpose1d", OpClass::kConvTranspose},
      {"conv_transpose2d", OpClass::kConvTranspose},
      {"conv_transpose3d", OpClass::kConvTranspose},
      {"convolution", OpClass::kConvolution},
      {"_convolution", OpClass::kConvolution},
      {"linear", OpClass::kLinear},
      {"matmul", OpClass::kMatmul},
      {"mm", OpClass::kMm},
      {"bmm", OpClass::kBmm},
      {"addmm", OpClass::kAddmm},
      {"_addmm_activation", OpClass::kAddmm},
      {"baddbmm", OpClass::kBaddbmm},
      {"addbmm", OpClass::kBaddbmm},
      {"mv", OpClass::kMv},
      {"addmv", OpClass::kAddmv},
      {"dot", OpClass::kDot},
      {"vdot", OpClass::kDot},
      {"addr", OpClass::kAddr},
      {"lstm", OpClass::kRnn},
      {"gru", OpClass::kRnn},
      {"rnn_tanh", OpClass::kRnn},
      {"rnn_relu", OpClass::kRnn},
      {"lstm_cell", OpClass::kRnnCell},
      {"gru_cell", OpClass::kRnnCell},
      {"rnn_tanh_cell", OpClass::kRnnCell},
      {"rnn_relu_cell", OpClass::kRnnCell},
      {"scaled_dot_product_attention", OpClass::kAttention},
      {"_native_multi_head_attention", OpClass::kOpaque},
      {"_transformer_encoder_layer_fwd", OpClass::kOpaque},
      {"_thnn_fused_lstm_cell", OpClass::kOpaque},
      {"_thnn_fused_gru_cell", OpClass::kOpaque},
      {"mkldnn_rnn_layer", OpClass::kOpaque},
      {"mkldnn_linear", OpClass::kOpaque},
      {"_cudnn_rnn", OpClass::kOpaque},
      {"miopen_rnn", OpClass::kOpaque},
      {"_scaled_mm", OpClass::kOpaque},
      {"_int_mm", OpClass::kOpaque}};
  std::string name = qualified ? qualified : "";
  if (name.rfind("aten::", 0) != 0) return OpClass::kOther;
  name.erase(0, 6);
  if (const auto it = table.find(name); it != table.end()) return it->second;
  if (name.rfind("_scaled_dot_product_", 0) == 0 || name.rfind("quantized_", 0) == 0 ||
      name.rfind("fbgemm_", 0) == 0) {
    return OpClass::kOpaque;
  }
  return OpClass::kOther;
}

// The tensor at `i` of an op's operands or results (an ArrayRef or a vector of IValues); null
// when there is none there.
template <typename Values>
const at::Tensor* tensor_at(const Values& values, size_t i) {
  return i < values.size() && values[i].isTensor() && values[i].toTensor().defined()
             ? &values[i].toTensor()
             : nullptr;
}

double numel(const at::Tensor* t) { return t ? static_cast<double>(t->numel()) : 0.0; }
double size(const at::Tensor* t, int64_t dim) {
  return t && t->dim() > 0 ? static_cast<double>(t->size(dim)) : 0.0;
}
// The rows a sequence op or a cell computes: its input's elements over its features.
double rows(const at::Tensor* x) {
  return x && x->dim() > 0 && x->size(-1) > 0 ? numel(x) / size(x, -1) : 0.0;
}
// The multiply-accumulates per output of a convolution's weight [out, in / groups, k...]: the
// input channels of a group x the kernel; of a transposed one's [in, out / groups, k...], the
// outputs each input element feeds.
double per_row(const at::Tensor* w) { return w && w->dim() > 0 ? numel(w) / size(w, 0) : 0.0; }

// The multiply-accumulates of one call of an op of class `c` with these operands: `macs`, plus
// `per_output` x the elements of its result where the result's size is the simpler way (a
// convolution's padding and strides, matmul's broadcasting).
struct OpWork {
  double macs = 0;
  double per_output = 0;
};
OpWork op_work(OpClass c, c10::ArrayRef<const c10::IValue> in) {
  switch (c) {
    case OpClass::kConv:  // (input, weight, ...): each output takes in / groups x kernel
      return {0, per_row(tensor_at(in, 1))};
    case OpClass::kConvTranspose:  // each input element feeds out / groups x kernel outputs
      return {numel(tensor_at(in, 0)) * per_row(tensor_at(in, 1)), 0};
    case OpClass::kConvolution: {  // (input, weight, bias, stride, padding, dilation, transposed,
                                   //  ...)
      const bool transposed = in.size() > 6 && in[6].isBool() && in[6].toBool();
      if (transposed) return {numel(tensor_at(in, 0)) * per_row(tensor_at(in, 1)), 0};
      return {0, per_row(tensor_at(in, 1))};
    }
    case OpClass::kLinear:  // (input [..., in], weight [out, in]): each row x the weight
      return {rows(tensor_at(in, 0)) * numel(tensor_at(in, 1)), 0};
    case OpClass::kMatmul:  // each output takes a's last dimension (broadcasting: the output's)
      return {0, size(tensor_at(in, 0), -1)};
    case OpClass::kMm:  // a [n, k] x b [k, m]
    case OpClass::kBmm:
      return {numel(tensor_at(in, 0)) * size(tensor_at(in, 1), -1), 0};
    case OpClass::kAddmm:  // (bias, a, b)
    case OpClass::kBaddbmm:
      return {numel(tensor_at(in, 1)) * size(tensor_at(in, 2), -1), 0};
    case OpClass::kMv:
    case OpClass::kDot:
      return {numel(tensor_at(in, 0)), 0};
    case OpClass::kAddmv:
      return {numel(tensor_at(in, 1)), 0};
    case OpClass::kAddr:  // (self, u, v): the outer product's elements
      return {numel(tensor_at(in, 1)) * numel(tensor_at(in, 2)), 0};
    case OpClass::kRnn: {
      // lstm / gru / rnn_*: (input, hx, params, ...) or, packed, (data, batch_sizes, hx,
      // params, ...). Every weight matrix of every layer and direction (input-hidden,
      // hidden-hidden, LSTM's projection) is applied once per row of the sequence: the
      // sequence's rows (steps x batch) x the elements of its 2-D parameters. The parameter
      // list is the last tensor list.
      double weights = 0;
      for (auto it = in.rbegin(); it != in.rend(); ++it) {
        if (!it->isTensorList()) continue;
        for (const at::Tensor& w : it->toTensorList().vec()) {
          if (w.defined() && w.dim() == 2) weights += static_cast<double>(w.numel());
        }
        break;
      }
      return {rows(tensor_at(in, 0)) * weights, 0};
    }
    case OpClass::kRnnCell:  // (input, hx, w_ih, w_hh, b_ih, b_hh)
      return {rows(tensor_at(in, 0)) * (numel(tensor_at(in, 2)) + numel(tensor_at(in, 3))), 0};
    case OpClass::kAttention: {  // (query [..., L, E], key [..., S, E], value [..., S, Ev])
      const at::Tensor* q = tensor_at(in, 0);
      const double s = size(tensor_at(in, 1), -2);
      return {rows(q) * s * (size(q, -1) + size(tensor_at(in, 2), -1)), 0};
    }
    default:
      return {};
  }
}

// The last `n` of `values`: a call from the TorchScript interpreter (a boxed call) hands
// RecordFunction its whole stack, the op's operands (and, after it, its results) on top.
c10::ArrayRef<const c10::IValue> last(c10::ArrayRef<const c10::IValue> values, size_t n) {
  return values.size() > n ? values.slice(values.size() - n) : values;
}

// The count of one forward pass on this thread (forward_work installs it).
struct OpCount {
  double macs = 0, fp32_macs = 0, fp8_macs = 0;
  bool all_fp32 = false;
  bool fp8_next = false;  // the recipe just quantised a GEMM's operands: the next product is FP8
  int depth = 0;  // open calls of counted ops (and of the ops they call)
  std::set<std::string> uncounted;
};
thread_local OpCount* t_count = nullptr;

struct CountedCall : at::ObserverContext {
  bool counted = false;  // false: an op called by a counted one, or a fused one (below)
  bool fp32 = false;
  bool fp8 = false;
  OpWork work;
  bool fused = false;         // an op of kOpaque: not counted itself, nor does it hide its calls
  double macs_before = 0;     // the count when it began: unchanged at its end, it was opaque
};

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  OpCount* count = t_count;
  if (!count) return nullptr;
  if (count->depth > 0) {
    ++count->depth;
    return std::make_unique<CountedCall>();
  }
  const OpClass c = op_class(fn.name());
  if (c == OpClass::kOther) return nullptr;
  if (c == OpClass::kOpaque) {
    // Its kernel may compute through the table's ops (LibTorch 1.13's CPU multi-head attention
    // calls addmm and bmm), which count as they run; named only when none of them did.
    auto call = std::make_unique<CountedCall>();
    call->fused = true;
    call->macs_before = count->macs;
    return call;
  }
  ++count->depth;
  auto call = std::make_unique<CountedCall>();
  call->counted = true;
  call->fp32 = count->all_fp32 || amp::in_marked_module();
  call->fp8 = count->fp8_next;
  count->fp8_next = false;
  // The operands now: a boxed call's stack holds the results, not them, once the op has run.
  call->work = op_work(c, last(fn.inputs(), fn.num_inputs()));
  return call;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  OpCount* count = t_count;
  if (!count || !context) return;
  const auto* call = static_cast<const CountedCall*>(context);
  if (call->fused) {
    if (count->macs == call->macs_before) count->uncounted.insert(fn.name());
    return;
  }
  --count->depth;
  if (!call->counted) return;
  double macs = call->work.macs;
  if (call->work.per_output > 0) {
    const std::vector<c10::IValue>& results = fn.outputs();
    const auto out =
        last(c10::ArrayRef<const c10::IValue>(results.data(), results.size()), fn.num_outputs());
    macs += numel(tensor_at(out, 0)) * call->work.per_output;
  }
  count->macs += macs;
  if (call->fp32) count->fp32_macs += macs;
  if (call->fp8) count->fp8_macs += macs;
}

// Counts the ops this thread runs while alive.
class ScopedOpCount {
 public:
  explicit ScopedOpCount(OpCount& count) : previous_(t_count) {
    t_count = &count;
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(on_op_start, on_op_end)
                                             .needsInputs(true)
                                             .needsOutputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
  }
  ~ScopedOpCount() {
    at::removeCallback(handle_);
    t_count = previous_;
  }
  ScopedOpCount(const ScopedOpCount&) = delete;
  ScopedOpCount& operator=(const ScopedOpCount&) = delete;

 private:
  OpCount* previous_;
  at::CallbackHandle handle_ = 0;
};

// The multiply-accumulates that run as FP8 GEMMs (0 without amp.fp8.enabled). Which products
// those are is the recipe's (amp/fp8_gemm.h: modules kept out, fp32 regions, the ops it takes):
// the same forward pass under the run's policy, where the recipe reports each GEMM's operands to
// the scaling state's observer just before the product runs. Its GEMMs emulated whatever
// amp.fp8.gemm says: the same products, counted as the ops they are (a scripted linear under
// scaled_mm hands its op empty stand-ins), on any LibTorch.
double fp8_macs(const Settings& settings, Task& task, const data::Batch& sample) {
  amp::Policy policy = amp::resolve_policy(settings.amp, /*on_cuda=*/false);
  if (!policy.fp8.enabled) return 0;
  policy.fp8.scaled_mm = false;
  torch::nn::Module& model = task.module();
  auto state = std::make_shared<amp::Fp8State>(amp::fp8_scaling(policy.fp8));
  state->set_observer(std::make_shared<const amp::Fp8Observer>(
      [](const std::string&, amp::Fp8Role role, const torch::Tensor&, float, amp::Fp8Format) {
        if (t_count && role != amp::Fp8Role::kGradOutput) t_count->fp8_next = true;
      }));
  OpCount count;
  {
    amp::ScopedPolicy scoped(policy);
    amp::ScopedModules modules(std::make_shared<const amp::ModuleMap>(
        model, settings.amp.fp32_modules, policy.fp8.skip_modules));
    amp::ScopedFp8 fp8(state, /*record=*/false);
    ScopedOpCount counting(count);
    model.eval();
    task.train_loss(sample, torch::Device(torch::kCPU));
  }
  return count.fp8_macs;
}

}  // namespace

ForwardWork forward_work(const Config& config) {
  const Settings settings = Settings::from(config);
  return forward_work(
      settings, data::make_dataset(settings.data, settings.rootnet, settings.model,
                                   data::Split::kTrain));
}

ForwardWork forward_work(const Settings& settings,
                         const std::shared_ptr<const data::Dataset>& train_set) {
  torch::manual_seed(static_cast<uint64_t>(settings.seed));
  const std::unique_ptr<Task> task = make_task(settings);
  torch::nn::Module& model = task->module();
  // The marks of amp.fp32_modules (a glob that matches nothing is a ConfigError here too).
  const auto modules = std::make_shared<const amp::ModuleMap>(model, settings.amp.fp32_modules);
  data::LoaderOptions opts =
      data::loader_options(settings.data, settings.seed, data::Split::kTrain, 0);
  opts.batch_size = 1;
  opts.drop_last = false;
  opts.shuffle = false;
  opts.workers = 0;
  data::Loader loader(train_set, opts);
  std::optional<data::Batch> sample;
  while ((sample = loader.next()) && sample->size == 0) {
  }
  if (!sample) {
    throw DataError("the training split of " + settings.data.root +
                    " has no readable sample to count the forward pass's work on");
  }
  OpCount count;
  count.all_fp32 = !amp::apex_properties(settings.amp).low_precision();
  {
    // No policy: every op computes in fp32; the module map marks the calls of amp.fp32_modules.
    amp::ScopedModules scope(modules);
    ScopedOpCount counting(count);
    // Gradients on, as in training: with them off LibTorch takes the fused inference paths of
    // attention and transformer layers (one kernel whose products the count cannot see). Eval
    // mode: a BatchNorm cannot normalise a batch of one sample with its own statistics.
    model.eval();
    task->train_loss(*sample, torch::Device(torch::kCPU));
  }
  ForwardWork work;
  work.macs = count.macs;
  work.fp32_macs = count.fp32_macs;
  work.uncounted.assign(count.uncounted.begin(), count.uncounted.end());
  work.fp8_macs = fp8_macs(settings, *task, *sample);
  return work;
}

}  // namespace amptune::train
