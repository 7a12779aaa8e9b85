// `amptune diagnose` of a run that computes in FP8 (docs/AMP.md "Diagnosing FP8"): every
// quantisation of a GEMM operand in the diagnosed passes (amp::Fp8State's observer) as a row -
// the share of its values saturated (|x * scale| beyond the format's max) and flushed to zero
// (nonzero values that quantise to 0), the SQNR of the fake-quantised tensor against its fp32
// value, the tensor's amax, the scale used and the slot's amax history (its range) - and the FP8
// advice rules over those rows and the module outputs (docs/AMP.md "FP8 advice rules"). No torch
// in this header: the app layer includes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "records/records.h"

namespace at {
class Tensor;
}
namespace amptune::amp {
enum class Fp8Format;
class Fp8State;
}  // namespace amptune::amp

namespace amptune::train {

// The thresholds of the FP8 advice rules (docs/AMP.md "FP8 advice rules" states them).
// A slot loses its small values when at least this share of its nonzero values flushes to 0.
inline constexpr double kFp8FlushedMin = 0.05;
// Saturation is mild when at most this share of the values saturates ...
inline constexpr double kFp8MildSaturation = 0.01;
// ... and the tensor's amax lands at most this factor beyond the format's max (one more power
// of two of margin takes it); otherwise the delayed scale is behind a jump.
inline constexpr double kFp8MildOvershoot = 2.0;
// The amax history holds a stale spike when its largest entry is at least this factor above
// the amax of the tensor now quantised with it (the scale leaves 4 binades of the format unused).
inline constexpr double kFp8StaleRatio = 16.0;

// The errors of quantising `value` (fp32) with `scale` to `format` as an FP8 row without batch,
// seq, module, role and history: numel, saturated_frac (share of all values; an infinite value
// counts as saturated, NaN as neither), flushed_frac (share of the nonzero finite values),
// sqnr_db over the finite values (NaN when the quantisation is exact), amax (largest finite
// |x|), scale, format. The quantisation is amp::fp8_quantise's.
records::Fp8DiagnosticRow fp8_tensor_row(const at::Tensor& value, float scale,
                                         amp::Fp8Format format);

// One row per slot and role (module, role), the worst over the batches and calls: the largest
// saturated and flushed shares and amax, the lowest SQNR (NaN, exact, counts as the best) and
// scale, the widest history; `batch` and `seq` those of its first row. In the order of the
// first quantisation (seq, then batch).
std::vector<records::Fp8DiagnosticRow> worst_fp8_rows(const records::Diagnosis& d);

// The run's FP8 recipe, which the rules read.
struct Fp8AdviceContext {
  bool delayed = true;              // amp.fp8.recipe: delayed (else current)
  bool amax_max = true;             // amp.fp8.amax_compute: max (else most_recent)
  int margin = 0;                   // amp.fp8.margin
  int64_t amax_history_len = 1024;  // amp.fp8.amax_history_len
};

// The FP8 advice rules (docs/AMP.md "FP8 advice rules") over d.fp8_rows and d.rows (the
// forward rows: a module's output departs when its worst cosine is below d.cosine_min or NaN),
// in the order of records::AdviceRule (within a rule: fp8_current_scaling's steepest first, the
// others in the order found), each module once per rule:
//  - fp8_keep_out: a slot whose flushed share is >= kFp8FlushedMin (a few large values set the
//    per-tensor scale; the small ones, which carry the signal, underflow - the module's own
//    output may still look close), unless a stale history explains it (below);
//    the last module in FP8 (the output head) when its output departs; the FP8 module whose
//    output departs most - both only before (in forward order) the first module whose input or
//    weight saturates beyond mild under delayed scaling: a departure from there on is that
//    saturation's, and fp8_current_scaling names it.
//  - fp8_current_scaling: a delayed slot that saturates beyond mild (more than
//    kFp8MildSaturation of its values, or in one quantisation its amax more than
//    kFp8MildOvershoot x the format's max at its scale): the recent amax jumped above the
//    delayed scale's.
//  - fp8_raise_margin: a delayed slot whose saturation is mild (both bounds kept).
//  - fp8_shorten_history: a flushing delayed slot (amax_compute max, a history longer than 1)
//    whose history's largest amax is >= kFp8StaleRatio x the tensor's amax.
std::vector<records::DiagnosisAdvice> advise_fp8(const records::Diagnosis& d,
                                                 const Fp8AdviceContext& context);

// The FP8 slot key's module: "blocks.0.attn#1" -> "blocks.0.attn".
std::string fp8_slot_module(const std::string& key);

// Records the quantisations of an Fp8State while it lives: installs an observer (the previous
// one is put back when it goes) that turns each into an fp8_tensor_row with its key, role,
// batch, seq and the slot's history as the state held it when the batch began (diagnose ends a
// step of the state after each batch, as training would, and the next batch's scales come from
// the histories then). Thread-safe (the backward pass quantises grad_output on the autograd
// engine's thread).
class Fp8Watch {
 public:
  explicit Fp8Watch(amp::Fp8State& state);
  ~Fp8Watch();
  Fp8Watch(const Fp8Watch&) = delete;
  Fp8Watch& operator=(const Fp8Watch&) = delete;

  // The batch the next rows belong to; seq counts from 0 again; the histories are read again.
  void begin_batch(int batch);
  // The rows so far (and forgets them).
  std::vector<records::Fp8DiagnosticRow> take();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amptune::train
