// What a run is, checked before anything trains (plan.h): plan_fork (a fork's spec),
// validate_config and check_data. No training here; train_run starts a fork from its parent's
// checkpoint (trainer.cpp start_from_parent).
#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "amp/emulate.h"
#include "amp/fp8_gemm.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "dist/group.h"
#include "train/task.h"
#include "train/casts.h"
#include "train/model_info.h"
#include "train/profile.h"
#include "train/plan.h"
#include "train/session.h"

namespace amptune::train {

namespace {

// amp.fp32_modules and amp.fp8.skip_modules: every glob names a module of the model. The names
// of each model configuration (the model.* keys of `config`, whose settings are `s`) are read
// once (the model is built without its weights files).
void check_fp32_modules(const Config& config, const Settings& s) {
  const std::vector<std::string>& globs = s.amp.fp32_modules;
  if (globs.empty() && s.amp.fp8.skip_modules.empty()) return;
  static std::mutex mutex;
  static std::map<std::string, std::vector<std::string>> names_of;
  Config shape = config;
  shape.set("model.weights", "");
  shape.set("model.backbone_weights", "");
  const std::string key = shape.nested().at("model").dump();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = names_of.find(key);
    if (it == names_of.end()) {
      Settings without_weights = s;
      without_weights.model.weights.clear();
      without_weights.model.backbone_weights.clear();
      auto task = make_task(without_weights);
      it = names_of.emplace(key, amp::ModuleMap(task->module(), {}).names()).first;
    }
    names = it->second;
  }
  amp::check_module_globs(names, globs);
  amp::check_module_globs(names, s.amp.fp8.skip_modules, "amp.fp8.skip_modules");
}

std::map<std::string, std::string> columns_of(const Settings& s) {
  auto info = model_info(s);
  const amp::Policy policy = amp::resolve_policy(
      s.amp, s.device == DeviceChoice::kCuda ||
                 (s.device == DeviceChoice::kAuto && torch::cuda::is_available()));
  return {
      {"model", nlohmann::json(s.model.name).dump()},
      {"dataset", nlohmann::json(to_string(s.data.format) + ":" + s.data.root).dump()},
      {"optimizer", nlohmann::json(to_string(s.optim.name)).dump()},
      {"lr", nlohmann::json(s.optim.lr).dump()},
      {"batch_size", nlohmann::json(s.data.batch_size).dump()},
      {"epochs", nlohmann::json(s.schedule.epochs).dump()},
      {"lr_dec_epoch", nlohmann::json(s.schedule.lr_dec_epoch).dump()},
      {"seed", nlohmann::json(s.seed).dump()},
      {"primary_metric", nlohmann::json(info.primary_metric).dump()},
      // amp: the resolved policy (loss_scale auto -> the level's default; the backend this
      // machine uses). Throws ConfigError for a combination apex refuses, before anything runs.
      {"opt_level", nlohmann::json(to_string(policy.opt_level)).dump()},
      {"dtype", nlohmann::json(to_string(policy.dtype)).dump()},
      {"loss_scale", policy.dynamic_scale ? nlohmann::json("dynamic").dump()
                                          : nlohmann::json(policy.static_scale).dump()},
      {"backend", nlohmann::json(amp::to_string(policy.backend)).dump()},
      {"backend_reason", nlohmann::json(policy.backend_reason).dump()},
  };
}

// validate_config of `config`, whose settings are `s`; returns run_columns(s) (which resolves
// the amp policy: combinations apex refuses).
std::map<std::string, std::string> validated_columns(const Config& config, const Settings& s) {
  (void)model_info(s);  // the model and its task exist
  const ModelEntry& model = model_entry(s.model.name);
  const ModelCapabilities& can = model.capabilities;
  check_fp32_modules(config, s);
  if (s.amp.fp8.enabled && s.amp.fp8.gemm == Fp8GemmPath::kScaledMm) {
    amp::check_scaled_mm_build();  // (the device: when the run starts, amp::Engine)
  }
  std::map<std::string, std::string> columns = columns_of(s);
  (void)profile_steps(s.profile);  // [first, last] or []
  const auto& casts = s.casts.int32;
  (void)Int32Casts(casts);  // known cast point names
  if (!casts.empty() && !can.takes_casts) {
    throw ConfigError("casts.int32: the cast points are fields of RootNet's data path; model " +
                      s.model.name + " has none, so they would change nothing; remove casts.int32");
  }
  if (model.check) model.check(s);
  const bool custom = can.custom_task && s.model.task == ModelTask::kCustom;
  const bool tensors = s.data.format == DataFormat::kTensors;
  if (custom && !tensors) {
    throw ConfigError(
        "data.format: model.task custom reads batches of named tensors; set "
        "data.format: tensors (docs/DATA.md), not " +
        to_string(s.data.format));
  }
  if (tensors && !custom) {
    throw ConfigError(
        "data.format: tensors holds named tensors, which only a TorchScript model "
        "of model.task custom reads (docs/MODELS.md \"Your own model\"); model " +
        s.model.name + " reads images");
  }
  if (s.data.format == DataFormat::kSynthetic && !can.classifies_images) {
    throw ConfigError("data.format: synthetic makes random images with class labels, which only "
                      "a classifier trains on (resnet*, a TorchScript classifier); model " +
                      s.model.name + " reads other samples: use its own data.format (" +
                      s.model.name + ": docs/DATA.md)");
  }
  if (s.dist.sync_bn && !can.sync_bn) {
    throw ConfigError("dist.sync_bn: a TorchScript model's BatchNorm runs the model's own code, "
                      "which amptune cannot synchronise over ranks; set dist.sync_bn: false "
                      "(each rank then normalises over its own part of the batch)");
  }
  if (s.schedule.training_step_per_epoch == 0) {
    throw ConfigError(
        "schedule.training_step_per_epoch is 0: every epoch must train at least "
        "one step (-1 = the whole training split); for an evaluation-only cell "
        "set schedule.epochs: 0");
  }
  if (s.schedule.eval_step_per_epoch == 0) {
    if (s.schedule.epochs == 0) {
      throw ConfigError(
          "schedule.epochs is 0 (an evaluation-only run) but "
          "schedule.eval_step_per_epoch is 0 (no evaluation), so the run would do "
          "nothing; set schedule.eval_step_per_epoch to -1 (the whole evaluation "
          "split) or a number of batches");
    }
    if (s.schedule.eval_initial) {
      throw ConfigError(
          "schedule.eval_initial is true but schedule.eval_step_per_epoch is 0 (no "
          "evaluation); set schedule.eval_step_per_epoch to -1 or a number of "
          "batches, or remove schedule.eval_initial");
    }
  }
  return columns;
}

}  // namespace

