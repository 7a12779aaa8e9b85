// A trainable task: a model, its training loss on a batch, and its evaluation metrics. The
// trainer is generic over tasks. The models a run can name (model.name) are registered in one
// table, kModels in train/tasks.cpp: adding a model is one file (its module and Task) plus one
// entry there; validation, the error for an unknown name and the run columns all read it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "core/words.h"
#include "data/loader.h"
#include "train/model_info.h"

namespace amptune {
struct Settings;
}

namespace amptune::train {

// What a task keeps of one evaluated batch: its batch number in the single-process order, the
// corrupt samples left out, and task-defined numbers (per-batch sums, per-sample results).
struct EvalBatch {
  int64_t index = 0;
  int64_t skipped = 0;
  std::vector<double> values;
};

// Records as bytes, and back (to gather them from several processes).
std::string encode_eval_batches(const std::vector<EvalBatch>& batches);
std::vector<EvalBatch> decode_eval_batches(const std::string& bytes);

// Whether oneDNN runs a CPU convolution of this shape correctly in channels_last. Its AVX2
// kernel for the weight gradient of a 1x1 convolution (jit_avx2_1x1_convolution_bwd_weights)
// writes past its buffers in channels_last when the stride is above 1 and there are fewer than 8
// input channels (valgrind; glibc aborts "corrupted size vs. prev_size"), in the oneDNN 2.6 of
// Debian's LibTorch 1.13 and the 3.10 of PyTorch 2.11 alike. ResNet's downsampling convolutions
// at model.width 0.0625 are such (docs/MODELS.md).
bool cpu_channels_last_conv_safe(int64_t in_channels, int64_t kernel_h, int64_t kernel_w,
                                 int64_t stride_h, int64_t stride_w);

// What model.memory_format resolves to where a model is placed, and why in words (the run's
// start line shows it).
struct MemoryFormatChoice {
  bool channels_last = false;
  std::string reason;  // e.g. "channels_last (auto: CUDA, native fp16/bf16 kernels)"
};
// `setting` on CUDA (`cuda`) or the CPU. auto: channels_last on the CPU unless `cpu_hazard`
// names a convolution that is not cpu_channels_last_conv_safe (then NCHW); on CUDA
// channels_last when the run's policy computes in fp16/bf16 kernels there
// (`native_low_precision`: amp.backend native for O1-O3; channels_last measured 1.47-1.57x
// there, docs/PERFORMANCE.md), NCHW for fp32 (O0, emulation). ConfigError: channels_last asked
// for on the CPU with a `cpu_hazard`.
MemoryFormatChoice choose_memory_format(MemoryFormat setting, bool cuda, bool native_low_precision,
                                        const std::string& cpu_hazard);
// Whether cuDNN's autotuner runs (cudnn_benchmark, deterministic): on CUDA only, never when
// deterministic.
bool cudnn_benchmark_on(bool cuda, bool cudnn_benchmark, bool deterministic);

class Task {
 public:
  virtual ~Task() = default;
  virtual torch::nn::Module& module() = 0;
  // Moves the model to `device` in the memory format model.memory_format resolves to there
  // (choose_memory_format): every 4-d parameter and buffer. Again after loading a checkpoint,
  // which brings the layout it was saved in. ConfigError: channels_last asked for such a model.
  // On CUDA it also sets cuDNN's global flags for the run (deterministic, cudnn_benchmark).
  void place(const torch::Device& device);
  // The last place()'s choice of layout, in words ("" before any).
  const std::string& memory_format_reason() const { return memory_format_reason_; }
  // A batch of images on `device` in the model's memory format (4-d inputs; others as they are).
  torch::Tensor input(const torch::Tensor& images, const torch::Device& device) const;
  torch::MemoryFormat memory_format() const { return memory_format_; }
  // Forward + loss of one training batch (mean over the batch).
  virtual torch::Tensor train_loss(const data::Batch& batch, const torch::Device& device) = 0;
  // Evaluation in two halves, so that the shards of a set evaluated by several processes
  // (data::LoaderOptions::Shard::kBatches) combine into exactly the single-process result:
  // evaluate_batches runs the model over the loader's batches (model already in eval mode) and
  // returns one record per batch; metrics() turns the records of every batch of the set, in
  // batch order, into the metrics.
  virtual std::vector<EvalBatch> evaluate_batches(data::Loader& loader,
                                                  const torch::Device& device) = 0;
  virtual std::map<std::string, double> metrics(const std::vector<EvalBatch>& batches) const = 0;
  // Metrics over the whole evaluation loader.
  std::map<std::string, double> evaluate(data::Loader& loader, const torch::Device& device) {
    return metrics(evaluate_batches(loader, device));
  }

 private:
  friend std::unique_ptr<Task> make_task(const Settings& settings);
  MemoryFormat memory_format_setting_ = MemoryFormat::kAuto;  // model.memory_format
  bool cuda_native_low_precision_ = false;  // amp.* resolved for CUDA computes in fp16/bf16
  bool deterministic_ = false;              // deterministic
  bool cudnn_benchmark_ = true;             // cudnn_benchmark
  torch::MemoryFormat memory_format_ = torch::MemoryFormat::Contiguous;
  std::string memory_format_reason_;
};

// The loop of every task's evaluate_batches: one record per batch of `loader`, in order, with
// gradients off; `values` gives a non-empty batch's numbers (an empty one keeps none).
std::vector<EvalBatch> evaluate_each(
    data::Loader& loader, const std::function<std::vector<double>(const data::Batch&)>& values);

// One registered model. Its functions take the run's settings (core/settings.h), read once per
// run, and read the sections they need.
struct ModelEntry {
  std::string name;  // the value of model.name
  // Builds and initialises the model and its task (torch's RNG must be seeded by the caller).
  std::function<std::unique_ptr<Task>(const Settings&)> make_task;
  std::function<ModelInfo(const Settings&)> info;
  std::vector<std::string> headline_metrics;  // model_info.h
  std::vector<MetricDef> metrics;             // its evaluation metrics (recorded_metrics)
  // When set, the evaluation metrics of a run's settings instead (a TorchScript model's own
  // metrics, train/task_scripted.h).
  std::function<std::vector<MetricDef>(const Settings&)> metrics_for;
  // The model's own checks of a run's settings, beyond its capabilities (validate_config calls
  // it; ConfigError naming the key); unset: none.
  std::function<void(const Settings&)> check;
  ModelCapabilities capabilities;  // model_info.h; a classifier's: the defaults
};

// Every registered model: the built-in ones in table order (tasks.cpp), then those added with
// register_model.
const std::vector<ModelEntry>& registered_models();
// Adds a model at start-up, from one thread, before runs are planned (the registry is not
// locked); UsageError when the name is taken.
void register_model(ModelEntry entry);

// A classifier: builds the module from the run's settings (seeded by the caller;
// settings.model.num_classes, model.in_channels ...). Its forward takes [B, C, H, W] images and
// returns [B, classes] logits.
using BuildClassifier = std::function<torch::nn::AnyModule(const Settings&)>;
// The entry of a classification model: cross-entropy training, acc1 / acc5 / val_loss, judged
// by acc1 (higher is better). A new classifier is its file (the module and its BuildClassifier)
// plus one line in the registry of tasks.cpp: classifier("name", build).
ModelEntry classifier(const std::string& name, BuildClassifier build);
// The entry of model.name; ConfigError naming the registered models for an unknown name.
const ModelEntry& model_entry(const std::string& name);
// model_entry(settings.model.name).make_task(settings), with model.memory_format.
std::unique_ptr<Task> make_task(const Settings& settings);

}  // namespace amptune::train
