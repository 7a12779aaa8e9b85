#include "app/run/run_input.h"

namespace amptune::app {

train::RunInput resolve_run(const records::RunRow& row) {
  train::RunInput run(Config::from_json(row.config_json, "run " + row.name));
  run.id = row.id;
  run.name = row.name;
  run.label = row.label;
  run.sweep_name = row.sweep_name;
  run.cell_index = row.cell_index;
  run.axes_json = row.axes_json;
  run.config_hash = row.config_hash;
  run.legacy_config_hash = row.legacy_config_hash;
  run.data_fingerprint = row.data_fingerprint;
  run.fork = row.fork;
  return run;
}

}  // namespace amptune::app
