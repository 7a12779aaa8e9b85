// `amptune merge`: joins shard databases (or any results databases) into one; and the --db of
// the commands that read several databases as one before they are merged. app/run/merge.h does the
// work.
#include <iostream>

#include "app/run/merge.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::cli {
namespace {

std::string conflict_text(const records::MergeConflict& c) {
  return "same cell in two databases: " + c.run + ": kept the copy of " + c.kept_from + " (" +
         std::to_string(c.kept_epochs) + " epochs, " + c.kept_status + ") over " + c.dropped_from +
         " (" + std::to_string(c.dropped_epochs) + " epochs, " + c.dropped_status + ")";
}

}  // namespace

std::unique_ptr<store::Store> open_results(const std::vector<std::string>& dbs) {
  const std::vector<std::string> paths = expand_globs(dbs);
  records::MergeReport report;
  auto store = app::open_databases(paths, &report);
  if (paths.size() > 1) {
    std::string list;
    for (const auto& p : paths) list += (list.empty() ? "" : ", ") + p;
    log::info(std::to_string(paths.size()) +
              " databases read as one (merged in memory, nothing "
              "written): " +
              list);
    for (const auto& c : report.conflicts) log::info(conflict_text(c));
  }
  return store;
}

int cmd_merge(const Invocation& inv) {
  std::vector<std::string> inputs;
  std::string into;
  Options opts("merge",
               "usage: amptune merge A.sqlite B.sqlite ... [--into FILE]\n\n"
               "Merges results databases (the shards of a sweep: amptune run --shard K/N) into\n"
               "one, in one transaction: all or nothing. Runs are matched by sweep and config\n"
               "hash and get new ids in the target; a cell found in two databases keeps the copy\n"
               "with more recorded epochs. Merging the same database again changes nothing.\n"
               "Inputs are only read; a bad one (not SQLite, corrupt, newer schema) is named and\n"
               "nothing is written. Arguments may be quoted globs: 'results/x.shard-*.sqlite'.\n");
  opts.positionals(&inputs).quiet();
  opts.add()("into", po::value(&into)->default_value(default_db()),
             "the database merged into; created when missing (env AMPTUNE_DB)");
  if (!opts.parse(inv.args)) return 0;
  if (inputs.empty()) {
    throw UsageError(
        "amptune merge needs the databases to merge: amptune merge "
        "'results/SWEEP.shard-*.sqlite' --into results/amptune.sqlite");
  }
  inputs = expand_globs(inputs);
  const records::MergeReport report = app::merge_databases(into, inputs);
  int added = 0, replaced = 0, kept = 0, unchanged = 0;
  int64_t epochs = 0;
  for (const auto& in : report.inputs) {
    std::cout << in.path << " (schema " << in.schema_version << "): " << in.runs_added
              << " runs added, " << in.runs_replaced << " replaced, " << in.runs_kept
              << " kept from before, " << in.runs_unchanged << " already there, " << in.epochs
              << " epochs copied\n";
    added += in.runs_added;
    replaced += in.runs_replaced;
    kept += in.runs_kept;
    unchanged += in.runs_unchanged;
    epochs += in.epochs;
  }
  for (const auto& c : report.conflicts) std::cout << log::printable(conflict_text(c)) << "\n";
  std::cout << "merged " << report.inputs.size() << " databases into " << into << ": " << added
            << " runs added, " << replaced << " replaced, " << kept << " kept, " << unchanged
            << " already there; " << epochs << " epochs, " << report.conflicts.size()
            << " conflicts\n";
  if (report.foreign_checkpoints > 0) {
    log::warn(std::to_string(report.foreign_checkpoints) +
              " recorded checkpoint paths lie outside their run's own checkpoint folder (e.g. " +
              report.first_foreign +
              "): merged as deleted, so nothing loads or deletes them; their metrics are kept");
  }
  if (report.missing_checkpoints > 0) {
    log::warn(std::to_string(report.missing_checkpoints) + " of " +
              std::to_string(report.checkpoints) +
              " recorded checkpoint files are not found from this directory (e.g. " +
              report.first_missing +
              "); relative paths are relative to the directory training ran in: run amptune "
              "from there, or eval/resume/fork of those epochs will not find them");
  }
  return 0;
}

}  // namespace amptune::cli
