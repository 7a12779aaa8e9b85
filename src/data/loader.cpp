#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include <torch/torch.h>

#include "core/error.h"
#include "core/settings.h"
#include "data/image.h"
#include "data/synthetic.h"

namespace amptune::data {
namespace {

std::string shape_str(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

// Stacks equally shaped tensors along a new dimension 0 with memcpy (no ATen kernels, so no
// intra-op threads are used from loader workers).
torch::Tensor stack_plain(const std::vector<const torch::Tensor*>& parts, const std::string& what) {
  const torch::Tensor& first = *parts.front();
  std::vector<int64_t> shape{static_cast<int64_t>(parts.size())};
  for (int64_t d : first.sizes()) shape.push_back(d);
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(first.dtype()));
  const size_t bytes = static_cast<size_t>(first.numel()) * first.element_size();
  char* dst = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < parts.size(); ++i) {
    const torch::Tensor& t = *parts[i];
    if (!t.defined() || t.sizes() != first.sizes() || t.dtype() != first.dtype()) {
      throw DataError("cannot batch " + what + ": sample " + std::to_string(i) + " has shape " +
                      (t.defined() ? shape_str(t) : "undefined") + " but sample 0 has " +
                      shape_str(first) + " (same shapes and dtypes needed in a batch)");
    }
    const torch::Tensor c = t.is_contiguous() ? t : t.contiguous();
    std::memcpy(dst + i * bytes, c.data_ptr(), bytes);
  }
  return out;
}

Batch collate(int64_t index, std::vector<std::optional<Sample>>& samples) {
  Batch batch;
  batch.index = index;
  std::vector<const Sample*> ok;
  for (const auto& s : samples) {
    if (s) {
      ok.push_back(&*s);
    } else {
      ++batch.skipped;
    }
  }
  if (ok.empty()) {
    batch.images = torch::empty({0}, torch::kFloat32);
    return batch;
  }
  batch.size = static_cast<int64_t>(ok.size());
  std::vector<const torch::Tensor*> parts;
  if (ok.front()->image.defined()) {
    for (const Sample* s : ok) parts.push_back(&s->image);
    batch.images = stack_plain(parts, "images");
  } else {  // a data set without images (data.format tensors): images stays undefined
    for (size_t i = 1; i < ok.size(); ++i) {
      if (ok[i]->image.defined()) {
        throw DataError("cannot batch images: sample " + std::to_string(i) + " of batch " +
                        std::to_string(index) + " has one, sample 0 none");
      }
    }
  }
  for (const auto& [name, first] : ok.front()->fields) {
    parts.clear();
    for (const Sample* s : ok) {
      auto it = s->fields.find(name);
      if (it == s->fields.end()) {
        throw DataError("cannot batch field '" + name + "': a sample of batch " +
                        std::to_string(index) + " lacks it");
      }
      parts.push_back(&it->second);
    }
    batch.fields[name] = stack_plain(parts, "field '" + name + "'");
  }
  return batch;
}

}  // namespace

LoaderOptions loader_options(const DataSettings& data, int64_t seed, Split split, uint64_t epoch) {
  LoaderOptions o;
  const bool train = split == Split::kTrain;
  o.batch_size = data.batch_size;
  if (!train && data.eval_batch_size > 0) o.batch_size = data.eval_batch_size;
  o.workers = static_cast<int>(data.workers);
  o.prefetch = static_cast<int>(data.prefetch);
  o.shuffle = train;
  o.train = train;
  o.drop_last = train;
  o.seed = static_cast<uint64_t>(seed);
  o.epoch = epoch;
  return o;
}

