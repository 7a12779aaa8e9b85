// The enum-like words that more than one layer reads or writes, each an enum class with one
// table of its names (words.cpp): every config key of fixed words that the typed settings hold
// (core/settings.h: device, model.memory_format, model.task, data.format, optim.name,
// schedule.lr_policy, amp.opt_level, amp.dtype, amp.backend, amp.keep_batchnorm_fp32 and
// amp.master_weights, amp.loss_scale's words, amp.fp8.format / recipe / amax_compute / gemm,
// dist.backend) and prune.rule, and two columns of
// the results database (why the loss scale changed; the type of a diagnosed tensor).
//
//   const std::optional<OptLevel> level = parse_opt_level("O2");   // unset for "o2", "O4"
//   runs.opt_level = to_string(*level);                            // "O2"
//
// They live in core because the layers that need one value cannot include each other: the
// config's typed sections (core/settings.h) and sweep blocks (core/sweep.h), the loss scaler
// (amp/scaler.h) and the store's records (records/records.h, which neither amp nor any torch code
// may reach from below). A value here carries no meaning: what an opt level does is apex's rule
// and stays in amp/policy.h, which backend `auto` picks in amp/policy.h and dist/group.h, how a
// prune rule decides in app/prune/prune_rules.h.
//
// parse_*(text) is unset for a word not in the table; its caller says where the word came from
// (ConfigError naming the key, StoreError naming table, row and column). No torch in this header.
#pragma once

#include <optional>
#include <string>

namespace amptune {

enum class OptLevel { kO0, kO1, kO2, kO3 };          // amp.opt_level: O0 | O1 | O2 | O3
enum class Dtype { kFp16, kBf16 };                   // amp.dtype: the low precision of O1-O3
enum class AmpBackend { kAuto, kNative, kEmulate };  // amp.backend as set (amp::Backend: as run)
enum class DistBackend { kAuto, kGloo, kNccl };      // dist.backend
enum class DeviceChoice { kAuto, kCpu, kCuda };      // device as set (torch::Device: as run)
enum class MemoryFormat { kAuto, kChannelsLast, kContiguous };     // model.memory_format
enum class ModelTask { kClassification, kCustom };                 // model.task (torchscript)
enum class DataFormat { kImageFolder, kIdx, kRootNet, kTensors, kSynthetic };  // data.format
enum class OptimizerName { kSgd, kAdam };                          // optim.name
enum class LrPolicy { kStep, kCosine };                            // schedule.lr_policy
// amp.keep_batchnorm_fp32, amp.master_weights: a flag, or auto = the opt level's default.
enum class AutoBool { kAuto, kTrue, kFalse };
// The words of amp.loss_scale (auto = the opt level's default); a static scale is a number
// (core/settings.h LossScale).
enum class LossScaleWord { kAuto, kDynamic };
// amp.fp8.format: hybrid = E4M3 forward, E5M2 gradients; e4m3 = E4M3 everywhere (what each
// does: amp/fp8_gemm.h).
enum class Fp8FormatSet { kHybrid, kE4M3 };
enum class Fp8Recipe { kDelayed, kCurrent };       // amp.fp8.recipe
enum class AmaxCompute { kMax, kMostRecent };      // amp.fp8.amax_compute
// amp.fp8.gemm: how a Linear's FP8 GEMMs run (amp/fp8_gemm.h) - fp32 kernels on the
// quantised values, or torch._scaled_mm on float8 tensors.
enum class Fp8GemmPath { kEmulate, kScaledMm };
enum class PruneRule { kNone, kAsha, kMedian };      // prune.rule; prune_decisions.rule
// loss_scale_events.reason: the scale a run started with (init), halved after an overflow,
// doubled after amp.growth_interval steps without one (growth).
enum class ScaleReason { kInit, kOverflow, kGrowth };
// diagnostics.dtype: the type a diagnosed tensor was computed in (fp32 and int32 besides the
// low precisions: modules kept in fp32, cast points).
enum class TensorDtype { kFp16, kBf16, kFp32, kInt32 };

std::string to_string(OptLevel value);     // "O0" .. "O3"
std::string to_string(Dtype value);        // "fp16" | "bf16"
std::string to_string(AmpBackend value);   // "auto" | "native" | "emulate"
std::string to_string(DistBackend value);  // "auto" | "gloo" | "nccl"
std::string to_string(DeviceChoice value);   // "auto" | "cpu" | "cuda"
std::string to_string(MemoryFormat value);   // "auto" | "channels_last" | "contiguous"
std::string to_string(ModelTask value);      // "classification" | "custom"
// "imagefolder" | "idx" | "rootnet" | "tensors" | "synthetic"
std::string to_string(DataFormat value);
std::string to_string(OptimizerName value);  // "sgd" | "adam"
std::string to_string(LrPolicy value);       // "step" | "cosine"
std::string to_string(AutoBool value);       // "auto" | "true" | "false"
std::string to_string(LossScaleWord value);  // "auto" | "dynamic"
std::string to_string(Fp8FormatSet value);   // "hybrid" | "e4m3"
std::string to_string(Fp8Recipe value);      // "delayed" | "current"
std::string to_string(AmaxCompute value);    // "max" | "most_recent"
std::string to_string(Fp8GemmPath value);    // "emulate" | "scaled_mm"
std::string to_string(PruneRule value);    // "none" | "asha" | "median"
std::string to_string(ScaleReason value);  // "init" | "overflow" | "growth"
std::string to_string(TensorDtype value);  // "fp16" | "bf16" | "fp32" | "int32"
std::optional<OptLevel> parse_opt_level(const std::string& text);
std::optional<Dtype> parse_dtype(const std::string& text);
std::optional<AmpBackend> parse_amp_backend(const std::string& text);
std::optional<DistBackend> parse_dist_backend(const std::string& text);
std::optional<DeviceChoice> parse_device_choice(const std::string& text);
std::optional<MemoryFormat> parse_memory_format(const std::string& text);
std::optional<ModelTask> parse_model_task(const std::string& text);
std::optional<DataFormat> parse_data_format(const std::string& text);
std::optional<OptimizerName> parse_optimizer_name(const std::string& text);
std::optional<LrPolicy> parse_lr_policy(const std::string& text);
std::optional<AutoBool> parse_auto_bool(const std::string& text);
std::optional<LossScaleWord> parse_loss_scale_word(const std::string& text);
std::optional<Fp8FormatSet> parse_fp8_format_set(const std::string& text);
std::optional<Fp8Recipe> parse_fp8_recipe(const std::string& text);
std::optional<AmaxCompute> parse_amax_compute(const std::string& text);
std::optional<Fp8GemmPath> parse_fp8_gemm_path(const std::string& text);
std::optional<PruneRule> parse_prune_rule(const std::string& text);
std::optional<ScaleReason> parse_scale_reason(const std::string& text);
std::optional<TensorDtype> parse_tensor_dtype(const std::string& text);

// The low precision `dtype` as a tensor's type.
TensorDtype tensor_dtype(Dtype dtype);

}  // namespace amptune
