// RootNet data sets (docs/ROOTNET.md): readers of the official annotation formats (Human3.6M,
// MuCo-3DHP, MuPoTS-3D, MPII) into one torch-free record per person crop, the synthetic
// generator that writes those formats, and the torch Dataset with the original's pipeline.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/rootnet_geometry.h"

namespace amptune {
struct DataSettings;
struct RootNetSettings;
}

namespace amptune::data {

class Dataset;
enum class Split;

// One person crop as the original's data lists hold it.
struct RootEntry {
  std::string image_path;  // full path of the image file
  int64_t image_id = 0;
  int width = 0, height = 0;  // of the image
  BoxF bbox;                  // processed (process_bbox) box
  std::array<double, 3> root_cam{};  // mm, camera space (MPII: back-projected at Z = 0)
  std::array<double, 2> root_img{};  // pixels
  double root_vis = 1;
  bool have_depth = true;
  double fx = 1500, fy = 1500, cx = 0, cy = 0;
  bool valid = true;  // ground truth that AP_root counts (read_mupots skips is_valid 0 people)
  double score = 1;  // detector score (MuPoTS with a bbox file), else 1
  int action = -1;   // Human3.6M action index 0..14 (action_idx - 2), else -1
};

// Human3.6M action names by RootEntry::action.
const std::vector<std::string>& h36m_action_names();

// Human3.6M: ROOT/annotations/Human36M_subject{S}_{data,camera,joint_3d}.json for the protocol's
// subjects of the split (protocol 1: train 1,5,6,7,8,9 / test 11; protocol 2: train 1,5,6,7,8 /
// test 9,11), frames with frame_idx % every == 0, images ROOT/images/<file_name>. Root = joint
// 0 world -> camera (R X + t) -> pixels. Throws DataError naming a missing file or a malformed
// field (file, what was expected).
std::vector<RootEntry> read_h36m(const std::string& root, int protocol, bool train, int every);
// MuCo-3DHP: ROOT/data/MuCo-3DHP.json, images ROOT/data/<file_name>, root joint 14; per image the
// person closest to the camera plus every other person whose root is >= 500 mm (2D and 3D) from
// all others, as the original.
std::vector<RootEntry> read_muco(const std::string& root);
// MuPoTS-3D: ROOT/data/MuPoTS-3D.json, images ROOT/data/MultiPersonTestSet/<file_name>; every
// annotation with is_valid != 0 with its ground-truth box (score 1); people marked is_valid 0
// are skipped as the original skips them (neither evaluated nor counted by AP_root). When
// bbox_file is not empty: the detector boxes [{image_id, bbox, score}] of that file instead (root
// fields then zero, root_vis 0), matched against the valid people of read_mupots(root, "").
std::vector<RootEntry> read_mupots(const std::string& root, const std::string& bbox_file);
// MPII: ROOT/annotations/train.json (COCO-style: images {id, file_name, width, height},
// annotations {image_id, bbox, keypoints [x, y, v] x 16, num_keypoints}), images
// ROOT/images/<file_name>; root = pelvis (joint 6), have_depth 0, f 1500, c image centre.
std::vector<RootEntry> read_mpii(const std::string& root);

// The synthetic generator behind `amptune data synth-rootnet`.
struct SynthOptions {
  std::string format;  // h36m | muco | mupots | mpii
  std::string out;     // root directory written in the format's layout
  uint64_t seed = 0;
  int images = 200;    // images per split (h36m: per subject)
  int width = 320, height = 240;  // image size
  // Millimetres per unit of the 3D coordinates written (keypoints_cam): 1 (mm, the formats'
  // unit) or 1000 (m; muco and mupots only). The images, boxes and cameras do not change, so
  // rootnet.bbox_real in the same unit keeps k = depth / gamma a few units: the int32 cast
  // fault of docs/ROOTNET.md.
  double unit_mm = 1.0;
};
struct SynthStats {
  int images = 0, people = 0;
  int invalid_people = 0;  // MuPoTS: people written with is_valid 0 (counted in `people`)
  std::vector<std::string> files;  // annotation files written
};
// Writes people as articulated 3D stick bodies (17 joints h36m, 21 joints muco / mupots, 16 mpii;
// heights 1.5-1.9 m, random pose, root depth 2-7.5 m) through pinhole cameras (f 0.9-1.3 x
// image width, principal point near the centre) into JPEG images plus the format's JSON.
// Deterministic for a seed. Throws DataError when OUT cannot be written.
SynthStats synth_rootnet(const SynthOptions& options);

// The torch data set for data.format rootnet: training = the rootnet.train_sets mixed as the
// original's MultipleDatasets; evaluation = rootnet.test_set. Reads the rootnet.* section and
// data.mean, data.std (three values, 0..255 pixels), data.augment. Sample fields (float32 unless
// stated): coord [3] (x, y heatmap pixels, root Z mm), vis [1], have_depth [1], k_value [1],
// bbox [4] (processed box), f [2], c [2], root_cam [3], score [1], image_id int64, action int64.
std::shared_ptr<Dataset> make_rootnet_dataset(const DataSettings& data,
                                              const RootNetSettings& rootnet, Split split);

}  // namespace amptune::data
