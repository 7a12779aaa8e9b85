// FP8 (OCP 8-bit floating point, arXiv 2209.05433) emulated on fp32 kernels, and Transformer
// Engine's per-tensor scaling (docs/AMP.md "FP8"; facts in shared/REFERENCE.md section 10).
//
// Formats: E4M3 (PyTorch's float8_e4m3fn: bias 7, no infinities, max 448, min normal 2^-6, min
// subnormal 2^-9) and E5M2 (float8_e5m2: bias 15, max 57344, min normal 2^-14, min subnormal
// 2^-16). round_fp8 rounds an fp32 value to the nearest value of the format, ties to even,
// subnormals kept, and saturates: finite values and infinities beyond +-max become +-max, as
// Transformer Engine's casts do (__NV_SATFINITE); NaN stays NaN. The result is an fp32 holding
// the fp8 value exactly. On LibTorch 2.x this is bit for bit
// `x.clamp(-max, max).to(kFloat8_e4m3fn | kFloat8_e5m2).to(kFloat)` (tests/unit/amp/fp8_test.cpp;
// PyTorch's plain cast gives NaN (e4m3fn) or inf (e5m2) for out-of-range values instead: amptune
// follows Transformer Engine for every tensor role). LibTorch 1.13 has no float8 dtype: the
// rounding is written out here and is the same on every build.
//
// Scaling: a tensor is quantised as q = round_fp8(x * scale) and stands for q * scale_inv,
// scale_inv = 1 / scale (fp32); a GEMM multiplies the two operands' scale_inv into its fp32
// accumulator. scale = fp8_max / amax / 2^margin (fp8_scale_from_amax), so the tensor's amax lands
// at 2^-margin * fp8_max. Transformer Engine's recipes:
//   delayed: the scale used at step t comes from the amax history of the steps before t (the
//     newest amax enters at the end of each step, the oldest leaves; `amax_history_len` steps;
//     the history's maximum or its most recent entry); before any step the scale is 1.
//   current: the scale comes from this tensor's own amax, computed when it is quantised.
// Either way the tensor's amax of every step enters its history (diagnose reads the history's
// range); an overflowed step's inf/NaN amax is kept there but the delayed scale is taken over
// the finite entries (a non-finite most recent one gives scale 1). Within one step a slot
// quantised several times (a module called twice) takes the maximum amax of its calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/types.h>

namespace amptune::amp {

enum class Fp8Format { kE4M3, kE5M2 };

// 448 (E4M3) or 57344 (E5M2).
float fp8_max(Fp8Format format);
// "e4m3" | "e5m2"
const char* to_string(Fp8Format format);

// One value (see the top of this file).
float round_fp8(float x, Fp8Format format);
// n values; src and dst may alias.
void round_fp8(const float* src, float* dst, int64_t n, Fp8Format format);
// An fp32 tensor's values rounded (a new fp32 tensor, no autograd). CPU tensors through the
// loop above (in parallel), others through tensor ops that give the same bits.
torch::Tensor round_to_fp8(const torch::Tensor& x, Fp8Format format);
// The tensor-op path of round_to_fp8 (what a GPU tensor takes), on any device: the tests hold
// it to the loop's bits on the CPU.
torch::Tensor round_to_fp8_ops(const torch::Tensor& x, Fp8Format format);

// max |x| (0 for an empty tensor; NaN when x holds a NaN), without a temporary |x|.
float fp8_amax(const torch::Tensor& x);

// Transformer Engine's compute_scale_from_amax: fp8_max / amax / 2^margin in fp32; 1 when amax
// is 0, negative, inf or NaN; FLT_MAX when the quotient overflows. margin >= 0.
float fp8_scale_from_amax(float amax, Fp8Format format, int margin);

// round_fp8(x * scale): the fp8 values (in fp32) that stand for x * scale; no autograd.
torch::Tensor fp8_quantise(const torch::Tensor& x, float scale, Fp8Format format);
// fp8_quantise(x, scale) * (1 / scale), the value a GEMM's operand stands for, in one pass on the
// CPU (bit for bit the two steps; tests/unit/amp/fp8_test.cpp); no autograd.
torch::Tensor fp8_fake_quantise(const torch::Tensor& x, float scale, Fp8Format format);

// The roles of a GEMM's tensors under Transformer Engine's recipes.
enum class Fp8Role { kInput, kWeight, kGradOutput };
const char* to_string(Fp8Role role);  // "input" | "weight" | "grad_output"

// How the scales of the tensors are computed (amp.fp8.*: recipe, margin, amax_history_len,
// amax_compute).
struct Fp8Scaling {
  bool delayed = true;           // recipe: delayed | current
  int margin = 0;                // >= 0
  int64_t amax_history_len = 1024;  // >= 1
  bool amax_max = true;          // amax_compute: max | most_recent
};

// The scaling state of one tensor of one GEMM (Transformer Engine's fp8 meta for one tensor).
class Fp8Slot {
 public:
  Fp8Slot(Fp8Format format, const Fp8Scaling& scaling);

