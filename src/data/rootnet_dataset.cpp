// The RootNet torch data set: the original's per-sample pipeline (patch warp, augmentation,
// targets in heatmap pixels, 0..255 normalisation) over the records of the readers.
#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "core/error.h"
#include "core/log.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/image.h"
#include "data/rootnet_data.h"

namespace amptune::data {
namespace {

double normal01(Rng& rng) {
  const double u1 = std::max(uniform01(rng), 1e-12), u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

struct PipelineOptions {
  int input_size = 256;
  double real_x = 2000, real_y = 2000;
  std::vector<double> mean, std;
  bool augment = true;
  double rot_factor = 30, rot_prob = 0.6, flip_prob = 0.5, color_factor = 0.2;
};

class RootNetDataset : public Dataset {
 public:
  RootNetDataset(std::vector<std::vector<RootEntry>> groups, std::vector<std::string> names,
                 PipelineOptions options, bool train)
      : groups_(std::move(groups)), names_(std::move(names)), o_(std::move(options)) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].empty()) {
        throw DataError("RootNet set " + names_[g] + " holds no usable person crop");
      }
      max_len_ = std::max(max_len_, groups_[g].size());
    }
    // Evaluation: one set, every record once. Training: each set made max_len long.
    size_ = train ? max_len_ * groups_.size() : groups_.at(0).size();
  }

  size_t size() const override { return size_; }

  std::string describe() const override {
    std::string s = "rootnet";
    for (size_t g = 0; g < groups_.size(); ++g) {
      s += " " + names_[g] + " (" + std::to_string(groups_[g].size()) + " crops)";
    }
    return s;
  }

  std::optional<Sample> get(size_t index, Rng& rng, bool train) const override {
    const size_t g = std::min(index / max_len_, groups_.size() - 1);
    const auto& group = groups_[g];
    size_t i = index % max_len_;
    // MultipleDatasets: the tail beyond a whole number of copies is drawn at random.
    if (i >= group.size() * (max_len_ / group.size())) {
      i = static_cast<size_t>(uniform_index(rng, group.size()));
    } else {
      i %= group.size();
    }
    const RootEntry& e = group[i];
    std::vector<uint8_t> bytes;
    std::string error;
    if (!read_file_bytes(e.image_path, &bytes, &error)) {
      log::warn("cannot read " + e.image_path + ": " + error);
      return std::nullopt;
    }
    auto img = decode_image(bytes.data(), bytes.size(), 3, &error);
    if (!img) {
      log::warn("cannot decode " + e.image_path + ": " + error);
      return std::nullopt;
    }
    double rot = 0, color[3] = {1, 1, 1};
    bool flip = false;
    if (train && o_.augment) {
      const double r = std::clamp(normal01(rng), -2.0, 2.0) * o_.rot_factor;
      rot = uniform01(rng) <= o_.rot_prob ? r : 0.0;
      flip = uniform01(rng) < o_.flip_prob;
      for (double& c : color) c = uniform_real(rng, 1 - o_.color_factor, 1 + o_.color_factor);
    }
    double cx = e.bbox.x + 0.5 * e.bbox.w, cy = e.bbox.y + 0.5 * e.bbox.h;
    double rx = e.root_img[0], ry = e.root_img[1];
    if (flip) {
      flip_horizontal(&*img);
      cx = img->width - cx - 1;
      rx = img->width - rx - 1;
    }
    const int in = o_.input_size;
    const Affine trans = patch_transform(cx, cy, e.bbox.w, e.bbox.h, in, in, rot);
    std::vector<float> patch = warp_affine_bilinear(*img, trans, in, in);
    if (train && o_.augment) {
      for (size_t p = 0; p < patch.size(); ++p) {
        patch[p] = std::clamp(patch[p] * static_cast<float>(color[p % 3]), 0.0f, 255.0f);
      }
    }
    Sample s;
    s.image = torch::empty({3, in, in}, torch::kFloat32);
    normalise_rootnet_patch(patch, in, in, 3, o_.mean, o_.std, s.image.data_ptr<float>());
    auto t = trans.apply(rx, ry);
    double vis = e.root_vis;
    if (!(t[0] >= 0 && t[0] < in && t[1] >= 0 && t[1] < in)) vis = 0;
    const int out = in / 4;
    auto f32 = [](std::initializer_list<double> v) {
      std::vector<float> f(v.begin(), v.end());
      return torch::tensor(f, torch::kFloat32);
    };
    s.fields["coord"] = f32({t[0] / in * out, t[1] / in * out, e.root_cam[2]});
    s.fields["vis"] = f32({vis});
    s.fields["have_depth"] = f32({e.have_depth ? 1.0 : 0.0});
    s.fields["k_value"] = f32({k_value(e.bbox, e.fx, e.fy, o_.real_x, o_.real_y)});
    s.fields["bbox"] = f32({e.bbox.x, e.bbox.y, e.bbox.w, e.bbox.h});
    s.fields["f"] = f32({e.fx, e.fy});
    s.fields["c"] = f32({e.cx, e.cy});
    s.fields["root_cam"] = f32({e.root_cam[0], e.root_cam[1], e.root_cam[2]});
    s.fields["score"] = f32({e.score});
    s.fields["valid"] = f32({e.valid ? 1.0 : 0.0});
    s.fields["image_id"] = torch::tensor(e.image_id, torch::kInt64);
    s.fields["action"] = torch::tensor(static_cast<int64_t>(e.action), torch::kInt64);
    return s;
  }

 private:
  std::vector<std::vector<RootEntry>> groups_;
  std::vector<std::string> names_;
  PipelineOptions o_;
  size_t max_len_ = 0, size_ = 0;
};

}  // namespace

