// Multi-threaded batch loader with bounded prefetch. Batch b of epoch e always holds the same
// samples with the same augmentation, whatever the number of worker threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace amptune::data {

struct LoaderOptions {
  int64_t batch_size = 32;
  int workers = 2;          // threads decoding samples; 0 = load in the calling thread
  int prefetch = 4;         // batches ready ahead at most
  bool shuffle = true;      // order from (seed, epoch)
  bool train = true;        // augmentation on
  bool drop_last = true;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  int64_t max_batches = -1;  // -1 = all
};

struct Batch {
  int64_t index = 0;                            // batch number within the epoch
  torch::Tensor images;                         // [B, C, H, W]
  std::map<std::string, torch::Tensor> fields;  // stacked sample fields
  int64_t skipped = 0;                          // corrupt samples left out of this batch
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~Loader();  // stops and joins the workers
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t num_batches() const { return num_batches_; }
  // The next batch in order, or nullopt at the end of the epoch.
  std::optional<Batch> next();

 private:
  // implementation-defined members
  struct State;
  std::unique_ptr<State> state_;
  int64_t num_batches_ = 0;
};

}  // namespace amptune::data
