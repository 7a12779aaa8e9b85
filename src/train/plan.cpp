// What a run is, checked before anything trains (plan.h): plan_fork (a fork's spec),
// validate_config and check_data. No training here; train_run starts a fork from its parent's
// checkpoint (trainer.cpp start_from_parent).
#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "amp/emulate.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/error.h"
#include "core/hash.h"
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

// amp.fp32_modules: every glob names a module of the model. The names of each model
// configuration are read once (the model is built without its weights files).
void check_fp32_modules(const Config& config) {
  const auto globs = config.get_string_list("amp.fp32_modules");
  if (globs.empty()) return;
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
      auto task = make_task(shape);
      it = names_of.emplace(key, amp::ModuleMap(task->module(), {}).names()).first;
    }
    names = it->second;
  }
  amp::check_fp32_globs(names, globs);
}

}  // namespace

void validate_config(const Config& config) {
  (void)model_info(config);   // the model and its task exist
  check_fp32_modules(config);
  (void)run_columns(config);  // the amp policy: combinations apex refuses
  (void)profile_steps(config);  // [first, last] or []
  const auto casts = config.get_string_list("casts.int32");
  (void)Int32Casts(casts);  // known cast point names
  if (!casts.empty() && config.get_string("model.name") != "rootnet") {
    throw ConfigError("casts.int32: the cast points are fields of RootNet's data path; model " +
                      config.get_string("model.name") +
                      " has none, so they would change nothing; remove casts.int32");
  }
  if (config.get_int("schedule.training_step_per_epoch") == 0) {
    throw ConfigError(
        "schedule.training_step_per_epoch is 0: every epoch must train at least "
        "one step (-1 = the whole training split); for an evaluation-only cell "
        "set schedule.epochs: 0");
  }
  if (config.get_int("schedule.eval_step_per_epoch") == 0) {
    if (config.get_int("schedule.epochs") == 0) {
      throw ConfigError(
          "schedule.epochs is 0 (an evaluation-only run) but "
          "schedule.eval_step_per_epoch is 0 (no evaluation), so the run would do "
          "nothing; set schedule.eval_step_per_epoch to -1 (the whole evaluation "
          "split) or a number of batches");
    }
    if (config.get_bool("schedule.eval_initial")) {
      throw ConfigError(
          "schedule.eval_initial is true but schedule.eval_step_per_epoch is 0 (no "
          "evaluation); set schedule.eval_step_per_epoch to -1 or a number of "
          "batches, or remove schedule.eval_initial");
    }
  }
}

