// Readers of the official RootNet annotation formats (see rootnet_data.h for the layouts).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/rootnet_data.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json load_json(const std::string& path, const std::string& what) {
  if (!fs::is_regular_file(path)) {
    throw DataError("missing " + what + " file " + path +
                    " (see docs/ROOTNET.md for the layout, or write a synthetic set with "
                    "`amptune data synth-rootnet`)");
  }
  std::ifstream in(path, std::ios::binary);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw DataError("malformed JSON in " + path + " (" + what + "): " + e.what());
  }
}

// Typed access with errors naming the file and the field.
const json& field(const json& obj, const char* key, const std::string& file) {
  if (!obj.is_object() || !obj.contains(key)) {
    throw DataError(file + ": expected field '" + key + "' in " + obj.dump().substr(0, 120));
  }
  return obj.at(key);
}

double num(const json& v, const std::string& file, const char* what) {
  if (v.is_number()) return v.get<double>();
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  throw DataError(file + ": expected a number for " + what + ", got " + v.dump().substr(0, 80));
}

std::vector<double> nums(const json& v, size_t n, const std::string& file, const char* what) {
  if (!v.is_array() || (n > 0 && v.size() != n)) {
    throw DataError(file + ": expected " + (n ? std::to_string(n) + " numbers" : "a list") +
                    " for " + what + ", got " + v.dump().substr(0, 80));
  }
  std::vector<double> out;
  for (auto& x : v) out.push_back(num(x, file, what));
  return out;
}

// An array of n [3] / [2] rows.
std::vector<std::vector<double>> rows(const json& v, size_t cols, const std::string& file,
                                      const char* what) {
  if (!v.is_array()) throw DataError(file + ": expected a list of points for " + what);
  std::vector<std::vector<double>> out;
  for (auto& r : v) {
    auto row = nums(r, 0, file, what);
    if (row.size() < cols) {
      throw DataError(file + ": expected points of " + std::to_string(cols) + " values for " +
                      what);
    }
    out.push_back(row);
  }
  return out;
}

const json& array_field(const json& doc, const char* key, const std::string& file) {
  const json& v = field(doc, key, file);
  if (!v.is_array()) throw DataError(file + ": field '" + std::string(key) + "' must be a list");
  return v;
}

BoxF box_of(const json& v, const std::string& file) {
  auto b = nums(v, 4, file, "bbox");
  return BoxF{b[0], b[1], b[2], b[3]};
}

struct ImageInfo {
  std::string file_name;
  int width = 0, height = 0;
  const json* raw = nullptr;
};

std::unordered_map<int64_t, ImageInfo> index_images(const json& doc, const std::string& file) {
  std::unordered_map<int64_t, ImageInfo> out;
  for (auto& img : array_field(doc, "images", file)) {
    ImageInfo info;
    const int64_t id = static_cast<int64_t>(num(field(img, "id", file), file, "images.id"));
    const json& name = field(img, "file_name", file);
    if (!name.is_string()) throw DataError(file + ": images.file_name must be a string");
    info.file_name = name.get<std::string>();
    info.width = static_cast<int>(num(field(img, "width", file), file, "images.width"));
    info.height = static_cast<int>(num(field(img, "height", file), file, "images.height"));
    info.raw = &img;
    out[id] = info;
  }
  return out;
}

const ImageInfo& image_of(const std::unordered_map<int64_t, ImageInfo>& images, int64_t id,
                          const std::string& file) {
  auto it = images.find(id);
  if (it == images.end()) {
    throw DataError(file + ": annotation refers to image_id " + std::to_string(id) +
                    " which is not in 'images'");
  }
  return it->second;
}

}  // namespace

const std::vector<std::string>& h36m_action_names() {
  static const std::vector<std::string> names = {
      "Directions", "Discussion", "Eating",  "Greeting", "Phoning",  "Posing",  "Purchases",
      "Sitting",    "SittingDown", "Smoking", "Photo",   "Waiting", "Walking", "WalkDog",
      "WalkTogether"};
  return names;
}

