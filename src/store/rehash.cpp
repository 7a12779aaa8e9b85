// Migration 12's code part: every run re-hashed from its stored config under the identity rules
// of docs/CONFIG.md "Identity" (schemas/store.sql, migration 12).
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "store/internal.h"

namespace amptune::store::detail {

namespace {

struct OldRun {
  int64_t sweep_id = 0;
  std::string name, config_json, config_hash;
  std::optional<ForkOf> fork;  // parent_identity holds the parent's id until it is looked up
};

}  // namespace

std::string migrated_identity(const std::string& config_json, const std::string& run_name,
                              const std::optional<ForkOf>& fork, std::string* why_kept) {
  try {
    const std::string config_hash =
        Config::from_json(config_json, "runs.config_json of run " + run_name).hash();
    if (!fork) return config_hash;
    if (fork->parent_identity.empty()) {
      *why_kept = "its parent run was not re-hashed before it";
      return "";
    }
    return fork_identity(config_hash, fork->parent_identity, fork->epoch, fork->reset_optimizer);
  } catch (const ConfigError& e) {
    *why_kept = e.what();
    return "";
  }
}

void rehash_runs(sqlite3* db, const std::string& path) {
  std::map<int64_t, OldRun> runs;
  {
    sql::Statement select(db,
                          "SELECT id, sweep_id, name, config_json, config_hash, parent_run_id, "
                          "parent_epoch, reset_optimizer FROM runs ORDER BY id");
    while (select.step()) {
      OldRun run;
      run.sweep_id = select.column_int(1);
      run.name = select.column_text(2);
      run.config_json = select.column_text(3);
      run.config_hash = select.column_text(4);
      if (!select.is_null(5)) {
        run.fork = ForkOf{std::to_string(select.column_int(5)),
                          static_cast<int>(select.column_int(6)), select.column_int(7) != 0};
      }
      runs.emplace(select.column_int(0), std::move(run));
    }
  }
  std::map<std::string, std::string> identity;        // run id (text) -> new identity
  std::set<std::pair<int64_t, std::string>> taken;    // (sweep, identity) assigned
  int changed = 0, kept = 0;
  // A parent before its forks: ids grow with creation, and a fork is created after its parent.
  for (auto& [id, run] : runs) {
    if (run.fork) run.fork->parent_identity = identity[run.fork->parent_identity];
    std::string why_kept;
    std::string hash = migrated_identity(run.config_json, run.name, run.fork, &why_kept);
    if (why_kept.empty() && hash != run.config_hash && taken.count({run.sweep_id, hash})) {
      why_kept = "another run of its sweep has the same identity now (they differed only in how "
                 "or where they ran)";
    }
    if (!why_kept.empty()) {
      hash = run.config_hash;
      ++kept;
      log::warn(path + ": migration 12 keeps the identity of run " + run.name + ": " + why_kept);
    }
    taken.insert({run.sweep_id, hash});
    identity[std::to_string(id)] = hash;
    if (hash == run.config_hash) continue;
    sql::run(db, "UPDATE runs SET config_hash = ?, legacy_config_hash = ? WHERE id = ?", hash,
             run.config_hash, id);
    ++changed;
  }
  if (!runs.empty()) {
    log::info(path + ": migration 12 re-hashed " + std::to_string(changed) + " of " +
              std::to_string(runs.size()) + " runs (a run's identity no longer covers where its " +
              "files go, thread and loader counts or data paths; docs/CONFIG.md \"Identity\")" +
              (kept ? "; " + std::to_string(kept) + " kept their identity (warned above)" : ""));
  }
}

}  // namespace amptune::store::detail