std::string fp8_gemm_paths() {
  const std::string emulate = to_string(Fp8GemmPath::kEmulate);
  return amp::scaled_mm_built() ? emulate + ", " + to_string(Fp8GemmPath::kScaledMm) : emulate;
}

void validate_config(const Config& config) {
  (void)validated_columns(config, Settings::from(config));
}

void check_parallel(const Settings& settings, int world_size) {
  if (world_size <= 1) return;
  (void)dist::resolve_backend(settings.dist.backend, pick_device(settings.device));
}

void check_world_size(const data::Dataset& train_set, int64_t batch_size, int world_size) {
  if (world_size <= 1) return;
  const auto n = static_cast<int64_t>(train_set.size());
  if (n < batch_size * world_size) {
    throw DataError(train_set.describe() + " holds " + std::to_string(n) +
                    " training samples, fewer than " + std::to_string(world_size) +
                    " processes x data.batch_size " + std::to_string(batch_size) +
                    " (data.batch_size is per process): run fewer processes, a smaller batch, "
                    "or more data");
  }
}

void check_data(const Settings& s, int world_size) {
  if (s.schedule.epochs > 0) {  // an evaluation-only run reads no training split
    auto train_set =
        data::make_dataset(s.data, s.rootnet, s.model, data::Split::kTrain);
    check_world_size(*train_set, s.data.batch_size, world_size);
  }
  if (s.schedule.eval_step_per_epoch != 0) {
    (void)data::make_dataset(s.data, s.rootnet, s.model, data::Split::kVal);
  }
}

