// Data sets and samples. A sample is an image tensor plus named target fields; the loader stacks
// them into batches. All randomness of a sample comes from the Rng passed in, which the loader
// seeds from (seed, epoch, sample index), so results do not depend on the number of threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <torch/types.h>

namespace amptune {
class Config;
}

namespace amptune::data {

using Rng = std::mt19937_64;

// A per-sample generator: splitmix64 over (seed, epoch, index).
Rng sample_rng(uint64_t seed, uint64_t epoch, uint64_t index);

struct Sample {
  torch::Tensor image;                          // float32 [C, H, W], normalised
  std::map<std::string, torch::Tensor> fields;  // e.g. "label": int64 scalar
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  virtual std::string describe() const = 0;  // "imagefolder data/imagenet/train (1000 classes)"
  // Loads sample `index`; `train` selects augmentation. Returns nullopt when the sample is corrupt
  // or unreadable (the loader skips and counts it). Must be safe to call from several threads.
  virtual std::optional<Sample> get(size_t index, Rng& rng, bool train) const = 0;
};

enum class Split { kTrain, kVal };

// The data set a config describes (data.format, data.root, ...). Throws DataError naming the
// expected path and format when files are missing or malformed.
std::shared_ptr<Dataset> make_dataset(const Config& config, Split split);

}  // namespace amptune::data
