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
#include <vector>

#include <torch/types.h>

#include "data/transforms.h"

namespace amptune {
struct DataSettings;
struct RootNetSettings;
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
  // Classification sets: number of classes and the name of class i (0 / empty otherwise).
  virtual int64_t num_classes() const { return 0; }
  virtual std::vector<std::string> class_names() const { return {}; }
};

enum class Split { kTrain, kVal };

// The data set a run's settings describe: data.format, data.root, the split's name, the
// transform (transform_options of `data` and `in_channels`, model.in_channels), and for
// data.format rootnet the rootnet.* section (make_rootnet_dataset). Throws ConfigError naming
// the key for an unusable value, DataError naming the expected path and format when files are
// missing or malformed.
std::shared_ptr<Dataset> make_dataset(const DataSettings& data, const RootNetSettings& rootnet,
                                      int64_t in_channels, Split split);

// The readers behind make_dataset, for callers that hold no settings.
//
// IDX (MNIST / Fashion-MNIST): ROOT/SPLIT-images-idx3-ubyte[.gz] + ROOT/SPLIT-labels-idx1-ubyte[.gz],
// loaded into memory once. Sample: image [channels, rows, cols] = (pixel/255 - mean) / std (grey
// replicated when channels is 3), field "label" int64 scalar. Training augmentation (train and
// options.augment): horizontal flip with probability 0.5. image_size / resize_size are unused.
std::shared_ptr<Dataset> make_idx_dataset(const std::string& root, const std::string& split,
                                          const TransformOptions& options);
// ImageFolder (torchvision layout): ROOT/SPLIT/<class>/**/*.{jpg,jpeg,png} (any case; decoded
// by content, JPEG or PNG); class folders sorted by name give the label index, files sorted by
// relative path; folders starting with '.' are ignored. Train: imagefolder_train_transform when
// options.augment, else the eval transform; eval: imagefolder_eval_transform. Sample: image
// [channels, image_size, image_size] normalised, field "label" int64 scalar. A file that cannot
// be read or decoded gives nullopt, with one warning per file. Throws DataError when ROOT/SPLIT
// is missing, holds no class folders, or a class folder holds no image.
std::shared_ptr<Dataset> make_imagefolder_dataset(const std::string& root,
                                                  const std::string& split,
                                                  const TransformOptions& options);

}  // namespace amptune::data
