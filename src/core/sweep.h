// A sweep: a base config plus grid / zip / exclude / repeat, expanded into cells.
//
//   name: quickstart
//   description: ...
//   base: {model: {name: resnet18}, optim: {lr: 0.1}}   # nested or dotted keys
//   grid: {optim.lr: [0.05, 0.1], data.batch_size: [64, 128]}   # cartesian product
//   zip:  [{optim.lr: [0.1, 0.2], data.batch_size: [128, 256]}] # lists advance together
//   exclude: [{optim.lr: 0.2, data.batch_size: 64}]             # partial assignments to drop
//   repeat: 2 | [0, 1]       # seeds: a count (seed+0, seed+1) or explicit seeds
//   forks:                   # runs continued from a cell's checkpoint with changed settings
//     - from: {where: {optim.lr: 0.1}, epoch: 1}   # where: cell selector (omitted: every cell)
//       grid: {amp.loss_scale: [dynamic, 128]}      # and/or set: {key: value}
//       reset_optimizer: false
//       name: label                                 # optional
//   prune: {rule: asha}      # stop losing cells early (docs/PRUNING.md)
//   tune: {...}              # what `amptune tune` searches (docs/TUNE.md); alone with base:
//
// Axes are the grid keys, each zip group and repeat, in the order the file declares them; cells
// are their cartesian product with the first axis varying slowest. docs/CONFIG.md has the rules
// and the error messages.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/tune_words.h"
#include "core/words.h"

namespace amptune {

// One grid cell. A cell keeps only its swept values and shares the sweep's base (a sweep may
// expand to 100,000 cells; a full Config each would cost ~20 KB per cell): config() builds the
// fully resolved config when it is needed.
struct Cell {
  int index = 0;           // position in expansion order, 0-based
  // Object: swept key -> value (only the keys this cell varies), in Sweep::axis_keys order.
  nlohmann::ordered_json axes;
  std::string hash;        // config().hash()
  std::shared_ptr<const Config> base;  // the sweep's base (with --set), shared by its cells

  Config config() const;   // base with the axes applied, fully resolved
  nlohmann::json value(const std::string& key) const;  // config().at(key), without building it
  std::string label() const;  // "optim.lr=0.1 seed=1" (empty axes -> "base")
};

// One `forks:` entry, expanded: each cell matching `where` forks at `epoch` once per override set.
struct ForkDecl {
  std::vector<std::pair<std::string, nlohmann::json>> where;  // key -> value the cell must have
  int epoch = 0;
  std::vector<std::vector<std::pair<std::string, nlohmann::json>>> override_sets;
  bool reset_optimizer = false;
  std::string name;   // label prefix ("" = parent label + changes)
  SourceLoc loc;      // of the entry, for messages
  std::vector<int> cells;  // indices of the matching cells
};

// The sweep's prune: block (schemas/sweep.yaml; docs/PRUNING.md): which rule stops losing cells
// early. Values are checked against the schema; the metric against the model when the sweep is
// planned (app/run/runner.h plan_sweep).
struct PruneBlock {
  PruneRule rule = PruneRule::kNone;
  std::string metric;         // "" = the model's primary metric
  int64_t grace_epochs = 1;
  int64_t eta = 3;
  int64_t min_cells = 3;
  SourceLoc loc;         // the block's key
  SourceLoc metric_loc;  // prune.metric's value (the block's key when not given)
};

// The sweep's tune: block (schemas/sweep.yaml; docs/TUNE.md): the search `amptune tune` runs from
// the base. Values are checked against the schemas here; the metric, the budget and the
// reference / start configs when the search is planned (app/tune/tune.h plan_tune).
struct TuneBlock {
  using Overrides = std::vector<std::pair<std::string, nlohmann::json>>;  // key -> coerced value
  std::string metric;                           // "" = the model's primary metric
  double tolerance_abs = 0, tolerance_rel = 0;  // exactly one > 0
  Overrides reference, start;
  std::vector<TuneMoveKind> moves;  // each allowable (core/tune_words.h), each once
  std::optional<int> fork_from;  // unset: auto
  int64_t budget_epochs = 0;     // 0: 8 x schedule.epochs
  int64_t eta = 3, min_epochs = 1;
  Objective objective = Objective::kPrecision;
  int64_t diagnose_batches = 2;
  double cosine_min = 0.99;
  bool confirm = true;            // train the answer from scratch when it is a fork
  int64_t reference_repeats = 1;  // the reference trained with this many seeds (the noise)
  std::string canonical;  // the block as canonical JSON (the search's identity)
  // Where the keys were given (the block's place when not given).
  SourceLoc loc, metric_loc, budget_loc, start_loc, repeats_loc;
};

struct Sweep {
  std::string name;
  std::string description;
  std::string source_path;  // the YAML file ("<string>" when parsed from text)
  std::string yaml_text;    // the file as read
  Config base;              // base + --set overrides
  std::vector<std::string> axis_keys;  // grid, zip and repeat keys in declaration order
  std::vector<Cell> cells;
  std::vector<ForkDecl> forks;
  std::optional<PruneBlock> prune;  // unset: no prune: block
  std::optional<TuneBlock> tune;    // unset: no tune: block
  // Where each key of base, of an axis or of a --set was given (the last place wins), so a
  // check made after expansion can name the line.
  std::map<std::string, SourceLoc> key_locs;
};

// Reads and expands a sweep file. `sets` are "key=value" overrides applied to base before
// expansion. Throws ConfigError naming file:line:column and key on any invalid input.
Sweep load_sweep(const std::string& path, const std::vector<std::string>& sets = {});
Sweep parse_sweep(const std::string& yaml_text, const std::string& origin,
                  const std::vector<std::string>& sets = {});

// Keeps the cells whose config matches every "key=value" (value parsed as YAML and coerced for
// the key, so "optim.lr=1e-1" matches 0.1). Any documented key may be named; an unknown key is a
// ConfigError, a missing '=' a UsageError. Cells keep their original index.
std::vector<Cell> filter_cells(const std::vector<Cell>& cells, const std::vector<std::string>& only);

}  // namespace amptune
