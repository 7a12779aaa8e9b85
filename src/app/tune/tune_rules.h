// The rules of `amptune tune` (docs/TUNE.md) as pure functions: the tolerance band around the
// reference, a candidate's outcome from its curve and how far it got, the moves a diagnosis and
// the move order offer over a setting (apex's meaning of the amp keys from amp/policy), their
// union, the rungs of a round's successive halving, the bisection of a solution's items, the
// objective's order and the answer as YAML. No database, no torch: app/tune/tune_search.h runs the
// search with them.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/tune_words.h"
#include "records/records.h"

namespace amptune::app {

using Overrides = std::vector<std::pair<std::string, nlohmann::json>>;  // key -> value

// tune.tolerance against the reference's value of a metric.
struct Tolerance {
  double abs = 0;  // exactly one of abs, rel is > 0
  double rel = 0;
  bool higher_is_better = true;
  // The worst value still within tolerance of `reference`.
  double limit(double reference) const;
  // Whether `value` is finite and no worse than limit(reference). False when either is not
  // finite.
  bool within(double value, double reference) const;
  // How much worse than `reference` `value` is (negative: better), in the metric's units;
  // +infinity for a value that is not finite.
  double shortfall(double value, double reference) const;
};

// `base` with `overrides` set.
Config with(const Config& base, const Overrides& overrides);
// `names` without repeats, in the order of their first appearance.
std::vector<std::string> distinct(const std::vector<std::string>& names);

// The first epoch of 0..`last` at which `values` is outside the band around `reference`, or has
// no value (a run that diverged there recorded none); unset when every epoch is inside.
std::optional<int> exit_epoch(const std::map<int, double>& values,
                              const std::map<int, double>& reference, int last,
                              const Tolerance& tolerance);

// How a candidate ended (tune_candidates.outcome; its names: records/records.h).
using Outcome = records::CandidateOutcome;

// What the rules see of a run: how it ended and its metric per epoch (a fork's values include
// its ancestors' epochs up to where it forked).
struct RunCurve {
  records::RunStatus status = records::RunStatus::kPending;
  std::map<int, double> values;  // epoch -> the metric (NaN when recorded as not finite)
  // Its last recorded epoch ended inside a streak of non-finite training losses (the epoch's
  // nonfinite_streak > 0, docs/AMP.md "Divergence").
  bool ends_non_finite = false;
};

// The outcome of a finished curve, a function of its steps only (docs/TUNE.md "One outcome per
// curve"): failed and pruned as the run ended; diverged when the run diverged, its last epoch
// ended inside a non-finite streak, or its metric at `last` is missing or not finite; else
// within or outside the tolerance of `reference` (the reference's metric at `last`).
Outcome judge(const RunCurve& curve, int last, double reference, const Tolerance& tolerance);

// How far a candidate got: the epochs from 0 with a finite metric, in a row, and its shortfall
// (Tolerance::shortfall) against the reference at the last of them (+infinity when none).
struct Progress {
  int reached = 0;
  double shortfall = 0;
};
Progress progress_of(const RunCurve& curve, const std::map<int, double>& reference, int last,
                     const Tolerance& tolerance);
// Whether `a` got further than `b`: more epochs, then a smaller shortfall.
bool further(const Progress& a, const Progress& b);

// One candidate of a round: a change of the round's start, and where it came from.
struct TuneMove {
  TuneMoveKind move = TuneMoveKind::kLossScale;  // an allowable one, or the search's own
  Overrides change;    // the keys it sets, with their new values
  std::string reason;  // one line for people
  std::optional<records::AdviceRule> advice_rule;  // the advice row it came from; unset: the order
  std::string advice_module;                       // "" for the order
};

// The moves over `current` (a resolved config: the round's start), in the order they are tried:
// first one per advice row that maps to an allowed move (activation_overflow and
// first_departure -> fp32_modules + [the module] (its enclosing block under O2/O3 for an
// overflow); gradient_underflow / gradient_overflow under a static scale -> loss_scale dynamic;
// batchnorm_low_precision -> keep_batchnorm_fp32 true; cast_point -> that point out of
// casts.int32; under amp.fp8.enabled fp8_keep_out -> fp8_skip_modules + [the module],
// fp8_current_scaling -> fp8_recipe current, fp8_raise_margin -> fp8_margin + 1,
// fp8_shorten_history -> fp8_history / 16), preceded, when the advice names two or more
// overflowing modules, by one move that keeps them all in fp32 together; then every other
// allowed move that changes something, cheapest first: loss_scale (static -> dynamic), casts
// (all removed), keep_batchnorm_fp32 (true under O2/O3), under FP8 fp8_recipe (delayed ->
// current), fp8_margin (+ 1) and fp8_history (delayed: 16 times shorter, at least 1),
// lr_dec_epoch (each decay after `fork_epoch` one epoch later, once per path: not when
// `lr_shifted`), opt_level (one level toward fp32, amp::toward_fp32: O3 -> O2 -> O1, never O0,
// with the keys apex refuses at the new level back to auto: amp::opt_level_change). What the amp
// keys mean (a static scale, BatchNorm in low precision, a cast model) is amp::apex_properties'.
// fp32_modules and fp8_skip_modules are offered only by a diagnosis. Two moves with the same
// change are one (the first).
std::vector<TuneMove> candidate_moves(const Config& current,
                                      const std::vector<records::DiagnosisAdvice>& advice,
                                      const std::vector<TuneMoveKind>& allowed, int fork_epoch,
                                      bool lr_shifted);

// The change that applies every move of `moves` (made over `current`) at once: the union of the
// modules they keep in fp32 (amp.fp32_modules) and of those they keep out of FP8
// (amp.fp8.skip_modules), the cast points none of them keeps
// (casts.int32), and each other key as the first move that sets it sets it. (Intel Neural
// Compressor's accumulated fallback; docs/TUNE.md step 7.)
Overrides union_change(const Config& current, const std::vector<TuneMove>& moves);
// Whether `key` is a list of modules that moves add to and a union joins: amp.fp32_modules,
// amp.fp8.skip_modules.
bool is_module_list(const std::string& key);

// The epochs at which a round's successive halving decides: fork_epoch + min_epochs * eta^k
// (k = 0, 1, ...) while before `last_epoch`, then last_epoch itself (the end, where candidates
// are judged). fork_epoch -1: fresh runs.
std::vector<int> tune_rungs(int fork_epoch, int last_epoch, int eta, int min_epochs);

// Bisection of the items of a solution (its fp32 modules, and the moves a union combined;
// Polygraphy's `debug precision` style): chunks of the kept list are dropped, halves first; a
// probe without a chunk that stays within tolerance drops it for good, one that does not splits
// it (a single item stays). `probes` are the results so far (the items a probe dropped, whether
// it stayed within tolerance), in order. An item listed twice counts once (a config from a
// database may repeat one), so the probes are at most 2 x (distinct items) - 1.
// Returns the next chunk to drop, or unset when done; `kept` gets the items kept so far. Ends
// with a list from which dropping any one item was tried and left tolerance (assuming
// monotonicity: more fp32 work is never worse).
std::optional<std::vector<std::string>> next_bisect_probe(
    const std::vector<std::string>& modules,
    const std::vector<std::pair<std::vector<std::string>, bool>>& probes,
    std::vector<std::string>& kept);

// The objective "precision" as a key to sort by, smaller = less fp32 work, then lower precision:
// `fp32_share`, the share of the forward pass's multiply-accumulates run in fp32
// (train::forward_work; NaN when it could not be measured, ranked as 1), then the share not run
// in FP8 (1 - `fp8_share`, the share run in FP8, 0 without it; NaN ranked as none: fewer
// modules kept out of FP8 is lower precision), then the opt level (amp::fp32_order: O3 < O2 <
// O1 < O0), then the number of distinct amp.fp32_modules, then BatchNorm held in fp32 under
// O2/O3, then the number of distinct amp.fp8.skip_modules under FP8.
std::vector<double> precision_rank(const Config& config, double fp32_share,
                                   double fp8_share = 0.0);

// Bisection over a solution's modules: its items, each module it keeps in fp32 (its name), then
// each it keeps out of FP8 ("fp8:" + its name, under amp.fp8.enabled), each once; the change over
// `solution` that keeps, of them, those in `kept` and not in `dropped` (amp.fp32_modules, and
// amp.fp8.skip_modules under FP8); and a probe's move: fp8_skip_modules when it drops only
// modules kept out of FP8, undo when it drops anything that is not a module item (a key a union
// set), else fp32_modules.
std::vector<std::string> module_items(const Config& solution);
Overrides module_probe(const Config& solution, const std::vector<std::string>& kept,
                       const std::vector<std::string>& dropped);
TuneMoveKind bisect_move(const std::vector<std::string>& dropped,
                         const std::vector<std::string>& module_items);

// The keys of `config` that differ from `base`, among `keys`, as YAML lines ready for base:
// ("amp.fp32_modules: [conv1]\n"), in the order of `keys` (each once).
std::string changed_yaml(const Config& config, const Config& base,
                         const std::vector<std::string>& keys);
// A JSON value as flow YAML: strings plain when safe ("dynamic", "O1"), quoted otherwise; lists
// as [a, b].
std::string flow_yaml(const nlohmann::json& value);
// Moves as a flow YAML list of their names: "[loss_scale, casts]".
std::string moves_yaml(const std::vector<TuneMoveKind>& moves);

// The seed noise of `values` (the final metric of the reference trained with different seeds):
// their range, max - min over the finite ones; 0 for fewer than two.
double seed_noise(const std::vector<double>& values);

// What the full grid of the tried moves would train: the product over moves of the values each
// took (fp32_modules: every subset of the modules its changes named; another move: 1 + its
// distinct changes), times `epochs` per run, plus the reference.
int grid_epochs(const std::vector<records::TuneCandidateRow>& candidates, int epochs);

}  // namespace amptune::app
