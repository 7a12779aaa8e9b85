// A run's database row resolved into the typed value train takes (train/run_input.h): the one
// place a stored configuration (runs.config_json) is parsed for training, evaluation, export,
// diagnosis, forks and checkpoint folders.
#pragma once

#include "records/records.h"
#include "train/run_input.h"

namespace amptune::app {

// Throws ConfigError naming the run when its stored configuration does not parse under this
// build's schema (a database written by a newer amptune, or edited by hand).
train::RunInput resolve_run(const records::RunRow& row);

}  // namespace amptune::app
