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
