#include "eval/rootnet_metrics.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

namespace amptune::eval {
namespace {

double distance(const Point3& a, const Point3& b) {
  const double dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
  return std::sqrt(dx * dx + dy * dy + dz * dz);
}

void add(RootError& e, const Point3& p, const Point3& g) {
  e.mrpe += distance(p, g);
  e.mrpe_x += std::abs(p[0] - g[0]);
  e.mrpe_y += std::abs(p[1] - g[1]);
  e.mrpe_z += std::abs(p[2] - g[2]);
  ++e.count;
}

void finish(RootError& e) {
  if (e.count == 0) return;
  const double n = static_cast<double>(e.count);
  e.mrpe /= n;
  e.mrpe_x /= n;
  e.mrpe_y /= n;
  e.mrpe_z /= n;
}

}  // namespace

MrpeResult mrpe(const std::vector<Point3>& pred, const std::vector<Point3>& gt,
                const std::vector<std::string>& actions) {
  if (pred.size() != gt.size() || (!actions.empty() && actions.size() != pred.size())) {
    throw Error(ExitCode::kInternal, "mrpe: predictions (" + std::to_string(pred.size()) +
                                         "), ground truth (" + std::to_string(gt.size()) +
                                         ") and actions differ in length");
  }
  MrpeResult r;
  for (size_t i = 0; i < pred.size(); ++i) {
    add(r.all, pred[i], gt[i]);
    if (!actions.empty() && !actions[i].empty()) add(r.per_action[actions[i]], pred[i], gt[i]);
  }
  finish(r.all);
  for (auto& [name, e] : r.per_action) finish(e);
  return r;
}

double ap_root(const std::vector<RootPrediction>& preds, const std::vector<RootGroundTruth>& gts,
               double threshold_mm) {
  std::unordered_map<int64_t, std::vector<size_t>> by_image;  // valid GT indices per image
  int64_t gt_num = 0;
  for (size_t i = 0; i < gts.size(); ++i) {
    if (!gts[i].valid) continue;
    by_image[gts[i].image_id].push_back(i);
    ++gt_num;
  }
  if (gt_num == 0) return 0.0;
  std::vector<size_t> order(preds.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return preds[a].score > preds[b].score; });
  std::vector<bool> matched(gts.size(), false);
  std::vector<double> precision, recall;
  int64_t tp = 0, fp = 0;
  for (size_t k : order) {
    auto it = by_image.find(preds[k].image_id);
    if (it == by_image.end()) continue;  // no valid GT in this image
    size_t best = it->second.front();
    double best_d = std::numeric_limits<double>::infinity();
    for (size_t g : it->second) {
      const double d = distance(preds[k].root, gts[g].root);
      if (d < best_d) {
        best_d = d;
        best = g;
      }
    }
    if (best_d < threshold_mm && !matched[best]) {
      matched[best] = true;
      ++tp;
    } else {
      ++fp;
    }
    precision.push_back(static_cast<double>(tp) / static_cast<double>(tp + fp));
    recall.push_back(static_cast<double>(tp) / static_cast<double>(gt_num));
  }
  double ap = 0;
  for (size_t n = 0; n + 1 < precision.size(); ++n) {
    ap += precision[n + 1] * (recall[n + 1] - recall[n]);
  }
  return ap;
}

}  // namespace amptune::eval