std::vector<RootEntry> read_h36m(const std::string& root, int protocol, bool train, int every) {
  std::vector<int> subjects;
  if (protocol == 1) {
    subjects = train ? std::vector<int>{1, 5, 6, 7, 8, 9} : std::vector<int>{11};
  } else if (protocol == 2) {
    subjects = train ? std::vector<int>{1, 5, 6, 7, 8} : std::vector<int>{9, 11};
  } else {
    throw ConfigError("rootnet.h36m_protocol must be 1 or 2, got " + std::to_string(protocol));
  }
  if (every < 1) throw ConfigError("Human3.6M frame sampling must be >= 1");
  std::vector<RootEntry> out;
  const fs::path ann = fs::path(root) / "annotations";
  for (int s : subjects) {
    const std::string stem = (ann / ("Human36M_subject" + std::to_string(s))).string();
    const std::string data_file = stem + "_data.json", cam_file = stem + "_camera.json",
                      joint_file = stem + "_joint_3d.json";
    const json doc = load_json(data_file, "Human3.6M data (COCO-like images/annotations)");
    const json cams = load_json(cam_file, "Human3.6M camera ({cam_idx: {R, t, f, c}})");
    const json joints =
        load_json(joint_file, "Human3.6M joint_3d ({action: {subaction: {frame: 17x3}}})");
    auto images = index_images(doc, data_file);
    for (auto& a : array_field(doc, "annotations", data_file)) {
      const int64_t image_id =
          static_cast<int64_t>(num(field(a, "image_id", data_file), data_file, "image_id"));
      const ImageInfo& img = image_of(images, image_id, data_file);
      const json& raw = *img.raw;
      const int subject = static_cast<int>(num(field(raw, "subject", data_file), data_file, "subject"));
      const int frame = static_cast<int>(num(field(raw, "frame_idx", data_file), data_file, "frame_idx"));
      if (std::find(subjects.begin(), subjects.end(), subject) == subjects.end()) continue;
      if (frame % every != 0) continue;
      const int cam = static_cast<int>(num(field(raw, "cam_idx", data_file), data_file, "cam_idx"));
      const int action = static_cast<int>(num(field(raw, "action_idx", data_file), data_file, "action_idx"));
      const int sub = static_cast<int>(num(field(raw, "subaction_idx", data_file), data_file, "subaction_idx"));
      const json& cp = field(cams, std::to_string(cam).c_str(), cam_file);
      auto R = rows(field(cp, "R", cam_file), 3, cam_file, "R");
      auto t = nums(field(cp, "t", cam_file), 3, cam_file, "t");
      auto f = nums(field(cp, "f", cam_file), 2, cam_file, "f");
      auto c = nums(field(cp, "c", cam_file), 2, cam_file, "c");
      if (R.size() != 3) throw DataError(cam_file + ": R must be 3x3");
      const json& jf = field(field(field(joints, std::to_string(action).c_str(), joint_file),
                                   std::to_string(sub).c_str(), joint_file),
                             std::to_string(frame).c_str(), joint_file);
      auto world = rows(jf, 3, joint_file, "joints");
      if (world.empty()) throw DataError(joint_file + ": empty joint list");
      RootEntry e;
      for (int i = 0; i < 3; ++i) {
        e.root_cam[i] = R[i][0] * world[0][0] + R[i][1] * world[0][1] + R[i][2] * world[0][2] + t[i];
      }
      e.fx = f[0];
      e.fy = f[1];
      e.cx = c[0];
      e.cy = c[1];
      e.root_img = project(e.root_cam, e.fx, e.fy, e.cx, e.cy);
      if (a.contains("keypoints_vis")) {
        const json& kv = a.at("keypoints_vis");
        if (kv.is_array() && !kv.empty()) e.root_vis = num(kv.at(0), data_file, "keypoints_vis");
      }
      auto box = process_bbox(box_of(field(a, "bbox", data_file), data_file), img.width, img.height);
      if (!box) continue;
      e.bbox = *box;
      e.image_path = (fs::path(root) / "images" / img.file_name).string();
      e.image_id = image_id;
      e.width = img.width;
      e.height = img.height;
      e.action = action - 2;
      out.push_back(e);
    }
  }
  return out;
}

