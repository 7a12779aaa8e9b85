// ResNet family with torchvision's v1.5 structure (stride on the 3x3 conv of the bottleneck,
// BasicBlock for depth 18/34) and torchvision's exact state-dict names:
//   conv1.weight, bn1.{weight,bias,running_mean,running_var,num_batches_tracked},
//   layer<s>.<i>.conv<k>.weight, layer<s>.<i>.bn<k>.*, layer<s>.<i>.downsample.{0.weight,1.*},
//   fc.weight, fc.bias
// so a state dict saved by Python (torch.save(dict(model.state_dict()))) loads unchanged
// (see models/weights.h). Initialisation follows torchvision: kaiming_normal_(fan_out, relu) for
// convolutions, BatchNorm weight 1 / bias 0, Linear with PyTorch's default init,
// zero_init_residual = false.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace amptune::models {

struct ResNetOptions {
  int depth = 50;  // 18 | 34 (BasicBlock) | 50 | 101 | 152 (Bottleneck)
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // Multiplier on each stage's base channels: stage s has max(1, lround(b * width)) planes for
  // b = 64, 128, 256, 512 (the stem has the first); bottleneck outputs are 4x planes.
  double width = 1.0;
  // true: 3x3 stride-1 conv1 and no max-pool (28-64 px inputs); false: ImageNet 7x7/2 + max-pool.
  bool small_input = false;
  // false: no avgpool/fc (no fc.* keys); forward returns the layer4 map
  // [B, feature_channels(), H/32, W/32] (H/8 with small_input).
  bool include_top = true;
};

// The blocks per stage for a depth ({2,2,2,2} for 18, ...); throws ModelError otherwise.
std::vector<int64_t> resnet_stage_blocks(int depth);
// Planes of a stage base (64, 128, 256, 512) at `width`: max(1, lround(base * width)).
int64_t resnet_channels(int64_t base, double width);

// torchvision.models.resnet.BasicBlock (expansion 1).
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};  // registered only when shape changes
};
TORCH_MODULE(BasicBlock);

// torchvision.models.resnet.Bottleneck (expansion 4, stride on conv2).
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResNetImpl : public torch::nn::Module {
 public:
  // Throws ModelError for an unsupported depth or a non-positive size.
  explicit ResNetImpl(const ResNetOptions& options);

  // x: [B, in_channels, H, W] float. include_top: logits [B, num_classes]; else the layer4 map.
  torch::Tensor forward(torch::Tensor x);
  // Always the layer4 map, also when include_top is true.
  torch::Tensor forward_features(torch::Tensor x);

  const ResNetOptions& options() const { return options_; }
  // Channels of the layer4 map (512 * width for 18/34, 2048 * width for 50+ at round numbers).
  int64_t feature_channels() const { return feature_channels_; }

 private:
  torch::nn::Sequential make_layer(bool bottleneck, int64_t planes, int64_t blocks, int64_t stride);

  ResNetOptions options_;
  int64_t inplanes_ = 0;
  int64_t feature_channels_ = 0;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

// Number of elements of all parameters (not buffers), e.g. 25,557,032 for resnet50 at 1000
// classes.
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace amptune::models
