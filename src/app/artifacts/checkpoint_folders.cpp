// app/artifacts/checkpoint_folders.h: retention applied to a run's rows, the checkpoint root's
// owner file, `amptune gc`.
#include "app/artifacts/checkpoint_folders.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/settings.h"
#include "train/checkpoint_layout.h"
#include "train/retention.h"

namespace amptune::app {
namespace fs = std::filesystem;
namespace {

std::string normal(const fs::path& p) { return train::normal_path(p.string()); }

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int64_t size_of(const fs::path& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

// Temp files of write_file_atomic: "<name>.tmp.<pid>".
bool is_temp(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

}  // namespace

void apply_retention(store::Store& store, int64_t run_id, const CheckpointSettings& checkpoint,
                     const std::string& primary, bool higher_is_better) {
  train::RetentionPolicy policy;
  policy.keep_last = checkpoint.keep_last;
  policy.keep_best = checkpoint.keep_best;
  policy.keep_epochs = checkpoint.keep_epochs;
  policy.primary_metric = primary;
  policy.higher_is_better = higher_is_better;
  if (policy.keep_last == 0 && policy.keep_best == 0) return;
  const auto rows = store.epochs(run_id);
  const std::set<int> keep = train::retained_epochs(rows, policy, store.fork_epochs(run_id));
  const std::string run_dir = train::checkpoint_dir(checkpoint.dir, store.path(), run_id);
  for (auto& row : rows) {
    if (!row.checkpoint || keep.count(row.epoch)) continue;
    train::remove_own_checkpoint(row.checkpoint->path, run_dir);
    store.forget_checkpoint(run_id, row.epoch);
  }
}

void claim_checkpoint_root(const CheckpointSettings& checkpoint, const store::Store& store) {
  const fs::path root = train::checkpoint_root(checkpoint.dir, store.path());
  const fs::path marker = root / ".amptune-database";
  const std::string id = store.database_id();
  std::error_code ec;
  fs::create_directories(root, ec);
  const std::string text = id + " " + normal(store.path()) + "\n";
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd >= 0) {
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (written) return;
    fs::remove(marker, ec);
    throw CheckpointError("cannot write " + marker.string() + " (disk full?)");
  }
  std::ifstream in(marker);
  std::string owner, owner_path;
  in >> owner;
  std::getline(in >> std::ws, owner_path);
  if (!in && owner.empty()) {
    throw CheckpointError("cannot read " + marker.string() +
                          ", which says which database the "
                          "checkpoint folder " +
                          root.string() + " belongs to");
  }
  if (owner == id) return;
  if (owner_path == normal(store.path())) {
    // The database that claimed the folder was at this very path and is gone (deleted and made
    // again): its files are nobody's now, and this database takes the folder over.
    log::warn("the checkpoint folder " + root.string() + " belonged to an earlier database at " +
              store.path() + "; this one takes it over");
    write_file_atomic(marker.string(), text);
    return;
  }
  throw CheckpointError("the checkpoint folder " + root.string() + " belongs to the database " +
                        (owner_path.empty() ? "with id " + owner : owner_path) + " (" +
                        marker.string() + "), not to " + store.path() +
                        ": give this database a checkpoint.dir of its own (or none: then its "
                        "checkpoints go beside it)");
}

GcReport collect_garbage(store::Store& store, bool dry_run) {
  GcReport report;
  std::map<std::string, std::string> found;  // path -> reason
  const auto runs = store.runs();
  std::set<std::string> run_dirs;
  std::set<int64_t> run_ids;
  for (const auto& run : runs) {
    run_ids.insert(run.id);
    const fs::path dir = train::checkpoint_dir(train::configured_checkpoint_dir(run.config_json),
                                               store.path(), run.id);
    run_dirs.insert(normal(dir));
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    if (run.status == records::RunStatus::kRunning) {
      report.skipped.push_back(dir.string() + ": run " + run.name +
                               " is running (a save may be in flight; if its worker died, resume "
                               "or reclaim it first)");
      continue;
    }
    std::set<std::string> referenced;
    std::string missing;
    for (const auto& row : store.epochs(run.id)) {
      if (!row.checkpoint) continue;
      referenced.insert(normal(row.checkpoint->path));
      if (!fs::exists(row.checkpoint->path, ec) && missing.empty()) missing = row.checkpoint->path;
    }
    if (!missing.empty()) {
      report.skipped.push_back(dir.string() + ": run " + run.name + "'s recorded checkpoint " +
                               missing +
                               " is not there (moved, or a relative path recorded from another "
                               "working directory); nothing in this directory is deleted");
      continue;
    }
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file() || entry.is_symlink()) continue;
      const std::string path = normal(entry.path());
      if (referenced.count(path)) continue;
      found[entry.path().string()] = is_temp(entry.path().filename().string())
                                         ? "temp file of an interrupted save"
                                         : "not referenced by the database";
    }
  }
  // Directories of deleted runs, only under the database's own default root (a shared
  // checkpoint.dir may hold other databases' runs).
  std::vector<fs::path> stale_dirs;
  const fs::path root = train::default_checkpoint_root(store.path());
  std::error_code ec;
  if (fs::is_directory(root, ec)) {
    for (const auto& entry : fs::directory_iterator(root)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_directory() || entry.is_symlink() || !all_digits(name)) continue;
      if (run_ids.count(std::stoll(name)) || run_dirs.count(normal(entry.path()))) continue;
      stale_dirs.push_back(entry.path());
      for (const auto& file : fs::directory_iterator(entry.path())) {
        if (!file.is_regular_file() || file.is_symlink()) continue;
        found[file.path().string()] = "run " + name + " does not exist";
      }
    }
  }
  for (const auto& [path, reason] : found) {
    const int64_t bytes = size_of(path);
    report.files.push_back({path, bytes, reason});
    report.bytes += bytes;
  }
  if (dry_run) return report;
  for (const auto& file : report.files) {
    std::error_code rm;
    if (!fs::remove(file.path, rm) && rm) {
      throw CheckpointError("cannot delete " + file.path + ": " + rm.message() +
                            " (check the directory's permissions)");
    }
  }
  for (const auto& dir : stale_dirs) {
    std::error_code rm;
    if (fs::is_empty(dir, rm)) fs::remove(dir, rm);
  }
  return report;
}

}  // namespace amptune::app
