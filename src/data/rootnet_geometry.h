// Torch-free geometry of the 3DMPPE-RootNet pipeline (docs/ROOTNET.md): box processing, the
// k value, the patch affine transform and warp, and test-time back-projection. Units: pixels of
// the original image unless stated; camera space in mm.
#pragma once

#include <array>
#include <optional>

#include "data/image.h"

namespace amptune::data {

// [x, y, w, h] in pixels.
struct BoxF {
  double x = 0, y = 0, w = 0, h = 0;
};

// The original's process_bbox: clip the box to the image (x2 = min(W-1, x1 + max(0, w-1)), ...),
// reject it (nullopt) when w*h <= 0 or it is empty after clipping, make it `aspect` (= input
// width / input height) around its centre, then scale both sides by 1.25.
// [139.41, 102.25, 222.39, 241.57] in 640x392 -> [99.7487, 72.1788, 300.7125, 300.7125].
std::optional<BoxF> process_bbox(const BoxF& box, int image_width, int image_height,
                                 double aspect = 1.0);

// sqrt(real_x * real_y * fx * fy / (w * h)) of a processed box (bbox_real default 2000 x 2000 mm).
double k_value(const BoxF& processed, double fx, double fy, double real_x = 2000.0,
               double real_y = 2000.0);

// A 2x3 affine map: (x, y) -> (m[0][0] x + m[0][1] y + m[0][2], m[1][0] x + ...).
struct Affine {
  double m[2][3] = {{1, 0, 0}, {0, 1, 0}};
  std::array<double, 2> apply(double x, double y) const;
  Affine inverse() const;
};

// The original's gen_trans_from_patch_cv(c_x, c_y, src_w, src_h, dst_w, dst_h, scale = 1, rot):
// maps the box centre to the patch centre, the box's rotated half-height point (rotation `rot_deg`
// degrees, counter-clockwise in image coordinates as the original's rotate_2d) to (dst_w/2, dst_h)
// and its half-width point to (dst_w, dst_h/2).
Affine patch_transform(double cx, double cy, double src_w, double src_h, int dst_w, int dst_h,
                       double rot_deg, double scale = 1.0);

// cv2.warpAffine(src, transform, (out_w, out_h), INTER_LINEAR, BORDER_CONSTANT 0) into float
// HWC pixels (0..255, not rounded); `transform` maps source to patch coordinates.
std::vector<float> warp_affine_bilinear(const Image& src, const Affine& transform, int out_w,
                                        int out_h);

// Test-time back-projection: heatmap (x_hm, y_hm) of an out_w x out_h map inside the processed
// box -> image pixels (x_hm / out_w * box.w + box.x, ...) -> camera mm at depth z_mm:
// X = (x_img - cx) / fx * Z, Y = (y_img - cy) / fy * Z.
std::array<double, 3> back_project(double x_hm, double y_hm, double z_mm, const BoxF& box,
                                   int out_w, int out_h, double fx, double fy, double cx,
                                   double cy);

// The original's input normalisation of a float 0..255 HWC patch into CHW: (p - mean[c]) / std[c]
// with the 0..1 mean/std and no division by 255 (a 255 in R becomes (255 - 0.485) / 0.229 =
// 1111.419). `out` holds channels * h * w floats.
void normalise_rootnet_patch(const std::vector<float>& hwc, int w, int h, int channels,
                             const std::vector<double>& mean, const std::vector<double>& std,
                             float* out);

// Pinhole projection of a camera-space point (mm) to image pixels.
std::array<double, 2> project(const std::array<double, 3>& p_cam, double fx, double fy, double cx,
                              double cy);

}  // namespace amptune::data
