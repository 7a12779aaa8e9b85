// Synthetic RootNet data in the official formats: articulated 3D stick bodies drawn through
// pinhole cameras. Everything random comes from one mt19937_64 seeded by the seed, drawn in a
// fixed order, so a seed gives byte-identical files.
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/image.h"
#include "data/rootnet_data.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using V3 = std::array<double, 3>;
using Rng = std::mt19937_64;

V3 add(V3 a, V3 b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }
V3 scale(V3 a, double s) { return {a[0] * s, a[1] * s, a[2] * s}; }
// A limb of length `len` hanging down (+y) rotated by `fwd` (about x, towards -z) and `side`
// (about z) radians.
V3 limb(double len, double fwd, double side) {
  return {len * std::sin(side), len * std::cos(side) * std::cos(fwd), -len * std::cos(side) * std::sin(fwd)};
}

// Named joints of one body in camera space (mm, y down); "pelvis" is the root.
using Body = std::map<std::string, V3>;

Body make_body(Rng& rng, const V3& root, double height) {
  const double h = height;
  Body b;  // body frame: pelvis at origin, y down, facing -z
  b["pelvis"] = {0, 0, 0};
  const double hip = 0.055 * h, shoulder = 0.11 * h, thigh = 0.245 * h, shin = 0.245 * h;
  const double upper = 0.17 * h, fore = 0.15 * h;
  for (int s : {-1, 1}) {  // -1 right, +1 left (the person's)
    const std::string side = s < 0 ? "r" : "l";
    V3 hp = {s * hip, 0, 0};
    const double tf = uniform_real(rng, -0.6, 0.9), ts = s * uniform_real(rng, 0.0, 0.35);
    V3 kn = add(hp, limb(thigh, tf, ts));
    V3 an = add(kn, limb(shin, tf - uniform_real(rng, 0.0, 1.2), ts));
    b[side + "_hip"] = hp;
    b[side + "_knee"] = kn;
    b[side + "_ankle"] = an;
    b[side + "_toe"] = add(an, {0, 0.02 * h, -0.08 * h});
    V3 sh = {s * shoulder, -0.30 * h, 0};
    const double af = uniform_real(rng, -1.2, 1.8), as = s * uniform_real(rng, 0.0, 1.6);
    V3 el = add(sh, limb(upper, af, as));
    V3 wr = add(el, limb(fore, af + uniform_real(rng, 0.0, 1.4), as));
    b[side + "_shoulder"] = sh;
    b[side + "_elbow"] = el;
    b[side + "_wrist"] = wr;
    b[side + "_hand"] = add(wr, scale(add(wr, scale(el, -1)), 0.35));
  }
  b["spine"] = {0, -0.15 * h, 0};
  b["thorax"] = {0, -0.30 * h, 0};
  b["neck"] = {0, -0.34 * h, 0};
  b["nose"] = {0, -0.38 * h, -0.05 * h};
  b["head"] = {0, -0.40 * h, 0};
  b["head_top"] = {0, -0.47 * h, 0};
  // Whole-body lean and yaw, then translate to the root.
  const double yaw = uniform_real(rng, -M_PI, M_PI), lean = uniform_real(rng, -0.15, 0.15);
  const double cy = std::cos(yaw), sy = std::sin(yaw), cl = std::cos(lean), sl = std::sin(lean);
  for (auto& [name, p] : b) {
    V3 q = {p[0] * cl - p[1] * sl, p[0] * sl + p[1] * cl, p[2]};  // lean about z
    q = {q[0] * cy + q[2] * sy, q[1], -q[0] * sy + q[2] * cy};    // yaw about y
    p = add(q, root);
  }
  return b;
}

const std::vector<std::string>& joint_order(const std::string& format) {
  static const std::vector<std::string> h36m = {
      "pelvis", "r_hip", "r_knee", "r_ankle", "l_hip", "l_knee", "l_ankle", "spine", "thorax",
      "nose", "head", "l_shoulder", "l_elbow", "l_wrist", "r_shoulder", "r_elbow", "r_wrist"};
  static const std::vector<std::string> mpi3d = {
      "head_top", "thorax", "r_shoulder", "r_elbow", "r_wrist", "l_shoulder", "l_elbow",
      "l_wrist", "r_hip", "r_knee", "r_ankle", "l_hip", "l_knee", "l_ankle", "pelvis", "spine",
      "head", "r_hand", "l_hand", "r_toe", "l_toe"};
  static const std::vector<std::string> mpii = {
      "r_ankle", "r_knee", "r_hip", "l_hip", "l_knee", "l_ankle", "pelvis", "thorax", "neck",
      "head_top", "r_wrist", "r_elbow", "r_shoulder", "l_shoulder", "l_elbow", "l_wrist"};
  if (format == "h36m") return h36m;
  if (format == "mpii") return mpii;
  return mpi3d;
}

