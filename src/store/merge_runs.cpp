// RunMerge (merge_internal.h): which copy of each cell of one input the target keeps.
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/internal.h"
#include "store/merge_internal.h"
#include "store/sqlite.h"

namespace amptune::store::merging {
namespace {

using detail::quote_identifier;
using detail::same_name;
using sql::Statement;

// The columns of runs an older input lacks, as ", col = DEFAULT" assignments: a copy that
// replaces a target run gets their defaults.
std::string missing_column_defaults(const std::vector<DbColumn>& target,
                                    const std::vector<std::string>& names) {
  std::string defaults;
  for (const DbColumn& c : target) {
    if (c.name == "id" || index_of(names, c.name) >= 0) continue;
    if (c.not_null && c.default_sql.empty()) continue;  // cannot happen for ADD COLUMN
    defaults +=
        ", " + quote_identifier(c.name) + " = " + (c.default_sql.empty() ? "NULL" : c.default_sql);
  }
  return defaults;
}

std::string assignments(const std::vector<std::string>& names) {
  std::string out;
  for (size_t c = 0; c < names.size(); ++c) {
    out += (c ? ", " : "") + quote_identifier(names[c]) + " = ?";
  }
  return out;
}

// The input's runs, each with its parent (NULL before migration 4), started_at, epoch count and
// last epoch time, then the columns `names` (RunMerge::kFirst on). With `selected`: those whose
// ids are in the JSON array bound to ?1, and their fork ancestors.
std::string input_runs_sql(const std::vector<DbColumn>& input,
                           const std::vector<std::string>& names, bool selected) {
  bool forks = false;  // migration 4
  for (const DbColumn& c : input) forks = forks || same_name(c.name, "parent_run_id");
  const std::string chain =
      selected ? std::string("WITH RECURSIVE chain(id) AS (SELECT value FROM json_each(?1) "
                             "UNION SELECT r.parent_run_id FROM runs r JOIN chain c ON "
                             "r.id = c.id WHERE r.parent_run_id IS NOT NULL) ")
               : std::string();
  return chain + "SELECT r.id, " + (forks ? "r.parent_run_id" : "NULL") +
         ", COALESCE(r.started_at, ''), "
         "(SELECT COUNT(*) FROM epochs e WHERE e.run_id = r.id), "
         "(SELECT COALESCE(MAX(e.recorded_at), '') FROM epochs e "
         "WHERE e.run_id = r.id), " +
         column_list(names) + " FROM runs r" +
         (selected ? " WHERE r.id IN (SELECT id FROM chain)" : "") + " ORDER BY r.id";
}

}  // namespace

RunMerge::RunMerge(const Target& target, const std::vector<DbColumn>& target_runs, sqlite3* in,
                   const std::string& input, const std::unordered_map<int64_t, int64_t>& sweeps,
                   records::MergeCount& count, int version, const Selection* selection)
    : target_(target),
      input_(input),
      sweeps_(sweeps),
      count_(count),
      version_(version),
      target_columns_(target_runs),
      input_columns_(columns_of(in, "runs")),
      names_(shared_columns(target_columns_, input_columns_, {"id"})),
      insert_(target.db, "INSERT INTO runs (" + column_list(names_) + ") VALUES (" +
                             placeholders(names_.size()) + ")"),
      update_(target.db, "UPDATE runs SET " + assignments(names_) +
                             missing_column_defaults(target_columns_, names_) + " WHERE id = ?"),
      find_(target.db,
            "SELECT r.id, r.name, r.status, COALESCE(r.started_at, ''), "
            "(SELECT COUNT(*) FROM epochs e WHERE e.run_id = r.id), "
            "(SELECT COALESCE(MAX(e.recorded_at), '') FROM epochs e WHERE e.run_id = r.id) "
            "FROM runs r WHERE r.sweep_id = ? AND r.config_hash = ?"),
      same_name_(target.db, "SELECT config_hash FROM runs WHERE name = ? AND id IS NOT ?"),
      drop_epochs_(target.db, "DELETE FROM epochs WHERE run_id = ?"),
      drop_params_(target.db, "DELETE FROM run_params WHERE run_id = ?"),
      drop_diagnoses_(target.db, "DELETE FROM diagnoses WHERE run_id = ?"),
      drop_initial_(target.db, "DELETE FROM initial_metrics WHERE run_id = ?"),
      drop_decisions_(target.db, "DELETE FROM prune_decisions WHERE run_id = ?"),
      select_(in, input_runs_sql(input_columns_, names_, selection != nullptr)),
      set_legacy_(target.db, "UPDATE runs SET legacy_config_hash = ? WHERE id = ?"),
      known_(target.db,
             "SELECT epoch, checkpoint_path, coalesce(checkpoint_sha256, '') FROM epochs "
             "WHERE run_id = ? AND checkpoint_path IS NOT NULL AND checkpoint_deleted_at IS NULL"),
      selection_(selection) {
  if (selection_) {
    std::string ids;
    for (const int64_t id : selection_->runs) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    select_.bind(1, "[" + ids + "]");
  }
}

std::vector<std::pair<int64_t, int64_t>> RunMerge::merge() {
  while (select_.step()) merge_run();
  link_forks();
  return std::move(copied_);
}

// The input run select_ is on.
void RunMerge::merge_run() {
  const Copy mine = input_copy();
  const auto sweep = sweeps_.find(select_.column_int(at("sweep_id")));
  if (sweep == sweeps_.end()) {
    throw StoreError(input_ + ": run " + mine.name + " belongs to no sweep of the file");
  }
  const std::string hash = identity();
  const std::optional<Copy> theirs = target_copy(sweep->second, hash);
  if (theirs) {
    ids_[mine.id] = theirs->id;
    if (mine.same_as(*theirs)) {
      ++count_.runs_unchanged;
      return;
    }
    if (!settle_conflict(mine, *theirs)) {
      ++count_.runs_kept;
      return;
    }
  }
  check_name_is_free(mine, theirs, hash);
  const int64_t target_id = write_run(theirs, sweep->second, hash);
  if (hash != select_.column_text(at("config_hash"))) {  // re-hashed as migration 12 does
    set_legacy_.bind_all(select_.column_text(at("config_hash")), target_id).run();
  }
  ids_[mine.id] = target_id;
  target_.origins[target_id] = input_;
  copied_.emplace_back(mine.id, target_id);
  if (!select_.is_null(1)) parents_.emplace_back(target_id, select_.column_int(1));
}

Copy RunMerge::input_copy() const {
  Copy mine;
  mine.id = select_.column_int(0);
  mine.started_at = select_.column_text(2);
  mine.epochs = static_cast<int>(select_.column_int(3));
  mine.last_recorded = select_.column_text(4);
  mine.name = select_.column_text(at("name"));
  mine.status = select_.column_text(at("status"));
  return mine;
}

// The target's copy of the cell (sweep, identity), if it has one.
std::optional<Copy> RunMerge::target_copy(int64_t sweep_id, const std::string& hash) {
  find_.bind_all(sweep_id, hash);
  if (!find_.step()) return std::nullopt;
  return Copy{find_.column_int(0),  find_.column_text(1), find_.column_text(2),
              find_.column_text(3), find_.column_text(5), static_cast<int>(find_.column_int(4))};
}

// Two different copies of one cell: the one with more epochs is kept, at equal epochs a
// settled one (records::is_settled) over one that is not, else the target's. Reports the conflict;
// true when the input's copy is kept.
bool RunMerge::settle_conflict(const Copy& mine, const Copy& theirs) {
  const bool take = mine.epochs > theirs.epochs ||
                    (mine.epochs == theirs.epochs && mine.settled() && !theirs.settled());
  const auto origin = target_.origins.find(theirs.id);
  const std::string their_file = origin == target_.origins.end() ? target_.path : origin->second;
  records::MergeConflict conflict;
  conflict.run = take ? mine.name : theirs.name;
  conflict.kept_from = take ? input_ : their_file;
  conflict.dropped_from = take ? their_file : input_;
  conflict.kept_epochs = take ? mine.epochs : theirs.epochs;
  conflict.dropped_epochs = take ? theirs.epochs : mine.epochs;
  conflict.kept_status = take ? mine.status : theirs.status;
  conflict.dropped_status = take ? theirs.status : mine.status;
  target_.report.conflicts.push_back(conflict);
  return take;
}

// A run name names one cell: refuses another target run of the input run's name.
void RunMerge::check_name_is_free(const Copy& mine, const std::optional<Copy>& theirs,
                                  const std::string& hash) {
  same_name_.bind_all(mine.name, theirs ? theirs->id : int64_t{-1});
  if (same_name_.step()) {
    throw StoreError("run " + mine.name + " of " + input_ + " and a run of the same name in " +
                     target_.path + " have different configurations (config hash " + hash + " vs " +
                     same_name_.column_text(0) + "); they cannot be merged into one file");
  }
}

// Inserts the input run, or overwrites `theirs` with it and drops its rows; returns its id.
int64_t RunMerge::write_run(const std::optional<Copy>& theirs, int64_t sweep_id,
                            const std::string& hash) {
  Statement& write = theirs ? update_ : insert_;
  write.reset();
  for (size_t c = 0; c < names_.size(); ++c) {
    const int param = static_cast<int>(c) + 1;
    if (names_[c] == "sweep_id") {
      write.bind(param, sweep_id);
    } else if (names_[c] == "config_hash") {
      write.bind(param, hash);
    } else if (names_[c] == "parent_run_id") {
      write.bind_null(param);  // set in link_forks, once every run of the input has its id
    } else if (names_[c] == "config_json" && rewrites_config()) {
      write.bind(param, selection_->config(select_.column_text(kFirst + static_cast<int>(c))));
    } else {
      write.bind_column(param, select_, kFirst + static_cast<int>(c));
    }
  }
  const int64_t row = select_.column_int(0);
  if (!theirs) {
    copy_row(target_.db, input_, "runs", row, write);
    ++count_.runs_added;
    return sqlite3_last_insert_rowid(target_.db);
  }
  write.bind(static_cast<int>(names_.size()) + 1, theirs->id);
  copy_row(target_.db, input_, "runs", row, write);
  known_.bind_all(theirs->id);
  while (known_.step()) {
    target_.known[{theirs->id, known_.column_int(0)}] = {known_.column_text(1),
                                                         known_.column_text(2)};
  }
  drop_epochs_.bind_all(theirs->id).run();  // metrics, loss-scale events cascade
  drop_params_.bind_all(theirs->id).run();
  drop_diagnoses_.bind_all(theirs->id).run();  // their rows and advice cascade
  drop_initial_.bind_all(theirs->id).run();
  drop_decisions_.bind_all(theirs->id).run();
  ++count_.runs_replaced;
  return theirs->id;
}

bool RunMerge::rewrites_config() const {
  if (!selection_ || !selection_->config) return false;
  const int64_t id = select_.column_int(0);
  for (const int64_t selected : selection_->runs) {
    if (selected == id) return true;
  }
  return false;
}

void RunMerge::link_forks() {
  Statement set_parent(target_.db, "UPDATE runs SET parent_run_id = ? WHERE id = ?");
  for (const auto& [target_id, parent] : parents_) {
    const auto found = ids_.find(parent);
    if (found == ids_.end()) {
      throw StoreError(input_ + ": a fork's parent run " + std::to_string(parent) +
                       " is not in the file (is it corrupt?)");
    }
    set_parent.bind_all(found->second, target_id).run();
  }
}

// The identity of the input run select_ is on: as recorded, or for an input older than
// migration 12 what that migration gives it (its parent's in identities_, filled input run by
// input run). Two input runs whose new identities coincide (they differed only in where they
// ran) keep theirs for the second, as the migration does (taken_).
std::string RunMerge::identity() {
  std::string hash = select_.column_text(at("config_hash"));
  const std::string sweep = std::to_string(select_.column_int(at("sweep_id"))) + " ";
  if (version_ < detail::kRehashMigration) {
    std::optional<detail::ForkOf> fork;
    if (!select_.is_null(1)) {
      const bool reset = index_of(names_, "reset_optimizer") >= 0 &&
                         select_.column_int(at("reset_optimizer")) != 0;
      fork = detail::ForkOf{identities_[select_.column_int(1)],
                            static_cast<int>(select_.column_int(at("parent_epoch"))), reset};
    }
    std::string why_kept;
    const std::string migrated = detail::migrated_identity(
        select_.column_text(at("config_json")), select_.column_text(at("name")), fork, &why_kept);
    if (!migrated.empty() && !taken_.count(sweep + migrated)) hash = migrated;
  }
  taken_.insert(sweep + hash);
  identities_[select_.column_int(0)] = hash;
  return hash;
}

}  // namespace amptune::store::merging
