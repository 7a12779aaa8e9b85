// app/run/sweep_plan.h: a sweep's runs planned and checked before anything is written.
#include "app/run/sweep_plan.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_set>

#include "app/prune/prune_sweep.h"
#include "app/run/run_input.h"
#include "core/error.h"
#include "core/log.h"
#include "core/settings.h"
#include "train/model_info.h"
#include "train/plan.h"

namespace amptune::app {
namespace {

// The place to name for an error about a cell: where the first key the message names was set.
SourceLoc loc_of(const Sweep& sweep, const std::string& message) {
  const std::string* best = nullptr;
  size_t at = std::string::npos;
  for (const auto& [key, loc] : sweep.key_locs) {
    const size_t pos = message.find(key);
    if (pos == std::string::npos) continue;
    // the earliest mention; of keys found at one place the longest ("amp.loss_scale" over "amp")
    if (pos < at || (pos == at && best && key.size() > best->size())) {
      at = pos;
      best = &key;
    }
  }
  return best ? sweep.key_locs.at(*best) : SourceLoc{sweep.source_path};
}

// A run as plan_fork needs its parent: the cell of `config` and its spec, not yet in any
// database.
train::RunInput unsaved_run(const Config& config, const records::RunSpec& spec) {
  train::RunInput run(config);
  run.sweep_name = spec.sweep_name;
  run.name = spec.sweep_name + "/" + std::to_string(spec.cell_index) + "-" +
             spec.config_hash.substr(0, 8);
  run.cell_index = spec.cell_index;
  run.label = spec.label;
  run.config_hash = spec.config_hash;
  run.data_fingerprint = spec.data_fingerprint;
  run.axes_json = spec.axes_json;
  return run;
}

}  // namespace

std::vector<std::string> cell_hashes(const std::vector<Cell>& cells) {
  std::vector<std::string> hashes;
  hashes.reserve(cells.size());
  for (const Cell& cell : cells) hashes.push_back(cell.hash);
  return hashes;
}

records::RunSpec cell_spec(const Sweep& sweep, const Cell& cell, const Config& config,
                         const std::string& data_fingerprint) {
  records::RunSpec spec;
  spec.sweep_name = sweep.name;
  spec.cell_index = cell.index;
  spec.label = cell.label();
  spec.config_json = config.canonical_json();
  spec.config_hash = run_identity(cell.hash, data_fingerprint);
  spec.data_fingerprint = data_fingerprint;
  spec.config_key = cell.hash;
  spec.axes_json = cell.axes.dump();
  const Settings settings = Settings::from(config);
  spec.columns = train::run_columns(settings);
  spec.metric_directions = train::run_metric_directions(settings);
  return spec;
}

namespace {

// The cells of `plan.sweep` that --only (`only`) and --shard (`shard`) select, into plan.cells.
void select_cells(Plan& plan, const std::vector<std::string>& only,
                  const std::optional<Shard>& shard) {
  plan.cells = filter_cells(plan.sweep.cells, only);
  if (plan.cells.empty()) {
    throw UsageError("--only matched no cell of sweep " + plan.sweep.name + " (" +
                     std::to_string(plan.sweep.cells.size()) + " cells; see --dry-run)");
  }
  plan.only_cells = plan.cells.size();
  plan.shard = shard;
  if (!shard) return;
  // Forks are planned from the kept cells only: a fork goes with its parent's shard.
  const std::vector<int> of = plan_shards(cell_hashes(plan.cells), shard->n);
  plan.shard_sizes = shard_sizes(of, shard->n);
  std::vector<Cell> kept;
  for (size_t c = 0; c < plan.cells.size(); ++c) {
    if (of[c] == shard->k) kept.push_back(std::move(plan.cells[c]));
  }
  plan.cells = std::move(kept);
}

// Checks plan.cells one by one as plan_sweep says, filling the plan's fingerprints and forks.
class CellChecks {
 public:
  CellChecks(Plan& plan, bool data, int world_size)
      : plan_(plan), sweep_(plan.sweep), data_(data), world_size_(world_size),
        pruner_(plan.sweep.prune) {
    // Keys of the data set a run reads: cells that differ in none of them share one check.
    for (const auto& key : sweep_.axis_keys) {
      if (key.rfind("data.", 0) == 0 || key.rfind("rootnet.", 0) == 0 ||
          key == "schedule.eval_step_per_epoch") {
        data_axes_.push_back(key);
      }
    }
  }

