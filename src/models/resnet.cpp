// ResNet (torchvision v1.5 layout) and its construction from the config.
#include "models/resnet.h"

#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "amp/emulate.h"
#include "core/error.h"
#include "models/batchnorm.h"
#include "models/from_config.h"
#include "models/weights.h"

namespace amptune::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

nn::Sequential downsample_if_needed(int64_t inplanes, int64_t out, int64_t stride) {
  if (stride == 1 && inplanes == out) return nn::Sequential(nullptr);
  // Registered as "0" (conv1x1) and "1" (BatchNorm), as torchvision's nn.Sequential.
  return nn::Sequential(conv(inplanes, out, 1, stride, 0), nn::BatchNorm2d(out));
}

// Mixed-precision boundaries (amp/emulate.h): plain fp32 module calls unless an emulated O1-O3
// policy is installed, then conv/linear run on fp16/bf16-rounded inputs, weights and outputs and
// BatchNorm/add/pool outputs (ops in their input's dtype) are rounded too (BatchNorm's and the
// add's in place). relu and max-pool keep values on the grid: amp::relu / amp::keeps_grid carry
// that along, so the conv that follows does not round its input again. BatchNorm goes through
// models::batch_norm (plain bn->forward unless a ScopedBatchNormSync is alive, its output in its
// input's dtype: models/batchnorm.h).
// A conv in fp32 (amp.fp32_modules) gives its BatchNorm an fp32 input, so under O1 the
// BatchNorm's output stays fp32 as well.
torch::Tensor conv_bn(nn::Conv2dImpl& conv, nn::BatchNorm2dImpl& bn, const torch::Tensor& x) {
  return batch_norm(bn, amp::conv2d(conv, x), amp::fp32_module(conv));
}
torch::Tensor conv_bn(nn::Conv2d& conv, nn::BatchNorm2d& bn, const torch::Tensor& x) {
  return conv_bn(*conv, *bn, x);
}
torch::Tensor conv_bn(nn::Sequential& downsample, const torch::Tensor& x) {
  amp::ModuleCall call(*downsample);
  return call.output(conv_bn(*downsample->ptr(0)->as<nn::Conv2dImpl>(),
                             *downsample->ptr(1)->as<nn::BatchNorm2dImpl>(), call.input(x)));
}

// A stage (nn::Sequential of blocks) as one module call: its name ("layer2") can be kept in fp32
// as a whole, and its output is observed.
torch::Tensor stage(nn::Sequential& layer, const torch::Tensor& x) {
  amp::ModuleCall call(*layer);
  return call.output(layer->forward(call.input(x)));
}

}  // namespace

std::vector<int64_t> resnet_stage_blocks(int depth) {
  switch (depth) {
    case 18:
      return {2, 2, 2, 2};
    case 34:
      return {3, 4, 6, 3};
    case 50:
      return {3, 4, 6, 3};
    case 101:
      return {3, 4, 23, 3};
    case 152:
      return {3, 8, 36, 3};
    default:
      break;
  }
  throw ModelError("ResNet depth must be one of 18, 34, 50, 101, 152, got " +
                   std::to_string(depth));
}

int64_t resnet_channels(int64_t base, double width) {
  return std::max<int64_t>(1, std::lround(static_cast<double>(base) * width));
}

BasicBlockImpl::BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", conv(inplanes, planes, 3, stride, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", conv(planes, planes, 3, 1, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  downsample_ = downsample_if_needed(inplanes, planes, stride);
  if (downsample_) register_module("downsample", downsample_);
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor in) {
  amp::ModuleCall call(*this);
  const torch::Tensor x = call.input(in);
  torch::Tensor identity = downsample_ ? conv_bn(downsample_, x) : x;
  torch::Tensor out = amp::relu(conv_bn(conv1_, bn1_, x));
  out = conv_bn(conv2_, bn2_, out);
  return call.output(amp::relu(amp::input_dtype_op_(out + identity)));
}

BottleneckImpl::BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride) {
  const int64_t out = planes * 4;
  conv1_ = register_module("conv1", conv(inplanes, planes, 1, 1, 0));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", conv(planes, planes, 3, stride, 1));  // v1.5: stride here
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  conv3_ = register_module("conv3", conv(planes, out, 1, 1, 0));
  bn3_ = register_module("bn3", nn::BatchNorm2d(out));
  downsample_ = downsample_if_needed(inplanes, out, stride);
  if (downsample_) register_module("downsample", downsample_);
}

