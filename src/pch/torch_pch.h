// Precompiled header shared by every torch-using target (see src/CMakeLists.txt).
#pragma once
#include <torch/torch.h>
