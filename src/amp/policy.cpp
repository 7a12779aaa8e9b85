#include "amp/policy.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"

namespace amptune::amp {
namespace {

// The flag as set; unset for auto (the opt level's default, resolve_policy's table).
std::optional<bool> flag(AutoBool v) {
  if (v == AutoBool::kAuto) return std::nullopt;
  return v == AutoBool::kTrue;
}

}  // namespace

CpuCaps cpu_caps_from_flags(const std::string& flags, const std::string& isa_limit,
                            const std::string& limit_name) {
  CpuCaps caps;
  // oneDNN's ISA names that include bf16 kernels (AVX512_CORE_BF16, ..._FP16, ..._AMX...), or
  // no limit at all (ALL, DEFAULT).
  std::string upper;
  for (char c : isa_limit) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const bool allows_bf16 = upper.empty() || upper == "ALL" || upper == "DEFAULT" ||
                           upper.find("BF16") != std::string::npos ||
                           upper.find("FP16") != std::string::npos ||
                           upper.find("AMX") != std::string::npos;
  std::istringstream in(flags);
  std::string flag;
  while (in >> flag) {
    if (flag == "avx512_bf16" || flag == "amx_bf16") {
      caps.bf16_flags += (caps.bf16_flags.empty() ? "" : " ") + flag;
    }
  }
  // PyTorch sends bf16 convolutions to oneDNN when the CPU has the instructions; a limit below
  // them then makes them fail, where a CPU without them falls back to slow kernels.
  if (!allows_bf16 && !caps.bf16_flags.empty()) caps.isa_limit = limit_name + "=" + isa_limit;
  return caps;
}

const CpuCaps& detect_cpu() {
  static const CpuCaps caps = [] {
    std::string limit, name = "ONEDNN_MAX_CPU_ISA";
    if (const char* v = std::getenv("ONEDNN_MAX_CPU_ISA")) {
      limit = v;
    } else if (const char* d = std::getenv("DNNL_MAX_CPU_ISA")) {
      limit = d;
      name = "DNNL_MAX_CPU_ISA";
    }
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) == 0) {
        return cpu_caps_from_flags(line.substr(line.find(':') + 1), limit, name);
      }
    }
    return cpu_caps_from_flags("", limit, name);
  }();
  return caps;
}

std::string to_string(Backend backend) {
  switch (backend) {
    case Backend::kNone: return "none";
    case Backend::kNative: return "native";
    case Backend::kEmulate: return "emulate";
  }
  return "?";
}

std::string Fp8Policy::summary() const {
  if (!enabled) return "";
  return "fp8 " + to_string(hybrid ? Fp8FormatSet::kHybrid : Fp8FormatSet::kE4M3) + ", " +
         to_string(delayed ? Fp8Recipe::kDelayed : Fp8Recipe::kCurrent) +
         " scaling (margin " + std::to_string(margin) +
         (delayed ? ", amax history " + std::to_string(amax_history_len) + ", " +
                        to_string(amax_max ? AmaxCompute::kMax : AmaxCompute::kMostRecent)
                  : std::string()) +
         (skip_modules.empty() ? "" : ", " + std::to_string(skip_modules.size()) +
                                          " skip_modules glob(s)") +
         ")" + (scaled_mm ? ", Linear GEMMs by " + to_string(Fp8GemmPath::kScaledMm) : "");
}

std::string Policy::loss_scale_text() const {
  return dynamic_scale ? std::string("dynamic") : nlohmann::json(static_scale).dump();
}