struct Camera {
  double fx, fy, cx, cy;
};

Camera make_camera(Rng& rng, int w, int h) {
  Camera c;
  c.fx = uniform_real(rng, 0.9, 1.3) * w;
  c.fy = c.fx * uniform_real(rng, 0.98, 1.02);
  c.cx = w / 2.0 + uniform_real(rng, -6, 6);
  c.cy = h / 2.0 + uniform_real(rng, -6, 6);
  return c;
}

std::array<double, 2> proj(const V3& p, const Camera& c) {
  return {p[0] / p[2] * c.fx + c.cx, p[1] / p[2] * c.fy + c.cy};
}

// A root position whose projection lies inside the central part of the image.
V3 place_root(Rng& rng, const Camera& c, int w, int h) {
  const double z = uniform_real(rng, 2000, 7500);
  const double u = uniform_real(rng, 0.25 * w, 0.75 * w), v = uniform_real(rng, 0.35 * h, 0.7 * h);
  return {(u - c.cx) / c.fx * z, (v - c.cy) / c.fy * z, z};
}

Image background(Rng& rng, int w, int h) {
  Image img;
  img.width = w;
  img.height = h;
  img.channels = 3;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  double a[3], b[3];
  for (int c = 0; c < 3; ++c) {
    a[c] = uniform_real(rng, 40, 200);
    b[c] = uniform_real(rng, 40, 200);
  }
  for (int y = 0; y < h; ++y) {
    const double t = static_cast<double>(y) / std::max(1, h - 1);
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        img.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>(a[c] * (1 - t) + b[c] * t);
      }
    }
  }
  const int clutter = static_cast<int>(uniform_index(rng, 4));
  for (int k = 0; k < clutter; ++k) {
    const int x0 = static_cast<int>(uniform_index(rng, w)), y0 = static_cast<int>(uniform_index(rng, h));
    const int rw = 5 + static_cast<int>(uniform_index(rng, w / 4 + 1));
    const int rh = 5 + static_cast<int>(uniform_index(rng, h / 4 + 1));
    uint8_t col[3];
    for (auto& v : col) v = static_cast<uint8_t>(uniform_index(rng, 256));
    for (int y = y0; y < std::min(h, y0 + rh); ++y) {
      for (int x = x0; x < std::min(w, x0 + rw); ++x) {
        for (int c = 0; c < 3; ++c) img.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] = col[c];
      }
    }
  }
  return img;
}

void draw_segment(Image& img, std::array<double, 2> a, std::array<double, 2> b, double r,
                  const uint8_t col[3]) {
  const int x0 = std::max(0, static_cast<int>(std::floor(std::min(a[0], b[0]) - r)));
  const int x1 = std::min(img.width - 1, static_cast<int>(std::ceil(std::max(a[0], b[0]) + r)));
  const int y0 = std::max(0, static_cast<int>(std::floor(std::min(a[1], b[1]) - r)));
  const int y1 = std::min(img.height - 1, static_cast<int>(std::ceil(std::max(a[1], b[1]) + r)));
  const double dx = b[0] - a[0], dy = b[1] - a[1], len2 = dx * dx + dy * dy;
  for (int y = y0; y <= y1; ++y) {
    for (int x = x0; x <= x1; ++x) {
      double t = len2 > 0 ? ((x - a[0]) * dx + (y - a[1]) * dy) / len2 : 0;
      t = std::clamp(t, 0.0, 1.0);
      const double ex = x - (a[0] + t * dx), ey = y - (a[1] + t * dy);
      if (ex * ex + ey * ey <= r * r) {
        for (int c = 0; c < 3; ++c) img.pixels[(static_cast<size_t>(y) * img.width + x) * 3 + c] = col[c];
      }
    }
  }
}

