#include "data/image.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

#include <png.h>
#include <turbojpeg.h>

#include "core/error.h"

namespace amptune::data {
namespace {

struct TjDeleter {
  void operator()(void* handle) const {
    if (handle) tjDestroy(handle);
  }
};
using TjHandle = std::unique_ptr<void, TjDeleter>;

// One decompressor per thread: creating one per image costs an allocation of libjpeg state.
// After a failure the handle is replaced: libturbojpeg 2.1 leaves a handle whose header parse
// failed in a state where every later image fails too ("Bogus Huffman table definition").
TjHandle& thread_decompressor_slot() {
  thread_local TjHandle handle;
  return handle;
}
tjhandle thread_decompressor() {
  TjHandle& slot = thread_decompressor_slot();
  if (!slot) slot.reset(tjInitDecompress());
  return slot.get();
}
void discard_thread_decompressor() { thread_decompressor_slot().reset(); }

void set_error(std::string* error, const std::string& text) {
  if (error) *error = text;
}

// Refuses an image larger than `max_pixels` by its declared size (PIL's DecompressionBombError
// past twice its limit; amptune refuses past the limit itself: a skipped sample would let the
// run "succeed" without it).
void check_pixels(const char* format, int64_t width, int64_t height, int channels,
                  int64_t max_pixels) {
  if (width * height <= max_pixels) return;
  throw ImageTooLarge(
      std::string(format) + " declares " + std::to_string(width) + "x" + std::to_string(height) +
      " = " + std::to_string(width * height) + " pixels (" +
      std::to_string(width * height * channels) +
      " bytes decoded), more than data.max_image_pixels = " + std::to_string(max_pixels) +
      " (a decompression bomb? raise data.max_image_pixels if the image is real)");
}

bool is_jpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}
bool is_png(const uint8_t* data, size_t size) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return size >= 8 && std::memcmp(data, kSig, 8) == 0;
}

std::optional<Image> decode_jpeg(const uint8_t* data, size_t size, int channels, std::string* error,
                                 int64_t max_pixels) {
  tjhandle tj = thread_decompressor();
  if (!tj) {
    set_error(error, "cannot create a libturbojpeg decompressor");
    return std::nullopt;
  }
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  // libturbojpeg takes a non-const pointer in the 2.x API but does not write through it.
  auto* src = const_cast<unsigned char*>(data);
  if (tjDecompressHeader3(tj, src, static_cast<unsigned long>(size), &width, &height, &subsamp,
                          &colorspace) != 0) {
    set_error(error, std::string("bad JPEG header: ") + tjGetErrorStr2(tj));
    discard_thread_decompressor();
    return std::nullopt;
  }
  if (width <= 0 || height <= 0) {
    set_error(error, "JPEG with an empty image");
    return std::nullopt;
  }
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int pixel_format = cmyk ? TJPF_CMYK : (channels == 1 ? TJPF_GRAY : TJPF_RGB);
  const int decoded_channels = cmyk ? 4 : channels;
  check_pixels("JPEG", width, height, decoded_channels, max_pixels);
  std::vector<uint8_t> buffer(static_cast<size_t>(width) * height * decoded_channels);
  // STOPONWARNING: a truncated file or corrupt entropy data is a failure, not a grey image.
  if (tjDecompress2(tj, src, static_cast<unsigned long>(size), buffer.data(), width, 0, height,
                    pixel_format, TJFLAG_STOPONWARNING) != 0) {
    set_error(error, std::string("corrupt or truncated JPEG data: ") + tjGetErrorStr2(tj));
    discard_thread_decompressor();
    return std::nullopt;
  }
  Image image;
  image.width = width;
  image.height = height;
  image.channels = channels;
  if (!cmyk) {
    image.pixels = std::move(buffer);
    return image;
  }
  // Adobe CMYK JPEGs store inverted ink values, so C*K/255 is the red intensity (and so on).
  image.pixels.resize(static_cast<size_t>(width) * height * channels);
  const size_t n = static_cast<size_t>(width) * height;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &buffer[i * 4];
    const int k = p[3];
    const int r = (p[0] * k + 127) / 255, g = (p[1] * k + 127) / 255, b = (p[2] * k + 127) / 255;
    if (channels == 1) {
      image.pixels[i] = static_cast<uint8_t>((r * 299 + g * 587 + b * 114 + 500) / 1000);
    } else {
      image.pixels[i * 3 + 0] = static_cast<uint8_t>(r);
      image.pixels[i * 3 + 1] = static_cast<uint8_t>(g);
      image.pixels[i * 3 + 2] = static_cast<uint8_t>(b);
    }
  }
  return image;
}

