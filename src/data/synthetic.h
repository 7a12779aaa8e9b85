// data.format synthetic (docs/DATA.md "Synthetic"): random images and labels without files, for
// measuring the training step alone. Every batch a Loader hands out is one resident batch, made on
// the loader's device in its memory format the first time it is asked for and the same tensors
// after: no loader thread, no decoding, no copy from the host per step.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "data/dataset.h"
#include "data/loader.h"

namespace amptune::data {

class SyntheticDataset : public Dataset {
 public:
  // `samples` samples of images [channels, side, side] and labels in [0, classes) (all >= 1).
  // `split` salts the content: the training and evaluation batches differ.
  SyntheticDataset(int64_t channels, int64_t side, int64_t classes, int64_t samples, Split split);

  size_t size() const override { return static_cast<size_t>(samples_); }
  std::string describe() const override;
  // A sample drawn from `rng` alone (`index` and `train` change nothing): image float32
  // [channels, side, side], standard normal from a LibTorch CPU generator seeded by rng's first
  // draw; field "label" int64 scalar uniform in [0, classes) (uniform_index, the next draw).
  std::optional<Sample> get(size_t index, Rng& rng, bool train) const override;
  int64_t num_classes() const override { return classes_; }

  // The first `rows` (1..options.batch_size) samples of the resident batch of a loader of
  // `options`: options.batch_size samples, sample r = get(r, sample_rng(options.seed, salt, r))
  // with salt 0 for the training split and 1 for the evaluation split, stacked, then moved to
  // options.device in options.memory_format (4-d images). Made on the first call for a (seed,
  // batch size, device, memory format); later calls return views of the same tensors (Batch::index
  // 0, skipped 0; the caller sets the index). Safe to call from several threads.
  Batch resident_batch(const LoaderOptions& options, int64_t rows) const;

 private:
  using Key = std::tuple<uint64_t, int64_t, std::string, int>;
  int64_t channels_, side_, classes_, samples_;
  uint64_t salt_;
  mutable std::mutex mutex_;
  mutable std::map<Key, Batch> made_;
};

}  // namespace amptune::data
