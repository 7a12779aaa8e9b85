#include "data/transforms.h"

#include <string>

#include "core/config.h"
#include "core/error.h"

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

TransformOptions transform_options(const Config& config) {
  TransformOptions o;
  const int64_t channels = config.get_int("model.in_channels");
  if (channels != 1 && channels != 3) {
    throw ConfigError("model.in_channels must be 1 (grey) or 3 (RGB) for image data, got " +
                      std::to_string(channels));
  }
  o.channels = static_cast<int>(channels);
  o.image_size = static_cast<int>(config.get_int("data.image_size"));
  o.resize_size = static_cast<int>(config.get_int("data.resize_size"));
  o.augment = config.get_bool("data.augment");
  const std::vector<double> scale = config.get_double_list("data.crop_scale");
  if (scale.size() != 2 || !(scale[0] > 0.0) || scale[0] > scale[1] || scale[1] > 1.0) {
    throw ConfigError("data.crop_scale must be [lo, hi] with 0 < lo <= hi <= 1, got " +
                      list_str(scale));
  }
  o.scale_lo = scale[0];
  o.scale_hi = scale[1];
  for (const char* key : {"data.mean", "data.std"}) {
    const std::vector<double> v = config.get_double_list(key);
    if (v.size() != 1 && v.size() != static_cast<size_t>(channels)) {
      throw ConfigError(std::string(key) + " has " + std::to_string(v.size()) +
                        " values but model.in_channels is " + std::to_string(channels) +
                        ": give one value per channel or a single value (Fashion-MNIST: " +
                        "data.mean [0.2860], data.std [0.3530])");
    }
    if (std::string(key) == "data.std") {
      for (double s : v) {
        if (!(s > 0.0)) throw ConfigError("data.std values must be > 0, got " + list_str(v));
      }
      o.std = per_channel(v, o.channels);
    } else {
      o.mean = per_channel(v, o.channels);
    }
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