std::optional<Image> decode_png(const uint8_t* data, size_t size, int channels, std::string* error,
                                int64_t max_pixels) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, size)) {
    set_error(error, std::string("bad PNG header: ") + png.message);
    png_image_free(&png);
    return std::nullopt;
  }
  try {
    check_pixels("PNG", png.width, png.height, channels, max_pixels);
  } catch (...) {
    png_image_free(&png);
    throw;
  }
  png.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Image image;
  image.width = static_cast<int>(png.width);
  image.height = static_cast<int>(png.height);
  image.channels = channels;
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr)) {
    set_error(error, std::string("corrupt or truncated PNG data: ") + png.message);
    png_image_free(&png);
    return std::nullopt;
  }
  png_image_free(&png);
  if (image.width <= 0 || image.height <= 0) {
    set_error(error, "PNG with an empty image");
    return std::nullopt;
  }
  return image;
}

// PIL's bilinear filter and coefficient layout (ImagingResample): for each output position,
// the first input index and the normalised weights of the inputs it reads.
struct Coeffs {
  std::vector<int> start;
  std::vector<int> count;
  std::vector<float> weights;  // out_size * max_count
  int max_count = 0;
};

Coeffs resample_coeffs(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // bilinear support is 1
  Coeffs c;
  c.max_count = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.start.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(static_cast<size_t>(out_size) * c.max_count, 0.0f);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    xmax = std::min(xmax, c.max_count);
    double total = 0.0;
    std::vector<double> w(xmax);
    for (int x = 0; x < xmax; ++x) {
      double t = std::abs((x + xmin - center + 0.5) / filterscale);
      w[x] = t < 1.0 ? 1.0 - t : 0.0;
      total += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      c.weights[static_cast<size_t>(xx) * c.max_count + x] =
          static_cast<float>(total != 0.0 ? w[x] / total : 0.0);
    }
    c.start[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

}  // namespace

std::optional<Image> decode_image(const uint8_t* data, size_t size, int channels,
                                  std::string* error, int64_t max_pixels) {
  if (channels != 1 && channels != 3) {
    set_error(error, "decode_image supports 1 or 3 channels, asked for " +
                         std::to_string(channels));
    return std::nullopt;
  }
  if (is_jpeg(data, size)) return decode_jpeg(data, size, channels, error, max_pixels);
  if (is_png(data, size)) return decode_png(data, size, channels, error, max_pixels);
  set_error(error, size == 0 ? "empty file" : "neither JPEG nor PNG (unknown signature)");
  return std::nullopt;
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  if (image.channels != 1 && image.channels != 3) {
    throw DataError("encode_jpeg: images need 1 or 3 channels, got " +
                    std::to_string(image.channels));
  }
  if (quality < 1 || quality > 100) {
    throw DataError("encode_jpeg: quality must be in 1..100, got " + std::to_string(quality));
  }
  TjHandle tj(tjInitCompress());
  if (!tj) throw DataError("encode_jpeg: cannot create a libturbojpeg compressor");
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  const int pf = image.channels == 1 ? TJPF_GRAY : TJPF_RGB;
  const int subsamp = image.channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
  if (tjCompress2(tj.get(), image.pixels.data(), image.width, 0, image.height, pf, &out, &out_size,
                  subsamp, quality, TJFLAG_ACCURATEDCT) != 0) {
    std::string msg = tjGetErrorStr2(tj.get());
    if (out) tjFree(out);
    throw DataError("encode_jpeg: libturbojpeg failed: " + msg);
  }
  std::vector<uint8_t> bytes(out, out + out_size);
  tjFree(out);
  return bytes;
}

std::vector<uint8_t> encode_png(const Image& image) {
  if (image.channels != 1 && image.channels != 3) {
    throw DataError("encode_png: images need 1 or 3 channels, got " +
                    std::to_string(image.channels));
  }
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), 0, nullptr)) {
    throw DataError(std::string("encode_png: libpng failed: ") + png.message);
  }
  std::vector<uint8_t> bytes(size);
  if (!png_image_write_to_memory(&png, bytes.data(), &size, 0, image.pixels.data(), 0, nullptr)) {
    throw DataError(std::string("encode_png: libpng failed: ") + png.message);
  }
  bytes.resize(size);
  return bytes;
}

bool read_file_bytes(const std::string& path, std::vector<uint8_t>* bytes, std::string* error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    set_error(error, "cannot open file");
    return false;
  }
  const std::streamoff size = in.tellg();
  if (size < 0) {
    set_error(error, "cannot determine the file size");
    return false;
  }
  bytes->resize(static_cast<size_t>(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes->data()), size)) {
    set_error(error, "read failed");
    return false;
  }
  return true;
}

Image crop(const Image& image, const Box& box) {
  Image out;
  out.width = box.width;
  out.height = box.height;
  out.channels = image.channels;
  out.pixels.assign(static_cast<size_t>(box.width) * box.height * image.channels, 0);
  const int x0 = std::max(0, box.left), x1 = std::min(image.width, box.left + box.width);
  if (x1 <= x0) return out;
  for (int y = 0; y < box.height; ++y) {
    const int sy = box.top + y;
    if (sy < 0 || sy >= image.height) continue;
    std::memcpy(out.row(y) + static_cast<size_t>(x0 - box.left) * image.channels,
                image.row(sy) + static_cast<size_t>(x0) * image.channels,
                static_cast<size_t>(x1 - x0) * image.channels);
  }
  return out;
}

