// Low-precision emulation on fp32 kernels, and the boundary calls model code makes.
//
// Rounding: round_to_grid(x) = x.to(kHalf|kBFloat16).to(x.dtype()) - the value the device would
// store: fp16 overflow (> 65504 after rounding) gives inf, values below half the smallest
// subnormal (2^-25) flush to 0, subnormals keep their reduced precision, ties go to even.
// Contiguous CPU float tensors are rounded in one fused pass (F16C / bit arithmetic), bit-identical
// to the two conversions.
// round_through() is the same with autograd: the forward value and the gradient flowing back are
// both rounded (a low-precision tensor's gradient is low precision too).
// Rounding is idempotent, so a value known to be on the grid already is not rounded again: the
// last few outputs of a rounding (and what relu / max-pool make of them, amp::relu,
// amp::keeps_grid) are remembered by tensor and version, as are the gradients the roundings hand
// back (and relu's backward of them). A conv reading a relu of a rounded BatchNorm output so
// skips its input's rounding (its input gradient is still rounded), and the BatchNorm's rounding
// of that gradient, coming back through the relu, is skipped. Results are bitwise those of
// rounding everything (tests/unit/amp/resnet_amp_test.cpp checks gradients against that).
//
// The policy in force is thread-local (autocast's state is thread-local as well): the trainer
// installs it with ScopedPolicy around the forward passes of a run. Model code calls the
// boundary functions below; with no policy, O0, or the native backend (where autocast or real
// low-precision weights do the work) they are plain fp32 calls, so O0 results are unchanged.
//
// Boundaries (emulate backend):
//   conv2d / conv_transpose2d / linear: autocast's low-precision list. Inputs, weight, bias and
//     output are rounded (O1, O2, O3); accumulation stays fp32, as on tensor cores.
//   input_dtype_op(y): the output of an op autocast runs in its input's dtype (BatchNorm, relu,
//     pooling, add) whose input is low precision: rounded under O1 (its input came from a conv),
//     O2 and O3. BatchNorm itself computes in fp32; its parameters are fp32 unless O3 (or O2
//     with keep_batchnorm_fp32 false), which the trainer's Engine handles. input_dtype_op_(y)
//     rounds in place (conv / linear outputs are, too).
//   relu(x) / keeps_grid(out, in): ops whose output is on the grid when their input is; no
//     rounding, only the knowledge above carried along.
//   fp32_op(y): the output of an op on autocast's fp32 list (softmax, log_softmax, losses,
//     norms, exp/log/pow, sum/mean): left fp32 under O1; rounded under O2/O3 (no per-op casts).
//   model_input(x) / model_output(y): O2/O3 cast the input to the model type on entry and the
//     output back to fp32 (emulate: the input is rounded, the output left as it is).
//
// Modules in fp32 (amp.fp32_modules, docs/AMP.md "Keeping modules in fp32"): a ModuleMap names
// every module of a model (state-dict prefixes, torchvision style: "layer1.0.conv1", "" for the
// root) and marks the ones whose name, or an ancestor's, matches a glob. Model code opens a
// ModuleCall around each module it runs (the boundary functions above do it for conv / linear /
// deconv; BatchNorm, ResNet blocks and whole networks open their own). A call of a marked module
// is an fp32 region: inside it no value is rounded or cast (emulate), autocast is off and the
// input is cast up (native); its output is cast back to the model's type under O2/O3 and left
// fp32 under O1 (as autocast leaves fp32 results), where the input-dtype op that follows keeps
// it fp32 too (input_dtype_op's `fp32_input`). The Engine keeps the parameters and buffers of
// marked modules fp32 under O2/O3. ModuleCall also reports each module's input and output to
// this thread's Observer, in execution order (children before their parent): `amptune diagnose`
// tells a module whose own output overflows from one that only carries an inf it was given.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include "amp/policy.h"

namespace amptune::amp {

// at::kHalf or at::kBFloat16.
torch::ScalarType scalar_type(Dtype dtype);

// x.to(low).to(x.dtype()) without autograd.
torch::Tensor round_to_grid(const torch::Tensor& x, Dtype dtype);
// round_to_grid with a backward that rounds the incoming gradient onto the same grid.
torch::Tensor round_through(const torch::Tensor& x, Dtype dtype);

// Installs `policy` as this thread's policy until destruction (restores the previous one).
class ScopedPolicy {
 public:
  explicit ScopedPolicy(const Policy& policy);
  ~ScopedPolicy();
  ScopedPolicy(const ScopedPolicy&) = delete;
  ScopedPolicy& operator=(const ScopedPolicy&) = delete;

