#include "store/records.h"

#include <string>

namespace amptune::store {

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::kPending: return "pending";
    case RunStatus::kRunning: return "running";
    case RunStatus::kDone: return "done";
    case RunStatus::kFailed: return "failed";
    case RunStatus::kDiverged: return "diverged";
    case RunStatus::kPruned:
      return "pruned";
  }
  throw StoreError("unknown run status value " + std::to_string(static_cast<int>(status)));
}

RunStatus parse_status(const std::string& text) {
  if (text == "pending") return RunStatus::kPending;
  if (text == "running") return RunStatus::kRunning;
  if (text == "done") return RunStatus::kDone;
  if (text == "failed") return RunStatus::kFailed;
  if (text == "diverged") return RunStatus::kDiverged;
  if (text == "pruned") return RunStatus::kPruned;
  throw StoreError("unknown run status '" + text +
                   "'; expected pending, running, done, failed, diverged or pruned");
}

}  // namespace amptune::store
