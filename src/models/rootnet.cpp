// RootNet model and its construction from the config.
#include "models/rootnet.h"

#include <cmath>

#include <torch/torch.h>

#include "amp/emulate.h"
#include "core/error.h"
#include "models/batchnorm.h"
#include "models/from_config.h"
#include "models/weights.h"

namespace amptune::models {

RootNetImpl::RootNetImpl(const RootNetOptions& options) : options_(options) {
  if (options.head_channels < 1) throw ModelError("rootnet head_channels must be >= 1");
  ResNetOptions bo;
  bo.depth = options.backbone_depth;
  bo.width = options.width;
  bo.in_channels = options.in_channels;
  bo.include_top = false;
  backbone_ = register_module("backbone", ResNet(bo));
  const int64_t c5 = backbone_->feature_channels();
  const int64_t hc = options.head_channels;
  deconv_ = torch::nn::Sequential();
  int64_t in = c5;
  for (int i = 0; i < 3; ++i) {
    deconv_->push_back(torch::nn::ConvTranspose2d(
        torch::nn::ConvTranspose2dOptions(in, hc, 4).stride(2).padding(1).output_padding(0).bias(
            false)));
    deconv_->push_back(torch::nn::BatchNorm2d(hc));
    deconv_->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(true)));
    in = hc;
  }
  register_module("deconv", deconv_);
  xy_layer_ = register_module("xy_layer", torch::nn::Conv2d(torch::nn::Conv2dOptions(hc, 1, 1)));
  depth_layer_ =
      register_module("depth_layer", torch::nn::Conv2d(torch::nn::Conv2dOptions(c5, 1, 1)));

  torch::NoGradGuard no_grad;
  for (auto& m : deconv_->children()) {
    if (auto* d = m->as<torch::nn::ConvTranspose2d>()) {
      torch::nn::init::normal_(d->weight, 0.0, 0.001);
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(b->weight);
      torch::nn::init::zeros_(b->bias);
    }
  }
  for (auto* conv : {&xy_layer_, &depth_layer_}) {
    torch::nn::init::normal_((*conv)->weight, 0.0, 0.001);
    torch::nn::init::zeros_((*conv)->bias);
  }
}

// Mixed-precision boundaries (amp/emulate.h): plain fp32 calls without an emulated policy.
// softmax and the sums of the soft-argmax are on autocast's fp32 list (fp32_op), the products
// with the pixel index are elementwise (their inputs' type).
torch::Tensor RootNetImpl::soft_argmax(const torch::Tensor& logits) {
  const int64_t h = logits.size(-2), w = logits.size(-1);
  auto flat = logits.reshape({-1, h * w});
  auto prob = amp::fp32_op(torch::softmax(flat, 1)).reshape({-1, h, w});
  auto opts = torch::TensorOptions().dtype(prob.scalar_type()).device(prob.device());
  auto mx = amp::fp32_op(prob.sum(1)), my = amp::fp32_op(prob.sum(2));
  auto x = amp::fp32_op((mx * torch::arange(w, opts)).sum(1, true));  // marginal over rows
  auto y = amp::fp32_op((my * torch::arange(h, opts)).sum(1, true));
  return torch::cat({x, y}, 1);
}

torch::Tensor RootNetImpl::forward(torch::Tensor image, torch::Tensor k_value) {
  amp::ModuleCall call(*this);
  auto c5 = backbone_->forward(call.input(image));  // the backbone applies amp::model_input
  auto x = c5;
  {
    amp::ModuleCall deconv_call(*deconv_);  // "deconv" in amp.fp32_modules: the whole stack
    x = deconv_call.input(x);
    for (size_t i = 0; i + 2 < deconv_->size(); i += 3) {
      auto& deconv = *deconv_->ptr(i)->as<torch::nn::ConvTranspose2dImpl>();
      auto& bn = *deconv_->ptr(i + 1)->as<torch::nn::BatchNorm2dImpl>();
      x = amp::conv_transpose2d(deconv, x);
      x = batch_norm(bn, x, amp::fp32_module(deconv));
      x = torch::relu(x);
    }
    x = deconv_call.output(x);
  }
  auto xy = soft_argmax(amp::conv2d(*xy_layer_, x));
  auto feat = amp::fp32_op(c5.mean({2, 3}, true));  // [B, C5, 1, 1]
  auto gamma = amp::conv2d(*depth_layer_, feat).reshape({-1, 1});
  // PyTorch's type promotion as in the original: an fp16 gamma times an fp32 k gives fp32; times
  // an integer k (the ported code's int32 cast) stays fp16.
  auto depth = gamma * k_value.reshape({-1, 1});
  return call.output(amp::model_output(torch::cat({xy.to(depth.scalar_type()), depth}, 1)));
}

torch::Tensor rootnet_loss(const torch::Tensor& coord, const torch::Tensor& target,
                           const torch::Tensor& vis, const torch::Tensor& have_depth) {
  const int64_t b = coord.size(0);
  auto c = coord.to(torch::kFloat);
  auto v = vis.to(torch::kFloat).reshape({b, -1});
  auto d = (c - target.to(torch::kFloat)).abs() * v;  // v broadcasts from [B, 1] or [B, 3]
  auto per_sample =
      (d.select(1, 0) + d.select(1, 1) + d.select(1, 2) * have_depth.to(torch::kFloat).reshape({b})) /
      3.0;
  return per_sample.mean();
}

RootNetOptions rootnet_options(const ModelSettings& model) {
  RootNetOptions o;
  o.backbone_depth = static_cast<int>(model.backbone_depth);
  o.width = model.width;
  o.in_channels = model.in_channels;
  o.head_channels = std::max<int64_t>(1, std::lround(256.0 * o.width));
  return o;
}

RootNet build_rootnet(const ModelSettings& model) {
  RootNet net(rootnet_options(model));
  if (!model.backbone_weights.empty()) {
    LoadOptions skip_fc;
    skip_fc.skip_prefixes = {"fc."};
    load_state_dict(*net->backbone(), model.backbone_weights, skip_fc);
  }
  if (!model.weights.empty()) load_state_dict(*net, model.weights);
  return net;
}

}  // namespace amptune::models
