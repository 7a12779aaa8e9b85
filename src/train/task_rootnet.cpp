// RootNet task and the int32 cast points.
#include <array>

#include <torch/torch.h>

#include "core/error.h"
#include "core/settings.h"
#include "data/rootnet_data.h"
#include "eval/rootnet_metrics.h"
#include "models/from_config.h"
#include "train/cast_points.h"
#include "train/casts.h"
#include "train/task_rootnet.h"

namespace amptune::train {
namespace {

class RootNetTask : public Task {
 public:
  explicit RootNetTask(const Settings& settings)
      : model_(models::build_rootnet(settings.model)),
        casts_(settings.casts.int32),
        test_set_(settings.rootnet.test_set) {
    if (test_set_ == "mupots" && !settings.rootnet.mupots_bbox_file.empty()) {
      // Detector boxes carry no ground truth: AP matches against the annotation file's roots.
      for (const auto& e : data::read_mupots(settings.rootnet.mupots_root, "")) {
        mupots_gt_.push_back({e.image_id, e.valid, {e.root_cam[0], e.root_cam[1], e.root_cam[2]}});
      }
      detector_boxes_ = true;
    }
  }

  torch::nn::Module& module() override { return *model_; }

  torch::Tensor train_loss(const data::Batch& batch, const torch::Device& device) override {
    auto fields = batch.fields;
    casts_.apply(fields, true);
    auto coord = model_->forward(input(batch.images, device), fields.at("k_value").to(device));
    return models::rootnet_loss(coord, fields.at("coord").to(device), fields.at("vis").to(device),
                                fields.at("have_depth").to(device));
  }

  // values: the batch's loss x its samples, then per sample kSampleValues numbers: the
  // back-projected root (3), the ground-truth root (3), the patch centre's ray (x, y, fx, fy, cx,
  // cy), the action, image id, detection score and valid flag.
  static constexpr size_t kSampleValues = 16;

  std::vector<EvalBatch> evaluate_batches(data::Loader& loader,
                                          const torch::Device& device) override {
    return evaluate_each(loader, [&](const data::Batch& batch) {
      std::vector<double> values;
      auto fields = batch.fields;
      casts_.apply(fields, false);
      const int64_t out_w = batch.images.size(3) / 4, out_h = batch.images.size(2) / 4;
      auto coord = model_->forward(input(batch.images, device), fields.at("k_value").to(device))
                       .to(torch::kCPU, torch::kDouble);
      const int64_t b = coord.size(0);
      values.reserve(1 + static_cast<size_t>(b) * kSampleValues);
      values.push_back(models::rootnet_loss(coord, fields.at("coord"), fields.at("vis"),
                                                fields.at("have_depth"))
                               .item<double>() *
                           static_cast<double>(b));
      auto box = fields.at("bbox").to(torch::kDouble).contiguous();
      auto f = fields.at("f").to(torch::kDouble).contiguous();
      auto c = fields.at("c").to(torch::kDouble).contiguous();
      auto root = fields.at("root_cam").to(torch::kDouble).contiguous();
      auto score = fields.at("score").to(torch::kDouble).contiguous();
      auto valid = fields.at("valid").to(torch::kDouble).contiguous();
      auto image_id = fields.at("image_id").contiguous();
      auto action = fields.at("action").contiguous();
      auto ca = coord.accessor<double, 2>();
      for (int64_t i = 0; i < b; ++i) {
        const data::BoxF bb{box[i][0].item<double>(), box[i][1].item<double>(),
                            box[i][2].item<double>(), box[i][3].item<double>()};
        auto p = data::back_project(ca[i][0], ca[i][1], ca[i][2], bb, static_cast<int>(out_w),
                                    static_cast<int>(out_h), f[i][0].item<double>(),
                                    f[i][1].item<double>(), c[i][0].item<double>(),
                                    c[i][1].item<double>());
        values.insert(values.end(),
                          {p[0], p[1], p[2], root[i][0].item<double>(), root[i][1].item<double>(),
                           root[i][2].item<double>(), bb.x + bb.w / 2, bb.y + bb.h / 2,
                           f[i][0].item<double>(), f[i][1].item<double>(), c[i][0].item<double>(),
                           c[i][1].item<double>(), static_cast<double>(action[i].item<int64_t>()),
                           static_cast<double>(image_id[i].item<int64_t>()),
                           score[i][0].item<double>(), valid[i][0].item<double>()});
      }
      return values;
    });
  }