Image resize_bilinear(const Image& image, int out_width, int out_height) {
  if (out_width <= 0 || out_height <= 0 || image.width <= 0 || image.height <= 0) {
    throw DataError("resize_bilinear: empty size " + std::to_string(image.width) + "x" +
                    std::to_string(image.height) + " -> " + std::to_string(out_width) + "x" +
                    std::to_string(out_height));
  }
  const int C = image.channels;
  // Horizontal pass into floats, then vertical pass with rounding to 8 bits.
  const Coeffs cx = resample_coeffs(image.width, out_width);
  std::vector<float> tmp(static_cast<size_t>(image.height) * out_width * C);
  for (int y = 0; y < image.height; ++y) {
    const uint8_t* src = image.row(y);
    float* dst = &tmp[static_cast<size_t>(y) * out_width * C];
    for (int x = 0; x < out_width; ++x) {
      const float* w = &cx.weights[static_cast<size_t>(x) * cx.max_count];
      for (int c = 0; c < C; ++c) {
        float acc = 0.0f;
        for (int k = 0; k < cx.count[x]; ++k) acc += w[k] * src[(cx.start[x] + k) * C + c];
        dst[x * C + c] = acc;
      }
    }
  }
  const Coeffs cy = resample_coeffs(image.height, out_height);
  Image out;
  out.width = out_width;
  out.height = out_height;
  out.channels = C;
  out.pixels.resize(static_cast<size_t>(out_width) * out_height * C);
  const size_t row_len = static_cast<size_t>(out_width) * C;
  std::vector<float> acc(row_len);
  for (int y = 0; y < out_height; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* w = &cy.weights[static_cast<size_t>(y) * cy.max_count];
    for (int k = 0; k < cy.count[y]; ++k) {
      const float* src = &tmp[static_cast<size_t>(cy.start[y] + k) * row_len];
      const float wk = w[k];
      for (size_t i = 0; i < row_len; ++i) acc[i] += wk * src[i];
    }
    uint8_t* dst = out.row(y);
    for (size_t i = 0; i < row_len; ++i) {
      const float v = std::nearbyint(acc[i]);
      dst[i] = static_cast<uint8_t>(v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v));
    }
  }
  return out;
}

void flip_horizontal(Image* image) {
  const int C = image->channels;
  for (int y = 0; y < image->height; ++y) {
    uint8_t* r = image->row(y);
    for (int a = 0, b = image->width - 1; a < b; ++a, --b) {
      for (int c = 0; c < C; ++c) std::swap(r[a * C + c], r[b * C + c]);
    }
  }
}

double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

double uniform_real(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * uniform01(rng);
}

uint64_t uniform_index(std::mt19937_64& rng, uint64_t n) {
  if (n <= 1) return 0;
  // Rejection sampling: draws above the largest multiple of n are retried.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
  uint64_t x;
  do {
    x = rng();
  } while (x > limit);
  return x % n;
}

Box random_resized_crop_box(int width, int height, double scale_lo, double scale_hi,
                            double ratio_lo, double ratio_hi, std::mt19937_64& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform_real(rng, scale_lo, scale_hi);
    const double aspect = std::exp(uniform_real(rng, log_lo, log_hi));
    // Python's round() is round-half-even, as nearbyint in the default rounding mode.
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      Box box;
      box.top = static_cast<int>(uniform_index(rng, static_cast<uint64_t>(height - h + 1)));
      box.left = static_cast<int>(uniform_index(rng, static_cast<uint64_t>(width - w + 1)));
      box.height = h;
      box.width = w;
      return box;
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < std::min(ratio_lo, ratio_hi)) {
    w = width;
    h = static_cast<int>(std::nearbyint(w / std::min(ratio_lo, ratio_hi)));
  } else if (in_ratio > std::max(ratio_lo, ratio_hi)) {
    h = height;
    w = static_cast<int>(std::nearbyint(h * std::max(ratio_lo, ratio_hi)));
  }
  Box box;
  box.top = (height - h) / 2;
  box.left = (width - w) / 2;
  box.height = h;
  box.width = w;
  return box;
}

std::pair<int, int> resize_shorter_side(int width, int height, int resize_size) {
  if (width <= height) {
    return {resize_size,
            static_cast<int>(static_cast<double>(resize_size) * height / width)};
  }
  return {static_cast<int>(static_cast<double>(resize_size) * width / height), resize_size};
}

Box center_crop_box(int width, int height, int crop_width, int crop_height) {
  Box box;
  box.top = static_cast<int>(std::nearbyint((height - crop_height) / 2.0));
  box.left = static_cast<int>(std::nearbyint((width - crop_width) / 2.0));
  box.height = crop_height;
  box.width = crop_width;
  return box;
}

}  // namespace amptune::data
