// The rules of `amptune tune` (docs/TUNE.md) as pure functions: the tolerance band around the
// reference, the moves a diagnosis and the move order offer over a setting, the rungs of a
// round's successive halving, the bisection of fp32 modules, the objective's order and the
// answer as YAML. No database, no torch: app/tune.h runs the search on the store with them.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "store/records.h"

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

// The first epoch, in ascending order of the epochs both have, at which `values` is outside the
// band around `reference`; unset when it never is.
std::optional<int> first_exit(const std::map<int, double>& values,
                              const std::map<int, double>& reference, const Tolerance& tolerance);

// One candidate of a round: a change of the round's start, and where it came from.
struct TuneMove {
  std::string move;    // loss_scale | casts | keep_batchnorm_fp32 | fp32_modules | opt_level |
                       // lr_dec_epoch
  Overrides change;    // the keys it sets, with their new values
  std::string reason;  // one line for people
  std::string advice_rule, advice_module;  // the advice row it came from; "" for the order
};

// The moves over `current` (a resolved config: the round's start), in the order they are tried:
// first one per advice row that maps to an allowed move (activation_overflow and
// first_departure -> fp32_modules + [the module] (its enclosing block under O2/O3 for an
// overflow); gradient_underflow / gradient_overflow under a static scale -> loss_scale dynamic;
// batchnorm_low_precision -> keep_batchnorm_fp32 true; cast_point -> that point out of
// casts.int32), then every other allowed move that changes something, cheapest first:
// loss_scale (static -> dynamic), casts (all removed), keep_batchnorm_fp32 (true under O2/O3),
// lr_dec_epoch (each decay after `fork_epoch` one epoch later, once per path: not when
// `lr_shifted`), opt_level (O3 -> O2 -> O1; to O1 with keep_batchnorm_fp32 and master_weights
// back to auto, which apex refuses with O1). fp32_modules is offered only by a diagnosis. Two
// moves with the same change are one (the first).
std::vector<TuneMove> candidate_moves(const Config& current,
                                      const std::vector<store::DiagnosisAdvice>& advice,
                                      const std::vector<std::string>& allowed, int fork_epoch,
                                      bool lr_shifted);

// The epochs at which a round's successive halving decides: fork_epoch + min_epochs * eta^k
// (k = 0, 1, ...) while before `last_epoch`, then last_epoch itself (the end, where candidates
// are judged). fork_epoch -1: fresh runs.
std::vector<int> tune_rungs(int fork_epoch, int last_epoch, int eta, int min_epochs);

// Bisection of the fp32 modules of a solution (Polygraphy's `debug precision` style): chunks of
// the kept list are dropped, halves first; a probe without a chunk that stays within tolerance
// drops it for good, one that does not splits it (a single module stays). `probes` are the
// results so far (the modules a probe dropped, whether it stayed within tolerance), in order.
// A module listed twice counts once (a config from a database may repeat one), so the probes
// are at most 2 x (distinct modules) - 1.
// Returns the next chunk to drop, or unset when done; `kept` gets the modules kept so far. Ends
// with a list from which dropping any one module was tried and left tolerance (assuming
// monotonicity: more fp32 modules are never worse).
std::optional<std::vector<std::string>> next_bisect_probe(
    const std::vector<std::string>& modules,
    const std::vector<std::pair<std::vector<std::string>, bool>>& probes,
    std::vector<std::string>& kept);

// The objective "precision" as a key to sort by, smaller = less fp32 work: `fp32_share`, the
// share of the forward pass's multiply-accumulates run in fp32 (train::forward_work; NaN when it
// could not be measured, ranked as 1), then the opt level (O3 < O2 < O1 < O0), then the number of
// distinct amp.fp32_modules, then BatchNorm held in fp32 under O2/O3.
std::vector<double> precision_rank(const Config& config, double fp32_share);

// The keys of `config` that differ from `base`, among `keys`, as YAML lines ready for base:
// ("amp.fp32_modules: [conv1]\n"), in the order of `keys` (each once).
std::string changed_yaml(const Config& config, const Config& base,
                         const std::vector<std::string>& keys);
// A JSON value as flow YAML: strings plain when safe ("dynamic", "O1"), quoted otherwise; lists
// as [a, b].
std::string flow_yaml(const nlohmann::json& value);

// What the full grid of the tried moves would train: the product over moves of (1 + the number
// of distinct changes tried with it), times `epochs` per run, plus the reference.
int grid_epochs(const std::vector<store::TuneCandidateRow>& candidates, int epochs);

}  // namespace amptune::app