std::vector<RootEntry> read_muco(const std::string& root) {
  const std::string file = (fs::path(root) / "data" / "MuCo-3DHP.json").string();
  const json doc = load_json(file, "MuCo-3DHP (images {id, file_name, width, height, f, c}, "
                                   "annotations {image_id, keypoints_cam, keypoints_img, bbox})");
  auto images = index_images(doc, file);
  std::map<int64_t, std::vector<const json*>> by_image;
  for (auto& a : array_field(doc, "annotations", file)) {
    by_image[static_cast<int64_t>(num(field(a, "image_id", file), file, "image_id"))].push_back(&a);
  }
  constexpr size_t kRoot = 14;
  std::vector<RootEntry> out;
  for (auto& [image_id, anns] : by_image) {
    const ImageInfo& img = image_of(images, image_id, file);
    auto f = nums(field(*img.raw, "f", file), 2, file, "images.f");
    auto c = nums(field(*img.raw, "c", file), 2, file, "images.c");
    std::vector<std::array<double, 3>> roots;
    std::vector<std::array<double, 2>> roots_img;
    for (auto* a : anns) {
      auto cam = rows(field(*a, "keypoints_cam", file), 3, file, "keypoints_cam");
      auto im = rows(field(*a, "keypoints_img", file), 2, file, "keypoints_img");
      if (cam.size() <= kRoot || im.size() <= kRoot) {
        throw DataError(file + ": keypoints need 21 joints (root index 14)");
      }
      roots.push_back({cam[kRoot][0], cam[kRoot][1], cam[kRoot][2]});
      roots_img.push_back({im[kRoot][0], im[kRoot][1]});
    }
    size_t closest = 0;
    for (size_t i = 1; i < roots.size(); ++i) {
      if (roots[i][2] < roots[closest][2]) closest = i;
    }
    std::vector<size_t> picked = {closest};
    for (size_t i = 0; i < roots.size(); ++i) {
      if (i == closest) continue;
      bool ok = true;
      for (size_t j = 0; j < roots.size(); ++j) {
        if (i == j) continue;
        const double dx = roots[i][0] - roots[j][0], dy = roots[i][1] - roots[j][1],
                     dz = roots[i][2] - roots[j][2];
        if (std::sqrt(dx * dx + dy * dy) < 500 || std::sqrt(dx * dx + dy * dy + dz * dz) < 500) {
          ok = false;
        }
      }
      if (ok) picked.push_back(i);
    }
    for (size_t p : picked) {
      auto box = process_bbox(box_of(field(*anns[p], "bbox", file), file), img.width, img.height);
      if (!box) continue;
      RootEntry e;
      e.image_path = (fs::path(root) / "data" / img.file_name).string();
      e.image_id = image_id;
      e.width = img.width;
      e.height = img.height;
      e.bbox = *box;
      e.root_cam = roots[p];
      e.root_img = roots_img[p];
      e.fx = f[0];
      e.fy = f[1];
      e.cx = c[0];
      e.cy = c[1];
      out.push_back(e);
    }
  }
  return out;
}