namespace {

// Where `p`'s low precision runs (p.backend, p.backend_reason, p.slow_backend) for the setting
// amp.backend `backend` on `device_is_cuda` / a CPU with `cpu`. Throws ConfigError for a native
// backend the device has no kernels for.
void choose_backend(Policy& p, AmpBackend backend, bool device_is_cuda, const CpuCaps& cpu) {
  const std::string level = to_string(p.opt_level);
  const bool cpu_has_kernels = p.dtype == Dtype::kBf16 && p.opt_level == OptLevel::kO1;
  if (p.opt_level == OptLevel::kO0) {
    p.backend = Backend::kNone;
    p.backend_reason = "O0: fp32, no low precision";
  } else if (backend == AmpBackend::kEmulate) {
    p.backend = Backend::kEmulate;
    p.backend_reason = "amp.backend emulate";
  } else if (backend == AmpBackend::kNative) {
    if (!device_is_cuda && !cpu_has_kernels) {
      throw ConfigError("amp.backend native has no kernels on this CPU for " + level + " " +
                        to_string(p.dtype) +
                        " (LibTorch's CPU autocast covers bf16 O1 only; CPU fp16 kernels do not "
                        "exist); use amp.backend emulate or auto, or device cuda");
    }
    if (!device_is_cuda && !cpu.isa_limit.empty()) {
      throw ConfigError("amp.backend native: oneDNN is held to " + cpu.isa_limit +
                        ", which has no bf16 kernels; use amp.backend emulate or auto, or unset "
                        "the variable");
    }
    p.backend = Backend::kNative;
    p.backend_reason = "amp.backend native";
    if (!device_is_cuda && !cpu.bf16()) {
      p.slow_backend = true;
      p.backend_reason += " on a CPU without avx512_bf16 / amx_bf16 (slow bf16 kernels; auto "
                          "would emulate)";
    }
  } else if (device_is_cuda) {
    p.backend = Backend::kNative;
    p.backend_reason = "auto: CUDA kernels";
  } else if (!cpu_has_kernels) {
    p.backend = Backend::kEmulate;
    p.backend_reason = "auto: LibTorch has no CPU kernels for " + level + " " +
                       to_string(p.dtype);
  } else if (cpu.bf16()) {
    p.backend = Backend::kNative;
    p.backend_reason = "auto: the CPU has " + cpu.bf16_flags + " (oneDNN bf16 kernels)";
  } else if (!cpu.isa_limit.empty()) {
    p.backend = Backend::kEmulate;
    p.backend_reason = "auto: oneDNN is held to " + cpu.isa_limit + ", which has no bf16 kernels";
  } else {
    p.backend = Backend::kEmulate;
    p.backend_reason = "auto: the CPU lacks avx512_bf16 / amx_bf16, where native bf16 is many "
                       "times slower than fp32 (docs/PERFORMANCE.md)";
  }
}

// `value` of the integer key `key` within the bounds schemas/config.yaml gives it (settings made
// in code have not been through the schema's checks); ConfigError naming both otherwise.
void check_schema_bounds(const std::string& key, int64_t value) {
  const KeySpec* spec = Schema::builtin().find(key);
  if (!spec || !((spec->min && static_cast<double>(value) < *spec->min) ||
                 (spec->max && static_cast<double>(value) > *spec->max))) {
    return;
  }
  auto bound = [](const std::optional<double>& b) {
    return b ? std::to_string(static_cast<int64_t>(*b)) : std::string();
  };
  throw ConfigError(key + " must be in " + bound(spec->min) + ".." + bound(spec->max) + ", got " +
                    std::to_string(value));
}

// amp.fp8.*, checked.
Fp8Policy fp8_policy(const Fp8Settings& s) {
  if (s.enabled) {
    check_schema_bounds("amp.fp8.margin", s.margin);
    check_schema_bounds("amp.fp8.amax_history_len", s.amax_history_len);
  }
  Fp8Policy p;
  p.enabled = s.enabled;
  p.hybrid = s.format == Fp8FormatSet::kHybrid;
  p.delayed = s.recipe == Fp8Recipe::kDelayed;
  p.margin = static_cast<int>(s.margin);
  p.amax_history_len = s.amax_history_len;
  p.amax_max = s.amax_compute == AmaxCompute::kMax;
  p.skip_modules = s.skip_modules;
  p.scaled_mm = s.gemm == Fp8GemmPath::kScaledMm;
  return p;
}

}  // namespace

