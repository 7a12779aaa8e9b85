// Data-set utilities (`amptune data export-imagefolder`, `amptune data synth-rootnet`,
// `amptune data plant-weights`): the work is in data/ (export.h, rootnet_data.h) and
// train/planted_weights.h, torch-free headers. No torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/export.h"
#include "data/rootnet_data.h"
#include "train/planted_weights.h"

namespace amptune::app {

// The IDX files under `idx` (train and t10k) as an ImageNet-style JPEG folder: OUT/train and
// OUT/val (data::export_idx_as_imagefolder).
data::ExportStats export_imagefolder(const std::string& idx, const std::string& out,
                                     int64_t limit_per_split, int jpeg_quality,
                                     data::ClassNaming naming);

// A synthetic RootNet data set (data::synth_rootnet).
data::SynthStats synth_rootnet(const data::SynthOptions& options);

// The seeded initial weights of the model of sweep `sweep_path`'s first cell (base with the
// `sets` overrides; among the cells `only` selects), the tensors `scales` names multiplied,
// written to `out` (train::plant_weights). ConfigError for a bad sweep file or scale, or when
// no cell is selected.
train::ExportResult plant_weights(const std::string& sweep_path,
                                  const std::vector<std::string>& sets,
                                  const std::vector<std::string>& only,
                                  const std::vector<train::WeightScale>& scales,
                                  const std::string& out);

}  // namespace amptune::app
