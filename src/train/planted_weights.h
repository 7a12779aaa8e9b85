// A model's seeded initial weights with named tensors multiplied by factors (`amptune data
// plant-weights`): a precision fault planted in a network for tests and worked examples. A
// convolution's weight x 30000 makes its fp16 outputs overflow, while the BatchNorm after it
// normalises the fp32 values as before (experiments/tune_two_overflows.yaml). No torch in this
// header: the app layer includes it.
#pragma once

#include <string>
#include <vector>

#include "train/evaluate.h"  // ExportResult

namespace amptune {
class Config;
}

namespace amptune::train {

struct WeightScale {
  // A state-dict name: "layer3.0.conv1.weight"; or one slice of it along its first dimension,
  // "layer2.0.conv1.weight[0]" (one output filter of a convolution, one row of a Linear): a few
  // huge values that set a per-tensor FP8 scale (docs/TUNE.md "FP8").
  std::string name;
  double factor = 1.0;
};

// Builds the model of `config` as a run initialises it (torch seeded with the config's seed,
// then make_task), without loading model.weights or model.backbone_weights (the file written is
// what model.weights is to name), multiplies each named floating parameter or buffer by its
// factor and writes the whole state dict to `out` in the format model.weights reads
// (models/weights.h; atomic: core/files.h write_file_atomic). Throws ConfigError, before anything
// is written, naming a name that is no floating tensor of the model (with the names nearest to
// it), a slice beyond the tensor's first dimension, a name given twice, or a factor that is not
// finite or gives a value that is not finite in fp32; EnvironmentError / ModelError when `out`
// cannot be written.
ExportResult plant_weights(const Config& config, const std::vector<WeightScale>& scales,
                           const std::string& out);

}  // namespace amptune::train