void draw_body(Rng& rng, Image& img, const Body& b, const Camera& cam) {
  uint8_t skin[3], shirt[3], trousers[3];
  for (int c = 0; c < 3; ++c) {
    shirt[c] = static_cast<uint8_t>(uniform_index(rng, 256));
    trousers[c] = static_cast<uint8_t>(uniform_index(rng, 256));
  }
  const double tone = uniform_real(rng, 0.4, 1.0);
  skin[0] = static_cast<uint8_t>(230 * tone);
  skin[1] = static_cast<uint8_t>(180 * tone);
  skin[2] = static_cast<uint8_t>(150 * tone);
  const double z = b.at("pelvis")[2];
  auto px = [&](double mm) { return std::max(0.8, mm * cam.fx / z); };
  auto seg = [&](const char* a, const char* c, double mm, const uint8_t col[3]) {
    draw_segment(img, proj(b.at(a), cam), proj(b.at(c), cam), px(mm), col);
  };
  seg("pelvis", "thorax", 150, shirt);
  seg("l_hip", "r_hip", 80, trousers);
  for (const char* s : {"l_", "r_"}) {
    const std::string p(s);
    seg((p + "hip").c_str(), (p + "knee").c_str(), 65, trousers);
    seg((p + "knee").c_str(), (p + "ankle").c_str(), 55, trousers);
    seg((p + "ankle").c_str(), (p + "toe").c_str(), 40, trousers);
    seg("thorax", (p + "shoulder").c_str(), 60, shirt);
    seg((p + "shoulder").c_str(), (p + "elbow").c_str(), 50, shirt);
    seg((p + "elbow").c_str(), (p + "wrist").c_str(), 40, skin);
  }
  seg("thorax", "neck", 50, skin);
  seg("head", "head", 110, skin);
}

struct Person {
  Body body;
  double height;
};

std::vector<double> flat2(const Body& b, const std::vector<std::string>& order, const Camera& c,
                          std::vector<std::vector<double>>* img_rows,
                          std::vector<std::vector<double>>* cam_rows) {
  std::vector<double> box = {1e9, 1e9, -1e9, -1e9};
  for (auto& name : order) {
    const V3& p = b.at(name);
    auto q = proj(p, c);
    if (img_rows) img_rows->push_back({q[0], q[1]});
    if (cam_rows) cam_rows->push_back({p[0], p[1], p[2]});
  }
  for (auto& [name, p] : b) {
    auto q = proj(p, c);
    box[0] = std::min(box[0], q[0]);
    box[1] = std::min(box[1], q[1]);
    box[2] = std::max(box[2], q[0]);
    box[3] = std::max(box[3], q[1]);
  }
  return box;
}

// [x, y, w, h] of the projected body with a margin for the limb thickness.
json bbox_json(const std::vector<double>& mm, double margin) {
  return json::array({mm[0] - margin, mm[1] - margin, mm[2] - mm[0] + 2 * margin,
                      mm[3] - mm[1] + 2 * margin});
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw DataError("cannot write " + path.string());
}

void write_json(const fs::path& path, const json& j, SynthStats& stats) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << j.dump();
  if (!out) throw DataError("cannot write " + path.string());
  stats.files.push_back(path.string());
}

// Draws n people (far first) into a new image; returns them.
std::vector<Person> compose(Rng& rng, Image& img, const Camera& cam, int n) {
  std::vector<Person> people;
  for (int i = 0; i < n; ++i) {
    const double height = uniform_real(rng, 1500, 1900);
    V3 root = place_root(rng, cam, img.width, img.height);
    people.push_back({make_body(rng, root, height), height});
  }
  std::vector<size_t> order(people.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return people[a].body.at("pelvis")[2] > people[b].body.at("pelvis")[2];
  });
  for (size_t i : order) draw_body(rng, img, people[i].body, cam);
  return people;
}

double margin_px(const Person& p, const Camera& c) { return 80.0 * c.fx / p.body.at("pelvis")[2]; }