namespace {

// A file's or folder's fingerprint, computed once per path in a process (a sweep's cells share
// their data; the data do not change under a running process).
std::string cached_fingerprint(const std::string& path, bool tree) {
  static std::mutex mutex;
  static std::map<std::string, std::string> done;
  const std::string key = (tree ? "tree " : "file ") + path;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = done.find(key); it != done.end()) return it->second;
  }
  const std::string fp = tree ? fingerprint_tree(path) : fingerprint_file(path);
  std::lock_guard<std::mutex> lock(mutex);
  return done.emplace(key, fp).first->second;
}

}  // namespace

std::string data_fingerprint(const Settings& s) {
  const bool trains = s.schedule.epochs > 0;
  const bool evaluates = s.schedule.eval_step_per_epoch != 0;
  std::string parts;  // "<what> <fingerprint>" lines, in a fixed order
  auto add = [&](const std::string& what, const std::string& path, bool tree) {
    parts += what + " " + cached_fingerprint(path, tree) + "\n";
  };
  const DataFormat format = s.data.format;
  const std::string& root = s.data.root;
  for (const auto& [reads, split_key, split] :
       {std::tuple{trains, "data.train_split", s.data.train_split},
        std::tuple{evaluates, "data.val_split", s.data.val_split}}) {
    if (!reads) continue;
    if (format == DataFormat::kImageFolder) add(split_key, root + "/" + split, true);
    // tensors: each shard whole (a folder's fingerprint samples 64 KiB a file)
    if (format == DataFormat::kTensors) {
      for (const std::string& shard : data::tensors_shard_files(root, split)) {
        const std::string name = std::filesystem::path(shard).filename().string();
        add(std::string(split_key) + " " + name, shard, false);
      }
    }
    if (format == DataFormat::kIdx) {
      for (const char* kind : {"images-idx3", "labels-idx1"}) {
        add(std::string(split_key) + " " + kind, data::find_idx_file(root, split, kind), false);
      }
    }
  }
  if (format == DataFormat::kRootNet) {
    std::vector<std::string> sets;
    if (trains) sets = s.rootnet.train_sets;
    const std::string& test_set = s.rootnet.test_set;
    if (evaluates) sets.push_back(test_set);
    std::sort(sets.begin(), sets.end());
    sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
    const std::map<std::string, const std::string*> root_of = {{"h36m", &s.rootnet.h36m_root},
                                                               {"muco", &s.rootnet.muco_root},
                                                               {"mpii", &s.rootnet.mpii_root},
                                                               {"mupots", &s.rootnet.mupots_root}};
    for (const std::string& set : sets) add(set, *root_of.at(set), true);
    const std::string& boxes = s.rootnet.mupots_bbox_file;
    if (evaluates && test_set == "mupots" && !boxes.empty()) add("mupots_bbox_file", boxes, false);
  }
  const std::string& weights = s.model.weights;
  if (!weights.empty()) add("model.weights", weights, false);
  // The model's own file (RootNet's backbone weights, a TorchScript file), only when it reads one.
  const std::optional<ModelCapabilities> can = model_capabilities(s.model.name);
  if (can && can->file && !(s.model.*can->file).empty()) {
    add(can->file_key, s.model.*can->file, false);
  }
  return sha256_hex(parts);
}

void refuse_evaluation_only(const RunInput& run, const std::string& purpose) {
  if (run.settings().schedule.epochs != 0) return;
  throw CheckpointError("run " + run.name +
                        " is evaluation-only (schedule.epochs: 0): its epoch 0 is the evaluation "
                        "of its initial weights and it saved no checkpoint " +
                        purpose +
                        " (saved epochs: none); train a cell of the same model.weights with "
                        "schedule.epochs >= 1 for one");
}

