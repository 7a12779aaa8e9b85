// Torch-free RootNet evaluation (docs/ROOTNET.md): Human3.6M MRPE and MuPoTS AP_root, as the
// official evaluation code computes them. Camera-space points in mm.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace amptune::eval {

using Point3 = std::array<double, 3>;

struct RootError {
  double mrpe = 0;                    // mean Euclidean distance
  double mrpe_x = 0, mrpe_y = 0, mrpe_z = 0;  // mean absolute error per axis
  int64_t count = 0;
};

struct MrpeResult {
  RootError all;
  std::map<std::string, RootError> per_action;  // empty action names are not grouped
};

// MRPE over pairs (pred[i], gt[i]); actions (optional, same length) groups per action.
// Throws Error (ExitCode::kInternal: a caller bug) on mismatched lengths.
MrpeResult mrpe(const std::vector<Point3>& pred, const std::vector<Point3>& gt,
                const std::vector<std::string>& actions = {});

struct RootPrediction {
  int64_t image_id = 0;
  double score = 1.0;  // 1.0 with ground-truth boxes
  Point3 root{};
};

struct RootGroundTruth {
  int64_t image_id = 0;
  bool valid = true;
  Point3 root{};
};

// MuPoTS AP_root at `threshold_mm` (25 cm for AP_root_25), the official rule: predictions sorted
// by score (stable, descending); gt_num = valid GTs of the whole set; a prediction's image
// without valid GT is skipped (records nothing); else the nearest valid GT of its image (3D
// distance) is a true positive iff distance < threshold and not yet matched (no fallback to the
// second nearest), otherwise a false positive; after each counted prediction precision =
// tp/(tp+fp), recall = tp/gt_num; AP = sum_{n=0}^{N-2} precision[n+1] * (recall[n+1] -
// recall[n]) (as the official code: the first recorded point adds no area). 0 without GT.
double ap_root(const std::vector<RootPrediction>& preds, const std::vector<RootGroundTruth>& gts,
               double threshold_mm = 250.0);

}  // namespace amptune::eval
