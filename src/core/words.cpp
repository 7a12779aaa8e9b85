#include "core/words.h"

#include "core/name_table.h"

namespace amptune {
namespace {

const NameTable<OptLevel, 4> kOptLevel = {
    {{OptLevel::kO0, "O0"}, {OptLevel::kO1, "O1"}, {OptLevel::kO2, "O2"}, {OptLevel::kO3, "O3"}}};
const NameTable<Dtype, 2> kDtype = {{{Dtype::kFp16, "fp16"}, {Dtype::kBf16, "bf16"}}};
const NameTable<AmpBackend, 3> kAmpBackend = {{{AmpBackend::kAuto, "auto"},
                                               {AmpBackend::kNative, "native"},
                                               {AmpBackend::kEmulate, "emulate"}}};
const NameTable<DistBackend, 3> kDistBackend = {
    {{DistBackend::kAuto, "auto"}, {DistBackend::kGloo, "gloo"}, {DistBackend::kNccl, "nccl"}}};
const NameTable<DeviceChoice, 3> kDeviceChoice = {
    {{DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"}, {DeviceChoice::kCuda, "cuda"}}};
const NameTable<MemoryFormat, 3> kMemoryFormat = {{{MemoryFormat::kAuto, "auto"},
                                                   {MemoryFormat::kChannelsLast, "channels_last"},
                                                   {MemoryFormat::kContiguous, "contiguous"}}};
const NameTable<ModelTask, 2> kModelTask = {
    {{ModelTask::kClassification, "classification"}, {ModelTask::kCustom, "custom"}}};
const NameTable<DataFormat, 5> kDataFormat = {{{DataFormat::kImageFolder, "imagefolder"},
                                               {DataFormat::kIdx, "idx"},
                                               {DataFormat::kRootNet, "rootnet"},
                                               {DataFormat::kTensors, "tensors"},
                                               {DataFormat::kSynthetic, "synthetic"}}};
const NameTable<OptimizerName, 2> kOptimizerName = {
    {{OptimizerName::kSgd, "sgd"}, {OptimizerName::kAdam, "adam"}}};
const NameTable<LrPolicy, 2> kLrPolicy = {
    {{LrPolicy::kStep, "step"}, {LrPolicy::kCosine, "cosine"}}};
const NameTable<AutoBool, 3> kAutoBool = {
    {{AutoBool::kAuto, "auto"}, {AutoBool::kTrue, "true"}, {AutoBool::kFalse, "false"}}};
const NameTable<LossScaleWord, 2> kLossScaleWord = {
    {{LossScaleWord::kAuto, "auto"}, {LossScaleWord::kDynamic, "dynamic"}}};
const NameTable<Fp8FormatSet, 2> kFp8FormatSet = {
    {{Fp8FormatSet::kHybrid, "hybrid"}, {Fp8FormatSet::kE4M3, "e4m3"}}};
const NameTable<Fp8Recipe, 2> kFp8Recipe = {
    {{Fp8Recipe::kDelayed, "delayed"}, {Fp8Recipe::kCurrent, "current"}}};
const NameTable<AmaxCompute, 2> kAmaxCompute = {
    {{AmaxCompute::kMax, "max"}, {AmaxCompute::kMostRecent, "most_recent"}}};
const NameTable<Fp8GemmPath, 2> kFp8GemmPath = {
    {{Fp8GemmPath::kEmulate, "emulate"}, {Fp8GemmPath::kScaledMm, "scaled_mm"}}};
const NameTable<PruneRule, 3> kPruneRule = {
    {{PruneRule::kNone, "none"}, {PruneRule::kAsha, "asha"}, {PruneRule::kMedian, "median"}}};
const NameTable<ScaleReason, 3> kScaleReason = {{{ScaleReason::kInit, "init"},
                                                 {ScaleReason::kOverflow, "overflow"},
                                                 {ScaleReason::kGrowth, "growth"}}};
const NameTable<TensorDtype, 4> kTensorDtype = {{{TensorDtype::kFp16, "fp16"},
                                                 {TensorDtype::kBf16, "bf16"},
                                                 {TensorDtype::kFp32, "fp32"},
                                                 {TensorDtype::kInt32, "int32"}}};

}  // namespace

std::string to_string(OptLevel value) { return name_in(kOptLevel, value); }
std::string to_string(Dtype value) { return name_in(kDtype, value); }
std::string to_string(AmpBackend value) { return name_in(kAmpBackend, value); }
std::string to_string(DistBackend value) { return name_in(kDistBackend, value); }
std::string to_string(DeviceChoice value) { return name_in(kDeviceChoice, value); }
std::string to_string(MemoryFormat value) { return name_in(kMemoryFormat, value); }
std::string to_string(ModelTask value) { return name_in(kModelTask, value); }
std::string to_string(DataFormat value) { return name_in(kDataFormat, value); }
std::string to_string(OptimizerName value) { return name_in(kOptimizerName, value); }
std::string to_string(LrPolicy value) { return name_in(kLrPolicy, value); }
std::string to_string(AutoBool value) { return name_in(kAutoBool, value); }
std::string to_string(LossScaleWord value) { return name_in(kLossScaleWord, value); }
std::string to_string(Fp8FormatSet value) { return name_in(kFp8FormatSet, value); }
std::string to_string(Fp8Recipe value) { return name_in(kFp8Recipe, value); }
std::string to_string(AmaxCompute value) { return name_in(kAmaxCompute, value); }
std::string to_string(Fp8GemmPath value) { return name_in(kFp8GemmPath, value); }
std::string to_string(PruneRule value) { return name_in(kPruneRule, value); }
std::string to_string(ScaleReason value) { return name_in(kScaleReason, value); }
std::string to_string(TensorDtype value) { return name_in(kTensorDtype, value); }
std::optional<OptLevel> parse_opt_level(const std::string& text) {
  return value_in(kOptLevel, text);
}
std::optional<Dtype> parse_dtype(const std::string& text) { return value_in(kDtype, text); }
std::optional<AmpBackend> parse_amp_backend(const std::string& text) {
  return value_in(kAmpBackend, text);
}
std::optional<DistBackend> parse_dist_backend(const std::string& text) {
  return value_in(kDistBackend, text);
}
std::optional<DeviceChoice> parse_device_choice(const std::string& text) {
  return value_in(kDeviceChoice, text);
}
std::optional<MemoryFormat> parse_memory_format(const std::string& text) {
  return value_in(kMemoryFormat, text);
}
std::optional<ModelTask> parse_model_task(const std::string& text) {
  return value_in(kModelTask, text);
}
std::optional<DataFormat> parse_data_format(const std::string& text) {
  return value_in(kDataFormat, text);
}
std::optional<OptimizerName> parse_optimizer_name(const std::string& text) {
  return value_in(kOptimizerName, text);
}
std::optional<LrPolicy> parse_lr_policy(const std::string& text) {
  return value_in(kLrPolicy, text);
}
std::optional<AutoBool> parse_auto_bool(const std::string& text) {
  return value_in(kAutoBool, text);
}
std::optional<LossScaleWord> parse_loss_scale_word(const std::string& text) {
  return value_in(kLossScaleWord, text);
}
std::optional<Fp8FormatSet> parse_fp8_format_set(const std::string& text) {
  return value_in(kFp8FormatSet, text);
}
std::optional<Fp8Recipe> parse_fp8_recipe(const std::string& text) {
  return value_in(kFp8Recipe, text);
}
std::optional<AmaxCompute> parse_amax_compute(const std::string& text) {
  return value_in(kAmaxCompute, text);
}
std::optional<Fp8GemmPath> parse_fp8_gemm_path(const std::string& text) {
  return value_in(kFp8GemmPath, text);
}
std::optional<PruneRule> parse_prune_rule(const std::string& text) {
  return value_in(kPruneRule, text);
}
std::optional<ScaleReason> parse_scale_reason(const std::string& text) {
  return value_in(kScaleReason, text);
}
std::optional<TensorDtype> parse_tensor_dtype(const std::string& text) {
  return value_in(kTensorDtype, text);
}

TensorDtype tensor_dtype(Dtype dtype) {
  return dtype == Dtype::kBf16 ? TensorDtype::kBf16 : TensorDtype::kFp16;
}

}  // namespace amptune
