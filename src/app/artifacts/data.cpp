#include "app/artifacts/data.h"

#include "core/error.h"
#include "core/sweep.h"

namespace amptune::app {

data::ExportStats export_imagefolder(const std::string& idx, const std::string& out,
                                     int64_t limit_per_split, int jpeg_quality,
                                     data::ClassNaming naming) {
  return data::export_idx_as_imagefolder(idx, out, {{"train", "train"}, {"t10k", "val"}},
                                         limit_per_split, jpeg_quality, naming);
}

data::SynthStats synth_rootnet(const data::SynthOptions& options) {
  return data::synth_rootnet(options);
}

train::ExportResult plant_weights(const std::string& sweep_path,
                                  const std::vector<std::string>& sets,
                                  const std::vector<std::string>& only,
                                  const std::vector<train::WeightScale>& scales,
                                  const std::string& out) {
  const Sweep sweep = load_sweep(sweep_path, sets);
  const std::vector<Cell> cells = filter_cells(sweep.cells, only);
  if (cells.empty()) {
    throw ConfigError("no cell of " + sweep_path + " matches the --only selection");
  }
  return train::plant_weights(cells.front().config(), scales, out);
}

}  // namespace amptune::app