torch::Tensor BottleneckImpl::forward(torch::Tensor in) {
  amp::ModuleCall call(*this);
  const torch::Tensor x = call.input(in);
  torch::Tensor identity = downsample_ ? conv_bn(downsample_, x) : x;
  torch::Tensor out = amp::relu(conv_bn(conv1_, bn1_, x));
  out = amp::relu(conv_bn(conv2_, bn2_, out));
  out = conv_bn(conv3_, bn3_, out);
  return call.output(amp::relu(amp::input_dtype_op_(out + identity)));
}

ResNetImpl::ResNetImpl(const ResNetOptions& options) : options_(options) {
  const std::vector<int64_t> blocks = resnet_stage_blocks(options.depth);
  if (options.num_classes < 1 || options.in_channels < 1 || !(options.width > 0)) {
    std::ostringstream msg;
    msg << "ResNet options need num_classes >= 1, in_channels >= 1 and width > 0, got "
        << options.num_classes << ", " << options.in_channels << ", " << options.width;
    throw ModelError(msg.str());
  }
  const bool bottleneck = options.depth >= 50;
  inplanes_ = resnet_channels(64, options.width);
  conv1_ =
      register_module("conv1", options.small_input ? conv(options.in_channels, inplanes_, 3, 1, 1)
                                                   : conv(options.in_channels, inplanes_, 7, 2, 3));
  bn1_ = register_module("bn1", nn::BatchNorm2d(inplanes_));
  layer1_ = register_module(
      "layer1", make_layer(bottleneck, resnet_channels(64, options.width), blocks[0], 1));
  layer2_ = register_module(
      "layer2", make_layer(bottleneck, resnet_channels(128, options.width), blocks[1], 2));
  layer3_ = register_module(
      "layer3", make_layer(bottleneck, resnet_channels(256, options.width), blocks[2], 2));
  layer4_ = register_module(
      "layer4", make_layer(bottleneck, resnet_channels(512, options.width), blocks[3], 2));
  feature_channels_ = inplanes_;
  if (options.include_top) {
    // Linear keeps PyTorch's default init (kaiming_uniform a=sqrt(5), bias U(+-1/sqrt(fan_in))).
    fc_ = register_module("fc", nn::Linear(feature_channels_, options.num_classes));
  }

  // torchvision's init; BatchNorm modules already start at weight 1, bias 0.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

nn::Sequential ResNetImpl::make_layer(bool bottleneck, int64_t planes, int64_t blocks,
                                      int64_t stride) {
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    if (bottleneck) {
      layer->push_back(Bottleneck(inplanes_, planes, s));
      inplanes_ = planes * 4;
    } else {
      layer->push_back(BasicBlock(inplanes_, planes, s));
      inplanes_ = planes;
    }
  }
  return layer;
}

torch::Tensor ResNetImpl::forward_features(torch::Tensor x) {
  x = amp::model_input(x);  // O2/O3: the input is cast to the model's type on entry
  x = amp::relu(conv_bn(conv1_, bn1_, x));
  if (!options_.small_input) x = amp::keeps_grid(torch::max_pool2d(x, {3, 3}, {2, 2}, {1, 1}), x);
  x = stage(layer1_, x);
  x = stage(layer2_, x);
  x = stage(layer3_, x);
  return stage(layer4_, x);
}

torch::Tensor ResNetImpl::forward(torch::Tensor in) {
  amp::ModuleCall call(*this);  // the whole network (a RootNet's backbone) as one module
  torch::Tensor x = forward_features(call.input(in));
  if (!options_.include_top) return call.output(x);
  x = amp::input_dtype_op(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  return call.output(amp::model_output(amp::linear(*fc_, x)));  // O2/O3: logits back to fp32
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) n += p.numel();
  return n;
}

// ---- from the config ----------------------------------------------------------------------------

namespace {

int resnet_depth_from_name(const std::string& name) {
  for (int depth : {18, 34, 50, 101, 152}) {
    if (name == "resnet" + std::to_string(depth)) return depth;
  }
  throw ConfigError(
      "model.name must be one of resnet18, resnet34, resnet50, resnet101, "
      "resnet152, got '" +
      name + "'");
}

}  // namespace

ResNetOptions resnet_options(const ModelSettings& model) {
  ResNetOptions options;
  options.depth = resnet_depth_from_name(model.name);
  options.num_classes = model.num_classes;
  options.in_channels = model.in_channels;
  options.width = model.width;
  options.small_input = model.small_input;
  options.include_top = true;
  return options;
}

ResNet build_classifier(const ModelSettings& model) {
  ResNet classifier(resnet_options(model));
  if (!model.weights.empty()) load_state_dict(*classifier, model.weights);
  return classifier;
}

}  // namespace amptune::models