SynthStats synth_h36m(const SynthOptions& o, Rng& rng) {
  SynthStats stats;
  const fs::path root(o.out);
  const auto& order = joint_order("h36m");
  int image_id = 0, ann_id = 0;
  for (int subject : {1, 5, 6, 7, 8, 9, 11}) {
    const int step = subject >= 9 ? 64 : 5;
    json cams = json::object();
    std::vector<Camera> intr;
    std::vector<std::array<double, 9>> rots;
    std::vector<V3> trans;
    for (int k = 1; k <= 4; ++k) {
      Camera c = make_camera(rng, o.width, o.height);
      const double a = uniform_real(rng, -M_PI, M_PI);
      std::array<double, 9> R = {std::cos(a), 0, std::sin(a), 0, 1, 0, -std::sin(a), 0, std::cos(a)};
      V3 t = {uniform_real(rng, -500, 500), uniform_real(rng, -200, 200), uniform_real(rng, 4000, 6000)};
      cams[std::to_string(k)] = {{"R", {{R[0], R[1], R[2]}, {R[3], R[4], R[5]}, {R[6], R[7], R[8]}}},
                                 {"t", {t[0], t[1], t[2]}},
                                 {"f", {c.fx, c.fy}},
                                 {"c", {c.cx, c.cy}}};
      intr.push_back(c);
      rots.push_back(R);
      trans.push_back(t);
    }
    json data = {{"images", json::array()}, {"annotations", json::array()}};
    json joints = json::object();
    for (int i = 0; i < o.images; ++i) {
      const int action = 2 + static_cast<int>(uniform_index(rng, 15));
      const int sub = 1 + static_cast<int>(uniform_index(rng, 2));
      const int cam_idx = 1 + static_cast<int>(uniform_index(rng, 4));
      // Every 10th image has a frame index the protocol's sampling drops.
      const int frame = i * step + (i % 10 == 9 ? 1 : 0);
      const Camera& c = intr[cam_idx - 1];
      Image img = background(rng, o.width, o.height);
      auto people = compose(rng, img, c, 1);
      std::vector<std::vector<double>> cam_rows, img_rows;
      auto mm = flat2(people[0].body, order, c, &img_rows, &cam_rows);
      // world = R^T (cam - t)
      const auto& R = rots[cam_idx - 1];
      const V3& t = trans[cam_idx - 1];
      json world = json::array();
      for (auto& p : cam_rows) {
        const double d[3] = {p[0] - t[0], p[1] - t[1], p[2] - t[2]};
        world.push_back({R[0] * d[0] + R[3] * d[1] + R[6] * d[2], R[1] * d[0] + R[4] * d[1] + R[7] * d[2],
                         R[2] * d[0] + R[5] * d[1] + R[8] * d[2]});
      }
      joints[std::to_string(action)][std::to_string(sub)][std::to_string(frame)] = world;
      char name[128];
      std::snprintf(name, sizeof name, "s_%02d_act_%02d_subact_%02d_ca_%02d/s_%02d_act_%02d_subact_%02d_ca_%02d_%06d.jpg",
                    subject, action, sub, cam_idx, subject, action, sub, cam_idx, frame + 1);
      write_bytes(root / "images" / name, encode_jpeg(img, 90));
      data["images"].push_back({{"id", image_id}, {"file_name", name}, {"width", o.width},
                                {"height", o.height}, {"subject", subject}, {"action_idx", action},
                                {"subaction_idx", sub}, {"frame_idx", frame}, {"cam_idx", cam_idx}});
      data["annotations"].push_back({{"id", ann_id++}, {"image_id", image_id},
                                     {"bbox", bbox_json(mm, margin_px(people[0], c))},
                                     {"keypoints_vis", std::vector<bool>(17, true)}});
      ++image_id;
      ++stats.images;
      ++stats.people;
    }
    const fs::path stem = root / "annotations" / ("Human36M_subject" + std::to_string(subject));
    write_json(stem.string() + "_data.json", data, stats);
    write_json(stem.string() + "_camera.json", cams, stats);
    write_json(stem.string() + "_joint_3d.json", joints, stats);
  }
  return stats;
}

