// `amptune diagnose`: where a run's precision policy first departs from fp32 (docs/AMP.md
// "Diagnosing a precision setting"). The run's checkpoint is loaded twice from the same fp32
// values - under the run's policy (emulated or native backend, the checkpoint's loss scale, its
// amp.fp32_modules and cast points) and under a reference opt level (O0) - and both run forward
// and backward on the same training batches (the run's own data order for the next epoch). Every
// module's output, every parameter's unscaled gradient and every RootNet int32 cast point is
// compared (cosine, max absolute / relative error, shares of elements off by more than 1e-3 and
// 5e-3, overflow and underflow shares of the low-precision tensors). Under amp.fp8 the run's FP8
// scaling state (the checkpoint's) advances by each batch as by a training step (the weights
// stay), so batch b is quantised at the scales training would use for it (train/diagnose_fp8.h).
// The rows, the first module that departs and the advice from documented rules are stored
// (diagnoses, diagnostics, diagnosis_advice, view first_divergence). No torch in this header:
// the app layer includes it.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/words.h"
#include "records/records.h"
#include "train/run_input.h"

namespace at {
class Tensor;
}

namespace amptune {
class Config;
struct Settings;
}  // namespace amptune
namespace amptune::data {
class Dataset;
}

namespace amptune::train {

struct DiagnoseOptions {
  std::optional<int> epoch;  // the checkpoint; unset: the newest kept one, or the initial
                             // weights (epoch -1) when the run has none
  int batches = 2;           // training batches compared
  std::string against = "O0";  // --against as given; check_options refuses all but O0-O3
  double cosine_min = 0.99;  // a module whose cosine is below this departs
  int threads = 0;           // > 0 overrides the config's `threads`
};

// The errors of `value` (computed under a precision policy) against `reference` (fp32), as a
// diagnostics row without kind / batch / seq / module. `value` may be scaled by `scale` (a
// gradient under loss scale S): errors compare value / scale with the reference; the overflow
// and underflow shares are those of `value` itself on the `low_dtype` grid (fp16 | bf16),
// NaN for any other dtype (fp32, int32). Errors are taken over elements finite in both;
// relative errors over elements whose reference is not zero. The cosine is NaN when `value` is
// inf/NaN where the reference is finite.
records::DiagnosticRow compare_tensors(const at::Tensor& reference, const at::Tensor& value,
                                     TensorDtype low_dtype, double scale = 1.0);

// An overflow that an earlier one hid: with the modules `kept` in fp32 as well (those the advice
// names for the overflows found before it), the forward pass of the run's policy reaches
// `row`'s module with finite values and its output overflows. `row` is its worst row of that
// pass (overflow share, input_nonfinite_frac 0).
struct HiddenOverflow {
  records::DiagnosticRow row;
  std::vector<std::string> kept;
};

// What the advice rules need to know beyond the rows.
struct AdviceContext {
  OptLevel opt_level = OptLevel::kO0;
  Dtype dtype = Dtype::kFp16;
  bool dynamic_scale = false;  // the policy's loss scale is dynamic (amp::Policy), else static
  bool cast_model = false;     // O2/O3
  bool batchnorm_low = false;  // BatchNorm parameters held in low precision (O3, O2 without
                               // keep_batchnorm_fp32)
  std::set<std::string> batchnorm_modules;
  std::vector<HiddenOverflow> hidden_overflows;  // found by diagnose's further passes
};

// One row per compared tensor (kind, seq), the worst over the batches: the lowest cosine (NaN,
// values lost to inf/NaN, is the worst there is, as in the view first_divergence), the largest
// errors and shares. `batch` is that of the tensor's first row. Ordered by kind, then seq.
std::vector<records::DiagnosticRow> worst_rows(const records::Diagnosis& d);

// worst_rows in the order to show them: overflowing rows first (forward ones in execution order,
// the first being where it starts), then the rest by cosine, lowest (or lost: NaN) first.
std::vector<records::DiagnosticRow> rows_by_severity(const records::Diagnosis& d);

// The worst row (worst_rows) of the first forward tensor in execution order that departs: its
// cosine is below d.cosine_min (or NaN), or it overflows. Unset when none does. As the view
// first_divergence.
std::optional<records::DiagnosticRow> first_divergence(const records::Diagnosis& d);

// Where activation overflows start among forward `rows`: each module whose output overflows
// (overflow_frac > 0) in a batch where its input was finite (input_nonfinite_frac 0), except one
// that contains another such module (a parent: "layer3.0" when "layer3.0.conv1" is one; the
// whole model ""). Modules downstream of an overflow, whose input was already inf/NaN, only
// carry it on and are not named. One row per module (its first call): the worst over those
// batches. In execution order (seq).
std::vector<records::DiagnosticRow> overflow_starts(
    const std::vector<records::DiagnosticRow>& rows);

// The advice rules (docs/AMP.md "Advice rules") over a diagnosis's rows, in priority order.
std::vector<records::DiagnosisAdvice> advise(const records::Diagnosis& d,
                                             const AdviceContext& context);

// Throws ConfigError naming the option (--batches, --cosine-min, --against) that cannot be used.
void check_options(const DiagnoseOptions& options);

// The epoch row of run `run` whose checkpoint to diagnose among `rows` (its epoch rows): the asked
// epoch's, or the newest kept one; unset for the initial weights (a run without checkpoints, when
// no epoch was asked for). Throws CheckpointError naming the saved epochs when the asked epoch
// has no kept checkpoint.
std::optional<records::EpochRow> pick_checkpoint(const RunInput& run,
                                                 const std::vector<records::EpochRow>& rows,
                                                 const DiagnoseOptions& options);

// Diagnoses `run` (see the top of this file) at `checkpoint` (pick_checkpoint; unset: the
// initial weights) and returns the diagnosis (the caller records it:
// app/artifacts/checkpoint_commands.h). When activations overflow, further forward passes on the
// same batches keep the modules named so far in fp32 until no new overflow starts (at most one pass
// per module of the model), since downstream of an overflow every value is NaN and a second one
// cannot be seen: each found this way is a HiddenOverflow behind its own activation_overflow advice
// row. Throws CheckpointError (unreadable checkpoint), ConfigError (bad options) or DataError as
// loading the run does.
records::Diagnosis diagnose(const RunInput& run,
                            const std::optional<records::EpochRow>& checkpoint,
                            const DiagnoseOptions& options);

// The work of one training sample's forward pass: the multiply-accumulates of every
// matmul-class op the forward runs - convolutions (transposed too), linear, matmul / mm / bmm /
// addmm / baddbmm / mv / dot, the LSTM / GRU / RNN layers and cells, scaled dot-product
// attention - each counted from its operands' shapes and once (not again in the ops it calls),
// whether the model is amptune's or a TorchScript file (its graph's ops, functional calls
// included); elementwise work is left out. fp32_macs: those that run in fp32 under the config's
// amp policy - all under O0, those inside amp.fp32_modules under O1-O3. The objective
// "precision" of amptune tune ranks solutions by the fp32 share (docs/TUNE.md). A fused kernel
// (attention, transformer layer, oneDNN RNN, quantized) counts through the counted ops it
// calls; `uncounted` names those inside which none ran (their products in their own kernel):
// when not empty the count is a lower bound, and the run says so. Builds the model and runs it
// once (train_loss, gradients on, eval mode), in fp32 on the CPU, on the first sample of the
// training split; throws ConfigError / DataError as loading the run's model and data does.
struct ForwardWork {
  double macs = 0;
  double fp32_macs = 0;
  std::vector<std::string> uncounted;  // "aten::..." op names, sorted; empty: the count is whole
  // Those that run as FP8 GEMMs under amp.fp8 (0 without it).
  double fp8_macs = 0;
  double fp32_share() const { return macs > 0 ? fp32_macs / macs : 0.0; }
  double fp8_share() const { return macs > 0 ? fp8_macs / macs : 0.0; }
};
ForwardWork forward_work(const Config& config);
// The same from a run's `settings` on its training split `train_set`, already open (the
// trainer's). Both seed torch's CPU random generator with the run's seed to build the model.
ForwardWork forward_work(const Settings& settings,
                         const std::shared_ptr<const data::Dataset>& train_set);

// The FLOPs of training on one sample (docs/PERFORMANCE.md "MFU"): the forward pass's
// multiply-accumulates x 2 (a multiply and an add) x 3 (the backward pass takes twice the
// forward's: the gradients of the inputs and of the weights), as the PaLM and Megatron papers
// count. Left out: BatchNorm, activations, pooling, the loss, the optimizer, amp's rounding.
inline double training_flops(const ForwardWork& work) { return 6.0 * work.macs; }

}  // namespace amptune::train
