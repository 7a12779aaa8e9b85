#include "app/data.h"

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

}  // namespace amptune::app
