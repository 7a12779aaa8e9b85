// Data sets and samples. A sample is an image tensor (none for data.format tensors) plus named
// fields; the loader stacks them into batches. All randomness of a sample comes from the Rng passed in, which the loader
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
struct ModelSettings;
struct RootNetSettings;
}

namespace amptune::data {

using Rng = std::mt19937_64;

// A per-sample generator: splitmix64 over (seed, epoch, index).
Rng sample_rng(uint64_t seed, uint64_t epoch, uint64_t index);

struct Sample {
  torch::Tensor image;  // float32 [C, H, W], normalised; undefined without images (tensors)
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
// transform (transform_options of `data` and model.in_channels; none for data.format tensors),
// for data.format rootnet the rootnet.* section (make_rootnet_dataset), for data.format synthetic
// a SyntheticDataset (data/synthetic.h) of model.in_channels x data.image_size^2 images,
// model.num_classes classes and data.synthetic_samples samples. Throws ConfigError naming the
// key for an unusable value, DataError naming the expected path and format when files are
// missing or malformed.
std::shared_ptr<Dataset> make_dataset(const DataSettings& data, const RootNetSettings& rootnet,
                                      const ModelSettings& model, Split split);

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
// be read or decoded gives nullopt, with one warning per file; one declaring more pixels than
// options.max_pixels (data.max_image_pixels) makes get() throw DataError naming it. Throws
// DataError when ROOT/SPLIT is missing, holds no class folders, or a class folder holds no image.
std::shared_ptr<Dataset> make_imagefolder_dataset(const std::string& root,
                                                  const std::string& split,
                                                  const TransformOptions& options);

// Tensors (data.format tensors, what model.task custom reads; docs/DATA.md "Tensors"):
// ROOT/SPLIT/*.safetensors ("shards", data/safetensors.h), read in file-name order (every entry
// of that name but folders and names starting with '.'). Every shard holds the same
// tensor names with the same dtypes and the same shape after the first dimension, which counts
// samples; one shard's tensors agree in it; shards concatenate along it. Sample i is row i of
// every tensor: no image, each tensor's row (its dtype as stored, shape without the first
// dimension) as the field of its name; no transform, no augmentation (data.mean / std /
// image_size do not apply). Everything is checked when the data set is made: DataError naming the
// file (and the tensor) when ROOT/SPLIT is missing, holds no .safetensors file or more than
// kMaxTensorShards, a shard is malformed (the reader's checks) or holds no tensor, a tensor has no
// dimension or rows of no element, the tensors of a shard differ in their first dimension, a
// shard differs from the first in names, dtypes or row shapes, or the split holds no sample.
// Memory: each shard is mapped read-only for the data set's life (its pages belong to the page
// cache, read as samples touch them) and get() copies one sample's rows out, so a split larger
// than memory trains, and opening one reads the headers only; what is kept is one pointer per
// tensor and shard. The shards must not change while a data set maps them (the fingerprint
// assumes it too). get() throws DataError naming the file, tensor and row for a BOOL byte other
// than 0 or 1 (checked in the rows read: a scan of every BOOL up front would read the data).
std::shared_ptr<Dataset> make_tensors_dataset(const std::string& root, const std::string& split);

// The most shards of one split: each is a mapping held open, and Linux allows a process 65,530
// (vm.max_map_count), which LibTorch, the loader's threads and the other split share.
constexpr size_t kMaxTensorShards = 10'000;

// The shard files of make_tensors_dataset(root, split), in reading order (paths ROOT/SPLIT/NAME);
// throws its DataErrors for the folder (missing, no shard, more than kMaxTensorShards).
std::vector<std::string> tensors_shard_files(const std::string& root, const std::string& split);

}  // namespace amptune::data
