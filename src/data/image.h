// 8-bit images in memory and the torch-free pixel operations of the data layer: JPEG / PNG
// decoding (libturbojpeg, libpng), JPEG encoding, crops, bilinear resampling, flips, and the
// torchvision transform parameters (RandomResizedCrop, Resize + CenterCrop).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace amptune::data {

// Interleaved (HWC) 8-bit pixels, row-major, no padding: pixels.size() == height * width * channels.
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;  // 1 (grey) or 3 (RGB)
  std::vector<uint8_t> pixels;

  uint8_t* row(int y) { return pixels.data() + static_cast<size_t>(y) * width * channels; }
  const uint8_t* row(int y) const {
    return pixels.data() + static_cast<size_t>(y) * width * channels;
  }
};

// PIL's Image.MAX_IMAGE_PIXELS, the default of data.max_image_pixels.
constexpr int64_t kDefaultMaxImagePixels = 89478485;

// An image whose header declares more than the allowed pixels (a decompression bomb): thrown
// before its pixels are allocated. The data set adds the file's path.
class ImageTooLarge : public DataError {
 public:
  using DataError::DataError;
};

// Decodes JPEG or PNG bytes (recognised by their signature, not by the file name) into an image
// with `channels` (1 or 3; colour is converted to grey with the ITU-R 601 luma as PIL does,
// grey is replicated into RGB; CMYK JPEGs are converted to RGB; PNG alpha is dropped).
// Returns nullopt and sets `*error` (when not null) for anything it cannot decode completely:
// unknown format, corrupt data, truncated files (libjpeg warnings count as failures).
// Throws ImageTooLarge when the header declares more than `max_pixels` pixels (width x height),
// before anything of the image's size is allocated.
std::optional<Image> decode_image(const uint8_t* data, size_t size, int channels,
                                  std::string* error = nullptr,
                                  int64_t max_pixels = kDefaultMaxImagePixels);

// Encodes an image (1 or 3 channels) as baseline JPEG with libturbojpeg; quality 1..100
// (4:2:0 chroma for RGB). Throws DataError on failure.
std::vector<uint8_t> encode_jpeg(const Image& image, int quality);
// Encodes an image (1 or 3 channels) as 8-bit PNG with libpng. Throws DataError on failure.
std::vector<uint8_t> encode_png(const Image& image);

// Reads a whole file; returns false and sets *error when it cannot be read.
bool read_file_bytes(const std::string& path, std::vector<uint8_t>* bytes, std::string* error);

// The region [top, top + height) x [left, left + width) of an image. Parts outside the image are
// zero (as torchvision's CenterCrop pads a too-small image).
struct Box {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

Image crop(const Image& image, const Box& box);
// Bilinear (triangle filter) resampling to out_width x out_height; when shrinking, the filter
// support grows with the scale factor (antialiasing), as PIL's Image.resize(BILINEAR) does.
Image resize_bilinear(const Image& image, int out_width, int out_height);
void flip_horizontal(Image* image);

// Uniform draws with a fixed definition (the standard distributions differ between standard
// libraries; these do not).
double uniform01(std::mt19937_64& rng);                         // [0, 1), 53 random bits
double uniform_real(std::mt19937_64& rng, double lo, double hi);  // [lo, hi)
uint64_t uniform_index(std::mt19937_64& rng, uint64_t n);       // [0, n), n >= 1, unbiased

// torchvision RandomResizedCrop.get_params for an image of width x height: up to 10 attempts of
// area fraction U(scale_lo, scale_hi) and log-uniform aspect ratio in [ratio_lo, ratio_hi]; then
// the centre crop fallback (whole image clamped to the ratio range).
Box random_resized_crop_box(int width, int height, double scale_lo, double scale_hi,
                            double ratio_lo, double ratio_hi, std::mt19937_64& rng);

// torchvision Resize(resize_size) with an int size: the shorter side becomes resize_size, the
// longer one int(resize_size * long / short). Returns {width, height}.
std::pair<int, int> resize_shorter_side(int width, int height, int resize_size);
// torchvision CenterCrop box: top = round((H - h) / 2), left = round((W - w) / 2).
Box center_crop_box(int width, int height, int crop_width, int crop_height);

}  // namespace amptune::data
