// What a run is before it trains: its readable columns, threads and device, where its
// checkpoints go, the checks that refuse it before anything runs, its data fingerprint, a
// fork's spec (plan.cpp). Functions read a run's settings (core/settings.h: Settings::from of its
// config, read once by the caller); validate_config and plan_fork take the Config itself. No
// torch in this header: the app and CLI layers include it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "records/records.h"
#include "train/checkpoint_layout.h"
#include "train/run_input.h"

namespace amptune {
class Config;
struct CheckpointSettings;
struct Settings;
}

namespace amptune::train {

// The readable run columns (model, optimizer, lr, ...), primary metric and resolved amp policy
// of a run's settings. Throws ConfigError for an amp combination apex refuses.
std::map<std::string, std::string> run_columns(const Settings& settings);
// The metrics a run of `settings` records and their directions (recorded_metrics), as
// records::RunSpec::metric_directions takes them.
std::map<std::string, bool> run_metric_directions(const Settings& settings);

// Threads a run uses: `override` > 0, else its setting `threads`, else all cores.
int resolve_threads(const Settings& settings, int override_threads);
// "cpu" or "cuda:0": where a run trains on this machine (its setting `device`).
std::string resolve_device(const Settings& settings);

// Directory of a run's checkpoints (checkpoint_layout.h checkpoint_dir): checkpoint.dir/<run id>,
// or default_checkpoint_root of the database at `db_path`/<run id>.
std::string checkpoint_dir(const CheckpointSettings& checkpoint, const std::string& db_path,
                           int64_t run_id);

// Everything about `config` that can refuse a run before it trains, without touching data: the
// model, the amp policy (combinations apex refuses), the cast point names (and that the model has
// them), schedule values that cannot train. Throws ConfigError naming the key. (The Config
// itself: its model.* keys name the model whose module names amp.fp32_modules is checked
// against, built once per model configuration.)
void validate_config(const Config& config);
// The amp.fp8.gemm values this build runs, as `amptune version` prints them: "emulate, scaled_mm"
// or "emulate" (no torch._scaled_mm in its LibTorch). A device may still refuse scaled_mm when
// a run starts (amp/fp8_gemm.h check_scaled_mm).
std::string fp8_gemm_paths();
// What a data-parallel run with `world_size` processes needs besides its data: a process group
// for its device (dist.backend: nccl needs CUDA, gloo a build with Gloo). Throws ConfigError
// naming dist.backend, EnvironmentError for a build without it. Nothing for one process.
void check_parallel(const Settings& settings, int world_size);
// The data sets a run reads open: the training split, and the evaluation split when the run
// evaluates; with `world_size` processes every one gets a batch. Throws DataError naming the
// expected path and format.
void check_data(const Settings& settings, int world_size = 1);

// The fingerprint of the data a run reads (docs/CONFIG.md "Identity"), which enters
// its identity (run_identity) instead of the paths: the training split when it trains, the
// evaluation split when it evaluates (imagefolder: the split's folder; idx: its two files;
// tensors: each shard file, by name and content; rootnet: the root folder of each set read, and
// the detector boxes file), and model.weights /
// model.backbone_weights when set. Each file or folder is read once per process. Throws
// DataError naming a path that is missing or unreadable.
std::string data_fingerprint(const Settings& settings);

// Throws CheckpointError saying that `run` is evaluation-only (schedule.epochs: 0) and has no
// checkpoint `purpose` ("to evaluate", "to fork from"); returns for any other run.
void refuse_evaluation_only(const RunInput& run, const std::string& purpose);

// A fork of `parent` from its checkpoint of `epoch` (docs/DATABASE.md "Forks"): the parent's
// config with `overrides` (key -> value, already coerced by the schema) applied. Returns the run
// spec to pass to Store::ensure_run (same sweep and cell index as the parent; the config hash
// mixes in parent, epoch and reset_optimizer, so the same fork asked for twice is one run).
// `name`, when not empty, is the label; otherwise the parent's label plus the changes. With
// `read_data` the fork's data fingerprint is read (it enters the identity when the fork reads
// other data than its parent); without, the parent's is assumed (planning without data).
// Throws ConfigError for overrides a continued run cannot take: model.* keys, optim.name without
// reset_optimizer, a schedule that ends at or before epoch + 1, and whatever validate_config
// refuses (combinations apex refuses, ...); CheckpointError for an evaluation-only parent.
records::RunSpec plan_fork(const RunInput& parent, int epoch,
                           const std::vector<std::pair<std::string, nlohmann::json>>& overrides,
                           bool reset_optimizer, const std::string& name, bool read_data = true);

}  // namespace amptune::train