std::vector<RootEntry> read_mupots(const std::string& root, const std::string& bbox_file) {
  const std::string file = (fs::path(root) / "data" / "MuPoTS-3D.json").string();
  const json doc = load_json(file, "MuPoTS-3D (images {id, file_name, width, height, intrinsic}, "
                                   "annotations {image_id, is_valid, keypoints_cam, bbox})");
  auto images = index_images(doc, file);
  const fs::path img_dir = fs::path(root) / "data" / "MultiPersonTestSet";
  constexpr size_t kRoot = 14;
  auto base = [&](int64_t image_id) {
    const ImageInfo& img = image_of(images, image_id, file);
    auto k = nums(field(*img.raw, "intrinsic", file), 4, file, "images.intrinsic");
    RootEntry e;
    e.image_path = (img_dir / img.file_name).string();
    e.image_id = image_id;
    e.width = img.width;
    e.height = img.height;
    e.fx = k[0];
    e.fy = k[1];
    e.cx = k[2];
    e.cy = k[3];
    return e;
  };
  std::vector<RootEntry> out;
  if (!bbox_file.empty()) {
    const json dets = load_json(bbox_file, "MuPoTS detector boxes ([{image_id, bbox, score}])");
    if (!dets.is_array()) throw DataError(bbox_file + ": expected a list of {image_id, bbox, score}");
    for (auto& d : dets) {
      RootEntry e = base(static_cast<int64_t>(num(field(d, "image_id", bbox_file), bbox_file, "image_id")));
      auto box = process_bbox(box_of(field(d, "bbox", bbox_file), bbox_file), e.width, e.height);
      if (!box) continue;
      e.bbox = *box;
      e.score = num(field(d, "score", bbox_file), bbox_file, "score");
      e.root_vis = 0;
      out.push_back(e);
    }
    return out;
  }
  for (auto& a : array_field(doc, "annotations", file)) {
    // People marked is_valid 0 are neither evaluated nor counted (the original's MuPoTS loader
    // skips them; AP_root's gt_num counts valid people only).
    if (num(field(a, "is_valid", file), file, "is_valid") == 0) continue;
    RootEntry e = base(static_cast<int64_t>(num(field(a, "image_id", file), file, "image_id")));
    auto cam = rows(field(a, "keypoints_cam", file), 3, file, "keypoints_cam");
    auto im = rows(field(a, "keypoints_img", file), 2, file, "keypoints_img");
    if (cam.size() <= kRoot || im.size() <= kRoot) {
      throw DataError(file + ": keypoints need 21 joints (root index 14)");
    }
    auto box = process_bbox(box_of(field(a, "bbox", file), file), e.width, e.height);
    if (!box) continue;
    e.bbox = *box;
    e.root_cam = {cam[kRoot][0], cam[kRoot][1], cam[kRoot][2]};
    e.root_img = {im[kRoot][0], im[kRoot][1]};
    if (a.contains("keypoints_vis") && a.at("keypoints_vis").is_array() &&
        a.at("keypoints_vis").size() > kRoot) {
      e.root_vis = num(a.at("keypoints_vis").at(kRoot), file, "keypoints_vis");
    }
    e.valid = true;
    out.push_back(e);
  }
  return out;
}

std::vector<RootEntry> read_mpii(const std::string& root) {
  const std::string file = (fs::path(root) / "annotations" / "train.json").string();
  const json doc = load_json(file, "MPII (COCO-style images / annotations with 16 keypoints)");
  auto images = index_images(doc, file);
  constexpr size_t kPelvis = 6;
  std::vector<RootEntry> out;
  for (auto& a : array_field(doc, "annotations", file)) {
    if (a.contains("num_keypoints") && num(a.at("num_keypoints"), file, "num_keypoints") == 0) continue;
    const int64_t image_id = static_cast<int64_t>(num(field(a, "image_id", file), file, "image_id"));
    const ImageInfo& img = image_of(images, image_id, file);
    auto kp = nums(field(a, "keypoints", file), 0, file, "keypoints");
    if (kp.size() < 3 * (kPelvis + 1)) throw DataError(file + ": keypoints need 16 x [x, y, v]");
    auto box = process_bbox(box_of(field(a, "bbox", file), file), img.width, img.height);
    if (!box) continue;
    RootEntry e;
    e.image_path = (fs::path(root) / "images" / img.file_name).string();
    e.image_id = image_id;
    e.width = img.width;
    e.height = img.height;
    e.bbox = *box;
    e.root_img = {kp[3 * kPelvis], kp[3 * kPelvis + 1]};
    e.root_vis = kp[3 * kPelvis + 2] > 0 ? 1.0 : 0.0;
    e.have_depth = false;
    e.fx = e.fy = 1500;
    e.cx = img.width / 2.0;
    e.cy = img.height / 2.0;
    // pixel2cam at Z = 0, as the original (the depth target is masked by have_depth 0).
    e.root_cam = {0, 0, 0};
    out.push_back(e);
  }
  return out;
}

}  // namespace amptune::data
