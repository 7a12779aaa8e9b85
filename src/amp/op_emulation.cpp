#include "amp/op_emulation.h"

#include <c10/util/intrusive_ptr.h>
#include <torch/torch.h>

#include <unordered_map>
#include <unordered_set>

#include "amp/emulate.h"
#include "amp/fp8_gemm.h"

namespace amptune::amp {
namespace {

// The lists of PyTorch's CUDA autocast (aten/src/ATen/autocast_mode.cpp), which apex O1 also
// follows: ops cast to fp16, ops run in fp32 (with or without an output dtype argument).
const std::unordered_set<std::string>& low_precision_ops() {
  static const std::unordered_set<std::string> ops = {
      "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
      "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr",
      "matmul", "einsum", "mm", "mv", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
      "linalg_multi_dot", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
      "scaled_dot_product_attention"};
  return ops;
}

const std::unordered_set<std::string>& fp32_ops() {
  static const std::unordered_set<std::string> ops = {
      "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
      "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm",
      "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
      "cosine_embedding_loss", "nll_loss", "nll_loss2d", "nll_loss_nd", "cross_entropy_loss",
      "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
      "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
      "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
      "logsumexp", "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
      "linalg_matrix_norm", "sum", "norm"};
  return ops;
}

// Outputs made only of input values (or zeros): on the grid when the inputs are.
const std::unordered_set<std::string>& grid_keeping_ops() {
  static const std::unordered_set<std::string> ops = {
      "relu", "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices",
      "adaptive_max_pool1d", "adaptive_max_pool2d", "view", "reshape", "flatten", "permute",
      "transpose", "t", "contiguous", "squeeze", "unsqueeze", "expand", "expand_as", "slice",
      "select", "narrow", "chunk", "split", "unbind", "cat", "stack", "clone", "detach", "view_as",
      "reshape_as", "index_select", "gather", "repeat", "flip", "roll", "neg", "abs", "max", "min",
      "maximum", "minimum", "where", "zeros_like", "alias", "upsample_nearest1d",
      "upsample_nearest2d", "upsample_nearest3d", "channel_shuffle", "pixel_shuffle"};
  return ops;
}

// The op being run on this thread (begin_op .. its last op_output).
struct OpState {
  bool active = false;  // emulating at begin_op
  OpKind kind = OpKind::kPromote;
  bool in_place = false;
  bool first_seen = false, first_low = false;
  bool low_dense = false, fp32_dense = false;    // inputs with dimensions
  bool low_scalar = false, fp32_scalar = false;  // 0-dim inputs
  const void* first_impl = nullptr;
  std::unique_ptr<Fp8Gemm> fp8;  // an FP8 GEMM (amp/fp8_gemm.h)
  bool conv = false;
  int fp8_inputs = 0;  // tensors given to fp8 so far
  torch::Tensor bias;  // the bias fp8 adds after the op
  // A linear under amp.fp8.gemm scaled_mm: its input and weight (the op gets empty stand-ins).
  bool scaled_mm = false;
  torch::Tensor x, w;
};
thread_local OpState t_op;

// Low-precision tags of this forward pass. The weak reference pins the TensorImpl's memory, so
// no other tensor can take its address while the tag lives.
using Tags = std::unordered_map<const void*, c10::weak_intrusive_ptr<c10::TensorImpl>>;
thread_local Tags t_tags;
thread_local int t_tag_scopes = 0;
thread_local std::shared_ptr<const std::unordered_set<const void*>> t_low_storage;

Dtype policy_dtype() { return current_policy()->dtype; }

bool floating(const torch::Tensor& t) { return t.defined() && t.is_floating_point(); }

torch::Tensor tagged(torch::Tensor t) {
  mark_low(t);
  return t;
}

// The dtype an ordinary op gives from what its inputs were.
bool output_low() {
  switch (t_op.kind) {
    case OpKind::kLowPrecision:
      if (current_policy()->patch_ops) return true;
      break;
    case OpKind::kFp32:
      if (current_policy()->patch_ops) return false;
      break;
    case OpKind::kFirstInput:
      return t_op.first_low;
    default:
      break;
  }
  if (t_op.in_place) return t_op.first_low;
  if (t_op.low_dense || t_op.fp32_dense) return !t_op.fp32_dense;
  return t_op.low_scalar && !t_op.fp32_scalar;
}

// to / type_as / float / half ...: the dtype asked for. A real low-precision tensor (the emulate
// backend never makes one otherwise) comes back as fp32 on the grid; an fp32 result that is the
// low input itself (x.float() returns x) becomes a distinct alias, so the tag stays with x.
torch::Tensor cast_output(const torch::Tensor& y) {
  if (y.scalar_type() == torch::kHalf || y.scalar_type() == torch::kBFloat16) {
    return tagged(round_through(y.to(torch::kFloat), policy_dtype()));
  }
  if (y.unsafeGetTensorImpl() == t_op.first_impl && t_op.first_low) return y.alias();
  return y;
}

}  // namespace

OpKind op_kind(const std::string& name) {
  const bool in_place = name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_';
  const std::string base = in_place ? name.substr(0, name.size() - 1) : name;
  if (low_precision_ops().count(base)) return OpKind::kLowPrecision;
  if (fp32_ops().count(base)) return OpKind::kFp32;
  if (base == "batch_norm" || base == "instance_norm" || base == "_batch_norm_impl_index" ||
      base == "native_batch_norm") {
    return OpKind::kFirstInput;
  }
  if (base == "to" || base == "type_as" || base == "float" || base == "half" ||
      base == "double" || base == "bfloat16") {
    return OpKind::kCast;
  }
  if (grid_keeping_ops().count(base)) return OpKind::kKeepsGrid;
  return OpKind::kPromote;
}

bool fp8_gemm_op(const std::string& name) {
  static const std::unordered_set<std::string> ops = {
      "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
      "conv_transpose3d", "convolution", "_convolution"};
  return ops.count(name) > 0;
}

void begin_op(OpKind kind, bool in_place, bool gemm, bool conv) {
  t_op = OpState{};  // (ends an FP8 GEMM an op that threw left open)
  t_op.active = emulating();
  t_op.kind = kind;
  t_op.in_place = in_place;
  if (gemm) {
    t_op.fp8 = Fp8Gemm::begin();
    t_op.conv = conv;
    t_op.scaled_mm = t_op.fp8 && !conv && t_op.fp8->by_scaled_mm();
  }
}

torch::Tensor op_input(const torch::Tensor& x) {
  if (t_op.fp8 && floating(x)) {
    const int index = t_op.fp8_inputs++;
    if (t_op.scaled_mm && index < 2) {
      // The op multiplies (..., 0) by (n, 0) (zeros, no work); op_output runs the GEMM.
      (index == 0 ? t_op.x : t_op.w) = x;
      return x.narrow(-1, 0, 0);
    }
    if (index == 0) return t_op.fp8->input(x);
    if (index == 1) return t_op.fp8->weight(x);
    return t_op.fp8->bias(x);
  }
  if (!t_op.active || !floating(x)) return x;
  const bool low = is_low(x);
  if (!t_op.first_seen) {
    t_op.first_seen = true;
    t_op.first_low = low;
    t_op.first_impl = x.unsafeGetTensorImpl();
  }
  bool& seen = x.dim() > 0 ? (low ? t_op.low_dense : t_op.fp32_dense)
                           : (low ? t_op.low_scalar : t_op.fp32_scalar);
  seen = true;
  if (t_op.kind == OpKind::kLowPrecision) {
    // O1: autocast's cast down, weights included. O2/O3: the value is on the grid already, but
    // the gradient the op hands back is low precision too (as the built-in models' boundaries
    // round it, amp/emulate.h).
    return tagged(round_through(x, policy_dtype()));
  }
  return x;
}

torch::Tensor op_input_optional(const torch::Tensor& x) {
  if (t_op.fp8 && t_op.fp8_inputs == 2 && floating(x)) {
    ++t_op.fp8_inputs;
    t_op.bias = t_op.scaled_mm ? x : t_op.fp8->bias(x);  // (Fp8Gemm::linear takes it raw)
    return torch::Tensor();
  }
  return op_input(x);
}

torch::Tensor op_output(const torch::Tensor& y) {
  if (t_op.fp8 && y.defined()) {
    torch::Tensor out = t_op.scaled_mm ? t_op.fp8->linear(t_op.x, t_op.w, t_op.bias)
                                       : t_op.fp8->output(y, t_op.bias, t_op.conv ? 1 : -1);
    t_op.fp8.reset();  // (native: autocast back on)
    t_op.bias = t_op.x = t_op.w = torch::Tensor();
    if (t_op.active) mark_low(out);
    return out;
  }
  if (!t_op.active || !y.defined()) return y;
  if (t_op.kind == OpKind::kCast) return cast_output(y);
  if (!y.is_floating_point() || !output_low()) return y;
  if (t_op.kind == OpKind::kKeepsGrid && !t_op.fp32_dense && !t_op.fp32_scalar) return tagged(y);
  return tagged(round_through(y, policy_dtype()));
}

bool is_low(const torch::Tensor& x) {
  const void* impl = x.unsafeGetTensorImpl();
  return t_tags.count(impl) > 0 || (t_low_storage && t_low_storage->count(impl) > 0);
}

void mark_low(const torch::Tensor& x) {
  if (t_tag_scopes == 0 || !x.defined()) return;
  t_tags.emplace(x.unsafeGetTensorImpl(),
                 c10::weak_intrusive_ptr<c10::TensorImpl>(x.getIntrusivePtr()));
}

ScopedValueTags::ScopedValueTags() {
  if (t_tag_scopes++ == 0) t_tags.clear();
}

ScopedValueTags::~ScopedValueTags() {
  if (--t_tag_scopes == 0) t_tags.clear();
}

ScopedLowStorage::ScopedLowStorage(const std::vector<torch::Tensor>& tensors)
    : previous_(t_low_storage) {
  auto set = std::make_shared<std::unordered_set<const void*>>();
  for (const auto& t : tensors) set->insert(t.unsafeGetTensorImpl());
  t_low_storage = std::move(set);
}

ScopedLowStorage::~ScopedLowStorage() {
  t_low_storage = previous_;
}

}  // namespace amptune::amp