SynthStats synth_multi(const SynthOptions& o, Rng& rng, bool test) {
  SynthStats stats;
  const fs::path root(o.out);
  const auto& order = joint_order("muco");
  json doc = {{"images", json::array()}, {"annotations", json::array()}};
  int ann_id = 0;
  for (int i = 0; i < o.images; ++i) {
    Camera c = make_camera(rng, o.width, o.height);
    Image img = background(rng, o.width, o.height);
    const int n = 1 + static_cast<int>(uniform_index(rng, 3));
    auto people = compose(rng, img, c, n);
    char name[64];
    if (test) {
      std::snprintf(name, sizeof name, "TS%d/img_%06d.jpg", 1 + i % 20, i);
      write_bytes(root / "data" / "MultiPersonTestSet" / name, encode_jpeg(img, 90));
      doc["images"].push_back({{"id", i}, {"file_name", name}, {"width", o.width},
                               {"height", o.height}, {"intrinsic", {c.fx, c.fy, c.cx, c.cy}}});
    } else {
      std::snprintf(name, sizeof name, "augmented_set/syn_%06d.jpg", i);
      write_bytes(root / "data" / name, encode_jpeg(img, 90));
      doc["images"].push_back({{"id", i}, {"file_name", name}, {"width", o.width},
                               {"height", o.height}, {"f", {c.fx, c.fy}}, {"c", {c.cx, c.cy}}});
    }
    for (auto& p : people) {
      std::vector<std::vector<double>> cam_rows, img_rows;
      auto mm = flat2(p.body, order, c, &img_rows, &cam_rows);
      for (auto& row : cam_rows) {  // --unit m: the same scene, its 3D numbers in metres
        for (double& v : row) v /= o.unit_mm;
      }
      json a = {{"id", ann_id++}, {"image_id", i}, {"keypoints_cam", cam_rows},
                {"keypoints_img", img_rows}, {"keypoints_vis", std::vector<bool>(21, true)},
                {"bbox", bbox_json(mm, margin_px(p, c))}};
      if (test) {
        // About one person in ten is invalid, and always the third one written, so that every
        // set of more than two people exercises the is_valid rule.
        const bool valid = uniform01(rng) < 0.9 && ann_id != 3;
        a["is_valid"] = valid ? 1 : 0;
        stats.invalid_people += valid ? 0 : 1;
      }
      doc["annotations"].push_back(a);
      ++stats.people;
    }
    ++stats.images;
  }
  write_json(test ? root / "data" / "MuPoTS-3D.json" : root / "data" / "MuCo-3DHP.json", doc, stats);
  return stats;
}

SynthStats synth_mpii(const SynthOptions& o, Rng& rng) {
  SynthStats stats;
  const fs::path root(o.out);
  const auto& order = joint_order("mpii");
  json doc = {{"images", json::array()}, {"annotations", json::array()}};
  for (int i = 0; i < o.images; ++i) {
    Camera c = make_camera(rng, o.width, o.height);
    Image img = background(rng, o.width, o.height);
    auto people = compose(rng, img, c, 1);
    char name[32];
    std::snprintf(name, sizeof name, "%09d.jpg", i);
    write_bytes(root / "images" / name, encode_jpeg(img, 90));
    std::vector<std::vector<double>> img_rows;
    auto mm = flat2(people[0].body, order, c, &img_rows, nullptr);
    json kp = json::array();
    for (auto& r : img_rows) {
      kp.push_back(r[0]);
      kp.push_back(r[1]);
      kp.push_back(2);
    }
    doc["images"].push_back({{"id", i}, {"file_name", name}, {"width", o.width}, {"height", o.height}});
    doc["annotations"].push_back({{"id", i}, {"image_id", i}, {"keypoints", kp},
                                  {"num_keypoints", 16},
                                  {"bbox", bbox_json(mm, margin_px(people[0], c))}});
    ++stats.images;
    ++stats.people;
  }
  write_json(root / "annotations" / "train.json", doc, stats);
  return stats;
}

}  // namespace

SynthStats synth_rootnet(const SynthOptions& o) {
  if (o.images < 1) throw DataError("synth-rootnet needs --images >= 1");
  if (o.width < 32 || o.height < 32) throw DataError("synth-rootnet needs an image of at least 32x32");
  if (o.unit_mm != 1.0 && o.format != "muco" && o.format != "mupots") {
    throw DataError("synth-rootnet --unit m is for --format muco and mupots (h36m and mpii are "
                    "written in mm)");
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) throw DataError("cannot create " + o.out + ": " + ec.message());
  Rng rng(o.seed);
  if (o.format == "h36m") return synth_h36m(o, rng);
  if (o.format == "muco") return synth_multi(o, rng, false);
  if (o.format == "mupots") return synth_multi(o, rng, true);
  if (o.format == "mpii") return synth_mpii(o, rng);
  throw DataError("synth-rootnet --format must be h36m, muco, mupots or mpii, got '" + o.format + "'");
}

}  // namespace amptune::data
