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
  int64_t max_batches = -1;  // -1 = all (with shards: per rank for kSamples, of the whole set
                             // for kBatches)
  // The shard of a data-parallel process (docs/DISTRIBUTED.md): rank `rank` of `world`.
  int rank = 0;
  int world = 1;
  // kSamples (training, as PyTorch's DistributedSampler): the epoch order padded by repeating
  // its start to a multiple of `world`, then every world-th sample from position `rank`; each
  // rank batches its own samples. kBatches (evaluation): the batches a single process would
  // form, every world-th from batch `rank`, with their single-process batch numbers, so the
  // per-batch results of all ranks combine into exactly the single-process result.
  enum class Shard { kSamples, kBatches } shard = Shard::kSamples;
  // Where a synthetic data set's resident batch lives (the run's device, the model's memory
  // format: data/synthetic.h); other data sets hand out CPU batches whatever these say.
  torch::Device device = torch::kCPU;
  torch::MemoryFormat memory_format = torch::MemoryFormat::Contiguous;
};

struct Batch {
  int64_t index = 0;  // batch number within the epoch (kBatches shards: the single-process one)
  int64_t size = 0;   // samples in the batch, with or without images
  torch::Tensor images;  // [B, C, H, W]; undefined when the samples have none (tensors)
  std::map<std::string, torch::Tensor> fields;  // stacked sample fields
  int64_t skipped = 0;                          // corrupt samples left out of this batch
};

// Loader options of a split from the data.* section and the run's `seed`: data.batch_size (val:
// data.eval_batch_size when > 0), data.workers, data.prefetch; train = shuffle + augmentation +
// drop_last, val = none.
LoaderOptions loader_options(const DataSettings& data, int64_t seed, Split split, uint64_t epoch);

// The sample order of an epoch: 0..n-1, or when `shuffle` a permutation drawn from
// sample_rng(seed, epoch, 2^64 - 1) (that index is reserved for the order): for n up to
// kTableOrderMax a Fisher-Yates shuffle held as a table (n int64: 128 MiB at the bound), above it
// a keyed Feistel permutation computed per position in constant memory (docs/DATA.md
// "Determinism": a Fisher-Yates order needs the whole table, so a split of 10^9 rows would need
// 8 GB for its order alone). Positions are read with order[pos], pos < size().
class EpochOrder {
 public:
  static constexpr size_t kTableOrderMax = size_t{1} << 24;

  // `table_max` is kTableOrderMax but in tests, which try the per-position order on small n.
  EpochOrder(size_t n, uint64_t seed, uint64_t epoch, bool shuffle,
             size_t table_max = kTableOrderMax);
  size_t size() const { return n_; }
  int64_t operator[](size_t pos) const;

 private:
  size_t n_ = 0;
  std::vector<int64_t> table_;  // the Fisher-Yates order (shuffled, n <= kTableOrderMax)
  std::vector<uint64_t> keys_;  // the Feistel round keys (shuffled, n > kTableOrderMax)
  unsigned half_bits_ = 0;      // the Feistel halves' width: the domain is 4^half_bits_ >= n
  uint64_t feistel(uint64_t x) const;
};

// The whole order of EpochOrder(n, seed, epoch, shuffle) as a vector (tests, small splits).
std::vector<int64_t> epoch_order(size_t n, uint64_t seed, uint64_t epoch, bool shuffle);

// The sample order of rank `rank` of `world` under LoaderOptions::Shard::kSamples: `order`
// padded by repeating its start to a multiple of `world`, then positions rank, rank + world, ...
// `order` itself when world == 1.
std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int world);

// Batch b holds the samples at positions [b * batch_size, (b + 1) * batch_size) of epoch_order
// (the last one shorter unless drop_last), each loaded with sample_rng(seed, epoch, sample index).
// Samples the data set returns nullopt for are left out and counted in Batch::skipped, so a batch
// can be smaller (even empty: images then has size 0 in dimension 0 and no fields). Images and
// every sample field are stacked along a new dimension 0 (images stays undefined when the samples
// carry none); samples of one batch must agree in shapes and dtypes and in having an image
// (DataError otherwise). Workers (options.workers > 0) load samples of the next `prefetch`
// batches in parallel and collate finished batches; they do no ATen intra-op work. An exception
// thrown while loading or collating batch b is rethrown by the next() call that would return b;
// the loader then goes on with batch b + 1. The destructor stops the workers at any point,
// waiting only for the samples being decoded at that moment. A SyntheticDataset
// (data/synthetic.h) is read differently: no worker starts, the order is not shuffled, and every
// batch is its resident batch on options.device (the first batch_len rows: a shorter last batch
// is a view of it), so a step costs no loading and no copy.
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