records::RunSpec plan_fork(const RunInput& parent, int epoch,
                           const std::vector<std::pair<std::string, nlohmann::json>>& overrides,
                           bool reset_optimizer, const std::string& name, bool read_data) {
  if (epoch < 0) throw UsageError("a fork needs an epoch >= 0, got " + std::to_string(epoch));
  refuse_evaluation_only(parent, "to fork from");
  Config config = parent.config();
  nlohmann::ordered_json applied = nlohmann::ordered_json::object();
  std::string changes, short_changes;
  for (const auto& [key, value] : overrides) {
    if (key.rfind("model.", 0) == 0) {
      throw ConfigError("fork of " + parent.name + ": " + key +
                        " cannot change in a continued run (the checkpoint holds another "
                        "model's weights); start a new sweep for another model");
    }
    const nlohmann::json before = config.at(key);  // throws ConfigError for an unknown key
    config.set(key, value);
    const nlohmann::json after = config.at(key);
    applied[key] = after;
    changes += (changes.empty() ? "" : "; ") + key + ": " + before.dump() + " -> " + after.dump();
    short_changes += (short_changes.empty() ? "" : " ") + key + "=" +
                     (after.is_string() ? after.get<std::string>() : after.dump());
  }
  const Settings s = Settings::from(config);
  const OptimizerName parent_optim = parent.settings().optim.name;
  if (!reset_optimizer && s.optim.name != parent_optim) {
    throw ConfigError("fork of " + parent.name + ": optim.name changes from " +
                      to_string(parent_optim) + " to " + to_string(s.optim.name) +
                      ", whose state the parent's optimizer cannot give; add --reset-optimizer "
                      "(reset_optimizer: true in a sweep's forks:) to start it fresh");
  }
  const int64_t epochs = s.schedule.epochs;
  if (epochs <= epoch + 1) {
    throw ConfigError("fork of " + parent.name + " from epoch " + std::to_string(epoch) +
                      ": schedule.epochs is " + std::to_string(epochs) +
                      ", so nothing is left to train; set schedule.epochs above " +
                      std::to_string(epoch + 1));
  }

  records::RunSpec spec;
  spec.sweep_name = parent.sweep_name;
  spec.cell_index = parent.cell_index;
  spec.config_json = config.canonical_json();
  spec.data_fingerprint = read_data ? data_fingerprint(s) : parent.data_fingerprint;
  const bool other_data =
      !parent.data_fingerprint.empty() && spec.data_fingerprint != parent.data_fingerprint;
  spec.config_hash = fork_identity(config.hash(), parent.config_hash, epoch, reset_optimizer,
                                   other_data ? spec.data_fingerprint : "");
  spec.label = !name.empty() ? name
                             : (parent.label.empty() ? "base" : parent.label) + " | fork@" +
                                   std::to_string(epoch) +
                                   (short_changes.empty() ? "" : " " + short_changes) +
                                   (reset_optimizer ? " reset-optimizer" : "");
  // The swept values of the fork: the parent's, with the overridden keys, so compare --by
  // groups forks with the cells they resemble.
  nlohmann::ordered_json axes = parent.axes_json.empty()
                                    ? nlohmann::ordered_json::object()
                                    : nlohmann::ordered_json::parse(parent.axes_json);
  for (const auto& [key, value] : applied.items()) axes[key] = value;
  spec.axes_json = axes.dump();
  // What no run can take (amp combinations, cast points, ...); the columns resolve the amp
  // policy once for both.
  spec.columns = validated_columns(config, s);
  spec.metric_directions = run_metric_directions(s);
  spec.fork = records::ForkOrigin{parent.id, epoch, applied.dump(), changes, reset_optimizer};
  return spec;
}

std::map<std::string, bool> run_metric_directions(const Settings& settings) {
  std::map<std::string, bool> out;
  for (const MetricDef& def : recorded_metrics(settings)) out[def.name] = def.higher_is_better;
  return out;
}

std::map<std::string, std::string> run_columns(const Settings& settings) {
  return columns_of(settings);
}

int resolve_threads(const Settings& settings, int override_threads) {
  int threads = override_threads > 0 ? override_threads : static_cast<int>(settings.threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads;
}

std::string resolve_device(const Settings& settings) { return pick_device(settings.device).str(); }

std::string checkpoint_dir(const CheckpointSettings& checkpoint, const std::string& db_path,
                           int64_t run_id) {
  return checkpoint_dir(checkpoint.dir, db_path, run_id);
}

}  // namespace amptune::train
