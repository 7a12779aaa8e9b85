#include "core/tune_words.h"

#include "core/name_table.h"

namespace amptune {
namespace {

const NameTable<TuneMoveKind, 14> kTuneMoveKind = {
    {{TuneMoveKind::kLossScale, "loss_scale"},
     {TuneMoveKind::kKeepBatchnormFp32, "keep_batchnorm_fp32"},
     {TuneMoveKind::kFp32Modules, "fp32_modules"},
     {TuneMoveKind::kCasts, "casts"},
     {TuneMoveKind::kOptLevel, "opt_level"},
     {TuneMoveKind::kLrDecEpoch, "lr_dec_epoch"},
     {TuneMoveKind::kFp8SkipModules, "fp8_skip_modules"},
     {TuneMoveKind::kFp8Recipe, "fp8_recipe"},
     {TuneMoveKind::kFp8Margin, "fp8_margin"},
     {TuneMoveKind::kFp8History, "fp8_history"},
     {TuneMoveKind::kUnion, "union"},
     {TuneMoveKind::kUndo, "undo"},
     {TuneMoveKind::kConfirm, "confirm"},
     {TuneMoveKind::kSeed, "seed"}}};
const NameTable<Objective, 2> kObjective = {
    {{Objective::kPrecision, "precision"}, {Objective::kSpeed, "speed"}}};

}  // namespace

bool is_allowable(TuneMoveKind move) {
  return static_cast<int>(move) <= static_cast<int>(TuneMoveKind::kFp8History);
}

std::string to_string(TuneMoveKind value) { return name_in(kTuneMoveKind, value); }
std::string to_string(Objective value) { return name_in(kObjective, value); }
std::optional<TuneMoveKind> parse_tune_move_kind(const std::string& text) {
  return value_in(kTuneMoveKind, text);
}
std::optional<Objective> parse_objective(const std::string& text) {
  return value_in(kObjective, text);
}

}  // namespace amptune
