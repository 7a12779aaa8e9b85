// The RootNet task (docs/ROOTNET.md): the official loss on training batches of the rootnet data
// set; evaluation back-projects each prediction with its processed box and camera and reports
// mrpe, mrpe_x, mrpe_y, mrpe_z (mm) and, on Human3.6M, mrpe_<Action> per action; on MuPoTS
// also ap_root_25 (percent). mrpe_constant is the MRPE of the constant predictor (patch centre at the mean
// test depth), the baseline a trained model must beat. casts.int32 applies its cast points (train/casts.h).
#pragma once

#include <memory>

#include "train/task.h"

namespace amptune::train {

std::unique_ptr<Task> make_rootnet_task(const Config& config);
// mrpe (lower is better) on Human3.6M; ap_root_25 (higher is better) on MuPoTS.
ModelInfo rootnet_info(const Config& config);

}  // namespace amptune::train
