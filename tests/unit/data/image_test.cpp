// Torch-free pixel code: JPEG / PNG decoding, transforms, transform parameters, uniform draws.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <zlib.h>

#include "data/dataset.h"
#include "data/image.h"
#include "data/transforms.h"
#include "data_util.h"

namespace amptune::data {
namespace {

int max_abs_diff(const Image& a, const Image& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  int worst = 0;
  for (size_t i = 0; i < a.pixels.size() && i < b.pixels.size(); ++i) {
    worst = std::max(worst, std::abs(int{a.pixels[i]} - int{b.pixels[i]}));
  }
  return worst;
}

TEST(Jpeg, RoundTripRgbGradientWithinJpegTolerance) {
  const Image src = testing_util::gradient(64, 48, 3);
  const std::vector<uint8_t> jpeg = encode_jpeg(src, 95);
  ASSERT_GT(jpeg.size(), 100u);
  std::string error;
  std::optional<Image> back = decode_image(jpeg.data(), jpeg.size(), 3, &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->width, 64);
  EXPECT_EQ(back->height, 48);
  EXPECT_EQ(back->channels, 3);
  EXPECT_LE(max_abs_diff(src, *back), 12);  // 4:2:0 chroma at q95 on a smooth gradient
}

TEST(Jpeg, RoundTripGreyAndChannelConversion) {
  const Image grey = testing_util::gradient(40, 30, 1);
  const std::vector<uint8_t> jpeg = encode_jpeg(grey, 95);
  std::optional<Image> back = decode_image(jpeg.data(), jpeg.size(), 1);
  ASSERT_TRUE(back);
  EXPECT_LE(max_abs_diff(grey, *back), 4);
  // Grey decoded as RGB: three equal channels.
  std::optional<Image> rgb = decode_image(jpeg.data(), jpeg.size(), 3);
  ASSERT_TRUE(rgb);
  ASSERT_EQ(rgb->channels, 3);
  for (size_t i = 0; i < rgb->pixels.size(); i += 3) {
    ASSERT_EQ(rgb->pixels[i], rgb->pixels[i + 1]);
    ASSERT_EQ(rgb->pixels[i], rgb->pixels[i + 2]);
  }
  // A pure red RGB image decoded as grey gives the luma 0.299 * 255 = 76.
  Image red;
  red.width = red.height = 16;
  red.channels = 3;
  red.pixels.assign(16 * 16 * 3, 0);
  for (size_t i = 0; i < red.pixels.size(); i += 3) red.pixels[i] = 255;
  const std::vector<uint8_t> rj = encode_jpeg(red, 100);
  std::optional<Image> rg = decode_image(rj.data(), rj.size(), 1);
  ASSERT_TRUE(rg);
  EXPECT_NEAR(rg->pixels[8 * 16 + 8], 76, 3);
}

TEST(Png, RoundTripIsExact) {
  const Image src = testing_util::gradient(33, 17, 3, 5);
  const std::vector<uint8_t> png = encode_png(src);
  std::optional<Image> back = decode_image(png.data(), png.size(), 3);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->pixels, src.pixels);
}

TEST(Decode, CorruptTruncatedAndGarbageReturnNullopt) {
  const std::vector<uint8_t> jpeg = encode_jpeg(testing_util::gradient(64, 64, 3), 90);
  std::string error;
  // Truncated in the entropy-coded data.
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  EXPECT_FALSE(decode_image(cut.data(), cut.size(), 3, &error));
  EXPECT_NE(error, "");
  // Cut near the end: headers intact, entropy-coded data truncated (a libjpeg warning).
  std::vector<uint8_t> tail_cut(jpeg.begin(), jpeg.end() - 40);
  EXPECT_FALSE(decode_image(tail_cut.data(), tail_cut.size(), 3, &error));
  // Only the signature.
  std::vector<uint8_t> head(jpeg.begin(), jpeg.begin() + 4);
  EXPECT_FALSE(decode_image(head.data(), head.size(), 3, &error));
  // Garbage after a valid header.
  std::vector<uint8_t> garbled = jpeg;
  for (size_t i = garbled.size() / 3; i < garbled.size(); ++i) garbled[i] = static_cast<uint8_t>(i * 131);
  EXPECT_FALSE(decode_image(garbled.data(), garbled.size(), 3, &error));
  // Not an image at all, and empty.
  std::vector<uint8_t> text{'h', 'e', 'l', 'l', 'o'};
  EXPECT_FALSE(decode_image(text.data(), text.size(), 3, &error));
  EXPECT_NE(error.find("unknown signature"), std::string::npos) << error;
  EXPECT_FALSE(decode_image(nullptr, 0, 3, &error));
  // A truncated PNG.
  const std::vector<uint8_t> png = encode_png(testing_util::gradient(32, 32, 3));
  std::vector<uint8_t> pcut(png.begin(), png.begin() + png.size() / 2);
  EXPECT_FALSE(decode_image(pcut.data(), pcut.size(), 3, &error));
  // The failures leave no broken decoder state behind: a good image still decodes.
  EXPECT_TRUE(decode_image(jpeg.data(), jpeg.size(), 3, &error)) << error;
}

TEST(Transforms, RandomResizedCropStaysWithinScaleAndRatio) {
  const double lo = 0.08, hi = 1.0, rlo = 3.0 / 4.0, rhi = 4.0 / 3.0;
  for (auto [w, h] : std::vector<std::pair<int, int>>{{500, 375}, {224, 224}, {640, 480},
                                                        {100, 300}, {37, 29}}) {
    for (uint64_t seed = 0; seed < 400; ++seed) {
      std::mt19937_64 rng(seed);
      const Box b = random_resized_crop_box(w, h, lo, hi, rlo, rhi, rng);
      ASSERT_GT(b.width, 0);
      ASSERT_GT(b.height, 0);
      ASSERT_GE(b.left, 0);
      ASSERT_GE(b.top, 0);
      ASSERT_LE(b.left + b.width, w);
      ASSERT_LE(b.top + b.height, h);
      const double area = static_cast<double>(b.width) * b.height / (static_cast<double>(w) * h);
      const double ratio = static_cast<double>(b.width) / b.height;
      // Rounding w and h to integers moves area and ratio by up to 0.5/w + 0.5/h (relative).
      const double slack = 1.0 / b.width + 1.0 / b.height;
      EXPECT_GE(area, lo * (1 - slack)) << w << "x" << h << " seed " << seed;
      EXPECT_LE(area, hi + 1e-12);
      EXPECT_GE(ratio, rlo * (1 - slack)) << w << "x" << h << " seed " << seed;
      EXPECT_LE(ratio, rhi * (1 + slack)) << w << "x" << h << " seed " << seed;
    }
  }
}

TEST(Transforms, RandomResizedCropFallbackIsTorchvisionCentreCrop) {
  // A 1000x10 strip: no attempt fits, ratio 100 > 4/3 -> h = 10, w = round(10 * 4/3) = 13.
  std::mt19937_64 rng(7);
  const Box b = random_resized_crop_box(1000, 10, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, rng);
  EXPECT_EQ(b.height, 10);
  EXPECT_EQ(b.width, 13);
  EXPECT_EQ(b.top, 0);
  EXPECT_EQ(b.left, (1000 - 13) / 2);
  // A tall strip: w = 10, h = round(10 / (3/4)) = 13.
  const Box t = random_resized_crop_box(10, 1000, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, rng);
  EXPECT_EQ(t.width, 10);
  EXPECT_EQ(t.height, 13);
  EXPECT_EQ(t.top, (1000 - 13) / 2);
}

TEST(Transforms, RandomResizedCropIsAFunctionOfTheGenerator) {
  std::mt19937_64 a(42), b(42), c(43);
  const Box x = random_resized_crop_box(500, 375, 0.08, 1.0, 0.75, 4.0 / 3.0, a);
  const Box y = random_resized_crop_box(500, 375, 0.08, 1.0, 0.75, 4.0 / 3.0, b);
  EXPECT_EQ(x.top, y.top);
  EXPECT_EQ(x.left, y.left);
  EXPECT_EQ(x.width, y.width);
  EXPECT_EQ(x.height, y.height);
  std::set<std::tuple<int, int, int, int>> seen;
  for (int i = 0; i < 20; ++i) {
    const Box z = random_resized_crop_box(500, 375, 0.08, 1.0, 0.75, 4.0 / 3.0, c);
    seen.insert({z.top, z.left, z.width, z.height});
  }
  EXPECT_GT(seen.size(), 15u);
}

TEST(Transforms, EvalTransformOutputSizeAndResizeRule) {
  TransformOptions o;
  o.image_size = 224;
  o.resize_size = 256;
  for (auto [w, h] : std::vector<std::pair<int, int>>{{500, 375}, {375, 500}, {256, 256},
                                                        {100, 60}, {1000, 20}}) {
    const Image out = imagefolder_eval_transform(testing_util::gradient(w, h, 3), o);
    EXPECT_EQ(out.width, 224);
    EXPECT_EQ(out.height, 224);
    EXPECT_EQ(out.channels, 3);
  }
  EXPECT_EQ(resize_shorter_side(500, 375, 256), (std::pair<int, int>{341, 256}));
  EXPECT_EQ(resize_shorter_side(375, 500, 256), (std::pair<int, int>{256, 341}));
  const Box c = center_crop_box(341, 256, 224, 224);
  EXPECT_EQ(c.left, 58);  // round(117 / 2) = round(58.5) = 58 (half to even)
  EXPECT_EQ(c.top, 16);
}

TEST(Transforms, TrainTransformOutputSizeAndDeterminism) {
  TransformOptions o;
  o.image_size = 32;
  const Image src = testing_util::gradient(90, 70, 3);
  std::mt19937_64 a(1), b(1);
  const Image x = imagefolder_train_transform(src, o, a);
  const Image y = imagefolder_train_transform(src, o, b);
  EXPECT_EQ(x.width, 32);
  EXPECT_EQ(x.height, 32);
  EXPECT_EQ(x.pixels, y.pixels);
}

TEST(Resize, ConstantImageStaysConstantAndIdentityIsExact) {
  Image c;
  c.width = 50;
  c.height = 30;
  c.channels = 3;
  c.pixels.assign(50 * 30 * 3, 77);
  for (auto [w, h] : std::vector<std::pair<int, int>>{{7, 5}, {50, 30}, {123, 99}}) {
    const Image r = resize_bilinear(c, w, h);
    for (uint8_t p : r.pixels) ASSERT_EQ(p, 77);
  }
  const Image g = testing_util::gradient(20, 10, 1);
  EXPECT_EQ(resize_bilinear(g, 20, 10).pixels, g.pixels);
}

TEST(Crop, OutsideTheImageIsZeroAndFlipMirrors) {
  const Image g = testing_util::gradient(4, 3, 1);
  Box b;
  b.top = -1;
  b.left = -1;
  b.width = 6;
  b.height = 5;
  const Image c = crop(g, b);
  EXPECT_EQ(c.row(0)[0], 0);
  EXPECT_EQ(c.row(1)[1], g.row(0)[0]);
  EXPECT_EQ(c.row(3)[4], g.row(2)[3]);
  EXPECT_EQ(c.row(4)[5], 0);
  Image f = g;
  flip_horizontal(&f);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 4; ++x) EXPECT_EQ(f.row(y)[x], g.row(y)[3 - x]);
  }
}