  std::map<std::string, double> metrics(const std::vector<EvalBatch>& batches) const override {
    std::vector<eval::Point3> pred, gt;
    // The constant predictor (patch centre, mean test depth) for comparison: its boxes/cameras.
    std::vector<std::array<double, 6>> centre_rays;  // x_img, y_img of the centre, fx, fy, cx, cy
    std::vector<std::string> actions;
    std::vector<eval::RootPrediction> ap_pred;
    std::vector<eval::RootGroundTruth> ap_gt;
    double loss_sum = 0;
    int64_t skipped = 0, n = 0;
    const auto& action_names = data::h36m_action_names();
    for (const auto& rec : batches) {
      skipped += rec.skipped;
      if (rec.values.empty()) continue;
      loss_sum += rec.values[0];
      const size_t b = (rec.values.size() - 1) / kSampleValues;
      for (size_t i = 0; i < b; ++i) {
        const double* v = rec.values.data() + 1 + i * kSampleValues;
        const eval::Point3 p{v[0], v[1], v[2]}, g{v[3], v[4], v[5]};
        const auto a = static_cast<int64_t>(v[12]);
        const auto id = static_cast<int64_t>(v[13]);
        ap_pred.push_back({id, v[14], p});
        if (detector_boxes_) continue;
        pred.push_back(p);
        gt.push_back(g);
        centre_rays.push_back({v[6], v[7], v[8], v[9], v[10], v[11]});
        actions.push_back(a >= 0 && a < static_cast<int64_t>(action_names.size())
                              ? action_names[static_cast<size_t>(a)]
                              : "");
        ap_gt.push_back({id, v[15] > 0, g});
      }
      n += static_cast<int64_t>(b);
    }
    std::map<std::string, double> m;
    m["val_samples"] = static_cast<double>(n);
    if (skipped > 0) m["val_skipped_samples"] = static_cast<double>(skipped);
    if (n == 0) return m;
    if (!detector_boxes_) {
      m["val_loss"] = loss_sum / static_cast<double>(n);
      auto r = eval::mrpe(pred, gt, actions);
      m["mrpe"] = r.all.mrpe;
      m["mrpe_x"] = r.all.mrpe_x;
      m["mrpe_y"] = r.all.mrpe_y;
      m["mrpe_z"] = r.all.mrpe_z;
      for (auto& [name, e] : r.per_action) m["mrpe_" + name] = e.mrpe;
      double mean_z = 0;
      for (const auto& g : gt) mean_z += g[2] / static_cast<double>(gt.size());
      std::vector<eval::Point3> constant;
      for (const auto& ray : centre_rays) {
        constant.push_back({(ray[0] - ray[4]) / ray[2] * mean_z, (ray[1] - ray[5]) / ray[3] * mean_z,
                            mean_z});
      }
      m["mrpe_constant"] = eval::mrpe(constant, gt).all.mrpe;
    }
    if (test_set_ == "mupots") {
      // In percent, as the store's metric_info and the papers report it.
      m["ap_root_25"] =
          100.0 * eval::ap_root(ap_pred, detector_boxes_ ? mupots_gt_ : ap_gt, 250.0);
    }
    return m;
  }

 private:
  models::RootNet model_;
  Int32Casts casts_;
  std::string test_set_;
  bool detector_boxes_ = false;
  std::vector<eval::RootGroundTruth> mupots_gt_;
};

}  // namespace

const std::vector<std::string>& int32_cast_points() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : kCastPoints) v.push_back(p.name);
    return v;
  }();
  return names;
}

Int32Casts::Int32Casts(const std::vector<std::string>& names) {
  for (const auto& n : names) {
    bool known = false;
    for (const auto& p : kCastPoints) known = known || n == p.name;
    if (!known) {
      std::string all;
      for (const auto& p : kCastPoints) all += (all.empty() ? "" : ", ") + std::string(p.name);
      throw ConfigError("casts.int32: unknown cast point '" + n + "'; known points: " + all);
    }
    names_.insert(n);
  }
}

torch::Tensor int32_roundtrip(const torch::Tensor& t) {
  return t.to(torch::kInt32).to(t.scalar_type());
}

void Int32Casts::apply(std::map<std::string, torch::Tensor>& fields, bool train) const {
  for (const auto& p : kCastPoints) {
    if (p.train != train || !has(p.name)) continue;
    auto it = fields.find(p.field);
    if (it != fields.end()) it->second = int32_roundtrip(it->second);
  }
}

ModelInfo rootnet_info(const Settings& settings) {
  if (settings.rootnet.test_set == "mupots") return ModelInfo{"ap_root_25", true};
  return ModelInfo{"mrpe", false};
}

std::unique_ptr<Task> make_rootnet_task(const Settings& settings) {
  return std::make_unique<RootNetTask>(settings);
}

}  // namespace amptune::train