Policy resolve_policy(const AmpSettings& amp, bool device_is_cuda, const CpuCaps& cpu) {
  Policy p;
  p.opt_level = amp.opt_level;
  p.dtype = amp.dtype;
  p.on_cuda = device_is_cuda;
  const std::string level = to_string(p.opt_level);
  const auto keep_bn = flag(amp.keep_batchnorm_fp32);
  const auto masters = flag(amp.master_weights);

  // apex's property table.
  switch (p.opt_level) {
    case OptLevel::kO0:
      if (keep_bn.value_or(false) || masters.value_or(false)) {
        throw ConfigError(std::string(keep_bn.value_or(false) ? "amp.keep_batchnorm_fp32"
                                                              : "amp.master_weights") +
                          " is true but amp.opt_level O0 keeps the whole model fp32; leave it "
                          "auto or use O2/O3");
      }
      break;
    case OptLevel::kO1:
      if (keep_bn || masters) {
        throw ConfigError(std::string(keep_bn ? "amp.keep_batchnorm_fp32" : "amp.master_weights") +
                          " must be auto with amp.opt_level O1: O1 casts around ops and keeps the "
                          "model weights fp32 (apex refuses it too); use O2 or O3 to cast the model");
      }
      p.patch_ops = true;
      break;
    case OptLevel::kO2:
      p.cast_model = true;
      p.keep_batchnorm_fp32 = keep_bn.value_or(true);
      p.master_weights = masters.value_or(true);
      break;
    case OptLevel::kO3:
      p.cast_model = true;
      p.keep_batchnorm_fp32 = keep_bn.value_or(false);
      p.master_weights = masters.value_or(false);
      break;
  }
  p.combine_grad = amp.combine_grad;
  p.fp32_modules = amp.fp32_modules;
  p.fp8 = fp8_policy(amp.fp8);
  if (p.combine_grad && p.opt_level == OptLevel::kO2 && !p.master_weights) {
    throw ConfigError(
        "amp.combine_grad true with amp.opt_level O2 needs master weights (Ascend apex refuses "
        "it); set amp.master_weights auto/true or amp.combine_grad false");
  }

  // Loss scale: auto = the level's default.
  if (amp.loss_scale.word == LossScaleWord::kAuto) {
    p.dynamic_scale = p.opt_level == OptLevel::kO1 || p.opt_level == OptLevel::kO2;
  } else if (amp.loss_scale.word == LossScaleWord::kDynamic) {
    p.dynamic_scale = true;  // also -1
  } else {
    p.dynamic_scale = false;
    p.static_scale = amp.loss_scale.value;
  }
  p.min_scale = amp.min_loss_scale;
  p.max_scale = amp.max_loss_scale;
  p.growth_interval = amp.growth_interval;
  if (p.min_scale > p.max_scale) {
    throw ConfigError("amp.min_loss_scale (" + nlohmann::json(p.min_scale).dump() +
                      ") is above amp.max_loss_scale (" + nlohmann::json(p.max_scale).dump() + ")");
  }
  p.init_scale = std::min(65536.0, p.max_scale);

  // Backend.
  choose_backend(p, amp.backend, device_is_cuda, cpu);
  return p;
}

Policy apex_properties(const AmpSettings& amp) { return resolve_policy(amp, true); }

std::vector<std::pair<std::string, std::string>> opt_level_change(const AmpSettings& amp,
                                                                  OptLevel to) {
  std::vector<std::pair<std::string, std::string>> change{{"amp.opt_level", to_string(to)}};
  // The refusals of resolve_policy's property table.
  auto refused = [&](AutoBool value) {
    return (to == OptLevel::kO1 && value != AutoBool::kAuto) ||
           (to == OptLevel::kO0 && value == AutoBool::kTrue);
  };
  const std::string automatic = to_string(AutoBool::kAuto);
  if (refused(amp.keep_batchnorm_fp32)) change.emplace_back("amp.keep_batchnorm_fp32", automatic);
  if (refused(amp.master_weights)) change.emplace_back("amp.master_weights", automatic);
  return change;
}

namespace {

// apex's levels, least fp32 work first (policy.h fp32_order), with what each keeps in fp32.
const std::pair<OptLevel, const char*> kTowardFp32[] = {
    {OptLevel::kO3, "no fp32 copy"},
    {OptLevel::kO2, "fp32 master weights"},
    {OptLevel::kO1, "per-op casts, fp32 weights"},
    {OptLevel::kO0, "all fp32"}};

}  // namespace

int fp32_order(OptLevel level) {
  for (int i = 0; i < static_cast<int>(std::size(kTowardFp32)); ++i) {
    if (kTowardFp32[i].first == level) return i;
  }
  throw std::logic_error("no place in the opt-level order for " + to_string(level));
}

std::optional<OptLevel> toward_fp32(OptLevel level) {
  const size_t next = static_cast<size_t>(fp32_order(level)) + 1;
  if (next == std::size(kTowardFp32)) return std::nullopt;
  return kTowardFp32[next].first;
}

std::string fp32_summary(OptLevel level) { return kTowardFp32[fp32_order(level)].second; }

}  // namespace amptune::amp
