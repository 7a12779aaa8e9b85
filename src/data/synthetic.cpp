#include "data/synthetic.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "core/error.h"
#include "data/image.h"

namespace amptune::data {

SyntheticDataset::SyntheticDataset(int64_t channels, int64_t side, int64_t classes,
                                   int64_t samples, Split split)
    : channels_(channels),
      side_(side),
      classes_(classes),
      samples_(samples),
      salt_(split == Split::kTrain ? 0 : 1) {
  if (channels < 1 || side < 1 || classes < 1 || samples < 1) {
    throw ConfigError("data.format synthetic needs model.in_channels, data.image_size, "
                      "model.num_classes and data.synthetic_samples >= 1, got " +
                      std::to_string(channels) + ", " + std::to_string(side) + ", " +
                      std::to_string(classes) + ", " + std::to_string(samples));
  }
}

std::string SyntheticDataset::describe() const {
  return "synthetic " + std::to_string(channels_) + "x" + std::to_string(side_) + "x" +
         std::to_string(side_) + " (" + std::to_string(classes_) + " classes, " +
         std::to_string(samples_) + " samples, one resident batch)";
}

std::optional<Sample> SyntheticDataset::get(size_t /*index*/, Rng& rng, bool /*train*/) const {
  at::Generator gen = at::detail::createCPUGenerator(rng());
  Sample s;
  s.image = torch::randn({channels_, side_, side_}, gen, torch::kFloat32);
  const auto label = static_cast<int64_t>(uniform_index(rng, static_cast<uint64_t>(classes_)));
  s.fields["label"] = torch::tensor(label, torch::kInt64);
  return s;
}

Batch SyntheticDataset::resident_batch(const LoaderOptions& options, int64_t rows) const {
  const int64_t n = options.batch_size;
  if (rows < 1 || rows > n) {
    throw std::logic_error("resident_batch: " + std::to_string(rows) + " rows of a batch of " +
                           std::to_string(n));
  }
  const Key key{options.seed, n, options.device.str(), static_cast<int>(options.memory_format)};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = made_.find(key);
  if (it == made_.end()) {
    torch::Tensor images = torch::empty({n, channels_, side_, side_}, torch::kFloat32);
    torch::Tensor labels = torch::empty({n}, torch::kInt64);
    for (int64_t r = 0; r < n; ++r) {
      Rng rng = sample_rng(options.seed, salt_, static_cast<uint64_t>(r));
      Sample s = *get(static_cast<size_t>(r), rng, options.train);
      images[r].copy_(s.image);
      labels[r].copy_(s.fields.at("label"));
    }
    Batch b;
    b.size = n;
    b.images = images.to(options.device).contiguous(options.memory_format);
    b.fields["label"] = labels.to(options.device);
    it = made_.emplace(key, std::move(b)).first;
  }
  const Batch& whole = it->second;
  Batch b;
  b.size = rows;
  b.images = rows == n ? whole.images : whole.images.narrow(0, 0, rows);
  for (const auto& [name, t] : whole.fields) b.fields[name] = rows == n ? t : t.narrow(0, 0, rows);
  return b;
}

}  // namespace amptune::data
