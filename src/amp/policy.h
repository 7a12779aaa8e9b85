// The precision policy of a run: apex AMP's opt_level property table (REFERENCE.md section 2)
// resolved from the config's amp.* keys, with the overrides apex allows and the combinations it
// refuses reported as ConfigError naming the key. No torch in this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace amptune {
class Config;
}

namespace amptune::amp {

enum class OptLevel { kO0, kO1, kO2, kO3 };
enum class Dtype { kFp16, kBf16 };
// What actually runs: kNone = fp32 (O0); kNative = low-precision kernels (autocast / cast model);
// kEmulate = fp32 kernels with values rounded onto the low-precision grid.
enum class Backend { kNone, kNative, kEmulate };

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

  // Any rounding / casting at all (false for O0).
  bool low_precision() const { return opt_level != OptLevel::kO0; }
  // The loss_scale as the run row shows it: "dynamic" or the number ("128.0").
  std::string loss_scale_text() const;
};

// Resolves config amp.* for a run on `device_is_cuda`. Throws ConfigError naming the amp.* key
// for the combinations apex refuses (O1 with keep_batchnorm_fp32 or master_weights set; O0 with
// either set to true; O2 combine_grad without master weights) and for a native backend the
// device has no kernels for (CPU + fp16; CPU + O2/O3).
Policy resolve_policy(const Config& config, bool device_is_cuda);

std::string to_string(OptLevel level);  // "O0".."O3"
std::string to_string(Dtype dtype);     // "fp16" | "bf16"
std::string to_string(Backend backend); // "none" | "native" | "emulate"

}  // namespace amptune::amp
