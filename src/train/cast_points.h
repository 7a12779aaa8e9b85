// The int32 cast points of casts.int32 (RootNet's; docs/ROOTNET.md "Cast points") as a table:
// each point's name, the side it applies on, the batch field it casts and where the ported code
// cast it. The one list train/casts.h applies (Int32Casts) and amptune export-setting names
// (app/artifacts/setting_export.h). No torch in this header.
#pragma once

namespace amptune::train {

struct CastPoint {
  const char* name;   // the casts.int32 word
  bool train;         // applied to training batches (else to test batches)
  const char* field;  // the batch field it casts
  const char* where;  // where the ported RootNet code cast it, for people
};

inline constexpr CastPoint kCastPoints[] = {
    {"k_value", true, "k_value", "the training batch's k value, before the model"},
    {"target_coord", true, "coord", "the training targets (x_hm, y_hm, Z), before the loss"},
    {"target_vis", true, "vis", "the training targets' visibility, before the loss"},
    {"have_depth", true, "have_depth", "the training targets' have_depth flag, before the loss"},
    {"bbox", true, "bbox", "the training batch's processed box"},
    {"cam_param", false, "k_value", "the test-time k value, before the model"},
    {"test_bbox", false, "bbox", "the box used for back-projection at test time"}};

}  // namespace amptune::train
