#include "data/transforms.h"

#include <string>

#include "core/error.h"
#include "core/settings.h"

namespace amptune::data {
namespace {

std::string list_str(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::vector<double> per_channel(const std::vector<double>& values, int channels) {
  if (values.size() == 1) return std::vector<double>(static_cast<size_t>(channels), values[0]);
  return values;
}

TransformOptions transform_options(const DataSettings& data, int64_t in_channels) {
  TransformOptions o;
  if (in_channels != 1 && in_channels != 3) {
    throw ConfigError("model.in_channels must be 1 (grey) or 3 (RGB) for image data, got " +
                      std::to_string(in_channels));
  }
  o.channels = static_cast<int>(in_channels);
  o.image_size = static_cast<int>(data.image_size);
  o.resize_size = static_cast<int>(data.resize_size);
  o.augment = data.augment;
  o.max_pixels = data.max_image_pixels;
  const std::vector<double>& scale = data.crop_scale;
  if (scale.size() != 2 || !(scale[0] > 0.0) || scale[0] > scale[1] || scale[1] > 1.0) {
    throw ConfigError("data.crop_scale must be [lo, hi] with 0 < lo <= hi <= 1, got " +
                      list_str(scale));
  }
  o.scale_lo = scale[0];
  o.scale_hi = scale[1];
  // data.mean / data.std: one value per channel, or a single value for all of them.
  auto channel_values = [&](const char* key, const std::vector<double>& v) {
    if (v.size() != 1 && v.size() != static_cast<size_t>(in_channels)) {
      throw ConfigError(std::string(key) + " has " + std::to_string(v.size()) +
                        " values but model.in_channels is " + std::to_string(in_channels) +
                        ": give one value per channel or a single value (Fashion-MNIST: " +
                        "data.mean [0.2860], data.std [0.3530])");
    }
    return per_channel(v, o.channels);
  };
  o.mean = channel_values("data.mean", data.mean);
  o.std = channel_values("data.std", data.std);
  for (double s : data.std) {
    if (!(s > 0.0)) throw ConfigError("data.std values must be > 0, got " + list_str(data.std));
  }
  return o;
}

Image imagefolder_train_transform(const Image& image, const TransformOptions& options,
                                  std::mt19937_64& rng) {
  const Box box = random_resized_crop_box(image.width, image.height, options.scale_lo,
                                          options.scale_hi, options.ratio_lo, options.ratio_hi,
                                          rng);
  Image out = resize_bilinear(crop(image, box), options.image_size, options.image_size);
  if (uniform01(rng) < 0.5) flip_horizontal(&out);
  return out;
}

Image imagefolder_eval_transform(const Image& image, const TransformOptions& options) {
  const auto [w, h] = resize_shorter_side(image.width, image.height, options.resize_size);
  const Image resized =
      (w == image.width && h == image.height) ? image : resize_bilinear(image, w, h);
  return crop(resized, center_crop_box(w, h, options.image_size, options.image_size));
}

}  // namespace amptune::data
