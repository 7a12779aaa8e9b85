#include "app/run/merge.h"

#include <filesystem>

#include "core/error.h"
#include "train/checkpoint_layout.h"

namespace amptune::app {

namespace fs = std::filesystem;

records::MergeReport merge_databases(const std::string& into,
                                   const std::vector<std::string>& inputs) {
  std::error_code ec;
  const bool existed = fs::exists(into, ec);
  // Store::merge checks every input before it writes; checking first here as well keeps a bad
  // input from even creating a missing target.
  if (!existed) {
    for (const std::string& input : inputs) store::check_merge_input(input);
  }
  try {
    store::Store target(into);
    return target.merge(inputs, train::checkpoint_layout());
  } catch (...) {
    if (!existed) {
      // Store created (and migrated) it before the merge failed: an empty database nobody asked
      // for. Its WAL files go with it.
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(into + suffix, ec);
    }
    throw;
  }
}

std::unique_ptr<store::Store> open_databases(const std::vector<std::string>& paths,
                                             records::MergeReport* report) {
  if (paths.empty()) throw UsageError("no results database given; pass --db FILE");
  if (paths.size() == 1) {
    std::error_code ec;
    if (!fs::exists(paths[0], ec)) {
      throw StoreError("database " + paths[0] +
                       " does not exist; run a sweep first or pass "
                       "--db FILE");
    }
    return std::make_unique<store::Store>(paths[0]);
  }
  std::string name;
  for (const auto& p : paths) name += (name.empty() ? "" : " + ") + p;
  auto merged = store::Store::in_memory(name + " (merged in memory)");
  records::MergeReport done = merged->merge(paths, train::checkpoint_layout());
  if (report) *report = std::move(done);
  return merged;
}

}  // namespace amptune::app
