#include "app/inspect.h"

#include <filesystem>

#include "core/error.h"

namespace amptune::app {

store::Store open_existing(const std::string& db) {
  if (!std::filesystem::exists(db)) {
    throw StoreError("database " + db + " does not exist; run a sweep first or pass --db FILE");
  }
  return store::Store(db);
}

store::RunRow find_run(const store::Store& store, const std::string& ref) {
  std::optional<store::RunRow> run = store.find_run(ref);
  if (!run) {
    throw UsageError("no run '" + ref + "' in " + store.path() + " (see amptune list --db " +
                     store.path() + ")");
  }
  return std::move(*run);
}

}  // namespace amptune::app