std::shared_ptr<Dataset> make_rootnet_dataset(const DataSettings& data,
                                              const RootNetSettings& rootnet, Split split) {
  PipelineOptions o;
  o.input_size = static_cast<int>(rootnet.input_size);
  if (o.input_size % 32 != 0) {
    throw ConfigError("rootnet.input_size must be a multiple of 32, got " +
                      std::to_string(o.input_size));
  }
  const std::vector<double>& real = rootnet.bbox_real;
  if (real.size() != 2) throw ConfigError("rootnet.bbox_real must hold two values (mm)");
  o.real_x = real[0];
  o.real_y = real[1];
  o.mean = data.mean;
  o.std = data.std;
  if (o.mean.size() != 3 || o.std.size() != 3) {
    throw ConfigError("rootnet needs three values in data.mean and data.std (RGB)");
  }
  o.augment = data.augment;
  o.rot_factor = rootnet.rot_factor;
  o.rot_prob = rootnet.rot_prob;
  o.flip_prob = rootnet.flip_prob;
  o.color_factor = rootnet.color_factor;
  const int protocol = static_cast<int>(rootnet.h36m_protocol);
  std::vector<std::vector<RootEntry>> groups;
  std::vector<std::string> names;
  if (split == Split::kTrain) {
    for (const auto& name : rootnet.train_sets) {
      if (name == "h36m") {
        groups.push_back(read_h36m(rootnet.h36m_root, protocol, true,
                                   static_cast<int>(rootnet.h36m_train_every)));
      } else if (name == "muco") {
        groups.push_back(read_muco(rootnet.muco_root));
      } else if (name == "mpii") {
        groups.push_back(read_mpii(rootnet.mpii_root));
      } else {
        throw ConfigError("rootnet.train_sets: unknown set '" + name + "' (h36m, muco, mpii)");
      }
      names.push_back(name);
    }
    if (groups.empty()) throw ConfigError("rootnet.train_sets is empty");
  } else {
    const std::string& name = rootnet.test_set;
    if (name == "h36m") {
      groups.push_back(read_h36m(rootnet.h36m_root, protocol, false,
                                 static_cast<int>(rootnet.h36m_test_every)));
    } else if (name == "mupots") {
      groups.push_back(read_mupots(rootnet.mupots_root, rootnet.mupots_bbox_file));
    } else {
      throw ConfigError("rootnet.test_set: unknown set '" + name + "' (h36m, mupots)");
    }
    names.push_back(name);
  }
  return std::make_shared<RootNetDataset>(std::move(groups), std::move(names), std::move(o),
                                          split == Split::kTrain);
}

}  // namespace amptune::data