EpochOrder::EpochOrder(size_t n, uint64_t seed, uint64_t epoch, bool shuffle, size_t table_max)
    : n_(n) {
  if (!shuffle || n < 2) return;
  Rng rng = sample_rng(seed, epoch, UINT64_MAX);
  if (n <= table_max) {
    // The order of every split up to the bound, unchanged since the first release.
    table_.resize(n);
    for (size_t i = 0; i < n; ++i) table_[i] = static_cast<int64_t>(i);
    for (size_t i = n - 1; i > 0; --i) std::swap(table_[i], table_[uniform_index(rng, i + 1)]);
    return;
  }
  while ((uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  keys_.resize(6);  // six rounds: past the four of Luby-Rackoff's strong pseudo-random permutation
  for (uint64_t& k : keys_) k = rng();
}

uint64_t EpochOrder::feistel(uint64_t x) const {
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t left = x >> half_bits_, right = x & mask;
  for (uint64_t key : keys_) {
    // splitmix64's finaliser of (key, right) as the round function.
    uint64_t z = (right + key) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const uint64_t next = left ^ (z & mask);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

int64_t EpochOrder::operator[](size_t pos) const {
  if (!table_.empty()) return table_[pos];
  if (keys_.empty()) return static_cast<int64_t>(pos);
  // Cycle walking: the permutation of [0, 4^half_bits_) restricted to [0, n) stays a
  // permutation; the domain is under 4 n, so a position takes under 4 rounds on average.
  uint64_t x = pos;
  do {
    x = feistel(x);
  } while (x >= n_);
  return static_cast<int64_t>(x);
}

std::vector<int64_t> epoch_order(size_t n, uint64_t seed, uint64_t epoch, bool shuffle) {
  const EpochOrder order(n, seed, epoch, shuffle);
  std::vector<int64_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = order[i];
  return all;
}

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int world) {
  if (world <= 1 || order.empty()) return order;
  const size_t w = static_cast<size_t>(world);
  const size_t total = (order.size() + w - 1) / w * w;
  std::vector<int64_t> mine;
  mine.reserve(total / w);
  for (size_t pos = static_cast<size_t>(rank); pos < total; pos += w) {
    mine.push_back(order[pos % order.size()]);  // padding repeats the start, as DistributedSampler
  }
  return mine;
}

struct Loader::State {
  struct Slot {
    std::vector<std::optional<Sample>> samples;
    int64_t done = 0;
    std::exception_ptr error;
    int64_t error_pos = -1;
    bool ready = false;
    Batch batch;
  };

  std::shared_ptr<const Dataset> dataset;
  const SyntheticDataset* synthetic = nullptr;  // the data set, when it is one
  LoaderOptions options;
  // This loader's samples are positions 0..size - 1 of its own sequence, read from the epoch
  // order without copying it (a split of 10^8 rows keeps one order, or none: EpochOrder).
  std::unique_ptr<EpochOrder> order;
  int64_t size = 0;
  int64_t num_batches = 0;
  int64_t index_stride = 1, index_offset = 0;  // Batch::index = b * stride + offset

  std::mutex mutex;
  std::condition_variable work_cv;   // workers: a task may be available, or stop
  std::condition_variable ready_cv;  // consumer: a batch became ready
  std::map<int64_t, Slot> slots;     // batches scheduled and not yet returned
  int64_t next_batch = 0;            // next batch next() returns
  int64_t sched_batch = 0;           // next task: sample sched_pos of batch sched_batch
  int64_t sched_pos = 0;
  bool stop = false;
  std::vector<std::thread> threads;

  int64_t batch_begin(int64_t b) const { return b * options.batch_size; }
  int64_t batch_len(int64_t b) const {
    return std::min<int64_t>(options.batch_size, size - batch_begin(b));
  }

  // The sample index at position `pos` of this loader's sequence. kSamples: the epoch order
  // padded by repeating its start to a multiple of world, every world-th position from rank
  // (shard_order). kBatches: the single-process batches rank, rank + world, ... back to back (only
  // the last batch of the set can be short, and it is then this rank's last).
  int64_t sample_at(int64_t pos) const {
    const auto n = static_cast<int64_t>(order->size());
    const int64_t rank = options.rank, world = options.world;
    if (options.shard == LoaderOptions::Shard::kSamples) {
      return (*order)[static_cast<size_t>((rank + pos * world) % n)];
    }
    const int64_t bs = options.batch_size;
    const int64_t global_batch = rank + (pos / bs) * world;
    return (*order)[static_cast<size_t>(global_batch * bs + pos % bs)];
  }

  // Loads the sample at position `pos` of batch `b`; errors go to *error, never out.
  std::optional<Sample> load(int64_t b, int64_t pos, std::exception_ptr* error) const {
    try {
      const int64_t index = sample_at(batch_begin(b) + pos);
      Rng rng = sample_rng(options.seed, options.epoch, static_cast<uint64_t>(index));
      return dataset->get(static_cast<size_t>(index), rng, options.train);
    } catch (...) {
      *error = std::current_exception();
      return std::nullopt;
    }
  }

  void worker() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      work_cv.wait(lock, [&] {
        return stop ||
               (sched_batch < num_batches && sched_batch < next_batch + options.prefetch);
      });
      if (stop) return;
      const int64_t b = sched_batch, pos = sched_pos;
      Slot& slot = slots[b];  // std::map: the reference stays valid while other slots change
      if (pos == 0) slot.samples.resize(static_cast<size_t>(batch_len(b)));
      if (++sched_pos == batch_len(b)) {
        ++sched_batch;
        sched_pos = 0;
      }
      lock.unlock();
      std::exception_ptr error;
      std::optional<Sample> sample = load(b, pos, &error);
      lock.lock();
      slot.samples[static_cast<size_t>(pos)] = std::move(sample);
      if (error && (slot.error_pos < 0 || pos < slot.error_pos)) {
        slot.error = error;  // the first failing position, whatever the thread timing
        slot.error_pos = pos;
      }
      if (++slot.done < static_cast<int64_t>(slot.samples.size())) continue;
      // This thread finished the batch: collate it outside the lock. The slot is not ready, so
      // the consumer does not touch it meanwhile.
      if (!slot.error) {
        lock.unlock();
        try {
          slot.batch = collate(b * index_stride + index_offset, slot.samples);
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
        if (error) slot.error = error;
      }
      slot.samples.clear();
      slot.ready = true;
      ready_cv.notify_all();
      if (stop) return;
    }
  }
};

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : state_(std::make_unique<State>()) {
  if (!dataset) throw DataError("Loader: no data set");
  if (options.batch_size < 1) {
    throw DataError("Loader: batch size must be >= 1, got " + std::to_string(options.batch_size));
  }
  if (options.workers < 0) {
    throw DataError("Loader: workers must be >= 0, got " + std::to_string(options.workers));
  }
  options.prefetch = std::max(options.prefetch, 1);
  State& s = *state_;
  s.dataset = std::move(dataset);
  s.options = options;
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    throw DataError("Loader: rank " + std::to_string(options.rank) + " of world size " +
                    std::to_string(options.world) + " is not a shard");
  }
  s.synthetic = dynamic_cast<const SyntheticDataset*>(s.dataset.get());
  s.order = std::make_unique<EpochOrder>(s.dataset->size(), options.seed, options.epoch,
                                         options.shuffle && !s.synthetic);
  const auto n = static_cast<int64_t>(s.order->size());
  const int64_t bs = options.batch_size, world = options.world;
  auto batches_of = [&](int64_t count) {
    int64_t b = options.drop_last ? count / bs : (count + bs - 1) / bs;
    return options.max_batches >= 0 ? std::min(b, options.max_batches) : b;
  };
  if (options.shard == LoaderOptions::Shard::kSamples) {
    s.size = world <= 1 || n == 0 ? n : (n + world - 1) / world;  // shard_order's length
    num_batches_ = batches_of(s.size);
  } else {
    const int64_t global = batches_of(n);
    num_batches_ = global > options.rank ? (global - options.rank + world - 1) / world : 0;
    s.size = 0;
    if (num_batches_ > 0) {
      const int64_t last = options.rank + (num_batches_ - 1) * world;
      s.size = (num_batches_ - 1) * bs + (std::min<int64_t>((last + 1) * bs, n) - last * bs);
    }
    s.index_stride = world;
    s.index_offset = options.rank;
  }
  s.num_batches = num_batches_;
  if (options.workers > 0 && num_batches_ > 0 && !s.synthetic) {
    for (int i = 0; i < options.workers; ++i) s.threads.emplace_back([&s] { s.worker(); });
  }
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  for (std::thread& t : state_->threads) t.join();
}

std::optional<Batch> Loader::next() {
  State& s = *state_;
  if (s.next_batch >= s.num_batches) return std::nullopt;
  const int64_t b = s.next_batch;
  if (s.synthetic) {
    ++s.next_batch;
    Batch batch = s.synthetic->resident_batch(s.options, s.batch_len(b));
    batch.index = b * s.index_stride + s.index_offset;
    return batch;
  }
  if (s.threads.empty()) {
    ++s.next_batch;
    std::vector<std::optional<Sample>> samples(static_cast<size_t>(s.batch_len(b)));
    for (int64_t pos = 0; pos < s.batch_len(b); ++pos) {
      std::exception_ptr error;
      samples[static_cast<size_t>(pos)] = s.load(b, pos, &error);
      if (error) std::rethrow_exception(error);
    }
    return collate(b * s.index_stride + s.index_offset, samples);
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  s.ready_cv.wait(lock, [&] {
    auto it = s.slots.find(b);
    return it != s.slots.end() && it->second.ready;
  });
  auto it = s.slots.find(b);
  State::Slot slot = std::move(it->second);
  s.slots.erase(it);
  ++s.next_batch;
  lock.unlock();
  s.work_cv.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

}  // namespace amptune::data