void check_parallel(const Config& config, int world_size) {
  if (world_size <= 1) return;
  (void)dist::resolve_backend(config.get_string("dist.backend"), pick_device(config));
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

void check_data(const Config& config, int world_size) {
  if (config.get_int("schedule.epochs") > 0) {  // an evaluation-only run reads no training split
    auto train_set = data::make_dataset(config, data::Split::kTrain);
    check_world_size(*train_set, config.get_int("data.batch_size"), world_size);
  }
  if (config.get_int("schedule.eval_step_per_epoch") != 0) {
    (void)data::make_dataset(config, data::Split::kVal);
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

std::string data_fingerprint(const Config& config) {
  const bool trains = config.get_int("schedule.epochs") > 0;
  const bool evaluates = config.get_int("schedule.eval_step_per_epoch") != 0;
  std::string parts;  // "<what> <fingerprint>" lines, in a fixed order
  auto add = [&](const std::string& what, const std::string& path, bool tree) {
    parts += what + " " + cached_fingerprint(path, tree) + "\n";
  };
  const std::string format = config.get_string("data.format");
  const std::string root = config.get_string("data.root");
  for (const auto& [reads, split_key] : {std::pair{trains, "data.train_split"},
                                         std::pair{evaluates, "data.val_split"}}) {
    if (!reads) continue;
    const std::string split = config.get_string(split_key);
    if (format == "imagefolder") add(split_key, root + "/" + split, true);
    if (format == "idx") {
      for (const char* kind : {"images-idx3", "labels-idx1"}) {
        add(std::string(split_key) + " " + kind, data::find_idx_file(root, split, kind), false);
      }
    }
  }
  if (format == "rootnet") {
    std::vector<std::string> sets;
    if (trains) sets = config.get_string_list("rootnet.train_sets");
    const std::string test_set = config.get_string("rootnet.test_set");
    if (evaluates) sets.push_back(test_set);
    std::sort(sets.begin(), sets.end());
    sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
    static const std::map<std::string, std::string> kRootKey = {
        {"h36m", "rootnet.h36m_root"}, {"muco", "rootnet.muco_root"},
        {"mpii", "rootnet.mpii_root"}, {"mupots", "rootnet.mupots_root"}};
    for (const std::string& set : sets) add(set, config.get_string(kRootKey.at(set)), true);
    const std::string boxes = config.get_string("rootnet.mupots_bbox_file");
    if (evaluates && test_set == "mupots" && !boxes.empty()) add("mupots_bbox_file", boxes, false);
  }
  const std::string weights = config.get_string("model.weights");
  if (!weights.empty()) add("model.weights", weights, false);
  const std::string backbone = config.get_string("model.backbone_weights");
  if (!backbone.empty() && config.get_string("model.name") == "rootnet") {
    add("model.backbone_weights", backbone, false);  // read by RootNet only
  }
  return sha256_hex(parts);
}

void refuse_evaluation_only(const store::RunRow& run, const std::string& purpose) {
  if (Config::from_json(run.config_json, "run " + run.name).get_int("schedule.epochs") != 0) return;
  throw CheckpointError("run " + run.name +
                        " is evaluation-only (schedule.epochs: 0): its epoch 0 is the evaluation "
                        "of its initial weights and it saved no checkpoint " +
                        purpose +
                        " (saved epochs: none); train a cell of the same model.weights with "
                        "schedule.epochs >= 1 for one");
}

store::RunSpec plan_fork(const store::RunRow& parent, int epoch,
                         const std::vector<std::pair<std::string, nlohmann::json>>& overrides,
                         bool reset_optimizer, const std::string& name, bool read_data) {
  if (epoch < 0) throw UsageError("a fork needs an epoch >= 0, got " + std::to_string(epoch));
  refuse_evaluation_only(parent, "to fork from");
  Config config = Config::from_json(parent.config_json, "run " + parent.name);
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
  const Config before = Config::from_json(parent.config_json, "run " + parent.name);
  if (!reset_optimizer && config.get_string("optim.name") != before.get_string("optim.name")) {
    throw ConfigError("fork of " + parent.name + ": optim.name changes from " +
                      before.get_string("optim.name") + " to " + config.get_string("optim.name") +
                      ", whose state the parent's optimizer cannot give; add --reset-optimizer "
                      "(reset_optimizer: true in a sweep's forks:) to start it fresh");
  }
  const int64_t epochs = config.get_int("schedule.epochs");
  if (epochs <= epoch + 1) {
    throw ConfigError("fork of " + parent.name + " from epoch " + std::to_string(epoch) +
                      ": schedule.epochs is " + std::to_string(epochs) +
                      ", so nothing is left to train; set schedule.epochs above " +
                      std::to_string(epoch + 1));
  }

  store::RunSpec spec;
  spec.sweep_name = parent.sweep_name;
  spec.cell_index = parent.cell_index;
  spec.config_json = config.canonical_json();
  spec.data_fingerprint = read_data ? data_fingerprint(config) : parent.data_fingerprint;
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
  validate_config(config);  // what no run can take (amp combinations, cast points, ...)
  spec.columns = run_columns(config);
  spec.fork = store::ForkOrigin{parent.id, epoch, applied.dump(), changes, reset_optimizer};
  return spec;
}

std::map<std::string, std::string> run_columns(const Config& config) {
  auto info = model_info(config);
  const std::string device = config.get_string("device");
  const amp::Policy policy = amp::resolve_policy(
      config, device == "cuda" || (device == "auto" && torch::cuda::is_available()));
  return {
      {"model", config.at("model.name").dump()},
      {"dataset", nlohmann::json(config.get_string("data.format") + ":" +
                                 config.get_string("data.root"))
                      .dump()},
      {"optimizer", config.at("optim.name").dump()},
      {"lr", config.at("optim.lr").dump()},
      {"batch_size", config.at("data.batch_size").dump()},
      {"epochs", config.at("schedule.epochs").dump()},
      {"lr_dec_epoch", config.at("schedule.lr_dec_epoch").dump()},
      {"seed", config.at("seed").dump()},
      {"primary_metric", nlohmann::json(info.primary_metric).dump()},
      // amp: the resolved policy (loss_scale auto -> the level's default; the backend this
      // machine uses). Throws ConfigError for a combination apex refuses, before anything runs.
      {"opt_level", nlohmann::json(amp::to_string(policy.opt_level)).dump()},
      {"dtype", nlohmann::json(amp::to_string(policy.dtype)).dump()},
      {"loss_scale", policy.dynamic_scale ? nlohmann::json("dynamic").dump()
                                          : nlohmann::json(policy.static_scale).dump()},
      {"backend", nlohmann::json(amp::to_string(policy.backend)).dump()},
      {"backend_reason", nlohmann::json(policy.backend_reason).dump()},
  };
}

int resolve_threads(const Config& config, int override_threads) {
  int threads = override_threads > 0 ? override_threads : static_cast<int>(config.get_int("threads"));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads;
}

std::string resolve_device(const Config& config) { return pick_device(config).str(); }

std::string default_checkpoint_root(const std::string& db_path) {
  const std::filesystem::path db(db_path);
  return (db.parent_path() / "checkpoints" / db.stem()).string();
}

std::string checkpoint_dir(const Config& config, const store::Store& store, int64_t run_id) {
  std::string dir = config.get_string("checkpoint.dir");
  if (dir.empty()) dir = default_checkpoint_root(store.path());
  return (std::filesystem::path(dir) / std::to_string(run_id)).string();
}


}  // namespace amptune::train
