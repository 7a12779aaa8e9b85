// Which checkpoint files of a run stay (docs/CONFIG.md checkpoint.*), and deleting files only
// inside a run's own folder. The database side (applying retention to a run's rows, claiming a
// checkpoint root, `amptune gc`) is app/artifacts/checkpoint_folders.h. No torch in this header.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "records/records.h"
#include "train/checkpoint_layout.h"

namespace amptune::train {

struct RetentionPolicy {
  int64_t keep_last = 0;          // newest N checkpoints; 0 (with keep_best 0) = keep all
  int64_t keep_best = 0;          // N best by the primary metric
  std::vector<int64_t> keep_epochs;  // always kept (0-based epochs)
  std::string primary_metric = "acc1";
  bool higher_is_better = true;
};

// The epochs of `rows` (a run's epoch rows, ascending) whose checkpoint files stay: all when
// keep_last and keep_best are 0; otherwise the newest, the keep_last newest, the keep_best best
// by the primary metric (rows without it rank last), every keep_epochs entry and every epoch in
// `fork_epochs` (a fork starts from it). Only rows that still have a checkpoint are returned.
std::set<int> retained_epochs(const std::vector<records::EpochRow>& rows,
                              const RetentionPolicy& policy, const std::vector<int>& fork_epochs);

// Deletes the recorded checkpoint file `path` of a run whose own checkpoint folder is `run_dir`
// (checkpoint_layout.h checkpoint_dir) only when it lies directly in that folder, has a
// checkpoint's name (is_checkpoint_file_name) and is a regular file, not a link; otherwise leaves
// the file and says so (a warning naming it). A path that came from another
// database (merge) or a copied row can so never make amptune delete anything outside its own
// tree. Returns whether the file was deleted.
bool remove_own_checkpoint(const std::string& path, const std::string& run_dir);

// Removes the temp files of interrupted checkpoint saves ("<name>.tmp.<pid>", checkpoint.h) in a
// run's checkpoint directory whose writer is dead: its pid is not a live process of this machine,
// or it is this process (which is not saving now). Called by the process that holds the run
// before it trains. Returns the removed paths; a missing directory is no error.
std::vector<std::string> remove_dead_temp_files(const std::string& dir);

// An absolute, normalised spelling of `path` (relative paths against the working directory), for
// comparing recorded checkpoint paths with directory listings.
std::string normal_path(const std::string& path);

}  // namespace amptune::train
