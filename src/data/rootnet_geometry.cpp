#include "data/rootnet_geometry.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace amptune::data {

std::optional<BoxF> process_bbox(const BoxF& box, int image_width, int image_height,
                                 double aspect) {
  const double x1 = std::max(0.0, box.x);
  const double y1 = std::max(0.0, box.y);
  const double x2 = std::min(static_cast<double>(image_width - 1), x1 + std::max(0.0, box.w - 1));
  const double y2 = std::min(static_cast<double>(image_height - 1), y1 + std::max(0.0, box.h - 1));
  if (!(box.w * box.h > 0 && x2 >= x1 && y2 >= y1)) return std::nullopt;
  double w = x2 - x1, h = y2 - y1;
  const double cx = x1 + w / 2.0, cy = y1 + h / 2.0;
  if (w > aspect * h) {
    h = w / aspect;
  } else if (w < aspect * h) {
    w = h * aspect;
  }
  BoxF out;
  out.w = w * 1.25;
  out.h = h * 1.25;
  out.x = cx - out.w / 2.0;
  out.y = cy - out.h / 2.0;
  return out;
}

double k_value(const BoxF& processed, double fx, double fy, double real_x, double real_y) {
  const double area = processed.w * processed.h;
  if (!(area > 0)) throw DataError("k_value needs a box with positive area");
  return std::sqrt(real_x * real_y * fx * fy / area);
}

std::array<double, 2> Affine::apply(double x, double y) const {
  return {m[0][0] * x + m[0][1] * y + m[0][2], m[1][0] * x + m[1][1] * y + m[1][2]};
}

Affine Affine::inverse() const {
  const double det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
  if (det == 0) throw DataError("singular affine transform (a box of zero size)");
  Affine r;
  r.m[0][0] = m[1][1] / det;
  r.m[0][1] = -m[0][1] / det;
  r.m[1][0] = -m[1][0] / det;
  r.m[1][1] = m[0][0] / det;
  r.m[0][2] = -(r.m[0][0] * m[0][2] + r.m[0][1] * m[1][2]);
  r.m[1][2] = -(r.m[1][0] * m[0][2] + r.m[1][1] * m[1][2]);
  return r;
}

Affine patch_transform(double cx, double cy, double src_w, double src_h, int dst_w, int dst_h,
                       double rot_deg, double scale) {
  const double sw = src_w * scale, sh = src_h * scale;
  const double rad = M_PI * rot_deg / 180.0;
  const double sn = std::sin(rad), cs = std::cos(rad);
  // rotate_2d of (0, sh/2) and (sw/2, 0)
  const double down_x = -0.5 * sh * sn, down_y = 0.5 * sh * cs;
  const double right_x = 0.5 * sw * cs, right_y = 0.5 * sw * sn;
  // Linear part A with A * right = (dst_w/2, 0) and A * down = (0, dst_h/2).
  // Source basis S = [right down] (columns); A = D * S^-1 with D = diag(dst_w/2, dst_h/2).
  const double det = right_x * down_y - down_x * right_y;
  if (det == 0) throw DataError("patch_transform of a box with zero size");
  const double inv[2][2] = {{down_y / det, -down_x / det}, {-right_y / det, right_x / det}};
  Affine a;
  const double dw = 0.5 * dst_w, dh = 0.5 * dst_h;
  a.m[0][0] = dw * inv[0][0];
  a.m[0][1] = dw * inv[0][1];
  a.m[1][0] = dh * inv[1][0];
  a.m[1][1] = dh * inv[1][1];
  a.m[0][2] = dw - (a.m[0][0] * cx + a.m[0][1] * cy);
  a.m[1][2] = dh - (a.m[1][0] * cx + a.m[1][1] * cy);
  return a;
}

std::vector<float> warp_affine_bilinear(const Image& src, const Affine& transform, int out_w,
                                        int out_h) {
  const int c = src.channels;
  std::vector<float> out(static_cast<size_t>(out_w) * out_h * c, 0.0f);
  const Affine inv = transform.inverse();
  auto px = [&](int x, int y, int ch) -> float {
    if (x < 0 || y < 0 || x >= src.width || y >= src.height) return 0.0f;  // BORDER_CONSTANT 0
    return src.pixels[(static_cast<size_t>(y) * src.width + x) * c + ch];
  };
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      const auto s = inv.apply(x, y);
      const double fx = std::floor(s[0]), fy = std::floor(s[1]);
      const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
      if (x0 < -1 || y0 < -1 || x0 >= src.width || y0 >= src.height) continue;
      const float ax = static_cast<float>(s[0] - fx), ay = static_cast<float>(s[1] - fy);
      float* o = &out[(static_cast<size_t>(y) * out_w + x) * c];
      for (int ch = 0; ch < c; ++ch) {
        const float top = px(x0, y0, ch) * (1 - ax) + px(x0 + 1, y0, ch) * ax;
        const float bot = px(x0, y0 + 1, ch) * (1 - ax) + px(x0 + 1, y0 + 1, ch) * ax;
        o[ch] = top * (1 - ay) + bot * ay;
      }
    }
  }
  return out;
}

std::array<double, 3> back_project(double x_hm, double y_hm, double z_mm, const BoxF& box,
                                   int out_w, int out_h, double fx, double fy, double cx,
                                   double cy) {
  const double xi = x_hm / out_w * box.w + box.x;
  const double yi = y_hm / out_h * box.h + box.y;
  return {(xi - cx) / fx * z_mm, (yi - cy) / fy * z_mm, z_mm};
}

void normalise_rootnet_patch(const std::vector<float>& hwc, int w, int h, int channels,
                             const std::vector<double>& mean, const std::vector<double>& std,
                             float* out) {
  if (mean.size() < static_cast<size_t>(channels) || std.size() < static_cast<size_t>(channels)) {
    throw ConfigError("data.mean and data.std need one value per image channel (" +
                      std::to_string(channels) + ")");
  }
  const size_t plane = static_cast<size_t>(w) * h;
  for (int c = 0; c < channels; ++c) {
    const float m = static_cast<float>(mean[c]);
    const float s = static_cast<float>(std[c]);
    for (size_t i = 0; i < plane; ++i) out[c * plane + i] = (hwc[i * channels + c] - m) / s;
  }
}

std::array<double, 2> project(const std::array<double, 3>& p, double fx, double fy, double cx,
                              double cy) {
  return {p[0] / p[2] * fx + cx, p[1] / p[2] * fy + cy};
}

}  // namespace amptune::data
