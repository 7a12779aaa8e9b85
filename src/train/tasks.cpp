// Task registry and the classification task (ResNet family): cross-entropy, acc1/acc5/val_loss.
#include <torch/torch.h>

#include "core/config.h"
#include "models/registry.h"
#include "train/task.h"
#include "train/task_rootnet.h"

namespace amptune::train {
namespace {

class ClassificationTask : public Task {
 public:
  explicit ClassificationTask(const Config& config) : model_(models::build_classifier(config)) {}
  torch::nn::Module& module() override { return *model_; }

  torch::Tensor train_loss(const data::Batch& batch, const torch::Device& device) override {
    auto images = batch.images.to(device);
    auto labels = batch.fields.at("label").to(device);
    return torch::nn::functional::cross_entropy(model_->forward(images), labels);
  }

  std::map<std::string, double> evaluate(data::Loader& loader,
                                         const torch::Device& device) override {
    torch::NoGradGuard no_grad;
    double loss_sum = 0, top1 = 0, top5 = 0;
    int64_t n = 0, skipped = 0;
    while (auto batch = loader.next()) {
      skipped += batch->skipped;
      if (!batch->images.defined() || batch->images.size(0) == 0) continue;
      auto logits = model_->forward(batch->images.to(device)).to(torch::kFloat);
      auto labels = batch->fields.at("label").to(device);
      loss_sum += torch::nn::functional::cross_entropy(
                      logits, labels,
                      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .item<double>();
      const int64_t k = std::min<int64_t>(5, logits.size(1));
      auto topk = std::get<1>(logits.topk(k, 1));
      auto hits = topk.eq(labels.unsqueeze(1));
      top1 += hits.narrow(1, 0, 1).sum().item<double>();
      top5 += hits.sum().item<double>();
      n += labels.size(0);
    }
    std::map<std::string, double> m;
    if (n > 0) {
      m["acc1"] = 100.0 * top1 / static_cast<double>(n);
      m["acc5"] = 100.0 * top5 / static_cast<double>(n);
      m["val_loss"] = loss_sum / static_cast<double>(n);
    }
    m["val_samples"] = static_cast<double>(n);
    if (skipped > 0) m["val_skipped_samples"] = static_cast<double>(skipped);
    return m;
  }

 private:
  models::ResNet model_;
};

}  // namespace

std::unique_ptr<Task> make_task(const Config& config) {
  // models::model_info throws ConfigError for a model name no task knows.
  (void)models::model_info(config.get_string("model.name"));
  if (config.get_string("model.name") == "rootnet") return make_rootnet_task(config);
  return std::make_unique<ClassificationTask>(config);
}

}  // namespace amptune::train
