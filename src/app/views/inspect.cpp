#include "app/views/inspect.h"

#include <filesystem>

#include "core/error.h"

namespace amptune::app {

store::Store open_existing(const std::string& db) {
  if (!std::filesystem::exists(db)) {
    throw StoreError("database " + db + " does not exist; run a sweep first or pass --db FILE");
  }
  return store::Store(db);
}

records::RunRow find_run(const store::Store& store, const std::string& ref) {
  std::optional<records::RunRow> run = store.find_run(ref);
  if (!run) {
    throw UsageError("no run '" + ref + "' in " + store.path() + " (see amptune list --db " +
                     store.path() + ")");
  }
  return std::move(*run);
}

std::vector<RunLine> list_runs(const std::string& db, const std::optional<std::string>& sweep) {
  return list_runs(open_existing(db), sweep);
}

std::unique_ptr<store::Store> open_read_only(const std::string& db) {
  return store::Store::open_read_only(db);
}

RunDetails show_run(const std::string& db, const std::string& ref) {
  return show_run(open_existing(db), ref);
}

RunDetails show_run(const store::Store& store, const std::string& ref) {
  RunDetails details;
  details.run = find_run(store, ref);
  details.epochs = store.epochs(details.run.id);
  details.initial_metrics = store.initial_metrics(details.run.id);
  details.prune_decisions = store.prune_decisions(details.run.id);
  return details;
}

}  // namespace amptune::app
