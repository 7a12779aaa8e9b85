#include "train/bench.h"

#include <chrono>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "train/optimizer.h"
#include "train/plan.h"
#include "train/task.h"

namespace amptune::train {

BenchResult bench(const Config& config, int64_t steps, int64_t warmup, int threads_override) {
  using Clock = std::chrono::steady_clock;
  BenchResult r;
  const Settings settings = Settings::from(config);
  r.threads = resolve_threads(settings, threads_override);
  torch::set_num_threads(r.threads);
  const torch::Device device(resolve_device(settings));
  auto dataset = data::make_dataset(settings.data, settings.rootnet, settings.model,
                                    data::Split::kTrain);
  data::LoaderOptions opts =
      data::loader_options(settings.data, settings.seed, data::Split::kTrain, 0);
  opts.max_batches = warmup + steps;

  auto timed = [&](auto&& per_batch) {
    data::Loader loader(dataset, opts);
    int64_t i = 0, images = 0;
    Clock::time_point start = Clock::now();
    while (auto batch = loader.next()) {
      if (i == warmup) start = Clock::now();
      per_batch(*batch);
      if (i >= warmup) images += batch->size;
      ++i;
    }
    if (i <= warmup) {
      throw DataError("bench needs " + std::to_string(warmup + 1) + " batches; " +
                      dataset->describe() + " has fewer");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return std::make_pair(static_cast<double>(images) / seconds, seconds / double(i - warmup));
  };

  r.loader_fps = timed([](const data::Batch&) {}).first;

  torch::manual_seed(static_cast<uint64_t>(settings.seed));
  auto task = make_task(settings);
  task->place(device);
  task->module().train();
  opts.device = device;  // data.format synthetic: its batch made there, in the model's layout
  opts.memory_format = task->memory_format();
  auto optimizer = make_optimizer(settings.optim, task->module().parameters());
  auto [fps, step_s] = timed([&](const data::Batch& batch) {
    optimizer->zero_grad();
    auto loss = task->train_loss(batch, device);
    loss.backward();
    optimizer->step();
    (void)loss.item<double>();
  });
  r.train_fps = fps;
  r.step_ms = step_s * 1000.0;
  r.steps = steps;
  return r;
}

}  // namespace amptune::train
