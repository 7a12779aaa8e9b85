// Data-set utilities (`amptune data export-imagefolder`, `amptune data synth-rootnet`): the work
// is in data/ (export.h, rootnet_data.h: torch-free headers). No torch.
#pragma once

#include <cstdint>
#include <string>

#include "data/export.h"
#include "data/rootnet_data.h"

namespace amptune::app {

// The IDX files under `idx` (train and t10k) as an ImageNet-style JPEG folder: OUT/train and
// OUT/val (data::export_idx_as_imagefolder).
data::ExportStats export_imagefolder(const std::string& idx, const std::string& out,
                                     int64_t limit_per_split, int jpeg_quality,
                                     data::ClassNaming naming);

// A synthetic RootNet data set (data::synth_rootnet).
data::SynthStats synth_rootnet(const data::SynthOptions& options);

}  // namespace amptune::app
