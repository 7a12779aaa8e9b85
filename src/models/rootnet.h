// 3DMPPE-RootNet (docs/ROOTNET.md): a torchvision ResNet backbone up to layer4, registered as
// "backbone" (state-dict keys backbone.conv1.weight, backbone.layer1.0.conv1.weight, ...: the
// torchvision names under the prefix "backbone."), and the official head:
//   deconv.{0,3,6}.weight   3 x [ConvTranspose2d(k4, s2, p1, no bias), BatchNorm2d, ReLU]
//                           (deconv.{1,4,7}.* the BatchNorms) with head_channels outputs,
//   xy_layer.{weight,bias}  Conv2d(head_channels, 1, 1x1) -> softmax over all HxW positions ->
//                           x = sum_i i * marginal_x(i), y likewise (heatmap pixels, 0..W-1),
//   depth_layer.{weight,bias} Conv2d(C5, 1, 1x1) on the global average of C5 = gamma;
//                           depth = gamma * k_value (mm, no activation).
// Init: deconv / xy_layer / depth_layer weights N(0, 0.001), biases 0, head BatchNorm 1 / 0;
// the backbone keeps torchvision's init (ImageNet weights are loaded for real training).
// Input H x W (multiples of 32) -> C5 H/32 x W/32 -> map H/4 x W/4 -> output [B, 3].
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

#include "models/resnet.h"

namespace amptune::models {

struct RootNetOptions {
  int backbone_depth = 50;      // 18 | 34 | 50 | 101 | 152
  double width = 1.0;           // backbone width multiplier (ResNetOptions::width)
  int64_t head_channels = 256;  // deconv channels; configs use max(1, lround(256 * width))
  int64_t in_channels = 3;
};

class RootNetImpl : public torch::nn::Module {
 public:
  explicit RootNetImpl(const RootNetOptions& options);

  // image [B, C, H, W] float, k_value [B] or [B, 1] -> [B, 3] = (x_hm, y_hm, depth_mm).
  torch::Tensor forward(torch::Tensor image, torch::Tensor k_value);
  // The soft-argmax of xy logits [B, 1, H, W] (or [B, H, W]) -> [B, 2] heatmap pixels.
  static torch::Tensor soft_argmax(const torch::Tensor& logits);

  ResNet& backbone() { return backbone_; }
  const RootNetOptions& options() const { return options_; }

 private:
  RootNetOptions options_;
  ResNet backbone_{nullptr};
  torch::nn::Sequential deconv_{nullptr};
  torch::nn::Conv2d xy_layer_{nullptr}, depth_layer_{nullptr};
};
TORCH_MODULE(RootNet);

// The official loss: per sample (|dx| vis + |dy| vis + |dz| vis have_depth) / 3, mean over the
// batch. coord, target [B, 3]; vis [B] / [B, 1] / [B, 3] (broadcast over x, y, z);
// have_depth [B] or [B, 1]. coord (1, 2, 3000), target (0, 0, 2000), vis 1 -> 334.333
// (have_depth 1) or 1.0 (have_depth 0).
torch::Tensor rootnet_loss(const torch::Tensor& coord, const torch::Tensor& target,
                           const torch::Tensor& vis, const torch::Tensor& have_depth);

}  // namespace amptune::models
