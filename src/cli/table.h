// The text table lives in app/table.h (amptune compare writes one); the commands use it as
// cli::Table.
#pragma once

#include "app/table.h"

namespace amptune::cli {

using app::fixed;
using app::Table;

}  // namespace amptune::cli