  Fp8Format format() const { return format_; }
  // The scale to quantise `x` with now (delayed: the scale of the last end_step, 1 before any;
  // current: from x's own amax), and x's amax taken into this step's amax when `record` (an
  // evaluation forward uses the scales without recording). `amax` is x's amax when the caller
  // computed it already, else negative. Thread-safe, as every method of a slot.
  float scale_for(const torch::Tensor& x, float amax = -1.0f, bool record = true);
  // End of an optimizer step: this step's amax enters the history (the oldest leaves once full),
  // the delayed scale is recomputed from the history; a slot not quantised this step records 0.
  void end_step();

  float scale() const;  // the delayed scale in force
  // The history, oldest first (at most amax_history_len entries; fewer before that many steps).
  std::vector<float> history() const;
  float step_amax() const;

  // For checkpoints (Fp8State::load): the history, oldest first (its newest amax_history_len
  // entries kept); the delayed scale is recomputed from it, so a fork that changes the margin,
  // the history length or the format starts from the same amaxes under its own rule.
  void restore(const std::vector<float>& history);

 private:
  Fp8Format format_;
  Fp8Scaling scaling_;
  std::vector<float> ring_;  // size amax_history_len once full
  int64_t next_ = 0;         // where the next amax goes once the ring is full
  float scale_ = 1.0f;
  float step_amax_ = 0.0f;
  bool seen_ = false;        // quantised during this step
  mutable std::mutex mutex_;  // the backward pass may run on another thread

  std::vector<float> history_locked() const;
  void recompute_scale();
};

// What `amptune diagnose` watches: every quantisation with its fp32 value, the scale used and
// the format. Called on the thread that quantises (the autograd engine's for grad_output).
using Fp8Observer = std::function<void(const std::string& module, Fp8Role role,
                                       const torch::Tensor& value, float scale,
                                       Fp8Format format)>;

// The slots of one model by module name and role (and by call index when a module runs several
// GEMMs: "blocks.0.attn#1"). Thread-safe (the backward pass may run on another thread).
class Fp8State {
 public:
  explicit Fp8State(Fp8Scaling scaling);

  const Fp8Scaling& scaling() const { return scaling_; }
  // The slot of `key` and `role`, made on first use with `format`.
  std::shared_ptr<Fp8Slot> slot(const std::string& key, Fp8Role role, Fp8Format format);
  // Every slot's end_step.
  void end_step();
  // Every slot's step amax, in key order (an all-reduce of amaxes across ranks reads and writes
  // these before end_step), and their setter (same order and count).
  std::vector<float> step_amaxes() const;
  void set_step_amaxes(const std::vector<float>& amaxes);
  // Every slot as "<key>.<role>\t<format>", in key order, and the slots of such a list this
  // state lacks made (restored from a loaded checkpoint as slot() restores them;
  // std::invalid_argument for an entry of another form): data-parallel ranks agree on the union
  // of their slots with these when one quantised nothing in its first step.
  std::vector<std::string> slot_list() const;
  void add_slots(const std::vector<std::string>& list);
  size_t slot_count() const;

  // The state as named fp32 tensors for a checkpoint: "fp8.<key>.<role>.history" (oldest first)
  // and "fp8.<key>.<role>.scale" (one value) per slot.
  std::map<std::string, torch::Tensor> to_tensors() const;
  // Replaces the state with the "fp8.*.history" tensors of `tensors` (other names ignored);
  // a slot is restored when it is first made (slot()), so `load` needs no model. Throws
  // CheckpointError naming `source` and the tensor for a dtype other than fp32, more than one
  // dimension, a negative amax (inf and NaN are an overflowed step's), or a name that is not
  // <key>.<role>.history.
  void load(const std::map<std::string, torch::Tensor>& tensors, const std::string& source);

  void set_observer(std::shared_ptr<const Fp8Observer> observer);
  std::shared_ptr<const Fp8Observer> observer() const;

 private:
  std::shared_ptr<Fp8Slot> slot_locked(const std::string& name, Fp8Format format);

  Fp8Scaling scaling_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Fp8Slot>> slots_;  // "key.role"
  std::map<std::string, std::vector<float>> pending_;      // loaded, slot not made yet
  std::shared_ptr<const Fp8Observer> observer_;
};

}  // namespace amptune::amp