TEST(Uniform, RangesHold) {
  std::mt19937_64 rng(3);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const double u = uniform01(rng);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const uint64_t k = uniform_index(rng, 7);
    ASSERT_LT(k, 7u);
    seen.insert(k);
  }
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_EQ(uniform_index(rng, 1), 0u);
}

// A JPEG of 16 x 16 pixels whose frame header (SOF0) declares width x height instead: what a
// 335-byte decompression bomb is.
std::vector<uint8_t> jpeg_declaring(int width, int height) {
  std::vector<uint8_t> jpeg = encode_jpeg(testing_util::gradient(16, 16, 3), 90);
  for (size_t i = 2; i + 8 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {  // FF C0, length(2), precision, height, width
      jpeg[i + 5] = static_cast<uint8_t>(height >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(height & 0xFF);
      jpeg[i + 7] = static_cast<uint8_t>(width >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(width & 0xFF);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF0 marker in the encoded JPEG";
  return jpeg;
}

// A 1 x 1 PNG whose IHDR declares width x height (its CRC fixed, so libpng reads on).
std::vector<uint8_t> png_declaring(uint32_t width, uint32_t height) {
  std::vector<uint8_t> png = encode_png(testing_util::gradient(1, 1, 3));
  // Signature (8), IHDR length (4), "IHDR" (4) at 12, width at 16, height at 20, CRC at 29.
  for (int k = 0; k < 4; ++k) {
    png[16 + k] = static_cast<uint8_t>(width >> (24 - 8 * k));
    png[20 + k] = static_cast<uint8_t>(height >> (24 - 8 * k));
  }
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), png.data() + 12, 17);
  for (int k = 0; k < 4; ++k) png[29 + k] = static_cast<uint8_t>(crc >> (24 - 8 * k));
  return png;
}

// issue 46 item 10: a 65500 x 65500 JPEG zero-filled 4.3 GB (12.9 GB as RGB) and a 60000^2 PNG
// cost 3.6 GB before failing as truncated; the header is now compared with data.max_image_pixels
// (PIL's 89,478,485 by default) before the pixels are allocated. Asked for grey images of
// 12000 x 12000 (144 MB) so the test stays light even where the bound is missing.
TEST(Decode, DecompressionBombsAreRefusedFromTheirHeader) {
  std::vector<uint8_t> jpeg = jpeg_declaring(12000, 12000);
  std::string msg;
  int64_t grew = testing_util::peak_rss_growth_mb([&] {
    msg = testing_util::data_error_of([&] { decode_image(jpeg.data(), jpeg.size(), 1); });
  });
  EXPECT_NE(msg.find("12000x12000 = 144000000 pixels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.max_image_pixels = 89478485"), std::string::npos) << msg;
  EXPECT_LT(grew, 40) << "MB";

  const std::vector<uint8_t> png = png_declaring(12000, 12000);
  grew = testing_util::peak_rss_growth_mb([&] {
    msg = testing_util::data_error_of([&] { decode_image(png.data(), png.size(), 1); });
  });
  EXPECT_NE(msg.find("PNG declares 12000x12000"), std::string::npos) << msg;
  EXPECT_LT(grew, 40) << "MB";

  // The issue's own bombs end the same way, and as ImageTooLarge for the data set to name.
  jpeg = jpeg_declaring(65500, 65500);
  EXPECT_THROW(decode_image(jpeg.data(), jpeg.size(), 3), ImageTooLarge);
  const std::vector<uint8_t> big_png = png_declaring(60000, 60000);
  EXPECT_THROW(decode_image(big_png.data(), big_png.size(), 3), ImageTooLarge);
}

TEST(Decode, PixelBoundIsInclusiveAndSettable) {
  const std::vector<uint8_t> jpeg = encode_jpeg(testing_util::gradient(64, 64, 3), 90);
  std::string error;
  EXPECT_TRUE(decode_image(jpeg.data(), jpeg.size(), 3, &error, 64 * 64)) << error;
  EXPECT_THROW(decode_image(jpeg.data(), jpeg.size(), 3, &error, 64 * 64 - 1), ImageTooLarge);
}

// A bomb in an ImageFolder is a DataError naming the file, not a skipped sample: a run that left
// it out would "succeed" on other data than the user's.
TEST(ImageFolderDataset, AnImageOverTheBoundIsADataErrorNamingIt) {
  const std::string root = amptune::testing::scratch_dir();
  testing_util::write_bytes(root + "/train/cat/a.jpg",
                            encode_jpeg(testing_util::gradient(40, 40, 3), 90));
  testing_util::write_bytes(root + "/train/cat/b.jpg", jpeg_declaring(65500, 65500));
  TransformOptions options;
  options.image_size = 32;
  options.resize_size = 32;
  const auto data = make_imagefolder_dataset(root, "train", options);
  Rng rng(1);
  EXPECT_TRUE(data->get(0, rng, false));
  const std::string msg = testing_util::data_error_of([&] { data->get(1, rng, false); });
  EXPECT_NE(msg.find(root + "/train/cat/b.jpg: JPEG declares 65500x65500"), std::string::npos)
      << msg;
  // The key raises the bound (checked here on the good file, below it).
  options.max_pixels = 40 * 40 - 1;
  const auto strict = make_imagefolder_dataset(root, "train", options);
  EXPECT_THROW(strict->get(0, rng, false), DataError);
}

}  // namespace
}  // namespace amptune::data
