// The words of amptune tune that more than one layer reads or writes, each an enum class with
// one table of its names (tune_words.cpp), in the pattern of core/words.h: the moves (tune.moves,
// and the column tune_candidates.move with the search's own candidates besides) and
// tune.objective.
//
//   const std::optional<TuneMoveKind> move = parse_tune_move_kind("casts");  // unset: "fp64"
//   tune_candidates.move = to_string(*move);                                // "casts"
//
// In core because the tune block (core/sweep.h) holds them and the records below the store
// (records/records.h) as well; apart from core/words.h, which every layer includes, because
// only the tune block, its records, its store side and app/tune_* read them. A value here carries
// no meaning: what a move changes is app/tune/tune_rules.h's, how an objective ranks the solutions
// app/tune/tune_search.cpp's. parse_*(text) is unset for a word not in the table; its caller says
// where the word came from. No torch in this header.
#pragma once

#include <optional>
#include <string>

namespace amptune {

// A candidate's move. The first ten are the changes of a setting that tune.moves may allow (its
// choices in schemas/sweep.yaml; the last four those of FP8, docs/TUNE.md "FP8"); the rest are
// candidates the search makes itself: the union of
// a round's moves that helped, a bisection probe that undoes a union's items, the answer trained
// from scratch (tune.confirm), the reference with another seed (tune.reference_repeats).
enum class TuneMoveKind {
  kLossScale,          // loss_scale: a static scale -> dynamic
  kKeepBatchnormFp32,  // keep_batchnorm_fp32: true under O2/O3
  kFp32Modules,        // fp32_modules: a module kept in fp32
  kCasts,              // casts: int32 cast points removed
  kOptLevel,           // opt_level: one step toward fp32
  kLrDecEpoch,         // lr_dec_epoch: the learning-rate decays one epoch later
  kFp8SkipModules,     // fp8_skip_modules: a module kept out of FP8 (amp.fp8.skip_modules)
  kFp8Recipe,          // fp8_recipe: amp.fp8.recipe delayed -> current
  kFp8Margin,          // fp8_margin: amp.fp8.margin + 1
  kFp8History,         // fp8_history: a shorter amp.fp8.amax_history_len
  kUnion,
  kUndo,
  kConfirm,
  kSeed
};
// tune.objective: the answer among the solutions - the least fp32 work, or the highest img/s.
enum class Objective { kPrecision, kSpeed };

// Whether tune.moves may name `move` (the first ten); false for the search's own candidates.
bool is_allowable(TuneMoveKind move);

std::string to_string(TuneMoveKind value);  // "loss_scale", "fp32_modules", ..., "union", "seed"
std::string to_string(Objective value);     // "precision" | "speed"
std::optional<TuneMoveKind> parse_tune_move_kind(const std::string& text);
std::optional<Objective> parse_objective(const std::string& text);

}  // namespace amptune