 private:
  std::shared_ptr<const Policy> previous_;
};

// This thread's policy, or nullptr (plain fp32).
const Policy* current_policy();
// True when the current policy emulates (backend emulate, O1-O3).
bool emulating();

torch::Tensor conv2d(torch::nn::Conv2dImpl& conv, const torch::Tensor& x);
torch::Tensor conv_transpose2d(torch::nn::ConvTranspose2dImpl& conv, const torch::Tensor& x);
torch::Tensor linear(torch::nn::LinearImpl& linear, const torch::Tensor& x);
// `fp32_input`: the op's input came out of a module running in fp32 (fp32_module()); under O1
// the result then stays fp32, as autocast's type promotion gives.
torch::Tensor input_dtype_op(const torch::Tensor& y, bool fp32_input = false);
// The same, rounding y in place: y must be an op's fresh output that no backward reads
// (BatchNorm's, an add's; not relu's, whose backward reads its result). A view or a leaf is
// rounded out of place.
torch::Tensor input_dtype_op_(const torch::Tensor& y, bool fp32_input = false);
// torch::relu(x); emulating, a grid value's relu (and the gradient flowing back through it) is
// known to be on the grid.
torch::Tensor relu(const torch::Tensor& x);
// `out` (max_pool2d(in), a view of in ...: made of in's values only); emulating, it is known to
// be on the grid when `in` is.
torch::Tensor keeps_grid(const torch::Tensor& out, const torch::Tensor& in);
torch::Tensor fp32_op(const torch::Tensor& y);
torch::Tensor model_input(const torch::Tensor& x);
torch::Tensor model_output(const torch::Tensor& y);

// ---- modules in fp32, observation ----------------------------------------------------------

// The modules of one model by address, with their names and fp32 marks.
class ModuleMap {
 public:
  struct Entry {
    std::string name;   // "" for the root, "layer1.0.conv1", ...
    bool fp32 = false;  // the name or an ancestor's matches one of the globs
    bool fp8_skip = false;  // the same for the globs of amp.fp8.skip_modules
  };
  // Throws ConfigError naming amp.fp32_modules (amp.fp8.skip_modules) for a glob that matches no
  // module (with examples of the names there are). Globs are shell patterns (fnmatch, '*' also
  // crosses dots).
  ModuleMap(const torch::nn::Module& model, const std::vector<std::string>& fp32_globs,
            const std::vector<std::string>& fp8_skip_globs = {});

  const Entry* find(const torch::nn::Module& module) const;
  // A parameter or buffer of a marked module (held fp32 under O2/O3).
  bool fp32_tensor(const torch::Tensor& t) const {
    return fp32_tensors_.count(t.unsafeGetTensorImpl()) > 0;
  }
  // Every name in registration order (root first).
  std::vector<std::string> names() const;

 private:
  std::unordered_map<const torch::nn::Module*, Entry> entries_;
  std::vector<const torch::nn::Module*> order_;
  std::unordered_set<const void*> fp32_tensors_;
};

// Throws the ConfigError ModuleMap throws when a glob matches none of `names` (module names,
// root "" first); `key` names the list.
void check_module_globs(const std::vector<std::string>& names,
                        const std::vector<std::string>& globs,
                        const std::string& key = "amp.fp32_modules");

// Installs `modules` for this thread until destruction (restores the previous map).
class ScopedModules {
 public:
  explicit ScopedModules(std::shared_ptr<const ModuleMap> modules);
  ~ScopedModules();
  ScopedModules(const ScopedModules&) = delete;
  ScopedModules& operator=(const ScopedModules&) = delete;

 private:
  std::shared_ptr<const ModuleMap> previous_;
};

// Sees each module call in execution order: the input its code passed through
// ModuleCall::input (before any cast; undefined when it passed none) and its output (after any
// cast back).
using Observer = std::function<void(const std::string& module, const torch::Tensor& input,
                                    const torch::Tensor& output)>;

// Installs `observer` for this thread until destruction.
class ScopedObserver {
 public:
  explicit ScopedObserver(Observer observer);
  ~ScopedObserver();
  ScopedObserver(const ScopedObserver&) = delete;
  ScopedObserver& operator=(const ScopedObserver&) = delete;

 private:
  std::shared_ptr<const Observer> previous_;
};

// One call of a module (see the top of this file). Open it before the module computes, pass
// the input through input() and the result through output().
class ModuleCall {
 public:
  explicit ModuleCall(const torch::nn::Module& module);
  ~ModuleCall();
  ModuleCall(const ModuleCall&) = delete;
  ModuleCall& operator=(const ModuleCall&) = delete;

  torch::Tensor input(const torch::Tensor& x);
  torch::Tensor output(const torch::Tensor& y) const;

 private:
  friend std::optional<std::string> next_fp8_gemm_key();
  const ModuleMap::Entry* entry_ = nullptr;
  ModuleCall* outer_ = nullptr;  // the known call this one is inside (entry_ set)
  int fp8_gemms_ = 0;            // FP8 GEMMs run in this call so far
  torch::Tensor input_;         // for the Observer (only while one is installed)
  bool region_ = false;         // this call opened an fp32 region
  bool autocast_paused_ = false;
};

// True when `module` computes in fp32 now: it is marked, or an fp32 region is open.
bool fp32_module(const torch::nn::Module& module);

// For FP8 (amp/fp8_gemm.h): the slot key of the next FP8 GEMM of the innermost module call open
// on this thread that the installed ModuleMap knows - its name, "name#k" for its k-th (k > 0) -
// counting it; unset when that call runs no FP8 (its module or an ancestor is in
// amp.fp8.skip_modules or amp.fp32_modules, or an fp32 region is open). Throws std::logic_error
// when no known module call is open (the boundary functions open one).
std::optional<std::string> next_fp8_gemm_key();

// Native autocast for the current thread while alive (CPU bf16 O1; CUDA O1 fp16/bf16); clears
// the autocast weight-cast cache on destruction (as Python's context manager does), so cached
// low-precision copies never outlive an optimizer step. A no-op unless policy is O1 native.
class AutocastGuard {
 public:
  explicit AutocastGuard(const Policy& policy);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool prev_enabled_ = false;
  torch::ScalarType prev_dtype_ = torch::kFloat;
};

}  // namespace amptune::amp
