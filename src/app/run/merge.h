// Several results databases as one: `amptune merge` (shards of a sweep trained on several
// machines, app/run/shard.h, joined into one file) and the commands that read several databases
// before they are merged (`status`, `compare --db 'results/x.shard-*.sqlite'`). The merge itself
// is Store::merge (store.h "Merging databases"); docs/DATABASE.md "Merging databases".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace amptune::app {

// Merges `inputs` into the database at `into` (Store::merge: one transaction, all or nothing).
// Every input is checked before `into` is opened, so a bad input leaves `into` as it was (not
// even created); a database this call created is removed again when the merge fails. Throws
// StoreError naming the file.
records::MergeReport merge_databases(const std::string& into,
                                     const std::vector<std::string>& inputs);

// The databases at `paths` read as one: a single file opened as it is, several merged into an
// in-memory database by Store::merge's rules (the copy of a cell with more epochs wins), with
// what the merge did in `*report` when given. No file is written. Throws StoreError for a
// missing or bad file, UsageError for no path at all.
std::unique_ptr<store::Store> open_databases(const std::vector<std::string>& paths,
                                             records::MergeReport* report = nullptr);

}  // namespace amptune::app
