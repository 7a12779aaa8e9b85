// The numeric vectors of REFERENCE.md section 5 for the torch-free RootNet geometry and metrics.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "data/rootnet_geometry.h"
#include "eval/rootnet_metrics.h"

namespace amptune {
namespace {

using data::BoxF;

TEST(RootNetGeometry, ProcessBboxVectors) {
  auto a = data::process_bbox({139.41, 102.25, 222.39, 241.57}, 640, 392);
  ASSERT_TRUE(a);
  EXPECT_NEAR(a->x, 99.7487, 1e-4);
  EXPECT_NEAR(a->y, 72.1788, 1e-4);
  EXPECT_NEAR(a->w, 300.7125, 1e-4);
  EXPECT_NEAR(a->h, 300.7125, 1e-4);
  EXPECT_NEAR(a->w * a->h, 90428.0077, 1e-3);
  auto b = data::process_bbox({287.17, 61.52, 74.88, 165.61}, 640, 392);
  ASSERT_TRUE(b);
  EXPECT_NEAR(b->x, 221.2287, 1e-4);
  EXPECT_NEAR(b->y, 40.9438, 1e-4);
  EXPECT_NEAR(b->w, 205.7625, 1e-4);
  EXPECT_NEAR(b->h, 205.7625, 1e-4);
}

TEST(RootNetGeometry, ProcessBboxRejectsInvalidBoxes) {
  EXPECT_FALSE(data::process_bbox({10, 10, 0, 20}, 640, 392));     // w*h = 0
  EXPECT_FALSE(data::process_bbox({10, 10, -5, 20}, 640, 392));    // negative
  EXPECT_FALSE(data::process_bbox({700, 10, 20, 20}, 640, 392));   // x2 < x1 after clipping
  EXPECT_TRUE(data::process_bbox({630, 380, 50, 50}, 640, 392));   // clipped, still valid
  // Wide box with aspect 1: height grows to the width.
  auto c = data::process_bbox({0, 0, 101, 51}, 640, 392);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->w, 125.0);
  EXPECT_DOUBLE_EQ(c->h, 125.0);
  EXPECT_DOUBLE_EQ(c->x + c->w / 2, 50.0);
  EXPECT_DOUBLE_EQ(c->y + c->h / 2, 25.0);
}

TEST(RootNetGeometry, KValueVectors) {
  auto a = data::process_bbox({139.41, 102.25, 222.39, 241.57}, 640, 392);
  auto b = data::process_bbox({287.17, 61.52, 74.88, 165.61}, 640, 392);
  EXPECT_NEAR(data::k_value(*a, 1500, 1500), 9976.3063, 1e-3);
  EXPECT_NEAR(data::k_value(*b, 1500, 1500), 14579.9162, 1e-3);
}

TEST(RootNetGeometry, PatchTransformMapsCentreAndHalfSides) {
  auto t = data::patch_transform(200, 150, 100, 100, 256, 256, 0.0);
  auto c = t.apply(200, 150);
  EXPECT_NEAR(c[0], 128, 1e-9);
  EXPECT_NEAR(c[1], 128, 1e-9);
  auto d = t.apply(200, 200);  // half-height point
  EXPECT_NEAR(d[0], 128, 1e-9);
  EXPECT_NEAR(d[1], 256, 1e-9);
  auto r = t.apply(250, 150);  // half-width point
  EXPECT_NEAR(r[0], 256, 1e-9);
  EXPECT_NEAR(r[1], 128, 1e-9);
  // Rotated by 90 degrees: the source point rotate_2d((0, 50)) = (-50, 0) goes to the bottom.
  auto t90 = data::patch_transform(200, 150, 100, 100, 256, 256, 90.0);
  auto d90 = t90.apply(150, 150);
  EXPECT_NEAR(d90[0], 128, 1e-9);
  EXPECT_NEAR(d90[1], 256, 1e-9);
  auto back = t90.inverse().apply(d90[0], d90[1]);
  EXPECT_NEAR(back[0], 150, 1e-9);
  EXPECT_NEAR(back[1], 150, 1e-9);
}

TEST(RootNetGeometry, WarpIsBilinearWithZeroBorder) {
  data::Image img;
  img.width = 4;
  img.height = 4;
  img.channels = 1;
  img.pixels.assign(16, 0);
  for (int x = 0; x < 4; ++x) {
    for (int y = 0; y < 4; ++y) img.pixels[y * 4 + x] = static_cast<uint8_t>(x * 10);
  }
  data::Affine shift;  // patch (x, y) = source (x - 0.5, y) -> source = patch + 0.5 ... here:
  shift.m[0][2] = -0.5;  // source x = patch x + 0.5
  auto out = data::warp_affine_bilinear(img, shift, 4, 4);
  EXPECT_FLOAT_EQ(out[0], 5.0f);   // between 0 and 10
  EXPECT_FLOAT_EQ(out[1], 15.0f);  // between 10 and 20
  EXPECT_FLOAT_EQ(out[3], 15.0f);  // between 30 and the zero border
  data::Affine far;
  far.m[0][2] = -100;
  auto zero = data::warp_affine_bilinear(img, far, 2, 2);
  for (float v : zero) EXPECT_EQ(v, 0.0f);
}

TEST(RootNetGeometry, NormalisationQuirk) {
  std::vector<float> hwc = {255.0f, 0.0f, 128.0f};
  float out[3];
  data::normalise_rootnet_patch(hwc, 1, 1, 3, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, out);
  EXPECT_NEAR(out[0], 1111.419, 1e-3);
  EXPECT_NEAR(out[1], -0.456 / 0.224, 1e-5);
  EXPECT_NEAR(out[2], (128 - 0.406) / 0.225, 1e-3);
}

TEST(RootNetGeometry, BackProjectionInvertsProjection) {
  const BoxF box{99.7487, 72.1788, 300.7125, 300.7125};
  // Heatmap centre of a 64 map -> box centre in the image.
  auto p = data::back_project(32, 32, 5000, box, 64, 64, 1500, 1400, 320, 196);
  const double xi = box.x + box.w / 2, yi = box.y + box.h / 2;
  EXPECT_NEAR(p[0], (xi - 320) / 1500 * 5000, 1e-9);
  EXPECT_NEAR(p[1], (yi - 196) / 1400 * 5000, 1e-9);
  EXPECT_EQ(p[2], 5000);
  auto img = data::project(p, 1500, 1400, 320, 196);
  EXPECT_NEAR(img[0], xi, 1e-9);
  EXPECT_NEAR(img[1], yi, 1e-9);
}

TEST(RootNetMetrics, MrpeOnHandMadePredictions) {
  std::vector<eval::Point3> gt = {{0, 0, 5000}, {100, -100, 3000}, {0, 0, 4000}};
  std::vector<eval::Point3> pred = {{30, 40, 5000}, {100, -100, 3100}, {0, -60, 4080}};
  auto r = eval::mrpe(pred, gt, {"Walk", "Walk", "Sit"});
  EXPECT_EQ(r.all.count, 3);
  EXPECT_NEAR(r.all.mrpe, (50.0 + 100.0 + 100.0) / 3, 1e-9);
  EXPECT_NEAR(r.all.mrpe_x, 10.0, 1e-9);
  EXPECT_NEAR(r.all.mrpe_y, (40.0 + 60.0) / 3, 1e-9);
  EXPECT_NEAR(r.all.mrpe_z, 60.0, 1e-9);
  ASSERT_EQ(r.per_action.size(), 2u);
  EXPECT_NEAR(r.per_action["Walk"].mrpe, 75.0, 1e-9);
  EXPECT_NEAR(r.per_action["Sit"].mrpe, 100.0, 1e-9);
  EXPECT_THROW(eval::mrpe(pred, {gt[0]}), Error);
}

TEST(RootNetMetrics, ApRootExactMatchingRule) {
  // Image 1: two valid GTs 1 m apart; image 2: one valid GT; image 3: only an invalid GT.
  std::vector<eval::RootGroundTruth> gts = {
      {1, true, {0, 0, 5000}}, {1, true, {1000, 0, 5000}}, {2, true, {0, 0, 3000}},
      {3, false, {0, 0, 4000}}};
  std::vector<eval::RootPrediction> preds = {
      {1, 0.9, {10, 0, 5000}},    // TP (GT 0)
      {1, 0.8, {100, 0, 5000}},   // nearest is GT 0, already matched -> FP (no fallback to GT 1)
      {3, 0.7, {0, 0, 4000}},     // image without valid GT: skipped
      {2, 0.6, {0, 0, 3240}},     // 240 mm < 250 -> TP
      {1, 0.5, {1000, 0, 5300}},  // 300 mm from GT 1 -> FP
  };
  // Recorded: p = [1, 1/2, 2/3, 2/4], r = [1/3, 1/3, 2/3, 2/3] (gt_num = 3).
  const double expected = 0.5 * 0 + (2.0 / 3) * (1.0 / 3) + 0.5 * 0;
  EXPECT_NEAR(eval::ap_root(preds, gts, 250), expected, 1e-12);
  // Sorting is by score: the same predictions in another order give the same AP.
  std::vector<eval::RootPrediction> shuffled = {preds[4], preds[2], preds[0], preds[3], preds[1]};
  EXPECT_NEAR(eval::ap_root(shuffled, gts, 250), expected, 1e-12);
  // With the threshold at 240 the second TP becomes an FP: AP 0.
  EXPECT_NEAR(eval::ap_root(preds, gts, 240), 0.0, 1e-12);
  EXPECT_EQ(eval::ap_root(preds, {}, 250), 0.0);
}

}  // namespace
}  // namespace amptune
