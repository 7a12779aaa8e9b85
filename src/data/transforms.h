// The image transforms of the data sets, on 8-bit images (torch-free). ImageFolder follows the
// torchvision ImageNet recipe; normalisation to a float tensor happens in the data set.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "data/image.h"

namespace amptune {
struct DataSettings;
}

namespace amptune::data {

struct TransformOptions {
  int channels = 3;        // model.in_channels: 1 (grey) or 3 (RGB)
  int image_size = 224;    // data.image_size: square side fed to the model (imagefolder)
  int resize_size = 256;   // data.resize_size: eval shorter side before the centre crop
  double scale_lo = 0.08;  // data.crop_scale
  double scale_hi = 1.0;
  double ratio_lo = 3.0 / 4.0;  // RandomResizedCrop aspect ratio range (torchvision default)
  double ratio_hi = 4.0 / 3.0;
  bool augment = true;     // data.augment (training split only)
  std::vector<double> mean{0.485, 0.456, 0.406};  // per channel, 0..1 pixels
  std::vector<double> std{0.229, 0.224, 0.225};
  int64_t max_pixels = kDefaultMaxImagePixels;  // data.max_image_pixels: larger images refused
};

// From the data.* section and `in_channels` (model.in_channels). Throws ConfigError naming the
// key when a value is unusable: in_channels not 1 or 3, mean/std with neither 1 value nor one per
// channel, a crop_scale that is not [lo, hi] with 0 < lo <= hi <= 1.
TransformOptions transform_options(const DataSettings& data, int64_t in_channels);

// Training transform: RandomResizedCrop(image_size, crop_scale, ratio) with bilinear resampling,
// then horizontal flip with probability 0.5. All draws come from `rng`, in that order.
Image imagefolder_train_transform(const Image& image, const TransformOptions& options,
                                  std::mt19937_64& rng);
// Evaluation transform: shorter side to resize_size (bilinear), centre crop image_size.
Image imagefolder_eval_transform(const Image& image, const TransformOptions& options);

// mean/std expanded to one value per channel (a single value is broadcast).
std::vector<double> per_channel(const std::vector<double>& values, int channels);

}  // namespace amptune::data
