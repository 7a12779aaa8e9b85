// The model registry (task.h) and the classification task of any classifier (the ResNet family,
// or a model registered with classifier()): cross-entropy training, acc1/acc5/val_loss from
// eval::ClassificationCounts.
#include <torch/torch.h>

#include <cstring>
#include <stdexcept>

#include "amp/policy.h"
#include "core/error.h"
#include "core/settings.h"
#include "eval/classification_metrics.h"
#include "models/from_config.h"
#include "models/scripted.h"
#include "train/task.h"
#include "train/task_rootnet.h"
#include "train/task_scripted.h"

namespace amptune::train {
namespace {

class ClassificationTask : public Task {
 public:
  explicit ClassificationTask(torch::nn::AnyModule model) : model_(std::move(model)) {}
  torch::nn::Module& module() override { return *model_.ptr(); }

  torch::Tensor train_loss(const data::Batch& batch, const torch::Device& device) override {
    auto images = input(batch.images, device);
    auto labels = batch.fields.at("label").to(device);
    return torch::nn::functional::cross_entropy(model_.forward(images), labels);
  }

  // values: cross-entropy sum, top-1 hits, top-5 hits, samples.
  std::vector<EvalBatch> evaluate_batches(data::Loader& loader,
                                          const torch::Device& device) override {
    return evaluate_each(loader, [&](const data::Batch& batch) {
      auto logits = model_.forward(input(batch.images, device)).to(torch::kFloat);
      auto labels = batch.fields.at("label").to(device);
      const double loss_sum =
          torch::nn::functional::cross_entropy(
              logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
              .item<double>();
      const int64_t k = std::min<int64_t>(5, logits.size(1));
      auto hits = std::get<1>(logits.topk(k, 1)).eq(labels.unsqueeze(1));
      return std::vector<double>{loss_sum,
                                 static_cast<double>(hits.narrow(1, 0, 1).sum().item<int64_t>()),
                                 static_cast<double>(hits.sum().item<int64_t>()),
                                 static_cast<double>(labels.size(0))};
    });
  }

  std::map<std::string, double> metrics(const std::vector<EvalBatch>& batches) const override {
    eval::ClassificationCounts counts;
    int64_t skipped = 0;
    for (const auto& b : batches) {
      skipped += b.skipped;
      if (b.values.size() != 4) continue;
      counts.loss_sum += b.values[0];
      counts.top1 += static_cast<int64_t>(b.values[1]);
      counts.top5 += static_cast<int64_t>(b.values[2]);
      counts.samples += static_cast<int64_t>(b.values[3]);
    }
    std::map<std::string, double> m = counts.metrics();
    if (skipped > 0) m["val_skipped_samples"] = static_cast<double>(skipped);
    return m;
  }

 private:
  torch::nn::AnyModule model_;  // forward: [B, C, H, W] -> logits [B, classes]
};

torch::nn::AnyModule build_resnet(const Settings& settings) {
  return torch::nn::AnyModule(models::build_classifier(settings.model));
}

}  // namespace

std::string encode_eval_batches(const std::vector<EvalBatch>& batches) {
  std::string out;
  auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  for (const auto& b : batches) {
    const int64_t head[3] = {b.index, b.skipped, static_cast<int64_t>(b.values.size())};
    put(head, sizeof head);
    put(b.values.data(), b.values.size() * sizeof(double));
  }
  return out;
}

std::vector<EvalBatch> decode_eval_batches(const std::string& bytes) {
  std::vector<EvalBatch> out;
  size_t pos = 0;
  auto get = [&](void* p, size_t n) {
    if (pos + n > bytes.size()) throw std::runtime_error("truncated evaluation records");
    std::memcpy(p, bytes.data() + pos, n);
    pos += n;
  };
  while (pos < bytes.size()) {
    int64_t head[3];
    get(head, sizeof head);
    EvalBatch& b = out.emplace_back();
    b.index = head[0];
    b.skipped = head[1];
    b.values.resize(static_cast<size_t>(head[2]));
    get(b.values.data(), b.values.size() * sizeof(double));
  }
  return out;
}

std::vector<EvalBatch> evaluate_each(
    data::Loader& loader, const std::function<std::vector<double>(const data::Batch&)>& values) {
  torch::NoGradGuard no_grad;
  std::vector<EvalBatch> out;
  while (auto batch = loader.next()) {
    EvalBatch rec;
    rec.index = batch->index;
    rec.skipped = batch->skipped;
    if (batch->size > 0) rec.values = values(*batch);
    out.push_back(std::move(rec));
  }
  return out;
}

ModelEntry classifier(const std::string& name, BuildClassifier build) {
  return ModelEntry{
      name,
      [build](const Settings& settings) {
        return std::make_unique<ClassificationTask>(build(settings));
      },
      [](const Settings&) { return ModelInfo{"acc1", true}; },
      {"acc1", "acc5"},
      {{"acc1", true}, {"acc5", true}, {"val_loss", false}},
      {},
      {},
      {}};
}

namespace {

// RootNet's: its data path has the int32 cast points; it reads its backbone's ImageNet weights.
ModelCapabilities rootnet_capabilities() {
  ModelCapabilities c;
  c.takes_casts = true;
  c.classifies_images = false;
  c.file_key = "model.backbone_weights";
  c.file = &ModelSettings::backbone_weights;
  return c;
}

}  // namespace

namespace {

// The registry: the built-in models (one line each), then those register_model added.
std::vector<ModelEntry>& registry() {
  static std::vector<ModelEntry> models = {
      classifier("resnet18", build_resnet),
      classifier("resnet34", build_resnet),
      classifier("resnet50", build_resnet),
      classifier("resnet101", build_resnet),
      classifier("resnet152", build_resnet),
      {"rootnet",
       make_rootnet_task,
       rootnet_info,
       {"mrpe", "ap_root_25"},
       {{"mrpe", false},
        {"mrpe_x", false},
        {"mrpe_y", false},
        {"mrpe_z", false},
        {"ap_root_25", true},
        {"val_loss", false}},
       {},
       {},
       rootnet_capabilities()},
      torchscript_entry(),
  };
  return models;
}

}  // namespace

const std::vector<ModelEntry>& registered_models() { return registry(); }

void register_model(ModelEntry entry) {
  for (const ModelEntry& e : registry()) {
    if (e.name == entry.name) {
      throw UsageError("model.name '" + entry.name + "' is registered already");
    }
  }
  registry().push_back(std::move(entry));
}

const ModelEntry& model_entry(const std::string& name) {
  std::string names;
  for (const ModelEntry& entry : registered_models()) {
    if (entry.name == name) return entry;
    names += (names.empty() ? "" : ", ") + entry.name;
  }
  throw ConfigError("model.name must be one of " + names + ", got '" + name + "'");
}

ModelInfo model_info(const Settings& settings) {
  return model_entry(settings.model.name).info(settings);
}

std::vector<MetricDef> recorded_metrics(const Settings& settings) {
  const ModelEntry& entry = model_entry(settings.model.name);
  std::vector<MetricDef> metrics = entry.metrics_for ? entry.metrics_for(settings) : entry.metrics;
  metrics.push_back({"train_loss", false});
  return metrics;
}

std::optional<ModelCapabilities> model_capabilities(const std::string& model_name) {
  for (const ModelEntry& entry : registered_models()) {
    if (entry.name == model_name) return entry.capabilities;
  }
  return std::nullopt;
}

const std::vector<std::string>& headline_metrics(const std::string& model_name) {
  static const std::vector<std::string> kNone;
  for (const ModelEntry& entry : registered_models()) {
    if (entry.name == model_name) return entry.headline_metrics;
  }
  return kNone;
}

std::unique_ptr<Task> make_task(const Settings& settings) {
  auto task = model_entry(settings.model.name).make_task(settings);
  task->memory_format_setting_ = settings.model.memory_format;
  try {
    const amp::Policy cuda = amp::resolve_policy(settings.amp, /*device_is_cuda=*/true);
    task->cuda_native_low_precision_ =
        cuda.backend == amp::Backend::kNative && cuda.low_precision();
  } catch (const ConfigError&) {
    // A refused amp.* combination: the run reports it where it resolves its policy.
  }
  task->deterministic_ = settings.deterministic;
  task->cudnn_benchmark_ = settings.cudnn_benchmark;
  return task;
}

bool cpu_channels_last_conv_safe(int64_t in_channels, int64_t kernel_h, int64_t kernel_w,
                                 int64_t stride_h, int64_t stride_w) {
  const bool one_by_one = kernel_h == 1 && kernel_w == 1;
  return !(one_by_one && (stride_h > 1 || stride_w > 1) && in_channels < 8);
}

namespace {

// The first convolution of `model` that oneDNN cannot run in channels_last on the CPU
// (cpu_channels_last_conv_safe), described for a message; "" when there is none.
std::string channels_last_hazard(torch::nn::Module& model) {
  for (const auto& item : model.named_modules()) {
    int64_t in_channels = 0, kh = 0, kw = 0, sh = 0, sw = 0;
    if (const auto* conv = item.value()->as<torch::nn::Conv2d>()) {
      const auto& o = conv->options;
      in_channels = o.in_channels();
      kh = (*o.kernel_size())[0], kw = (*o.kernel_size())[1];
      sh = (*o.stride())[0], sw = (*o.stride())[1];
    } else if (const auto layer = models::scripted_layer(*item.value());
               layer && layer->kind == "Conv2d") {
      const torch::Tensor& w = layer->weight;  // [out, in / groups, kh, kw]
      in_channels = w.size(1) * layer->groups;
      kh = w.size(2), kw = w.size(3);
      // A traced model keeps no stride: taken as 2, which can only make the check stricter.
      sh = layer->stride.empty() ? 2 : layer->stride[0];
      sw = layer->stride.empty() ? 2 : layer->stride[1];
    } else {
      continue;
    }
    if (!cpu_channels_last_conv_safe(in_channels, kh, kw, sh, sw)) {
      return item.key() + " (1x1, stride " + std::to_string(sh) + ", " +
             std::to_string(in_channels) + " input channels)";
    }
  }
  return "";
}

}  // namespace

MemoryFormatChoice choose_memory_format(MemoryFormat setting, bool cuda, bool native_low_precision,
                                        const std::string& cpu_hazard) {
  if (setting == MemoryFormat::kContiguous) return {false, "contiguous (model.memory_format)"};
  if (setting == MemoryFormat::kChannelsLast) {
    if (!cuda && !cpu_hazard.empty()) {
      throw ConfigError(
          "model.memory_format: channels_last - oneDNN corrupts memory in the backward of "
          "convolution " + cpu_hazard + " in channels_last on the CPU; use "
          "model.memory_format: auto (NCHW for such a model) or contiguous, or a model.width "
          "that gives it at least 8 input channels");
    }
    return {true, "channels_last (model.memory_format)"};
  }
  if (cuda) {
    if (native_low_precision) return {true, "channels_last (auto: CUDA, native fp16/bf16 kernels)"};
    return {false, "contiguous (auto: CUDA in fp32)"};
  }
  if (!cpu_hazard.empty()) {
    return {false, "contiguous (auto: CPU, oneDNN cannot run convolution " + cpu_hazard +
                       " in channels_last)"};
  }
  return {true, "channels_last (auto: CPU, oneDNN)"};
}

bool cudnn_benchmark_on(bool cuda, bool cudnn_benchmark, bool deterministic) {
  return cuda && cudnn_benchmark && !deterministic;
}

void Task::place(const torch::Device& device) {
  const bool cuda = device.is_cuda();
  const bool may_be_channels_last = memory_format_setting_ != MemoryFormat::kContiguous;
  const std::string hazard = !cuda && may_be_channels_last ? channels_last_hazard(module()) : "";
  const MemoryFormatChoice choice =
      choose_memory_format(memory_format_setting_, cuda, cuda_native_low_precision_, hazard);
  memory_format_reason_ = choice.reason;
  memory_format_ =
      choice.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  if (cuda) {  // process-wide flags, set for the run that trains now
    at::globalContext().setDeterministicCuDNN(deterministic_);
    const bool benchmark = cudnn_benchmark_on(true, cudnn_benchmark_, deterministic_);
    at::globalContext().setBenchmarkCuDNN(benchmark);
  }
  torch::nn::Module& model = module();
  model.to(device);
  torch::NoGradGuard no_grad;
  // set_data keeps each tensor's identity: the optimizer and the amp engine hold the same ones.
  auto relayout = [this](torch::Tensor t) {
    if (t.dim() == 4 && !t.is_contiguous(memory_format_)) t.set_data(t.contiguous(memory_format_));
  };
  for (auto& p : model.parameters(true)) relayout(p);
  for (auto& b : model.buffers(true)) relayout(b);
}

torch::Tensor Task::input(const torch::Tensor& images, const torch::Device& device) const {
  torch::Tensor x = images.to(device);
  return x.dim() == 4 ? x.contiguous(memory_format_) : x;
}

}  // namespace amptune::train
