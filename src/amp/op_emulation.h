// Autocast's rules op by op, for models whose code amptune does not write: a TorchScript model's
// graph (models/scripted.h) calls these around each of its aten ops. The built-in models call
// the boundary functions of amp/emulate.h at the places they know; a graph's ops are told apart
// by name here instead, and the low-precision values are tracked at run time.
//
// Under the emulate backend every tensor is fp32; a value "is low precision" when the device
// would hold it in fp16/bf16. That is tracked per tensor (a tag by TensorImpl, kept while a
// ScopedValueTags lives, i.e. one forward pass) and from the storage the Engine holds low (its
// cast parameters and buffers, ScopedLowStorage). Per op, with the policy's flags (amp/policy.h):
//   An op on autocast's low-precision list (conv, linear, matmul, ...): its floating inputs
//     (weights too) are rounded, with their gradients (O1: autocast's cast down; O2/O3: on the
//     grid already, but the gradient handed back is low precision as well); its output is low.
//   O1, an op on autocast's fp32 list (softmax, log, exp, losses, norms, sums ...): fp32 output.
//   Otherwise, as PyTorch's own dtype rules give (also for every op under O2/O3): an in-place op
//   keeps its first input's dtype; batch_norm / instance_norm compute in their input's dtype
//   whatever their parameters hold; to / type_as give the dtype asked for; any other op gives
//   the promotion of its floating inputs (an fp32 input among low ones makes it fp32; 0-dim
//   tensors count only when no input has dimensions).
//   A low output is rounded onto the grid (round_through), except for ops that cannot leave it
//   (relu, max-pooling, views, cat, ...), whose output is only tagged.
// Inside an fp32 region (amp.fp32_modules, ModuleCall) and without emulation nothing is rounded
// or tagged: the native backend's autocast and cast weights do the work in the dispatcher.
// FP8 (amp.fp8.enabled, amp/fp8_gemm.h): aten::linear and the convolutions (fp8_gemm_op) are
// FP8 GEMMs under any backend and opt level - input (the op's first tensor) and weight (its
// second) quantised, the bias (its optional third) taken out of the op and added after the
// gradient's quantisation. matmul, mm, bmm, addmm, einsum ... stay in the base precision, also
// with a parameter operand: as in Transformer Engine, whose unit is the Linear module (attention's
// activation x activation products are never FP8 there). Under amp.fp8.gemm scaled_mm an
// aten::linear is given empty stand-ins for its input and weight (sizes (..., 0) and (n, 0): a
// product of zeros that costs nothing) and op_output returns Fp8Gemm::linear of the real ones.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <torch/types.h>

namespace amptune::amp {

enum class OpKind {
  kLowPrecision,  // autocast's fp16 list
  kFp32,          // autocast's fp32 list
  kFirstInput,    // computes in its first input's dtype (batch_norm, instance_norm)
  kKeepsGrid,     // cannot leave the grid of its inputs (relu, max-pool, views, cat ...)
  kCast,          // to / type_as / float / half / double / bfloat16
  kPromote,       // every other op
};

// The kind of aten op `name` (the unqualified name: "conv2d", "relu_", "batch_norm"). A name ending
// in '_' is the in-place form of the same op.
OpKind op_kind(const std::string& name);

// Whether aten op `name` is one FP8 takes: linear, conv1d/2d/3d, conv_transpose1d/2d/3d,
// convolution, _convolution (input, weight, optional bias first).
bool fp8_gemm_op(const std::string& name);

// One op of a graph: begin_op, then op_input (op_input_optional for a Tensor? argument) for
// each of its tensor inputs in order (returns what the op must be given), the op, then op_output
// for each tensor it returns (returns what the graph must use). Cheap no-ops when this thread
// does not emulate and runs no FP8. `gemm`: fp8_gemm_op of the op's name (`conv` a
// convolution, whose bias runs along dimension 1).
void begin_op(OpKind kind, bool in_place, bool gemm = false, bool conv = false);
torch::Tensor op_input(const torch::Tensor& x);
// Undefined when the op must be given None: an FP8 GEMM's bias, added in op_output.
torch::Tensor op_input_optional(const torch::Tensor& x);
torch::Tensor op_output(const torch::Tensor& y);

// Whether `x` holds a low-precision value now (a tag, or storage the Engine holds low).
bool is_low(const torch::Tensor& x);
// Tags `x` as low precision while the current ScopedValueTags lives (model_input and the cast back
// at the end of an fp32 module call do, amp/emulate.cpp).
void mark_low(const torch::Tensor& x);

// The tags of one forward pass: the outermost scope clears them on entry and exit.
class ScopedValueTags {
 public:
  ScopedValueTags();
  ~ScopedValueTags();
  ScopedValueTags(const ScopedValueTags&) = delete;
  ScopedValueTags& operator=(const ScopedValueTags&) = delete;
};

// The tensors the Engine holds in low precision (Engine::low_precision_tensors), for this thread
// until destruction; they must outlive the scope.
class ScopedLowStorage {
 public:
  explicit ScopedLowStorage(const std::vector<torch::Tensor>& tensors);
  ~ScopedLowStorage();
  ScopedLowStorage(const ScopedLowStorage&) = delete;
  ScopedLowStorage& operator=(const ScopedLowStorage&) = delete;

 private:
  std::shared_ptr<const std::unordered_set<const void*>> previous_;
};

}  // namespace amptune::amp
