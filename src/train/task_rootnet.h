// The RootNet task (docs/ROOTNET.md): the official loss on training batches of the rootnet data
// set; evaluation back-projects each prediction with its processed box and camera and reports
// mrpe, mrpe_x, mrpe_y, mrpe_z (mm) and, on Human3.6M, mrpe_<Action> per action; on MuPoTS
// also ap_root_25 (percent). mrpe_constant is the MRPE of the constant predictor (patch centre at the mean
// test depth), the baseline a trained model must beat. casts.int32 applies its cast points (train/casts.h).
#pragma once

#include <memory>

#include "train/task.h"

namespace amptune::train {

// From model.* (the network, its weights), rootnet.test_set, rootnet.mupots_root and
// rootnet.mupots_bbox_file (detector boxes: AP against the annotation file's roots), casts.int32.
std::unique_ptr<Task> make_rootnet_task(const Settings& settings);
// mrpe (lower is better) on Human3.6M; ap_root_25 (higher is better) on MuPoTS (rootnet.test_set).
ModelInfo rootnet_info(const Settings& settings);

}  // namespace amptune::train
