#include "train/task_scripted.h"

#include <torch/torch.h>

#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "core/settings.h"
#include "models/scripted.h"
#include "models/weights.h"
#include "records/records.h"

namespace amptune::train {
namespace {

bool custom(const Settings& settings) { return settings.model.task == ModelTask::kCustom; }

models::ScriptedModel load_file(const Settings& settings) {
  if (settings.model.path.empty()) {
    throw ConfigError("model.path: model.name torchscript needs the TorchScript file of the "
                      "model (docs/MODELS.md \"Your own model\")");
  }
  return models::ScriptedModel(settings.model.path);
}

// The file with model.weights loaded into it, when set.
models::ScriptedModel load_model(const Settings& settings) {
  models::ScriptedModel model = load_file(settings);
  if (!settings.model.weights.empty()) models::load_state_dict(*model, settings.model.weights);
  return model;
}

void check_custom_methods(const models::ScriptedModelImpl& model) {
  for (const char* method : {"training_loss", "eval_batch"}) {
    if (!model.has_method(method)) {
      throw ModelError("model.path: " + model.path() + " has no method " + method +
                       "; a module of model.task custom defines training_loss(batch: Dict[str, "
                       "Tensor]) -> Tensor and eval_batch(batch: Dict[str, Tensor]) -> Dict[str, "
                       "Tensor] with @torch.jit.export (docs/MODELS.md \"Your own model\")");
    }
  }
}

// What planning needs of a file, read once per file version: model_info and recorded_metrics
// are asked often while a sweep is planned, and the first ask checks the file (a TorchScript
// archive this build reads; a custom task's methods) before anything runs.
struct FileFacts {
  std::vector<std::pair<std::string, bool>> directions;  // the metrics (none for a classifier)
  // The input channels of the first layer when it is a Conv2d (0 when the first layer is
  // another kind, or the module has none): a classifier's images must have that many.
  int64_t input_channels = 0;
  std::string first_layer;  // its module path and weight shape, for the message
};

// The first Conv2d / ConvTranspose2d / Linear of the module tree, in the order the module
// registered them (what its forward meets first, for the usual network): when a Conv2d, the
// channels it takes (weight [out, in / groups, kh, kw]).
void read_first_layer(const models::ScriptedModelImpl& model, FileFacts* facts) {
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto layer = models::scripted_layer(*item.value());
    if (!layer) continue;
    if (layer->kind != "Conv2d" || layer->weight.dim() != 4) return;
    facts->input_channels = layer->weight.size(1) * layer->groups;
    std::string shape;
    for (int64_t d = 0; d < layer->weight.dim(); ++d) {
      shape += (d ? ", " : "") + std::to_string(layer->weight.size(d));
    }
    facts->first_layer = "'" + item.key() + "' (Conv2d, weight [" + shape + "])";
    return;
  }
}

const FileFacts& facts_of(const Settings& settings) {
  static std::mutex mutex;
  static std::map<std::string, FileFacts> cache;
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(settings.model.path, ec);
  const std::string key = to_string(settings.model.task) + '\n' + settings.model.path + '\n' +
                          std::to_string(ec ? 0 : mtime.time_since_epoch().count());
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    models::ScriptedModel model = load_file(settings);
    FileFacts facts;
    if (custom(settings)) {
      check_custom_methods(*model);
      facts.directions = model->metric_directions();
      for (const auto& [name, higher] : facts.directions) {
        const std::string problem = records::metric_name_problem(name);
        if (!problem.empty()) {
          throw ModelError("model.path: " + settings.model.path +
                           ": the attribute higher_is_better names the metric '" + name +
                           "', which a custom model cannot record: " + problem +
                           "; rename it in the module (docs/MODELS.md \"Tasks\")");
        }
      }
    } else {
      read_first_layer(*model, &facts);
    }
    it = cache.emplace(key, std::move(facts)).first;
  }
  return it->second;  // std::map: stays valid while other entries are added
}

std::vector<std::pair<std::string, bool>> directions_of(const Settings& settings) {
  return facts_of(settings).directions;
}

// A scripted classifier whose first layer is a Conv2d taking other channels than
// model.in_channels: ConfigError naming model.in_channels and the value to set (read from the
// convolution's weight), instead of LibTorch's message in the first step. Nothing for a custom
// task, or when the first layer is not a Conv2d.
void check_input_channels(const Settings& settings) {
  if (custom(settings)) return;
  const FileFacts& facts = facts_of(settings);
  if (facts.input_channels == 0 || facts.input_channels == settings.model.in_channels) return;
  std::string hint = "set model.in_channels: " + std::to_string(facts.input_channels);
  if (facts.input_channels != 1 && facts.input_channels != 3) {
    hint = "image data has 1 or 3 channels, so this model cannot read it";
  }
  throw ConfigError("model.in_channels is " + std::to_string(settings.model.in_channels) +
                    " but the first layer of model.path " + settings.model.path + ", " +
                    facts.first_layer + ", takes " + std::to_string(facts.input_channels) +
                    " input channel" + (facts.input_channels == 1 ? "" : "s") + "; " + hint);
}

}  // namespace

