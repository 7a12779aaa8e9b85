// A sweep's runs planned before anything is written: its cells (--only, --shard) and their
// declared forks, every one checked as `run` would before training it (app/run/runner.h trains
// the plan). No torch in this header.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/prune/prune_rules.h"
#include "app/run/shard.h"
#include "core/config.h"
#include "core/sweep.h"
#include "records/records.h"

namespace amptune::app {

// One override set of a `forks:` entry applied to one selected cell; the entry (Plan::sweep.forks
// [decl]) holds the epoch, reset_optimizer and name.
struct PlannedFork {
  size_t decl = 0;    // index into Plan::sweep.forks
  size_t parent = 0;  // index into Plan::cells
  size_t set = 0;     // index into the entry's override_sets
};

struct Plan {
  Sweep sweep;
  std::vector<Cell> cells;         // the cells --only and --shard selected, in cell order
  std::vector<PlannedFork> forks;  // forks of the selected cells, in declaration order
  std::optional<Shard> shard;      // --shard K/N (app/run/shard.h)
  size_t only_cells = 0;           // cells --only selected, before --shard
  std::vector<int> shard_sizes;    // with --shard: the cells of each shard (plan_shards)
  // When the data were read (plan_sweep with data): the fingerprint of each cell's data
  // (train::data_fingerprint), parallel to cells; empty otherwise.
  std::vector<std::string> fingerprints;
  // The sweep's prune: block resolved against its cells' models (app/prune/prune_sweep.h
  // PrunePlanner; rule none without a block).
  PruneSettings prune;
};

// Reads and expands the sweep file at `path` (with --set `sets`, --only `only`) and checks every
// planned run as `run` would before training it: config keys and values, the amp policy, cast
// points, schedule values (train::validate_config), every fork's overrides (train::plan_fork),
// and, when `data` is true, that each distinct data set opens (train::check_data, once per
// distinct data.* / rootnet.* setting) and its fingerprint (Plan::fingerprints), and for a
// data-parallel job of `world_size` processes its process group (train::check_parallel) and that
// every process gets a batch. Touches no database. With `shard`, only the cells of that shard
// (plan_shards over the cells --only selected) are planned, each with its forks; a shard may have
// no cell (an empty plan, not an error). Throws ConfigError naming the file:line of the key where
// it can and the cell ("cell 3 (amp.opt_level=O1): ..."), DataError naming the expected path,
// UsageError when --only matches no cell. Linear in the number of cells: 100,000 cells plan in
// seconds (docs/PERFORMANCE.md).
Plan plan_sweep(const std::string& path, const std::vector<std::string>& sets,
                const std::vector<std::string>& only, bool data = true, int world_size = 1,
                const std::optional<Shard>& shard = std::nullopt);

// The config hashes of `cells`, in their order (plan_shards' input).
std::vector<std::string> cell_hashes(const std::vector<Cell>& cells);

// The run spec (Store::ensure_run) of a cell: label, canonical config, identity (its config hash
// with `data_fingerprint`, run_identity), axes, run columns.
records::RunSpec cell_spec(const Sweep& sweep, const Cell& cell, const Config& config,
                         const std::string& data_fingerprint);

// Calls f(cell, config) for each cell with its full config, reusing one Config: every cell of a
// sweep sets the same keys over the same base, so no per-cell copy is made.
template <class F>
void for_each_config(const std::vector<Cell>& cells, F&& f) {
  if (cells.empty()) return;
  Config work = *cells.front().base;
  for (const Cell& cell : cells) {
    for (const auto& item : cell.axes.items()) work.set(item.key(), nlohmann::json(item.value()));
    f(cell, work);
  }
}

}  // namespace amptune::app
