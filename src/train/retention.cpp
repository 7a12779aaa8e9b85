// Which checkpoints a run keeps (keep_last / keep_best / keep_epochs / fork parents), deleting
// only inside a run's own folder, temp files of dead writers.
#include "train/retention.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/log.h"
#include "core/process.h"

namespace amptune::train {
namespace fs = std::filesystem;

std::set<int> retained_epochs(const std::vector<records::EpochRow>& rows,
                              const RetentionPolicy& policy, const std::vector<int>& fork_epochs) {
  std::vector<const records::EpochRow*> with_file;
  for (auto& row : rows) {
    if (row.checkpoint) with_file.push_back(&row);
  }
  std::set<int> keep;
  if (with_file.empty()) return keep;
  if (policy.keep_last == 0 && policy.keep_best == 0) {
    for (auto* row : with_file) keep.insert(row->epoch);
    return keep;
  }
  keep.insert(with_file.back()->epoch);  // newest
  for (int64_t i = 0; i < policy.keep_last && i < static_cast<int64_t>(with_file.size()); ++i) {
    keep.insert(with_file[with_file.size() - 1 - static_cast<size_t>(i)]->epoch);
  }
  if (policy.keep_best > 0) {
    auto ranked = with_file;
    auto value = [&](const records::EpochRow* r) {
      auto it = r->metrics.find(policy.primary_metric);
      if (it == r->metrics.end() || std::isnan(it->second)) {
        return -std::numeric_limits<double>::infinity();
      }
      return policy.higher_is_better ? it->second : -it->second;
    };
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](const auto* a, const auto* b) { return value(a) > value(b); });
    for (int64_t i = 0; i < policy.keep_best && i < static_cast<int64_t>(ranked.size()); ++i) {
      keep.insert(ranked[static_cast<size_t>(i)]->epoch);
    }
  }
  const std::set<int64_t> pinned(policy.keep_epochs.begin(), policy.keep_epochs.end());
  for (auto* row : with_file) {
    if (pinned.count(row->epoch) ||
        std::find(fork_epochs.begin(), fork_epochs.end(), row->epoch) != fork_epochs.end()) {
      keep.insert(row->epoch);
    }
  }
  return keep;
}

namespace {

std::string normal(const fs::path& p) {
  std::error_code ec;
  fs::path out = fs::weakly_canonical(fs::absolute(p), ec);
  if (ec) out = fs::absolute(p).lexically_normal();
  return out.string();
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool remove_own_checkpoint(const std::string& path, const std::string& run_dir) {
  std::error_code ec;
  const fs::path file(path);
  const bool regular = fs::is_regular_file(fs::symlink_status(file, ec));
  if (!regular || !is_checkpoint_file_name(file.filename().string()) ||
      normal(file.parent_path()) != normal(run_dir)) {
    if (fs::exists(fs::symlink_status(file, ec))) {
      log::warn("not deleting " + path + ": it is not a checkpoint file in the run's own folder " +
                run_dir + " (a path recorded by another database?); its record is dropped");
    }
    return false;
  }
  return fs::remove(file, ec);
}

std::vector<std::string> remove_dead_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  const ProcessIdentity self = current_process();
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t mark = name.rfind(".tmp.");
    if (mark == std::string::npos || !entry.is_regular_file() || entry.is_symlink()) continue;
    const std::string pid_text = name.substr(mark + 5);
    if (!all_digits(pid_text) || pid_text.size() > 9) continue;
    ProcessIdentity writer{self.machine, std::stoll(pid_text), 0};
    if (writer.pid != self.pid && process_alive(writer)) continue;
    std::error_code rm;
    if (fs::remove(entry.path(), rm)) removed.push_back(entry.path().string());
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::string normal_path(const std::string& path) { return normal(path); }

}  // namespace amptune::train
