// The checkpoint layout merge is given by app (train/plan.h's rule), for tests of the store,
// which link no train: a database's default root <db dir>/checkpoints/<db stem>, and names
// epoch_<digits>[.ext]. Header-only.
#pragma once

#include <cctype>
#include <filesystem>
#include <string>

#include "records/records.h"

namespace amptune::testing {

inline records::CheckpointLayout checkpoint_layout() {
  records::CheckpointLayout layout;
  layout.default_root = [](const std::string& db_path) {
    const std::filesystem::path db(db_path);
    return (db.parent_path() / "checkpoints" / db.stem()).string();
  };
  layout.is_checkpoint_name = [](const std::string& name) {
    size_t digits = 0;
    while (6 + digits < name.size() && std::isdigit(static_cast<unsigned char>(name[6 + digits]))) {
      ++digits;
    }
    return name.rfind("epoch_", 0) == 0 && digits > 0 &&
           (6 + digits == name.size() || name[6 + digits] == '.');
  };
  return layout;
}

}  // namespace amptune::testing
