// The precision policy of a run: apex AMP's opt_level property table (REFERENCE.md section 2)
// resolved from the config's amp.* keys, with the overrides apex allows and the combinations it
// refuses reported as ConfigError naming the key. No torch in this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/words.h"

namespace amptune {
struct AmpSettings;
}

namespace amptune::amp {

// OptLevel and Dtype are values (core/words.h, with their names); what each opt level does is
// this header's: the Policy that resolve_policy derives from it.
// What actually runs: kNone = fp32 (O0); kNative = low-precision kernels (autocast / cast model);
// kEmulate = fp32 kernels with values rounded onto the low-precision grid.
enum class Backend { kNone, kNative, kEmulate };

// amp.fp8.*: FP8 GEMMs on top of the opt level's precision, the base (amp/fp8_gemm.h).
struct Fp8Policy {
  bool enabled = false;
  bool hybrid = true;              // format hybrid (E5M2 gradients) | e4m3
  bool delayed = true;             // recipe delayed | current
  int margin = 0;                  // 0 .. 64
  int64_t amax_history_len = 1024;  // 1 .. 16384
  bool amax_max = true;            // amax_compute max | most_recent
  std::vector<std::string> skip_modules;  // globs of modules kept in the base precision
  bool scaled_mm = false;          // gemm scaled_mm: a Linear's GEMMs through torch._scaled_mm
  // For people (the run's start line, `show`): "fp8 hybrid, delayed scaling (margin 0, amax
  // history 1024, max)", with ", Linear GEMMs by scaled_mm" under gemm scaled_mm; "" when not
  // enabled.
  std::string summary() const;
};

struct Policy {
  OptLevel opt_level = OptLevel::kO0;
  Dtype dtype = Dtype::kFp16;
  Backend backend = Backend::kNone;
  bool cast_model = false;          // O2/O3: weights (and layer outputs) in low precision
  bool patch_ops = false;           // O1: conv/linear/matmul in low precision, weights fp32
  bool keep_batchnorm_fp32 = false; // with cast_model: BatchNorm parameters and stats stay fp32
  bool master_weights = false;      // fp32 copies stepped by the optimizer
  bool combine_grad = false;        // unscale + overflow check over one flat buffer per dtype
  bool dynamic_scale = false;
  double static_scale = 1.0;        // the scale when !dynamic_scale
  double init_scale = 65536.0;      // min(2^16, max_scale) when dynamic
  double min_scale = 0;             // 0 = none
  double max_scale = 16777216.0;
  int64_t growth_interval = 2000;
  bool on_cuda = false;
  // amp.fp32_modules: globs of module names that run in fp32 under O1-O3 (amp/emulate.h).
  std::vector<std::string> fp32_modules;
  Fp8Policy fp8;  // FP8 combines with any opt level: O0 is an fp32 base, O1-O3 amp.dtype's
  // Why `backend` was chosen (the run row's backend_reason), and whether it is a path this
  // device runs far slower than the alternative (a config forcing native bf16 on a CPU without
  // bf16 instructions): the trainer warns then.
  std::string backend_reason;
  bool slow_backend = false;

  // Any rounding / casting at all (false for O0).
  bool low_precision() const { return opt_level != OptLevel::kO0; }
  // The loss_scale as the run row shows it: "dynamic" or the number ("128.0").
  std::string loss_scale_text() const;
};

// What a CPU offers low-precision kernels: oneDNN runs bf16 convolutions and matmuls at speed only
// with the avx512_bf16 or amx_bf16 instructions; without them LibTorch 1.13's CPU bf16 autocast
// falls back to slow kernels (docs/PERFORMANCE.md: 22x the O0 step on a Zen 3 without them).
// oneDNN can be held below what the CPU has (ONEDNN_MAX_CPU_ISA, or DNNL_MAX_CPU_ISA, e.g. AVX2:
// the test suite does so, cmake/amptune.cmake); below AVX512_CORE_BF16 it has no bf16 kernels at
// all, and a bf16 convolution fails ("could not create a primitive descriptor iterator").
struct CpuCaps {
  std::string bf16_flags;  // the flags found ("avx512_bf16 amx_bf16"), "" when none
  // "ONEDNN_MAX_CPU_ISA=AVX2" when such a limit rules out the bf16 kernels the CPU has, else ""
  std::string isa_limit;
  bool bf16() const { return !bf16_flags.empty() && isa_limit.empty(); }
};
// From the flags of /proc/cpuinfo's first processor and the environment's oneDNN limit, read
// once (no flags found: no bf16).
const CpuCaps& detect_cpu();
// From a flags line as /proc/cpuinfo writes it ("fpu vme ... avx512_bf16 ...") and the value of
// ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA ("" when unset; named `limit_name`).
CpuCaps cpu_caps_from_flags(const std::string& flags, const std::string& isa_limit = "",
                            const std::string& limit_name = "ONEDNN_MAX_CPU_ISA");

// Resolves the amp.* settings (core/settings.h) for a run on `device_is_cuda` (on a CPU with
// `cpu`'s capabilities). Throws ConfigError naming the amp.* key
// for the combinations apex refuses (O1 with keep_batchnorm_fp32 or master_weights set; O0 with
// either set to true; O2 combine_grad without master weights) and for a native backend the
// device has no kernels for (CPU + fp16; CPU + O2/O3), and amp.fp8.margin /
// amp.fp8.amax_history_len out of their bounds (settings made in code skip the schema).
// amp.backend auto takes native where it is the faster correct path: CUDA, or a CPU with bf16
// instructions for O1 bf16; otherwise emulate.
Policy resolve_policy(const AmpSettings& amp, bool device_is_cuda,
                      const CpuCaps& cpu = detect_cpu());

// apex's properties of `amp` whatever the device (what O1/O2/O3, keep_batchnorm_fp32,
// master_weights and the loss scale mean): resolve_policy as on CUDA, where every backend is
// allowed, so only apex's own refusals throw (ConfigError naming the key). For rules that reason
// about a setting rather than run it (amptune tune's moves).
Policy apex_properties(const AmpSettings& amp);

// The amp.* keys to set, as (key, value), to move `amp` to opt level `to` as a combination apex
// accepts: amp.opt_level, and amp.keep_batchnorm_fp32 / amp.master_weights back to auto where
// apex refuses them at `to` (any value at O1, true at O0).
std::vector<std::pair<std::string, std::string>> opt_level_change(const AmpSettings& amp,
                                                                  OptLevel to);

// apex's opt levels in the order of the fp32 work they keep, least first: O3 (the whole model in
// low precision), O2 (fp32 master weights, BatchNorm in fp32), O1 (per-op casts, fp32 weights),
// O0 (fp32). amptune tune steps along it (one level toward fp32 a move) and ranks by it.
// The place of `level` in that order: 0 for O3 ... 3 for O0.
int fp32_order(OptLevel level);
// The next level toward fp32 (O3 -> O2 -> O1 -> O0); unset at O0.
std::optional<OptLevel> toward_fp32(OptLevel level);
// What `level` keeps in fp32, for people: "fp32 master weights" (O2), "per-op casts, fp32
// weights" (O1), "no fp32 copy" (O3), "all fp32" (O0).
std::string fp32_summary(OptLevel level);

std::string to_string(Backend backend); // "none" | "native" | "emulate"

}  // namespace amptune::amp
