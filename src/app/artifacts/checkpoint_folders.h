// A results database's checkpoint folders: claiming a checkpoint root for the database, applying
// a run's retention rule to its rows and files, and `amptune gc` (files the database no longer
// references). train/retention.h decides which files stay; this side reads and writes the store.
// No torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace amptune {
struct CheckpointSettings;
}

namespace amptune::app {

// Applies checkpoint.keep_last / keep_best / keep_epochs to run `run_id` (forks'
// parent epochs are kept): deletes the other checkpoint files and marks them deleted in the
// store (their metrics stay).
void apply_retention(store::Store& store, int64_t run_id, const CheckpointSettings& checkpoint,
                     const std::string& primary, bool higher_is_better);

// The checkpoint folder of runs with `checkpoint` settings (train/checkpoint_layout.h
// checkpoint_root: checkpoint.dir, or default_checkpoint_root of the database) belongs to one
// database: its file .amptune-database names that database's id and path. Creates the folder and
// the file when missing; throws CheckpointError naming both databases when the file names another
// (two databases given one checkpoint.dir would write and delete each other's epoch_N files).
// Called before a run writes or deletes anything there.
void claim_checkpoint_root(const CheckpointSettings& checkpoint, const store::Store& store);

struct GarbageFile {
  std::string path;
  int64_t bytes = 0;
  std::string reason;  // "unreferenced", "temp file of an interrupted save", "run N does not exist"
};

struct GcReport {
  std::vector<GarbageFile> files;    // deleted (or, dry run, to delete), in path order
  std::vector<std::string> skipped;  // directories left alone, each with the reason
  int64_t bytes = 0;                 // sum of files[].bytes
};

// Finds checkpoint files the database no longer references: regular files in each run's
// checkpoint directory (train/checkpoint_layout.h checkpoint_dir, from the checkpoint.dir its
// stored config names) that no epoch row references as a kept checkpoint (temp files of
// interrupted saves included), and the directories under default_checkpoint_root named after
// run ids that no longer exist. Nothing outside those
// directories is looked at. Directories of running runs are skipped (a save may be in flight),
// and so is a run directory whose recorded checkpoints are not found at their recorded paths
// (e.g. relative paths recorded from another working directory). Unless `dry_run`, deletes the
// files, then the emptied directories of missing runs. Throws StoreError / CheckpointError naming
// the file that could not be deleted.
GcReport collect_garbage(store::Store& store, bool dry_run);

}  // namespace amptune::app