  void check(const Cell& cell, const Config& config) {
    // The cell's settings, read once and only when a check needs them: a large sweep without
    // data checks, parallel job or prune rule plans without them.
    std::optional<Settings> read;
    auto settings = [&]() -> const Settings& {
      if (!read) read = Settings::from(config);
      return *read;
    };
    announce_model_file(config);
    try {
      train::validate_config(config);
      if (world_size_ > 1) train::check_parallel(settings(), world_size_);
    } catch (const ConfigError& e) {
      throw ConfigError(cell_error(cell, e.what()));
    }
    if (pruner_.checks_cells()) pruner_.add(settings());  // names prune.metric's line
    if (data_) check_data(cell, settings());
    plan_forks(cell, config);
    ++position_;
  }

  // Says, once per file and before it is loaded, that checking a model whose file is code (a
  // TorchScript model) runs it (docs/MODELS.md "Your own model": a model file is code).
  void announce_model_file(const Config& config) {
    const auto can = train::model_capabilities(config.get_string("model.name"));
    if (!can || !can->loads_code) return;  // (an unknown name: validate_config says so)
    const std::string path = config.get_string(can->file_key);
    if (!announced_.insert(path).second) return;
    log::info(can->file_key + " " + path + ": loading it to check it; a TorchScript file is code " +
              "that runs when it is loaded: use only model files you trust as a script " +
              "(docs/MODELS.md \"Your own model\")");
  }

  // Forks in declaration order, then cell order (for_each_config visits cell by cell).
  void finish() {
    std::stable_sort(plan_.forks.begin(), plan_.forks.end(),
                     [](const PlannedFork& a, const PlannedFork& b) { return a.decl < b.decl; });
    plan_.prune = pruner_.settings();
  }

 private:
  std::string cell_error(const Cell& cell, const std::string& what) const {
    return loc_of(sweep_, what).prefix() + "cell " + std::to_string(cell.index) + " (" +
           cell.label() + "): " + what;
  }

  void check_data(const Cell& cell, const Settings& settings) {
    nlohmann::json key = nlohmann::json::array();
    for (const auto& k : data_axes_) key.push_back(cell.value(k));
    try {
      if (data_checked_.insert(key.dump()).second) train::check_data(settings, world_size_);
      plan_.fingerprints.push_back(train::data_fingerprint(settings));
    } catch (const DataError& e) {
      throw DataError(cell_error(cell, e.what()));
    } catch (const ConfigError& e) {
      throw ConfigError(cell_error(cell, e.what()));
    }
  }

  // The forks of this cell: plan_fork checks their overrides (model keys, optimizer, a schedule
  // that ends too early, and validate_config of the fork's config).
  void plan_forks(const Cell& cell, const Config& config) {
    std::optional<train::RunInput> parent;  // built once, for the first entry that forks the cell
    for (size_t d = 0; d < sweep_.forks.size(); ++d) {
      const ForkDecl& decl = sweep_.forks[d];
      if (std::find(decl.cells.begin(), decl.cells.end(), cell.index) == decl.cells.end()) continue;
      if (!parent) {
        parent = unsaved_run(config, cell_spec(sweep_, cell, config,
                                               data_ ? plan_.fingerprints.back() : std::string()));
      }
      for (size_t set = 0; set < decl.override_sets.size(); ++set) {
        try {
          train::plan_fork(*parent, decl.epoch, decl.override_sets[set], decl.reset_optimizer, "",
                           data_);
        } catch (const ConfigError& e) {
          throw ConfigError(decl.loc.prefix() + "fork of cell " + std::to_string(cell.index) +
                            ": " + e.what());
        }
        plan_.forks.push_back(PlannedFork{d, position_, set});
      }
    }
  }

  Plan& plan_;
  const Sweep& sweep_;
  const bool data_;
  const int world_size_;
  std::vector<std::string> data_axes_;
  std::unordered_set<std::string> data_checked_;
  std::set<std::string> announced_;  // model files said to be code (announce_model_file)
  size_t position_ = 0;  // of the visited cell in plan.cells
  PrunePlanner pruner_;
};

}  // namespace

Plan plan_sweep(const std::string& path, const std::vector<std::string>& sets,
                const std::vector<std::string>& only, bool data, int world_size,
                const std::optional<Shard>& shard) {
  Plan plan;
  plan.sweep = load_sweep(path, sets);
  select_cells(plan, only, shard);
  CellChecks checks(plan, data, world_size);
  for_each_config(plan.cells,
                  [&](const Cell& cell, const Config& config) { checks.check(cell, config); });
  checks.finish();
  return plan;
}

}  // namespace amptune::app