namespace {

std::map<std::string, torch::Tensor> on_device(const data::Batch& batch,
                                               const torch::Device& device) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : batch.fields) out[name] = t.to(device);
  return out;
}

// model.task custom: the module's own loss and per-batch metric sums.
class CustomTask : public Task {
 public:
  CustomTask(models::ScriptedModel model, std::vector<std::pair<std::string, bool>> directions)
      : model_(std::move(model)), directions_(std::move(directions)) {}
  torch::nn::Module& module() override { return *model_; }

  torch::Tensor train_loss(const data::Batch& batch, const torch::Device& device) override {
    return model_->training_loss(on_device(batch, device)).reshape({});
  }

  // values: the batch's samples, then each metric's sum in directions_' order.
  std::vector<EvalBatch> evaluate_batches(data::Loader& loader,
                                          const torch::Device& device) override {
    return evaluate_each(loader, [&](const data::Batch& batch) {
      const auto sums = model_->eval_batch(on_device(batch, device));
      std::vector<double> values{static_cast<double>(batch.size)};
      for (const auto& [name, higher] : directions_) {
        const auto it = sums.find(name);
        if (it == sums.end() || it->second.numel() != 1) {
          throw ModelError("model.path: " + model_->path() + ": eval_batch must return, for " +
                           "every metric of higher_is_better, its sum over the batch as a " +
                           "one-element tensor; '" + name + "' is " +
                           (it == sums.end() ? "missing" : "not one element"));
        }
        values.push_back(it->second.to(torch::kDouble).item<double>());
      }
      return values;
    });
  }

  std::map<std::string, double> metrics(const std::vector<EvalBatch>& batches) const override {
    std::vector<double> sums(directions_.size(), 0.0);
    double samples = 0;
    int64_t skipped = 0;
    for (const auto& b : batches) {
      skipped += b.skipped;
      if (b.values.size() != directions_.size() + 1) continue;
      samples += b.values[0];
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += b.values[i + 1];
    }
    std::map<std::string, double> m;
    if (samples > 0) {
      for (size_t i = 0; i < sums.size(); ++i) m[directions_[i].first] = sums[i] / samples;
    }
    m["val_samples"] = samples;
    if (skipped > 0) m["val_skipped_samples"] = static_cast<double>(skipped);
    return m;
  }

 private:
  models::ScriptedModel model_;
  std::vector<std::pair<std::string, bool>> directions_;
};

std::unique_ptr<Task> make_custom_task(const Settings& settings) {
  models::ScriptedModel model = load_model(settings);
  check_custom_methods(*model);
  auto directions = model->metric_directions();
  return std::make_unique<CustomTask>(std::move(model), std::move(directions));
}

torch::nn::AnyModule build_classifier(const Settings& settings) {
  models::ScriptedModel model = load_model(settings);
  model->expect_logits();
  return torch::nn::AnyModule(model);
}

}  // namespace

ModelEntry torchscript_entry() {
  ModelEntry entry = classifier("torchscript", build_classifier);
  // Its own code: its loss and metrics may be its own, its BatchNorm is not amptune's, and its
  // file runs when loaded.
  entry.capabilities.custom_task = true;
  entry.capabilities.sync_bn = false;
  entry.capabilities.loads_code = true;
  entry.capabilities.file_key = "model.path";
  entry.capabilities.file = &ModelSettings::path;
  entry.check = check_input_channels;
  const auto classify = entry.make_task;
  entry.make_task = [classify](const Settings& settings) {
    return custom(settings) ? make_custom_task(settings) : classify(settings);
  };
  entry.info = [](const Settings& settings) {
    const auto directions = directions_of(settings);  // checks the file
    if (!custom(settings)) return ModelInfo{"acc1", true};
    return ModelInfo{directions.front().first, directions.front().second};
  };
  const auto classification_metrics = entry.metrics;
  entry.metrics_for = [classification_metrics](const Settings& settings) {
    if (!custom(settings)) return classification_metrics;
    std::vector<MetricDef> out;
    for (const auto& [name, higher] : directions_of(settings)) out.push_back({name, higher});
    return out;
  };
  return entry;
}

}  // namespace amptune::train
