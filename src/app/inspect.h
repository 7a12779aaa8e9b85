// The one lookup of a run by id or name that every command naming a RUN goes through (show,
// resume, fork, eval, export, diagnose), and opening an existing results database. No torch.
#pragma once

#include <string>

#include "store/store.h"

namespace amptune::app {

// Opens the existing results database `db`; a missing file is a StoreError that says to run a
// sweep first or pass --db (commands that read results must not create an empty database).
store::Store open_existing(const std::string& db);

// The run `ref` (an id or a name) of `store`. Throws UsageError "no run 'REF' in DB (see amptune
// list --db DB)" when there is none.
store::RunRow find_run(const store::Store& store, const std::string& ref);

}  // namespace amptune::app
