// Where a database's runs keep their checkpoint files, and what those files are called: the one
// owner of the rule. train writes by it (plan.h, the trainer), retention and `gc` delete by it
// (retention.h, app/artifacts/checkpoint_folders.h), and merge, which cannot include train, is
// handed it as a records::CheckpointLayout (checkpoint_layout(), given by app/run/merge.h) to tell
// an input's own checkpoints from paths that point elsewhere (docs/SECURITY.md "Databases from
// elsewhere").
//
//   results/amptune.sqlite               the database
//   results/checkpoints/amptune/         its default root (default_checkpoint_root)
//   results/checkpoints/amptune/12/      run 12's folder (checkpoint_dir; or <checkpoint.dir>/12)
//   .../12/epoch_0004.safetensors        its checkpoint of epoch 4 (checkpoint_file_name)
//
// Header-only and torch-free: the store's tests include it (they link no train).
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "records/records.h"

namespace amptune::train {

// Where a database keeps its runs' checkpoints by default: <db dir>/checkpoints/<db file stem>
// (results/checkpoints/amptune for results/amptune.sqlite), so two databases in one directory
// never share a folder.
inline std::string default_checkpoint_root(const std::string& db_path) {
  const std::filesystem::path db(db_path);
  return (db.parent_path() / "checkpoints" / db.stem()).string();
}

// The folder that holds the runs' folders: `configured_dir` (a run's checkpoint.dir), or the
// database's default_checkpoint_root when it is "". Its owner file says which database it
// belongs to (app/artifacts/checkpoint_folders.h claim_checkpoint_root).
inline std::string checkpoint_root(const std::string& configured_dir, const std::string& db_path) {
  return configured_dir.empty() ? default_checkpoint_root(db_path) : configured_dir;
}

// The folder of run `run_id`'s checkpoints: <checkpoint_root>/<run id>.
inline std::string checkpoint_dir(const std::string& configured_dir, const std::string& db_path,
                                  int64_t run_id) {
  const std::filesystem::path root = checkpoint_root(configured_dir, db_path);
  return (root / std::to_string(run_id)).string();
}

// The checkpoint.dir of a run's config as a database stores it (runs.config_json); "" when it
// names none or the text is not a config object. Tolerant: it reads another machine's database
// too (merge), whose config this build's schema may not accept.
inline std::string configured_checkpoint_dir(const std::string& config_json) {
  const nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  if (!config.is_object() || !config.contains("checkpoint") || !config["checkpoint"].is_object()) {
    return "";
  }
  const nlohmann::json& dir = config["checkpoint"].value("dir", nlohmann::json());
  return dir.is_string() ? dir.get<std::string>() : "";
}

// The file name of a run's checkpoint of `epoch` in its folder: "epoch_0004.safetensors".
inline std::string checkpoint_file_name(int64_t epoch) {
  char name[48];
  std::snprintf(name, sizeof name, "epoch_%04lld.safetensors", static_cast<long long>(epoch));
  return name;
}

// Whether `name` (without its folder) is one a checkpoint of a run has: epoch_<digits>, with an
// extension or none (older builds wrote epoch_0004.pt).
inline bool is_checkpoint_file_name(const std::string& name) {
  constexpr size_t kPrefix = 6;  // "epoch_"
  size_t digits = 0;
  while (kPrefix + digits < name.size() &&
         std::isdigit(static_cast<unsigned char>(name[kPrefix + digits]))) {
    ++digits;
  }
  return name.rfind("epoch_", 0) == 0 && digits > 0 &&
         (kPrefix + digits == name.size() || name[kPrefix + digits] == '.');
}

// The rule as the store takes it (Store::merge): a run's folders are the one its stored config
// names (checkpoint.dir, when set) and the one under its database's default root, for a run
// may have been resumed with another checkpoint.dir (it is not part of a run's identity).
inline records::CheckpointLayout checkpoint_layout() {
  records::CheckpointLayout layout;
  layout.run_dirs = [](const std::string& db_path, int64_t run_id, const std::string& config_json) {
    std::vector<std::string> dirs = {checkpoint_dir("", db_path, run_id)};
    const std::string configured = configured_checkpoint_dir(config_json);
    if (!configured.empty()) dirs.push_back(checkpoint_dir(configured, db_path, run_id));
    return dirs;
  };
  layout.is_checkpoint_name = is_checkpoint_file_name;
  return layout;
}

}  // namespace amptune::train
