// Checkpoint retention and garbage collection (docs/CONFIG.md checkpoint.*, README `amptune gc`).
// No torch in this header: the CLI includes it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "store/store.h"

namespace amptune {
struct CheckpointSettings;
}

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
std::set<int> retained_epochs(const std::vector<store::EpochRow>& rows,
                              const RetentionPolicy& policy, const std::vector<int>& fork_epochs);

// Applies checkpoint.keep_last / keep_best / keep_epochs to run `run_id` (forks'
// parent epochs are kept): deletes the other checkpoint files and marks them deleted in the
// store (their metrics stay).
void apply_retention(store::Store& store, int64_t run_id, const CheckpointSettings& checkpoint,
                     const std::string& primary, bool higher_is_better);

// Deletes the recorded checkpoint file `path` of a run whose own checkpoint folder is `run_dir`
// (checkpoint_dir) only when it lies directly in that folder and is a regular file, not a link;
// otherwise leaves the file and says so (a warning naming it). A path that came from another
// database (merge) or a copied row can so never make amptune delete anything outside its own
// tree. Returns whether the file was deleted.
bool remove_own_checkpoint(const std::string& path, const std::string& run_dir);

// The checkpoint folder of runs with `checkpoint` settings (checkpoint.dir, or
// default_checkpoint_root of the database) belongs to one database: its file .amptune-database
// names that database's id and path. Creates the folder and the file when missing; throws
// CheckpointError naming both databases when the file names another (two databases given one
// checkpoint.dir would write and delete each other's epoch_N files). Called before a run writes
// or deletes anything there.
void claim_checkpoint_root(const CheckpointSettings& checkpoint, const store::Store& store);

// Removes the temp files of interrupted checkpoint saves ("<name>.tmp.<pid>", checkpoint.h) in a
// run's checkpoint directory whose writer is dead: its pid is not a live process of this machine,
// or it is this process (which is not saving now). Called by the process that holds the run
// before it trains. Returns the removed paths; a missing directory is no error.
std::vector<std::string> remove_dead_temp_files(const std::string& dir);

struct GarbageFile {
  std::string path;
  int64_t bytes = 0;
  std::string reason;  // "unreferenced", "temp file of an interrupted save", "run N does not exist"
};

struct GcReport {
  std::vector<GarbageFile> files;      // deleted (or, dry run, to delete), in path order
  std::vector<std::string> skipped;    // directories left alone, each with the reason
  int64_t bytes = 0;                   // sum of files[].bytes
};

// Finds checkpoint files the database no longer references: regular files in each run's
// checkpoint directory (checkpoint_dir) that no epoch row references as a kept checkpoint
// (temp files of interrupted saves included), and the directories under
// default_checkpoint_root (plan.h) named after run ids that no longer exist. Nothing outside those
// directories is looked at. Directories of running runs are skipped (a save may be in flight),
// and so is a run directory whose recorded checkpoints are not found at their recorded paths
// (e.g. relative paths recorded from another working directory). Unless `dry_run`, deletes the
// files, then the emptied directories of missing runs. Throws StoreError / CheckpointError naming
// the file that could not be deleted.
GcReport collect_garbage(store::Store& store, bool dry_run);

}  // namespace amptune::train
