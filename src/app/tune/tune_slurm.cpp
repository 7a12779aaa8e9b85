// app/tune/tune_slurm.h: the search's training as Slurm array jobs.
#include "app/tune/tune_slurm.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "app/run/program.h"
#include "app/run/slurm.h"
#include "app/tune/slurm_jobs.h"
#include "core/child.h"
#include "core/error.h"
#include "core/log.h"
#include "train/checkpoint_layout.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;

// The last `lines` lines of the file at `path` (a task's log), escaped; "" when unreadable. Only
// the file's last 64 KiB are read: a task's log can be as long as its training.
std::string log_tail(const std::string& path, int lines = 6) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  constexpr std::streamoff kTail = 64 * 1024;
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  in.seekg(size > kTail ? size - kTail : 0);
  std::vector<std::string> kept;
  for (std::string line; std::getline(in, line);) {
    kept.push_back(line);
    if (static_cast<int>(kept.size()) > lines) kept.erase(kept.begin());
  }
  std::string out;
  for (const std::string& line : kept) out += "\n    " + log::printable(log::clipped(line, 300));
  return out;
}

// The #SBATCH lines and the command of one step's array job.
struct Script {
  std::string dir, path;
  std::vector<std::string> runs, dbs;  // by array task
  int epoch = 0;
  bool stop = false;  // --stop-after-epoch epoch (not the last epoch)
};

std::string script_text(const Script& s, const TuneSlurmOptions& o, const std::string& sweep,
                        int threads) {
  const int ranks = o.nodes_per_run * o.tasks_per_node;
  std::ostringstream t;
  t << "#!/bin/bash\n"
    << "# One step of the tune search of sweep " << sweep << ": array task K trains run K below"
    << (s.stop ? " to epoch " + std::to_string(s.epoch) : std::string(" to its end"))
    << "\n# in its own database, which the search merges back. Written by: " << o.command_line
    << "\n#SBATCH --job-name=amptune-tune-" << sweep << "\n"
    << "#SBATCH --array=0-" << s.runs.size() - 1
    << (o.max_jobs > 0 ? "%" + std::to_string(o.max_jobs) : std::string()) << "\n"
    << "#SBATCH --output=" << s.dir << "/task-%a.out\n"
    << "#SBATCH --nodes=" << o.nodes_per_run << "\n"
    << "#SBATCH --ntasks-per-node=" << o.tasks_per_node << "\n";
  if (o.gpus_per_task > 0) t << "#SBATCH --gpus-per-task=" << o.gpus_per_task << "\n";
  if (o.cpus_per_task > 0) t << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
  t << "#SBATCH --chdir=" << o.workdir << "\n";
  if (!o.partition.empty()) t << "#SBATCH --partition=" << o.partition << "\n";
  if (!o.time.empty()) t << "#SBATCH --time=" << o.time << "\n";
  for (const std::string& option : o.sbatch) t << "#SBATCH " << option << "\n";
  t << "set -euo pipefail\ncd " << shell_quote(o.workdir) << "\nruns=(";
  for (size_t k = 0; k < s.runs.size(); ++k) t << (k ? " " : "") << shell_quote(s.runs[k]);
  t << ")\ndbs=(";
  for (size_t k = 0; k < s.dbs.size(); ++k) t << (k ? " " : "") << shell_quote(s.dbs[k]);
  // --stale-after 0: a task's database has one writer, so a holder it names is a task gone.
  t << ")\nexec " << (ranks > 1 ? "srun " : "") << shell_quote(o.binary)
    << " resume \"${runs[$SLURM_ARRAY_TASK_ID]}\" --db \"${dbs[$SLURM_ARRAY_TASK_ID]}\""
    << " --stale-after 0";
  if (s.stop) t << " --stop-after-epoch " << s.epoch;
  if (threads > 0) t << " --threads " << threads;
  t << "\n";
  return t.str();
}

}  // namespace

std::string default_jobs_dir(const std::string& db) {
  const fs::path path(db);
  return (path.parent_path() / "tune-jobs" / path.stem()).string();
}

void check_tune_slurm_options(const TuneSlurmOptions& o) {
  if (o.nodes_per_run < 1 || o.tasks_per_node < 1) {
    throw UsageError("--nodes-per-run and --tasks-per-node must be at least 1");
  }
  if (o.gpus_per_task < 0 || o.cpus_per_task < 0 || o.max_jobs < 0) {
    throw UsageError("--gpus-per-task, --cpus-per-task and --max-jobs cannot be negative");
  }
  if (!(o.poll_seconds > 0 && o.poll_seconds <= 3600)) {
    throw UsageError("--poll-seconds must be above 0 and at most 3600, got " +
                     std::to_string(o.poll_seconds));
  }
  for (const auto& [what, value] :
       {std::pair<std::string, std::string>{"--partition", o.partition},
        {"--time", o.time},
        {"the jobs directory", o.jobs_dir},
        {"the working directory (run amptune tune from another)", o.workdir},
        {"the amptune binary's path", o.binary},
        {"the command line", o.command_line}}) {
    require_one_line(what, value);
  }
  for (const std::string& option : o.sbatch) {
    require_one_line("--sbatch-arg", option);
    if (option.empty() || option[0] != '-') {
      throw UsageError("--sbatch-arg takes an sbatch option such as --account=proj, not '" +
                       option + "'");
    }
  }
}

SlurmTuneExecutor::SlurmTuneExecutor(store::Store& store, const TunePlan& plan,
                                     const SweepOptions& options, TuneSlurmOptions slurm)
    : StoreExecutor(store, plan, options), slurm_(std::move(slurm)) {
  if (slurm_.jobs_dir.empty()) slurm_.jobs_dir = default_jobs_dir(store.path());
  std::error_code ec;
  slurm_.jobs_dir = fs::absolute(slurm_.jobs_dir, ec).lexically_normal().string();
  check_tune_slurm_options(slurm_);
}

records::TuneSearchRow SlurmTuneExecutor::open_search(const records::TuneSearchRow& row) {
  records::TuneSearchRow search = StoreExecutor::open_search(row);
  search_id_ = search.id;
  return search;
}

bool SlurmTuneExecutor::train_to(const std::vector<int64_t>& ids, int epoch) {
  for (;;) {
    if (train::stop_requested()) return false;
    // The latest task of each run for this step.
    std::map<int64_t, records::TuneJobRow> latest;
    for (const records::TuneJobRow& job : store_.tune_jobs(search_id_)) {
      if (job.epoch != epoch) continue;
      auto [it, added] = latest.emplace(job.run_id, job);
      if (!added && job.attempt > it->second.attempt) it->second = job;
    }
    std::vector<std::pair<int64_t, int>> to_submit;
    std::vector<records::TuneJobRow> in_flight;
    for (const int64_t id : ids) {
      const records::RunRow run = *store_.find_run(id);
      const auto job = latest.find(id);
      const bool ours = job != latest.end();
      if (run.epochs_done > epoch || records::is_settled(run.status)) continue;
      if (run.status == records::RunStatus::kFailed && (!ours || given_up_.count(id))) continue;
      if (!ours) {
        to_submit.emplace_back(id, 1);
      } else if (job->second.ended_at.empty()) {
        in_flight.push_back(job->second);
      } else if (job->second.attempt < kTuneJobAttempts) {
        log::warn("tune: run " + run.name + " did not get to epoch " + std::to_string(epoch) +
                  " in Slurm job " + job->second.job_id + "_" + std::to_string(job->second.task) +
                  ": " + failure(job->second) + "\n  submitting it once more");
        to_submit.emplace_back(id, job->second.attempt + 1);
      } else {
        const std::string why = "Slurm job " + job->second.job_id + "_" +
                                std::to_string(job->second.task) + " (attempt " +
                                std::to_string(job->second.attempt) + "): " + failure(job->second);
        log::warn("tune: run " + run.name + " failed: " + why);
        if (run.status != records::RunStatus::kFailed) {
          store_.mark_running(id, options_.provenance);
          store_.finish_run(id, records::RunStatus::kFailed, log::clipped(why, 2000), "");
        }
        given_up_.insert(id);
        ++tally_.failed;
        values_stale_ = true;
      }
    }
    if (!to_submit.empty()) {
      for (records::TuneJobRow& job : submit(to_submit, epoch)) in_flight.push_back(job);
    }
    if (in_flight.empty()) {
      if (to_submit.empty()) return true;  // every run got there, or failed for good
      continue;
    }
    if (!wait(in_flight)) {
      std::set<std::string> jobs;
      for (const auto& job : in_flight) jobs.insert(job.job_id);
      std::string list;
      for (const std::string& id : jobs) list += (list.empty() ? "" : " ") + id;
      log::info("tune: stopped waiting; Slurm job(s) " + list +
                " go on: run the command again "
                "to wait for them and merge them (or scancel " +
                list + ")");
      return false;
    }
    merge_back(in_flight);
    values_stale_ = true;
  }
}

std::vector<records::TuneJobRow> SlurmTuneExecutor::submit(
    const std::vector<std::pair<int64_t, int>>& runs, int epoch) {
  Script s;
  s.epoch = epoch;
  s.stop = epoch < plan_.epochs - 1;
  // A folder of its own (a search killed before it recorded a job it had submitted makes the
  // step again: the folder of that job stays its own).
  const std::string stem = slurm_.jobs_dir + "/s" + std::to_string(search_id_) + "-e" +
                           std::to_string(epoch) + "-r" + std::to_string(runs.front().first) +
                           "-a" + std::to_string(runs.front().second);
  std::error_code ec;
  s.dir = stem;
  for (int again = 2; fs::exists(s.dir, ec); ++again) s.dir = stem + "-" + std::to_string(again);
  s.path = s.dir + "/job.sbatch";
  fs::create_directories(s.dir, ec);
  if (ec) {
    throw EnvironmentError("cannot create " + s.dir + " for the tune's Slurm tasks: " +
                           ec.message() + "; choose another --jobs-dir");
  }
  const std::string shared = plan_.base.at("checkpoint.dir").get<std::string>();
  std::vector<records::TuneJobRow> jobs;
  for (size_t k = 0; k < runs.size(); ++k) {
    const records::RunRow run = *store_.find_run(runs[k].first);
    records::TuneJobRow job;
    job.search_id = search_id_;
    job.run_id = run.id;
    job.epoch = epoch;
    job.attempt = runs[k].second;
    job.task = static_cast<int>(k);
    job.task_db = s.dir + "/task-" + std::to_string(k) + ".sqlite";
    job.log_path = s.dir + "/task-" + std::to_string(k) + ".out";
    // The sweep's shared checkpoint.dir holds one folder per task database (each claims its own).
    const std::string dir = shared.empty()
                                ? ""
                                : shared + "/tune-jobs/" + fs::path(s.dir).filename().string() +
                                      "/task-" + std::to_string(k);
    store::Store(job.task_db).copy_runs(store_.path(), {run.id}, [&](const std::string& json) {
      if (dir.empty()) return json;
      Config config = Config::from_json(json, "run " + run.name);
      config.set("checkpoint.dir", dir);
      return config.canonical_json();
    });
    s.runs.push_back(run.name);
    s.dbs.push_back(job.task_db);
    jobs.push_back(job);
  }
  for (const std::string& name : s.runs) require_one_line("run name", name);
  write_executable(s.path, script_text(s, slurm_, plan_.sweep.name, options_.training.threads));
  const ProgramRun sbatch = run_program({"sbatch", "--parsable", s.path});
  if (!sbatch.ok()) {
    throw EnvironmentError("sbatch " + s.path + " failed (" + sbatch.outcome() +
                           "; its message is above): install Slurm's client commands, or run "
                           "the search where they reach the cluster");
  }
  const std::string job_id = parsable_job_id(sbatch.out, s.path);
  for (records::TuneJobRow& job : jobs) job.job_id = job_id;
  store_.record_tune_jobs(jobs);
  jobs = [&] {  // as stored (submitted_at)
    std::vector<records::TuneJobRow> stored;
    for (const auto& row : store_.tune_jobs(search_id_)) {
      if (row.job_id == job_id) stored.push_back(row);
    }
    return stored;
  }();
  log::info("tune: submitted Slurm array job " + job_id + ": " + std::to_string(runs.size()) +
            " run(s) to " + (s.stop ? "epoch " + std::to_string(epoch) : "their end") +
            "; script and logs in " + s.dir);
  return jobs;
}

bool SlurmTuneExecutor::wait(std::vector<records::TuneJobRow>& jobs) {
  std::set<std::string> warned;
  for (;;) {
    std::map<std::string, JobQuery> queries;
    for (const auto& job : jobs) {
      if (!queries.count(job.job_id)) {
        queries[job.job_id] = query_job(job.job_id, fs::path(job.task_db).parent_path());
      }
    }
    bool all_ended = true;
    for (records::TuneJobRow& job : jobs) {
      const JobQuery& q = queries[job.job_id];
      if (!q.error.empty()) {
        if (warned.insert(q.error).second) log::warn("tune: " + q.error + "; asking again");
        all_ended = false;
        continue;
      }
      const auto task = q.tasks.find(job.task);
      std::string state = job.state;
      bool ended = false;
      if (q.gone) {
        ended = true;  // judged by its database
        if (!job_ended(parse_job_state(job.state)) && job.state.rfind("UNKNOWN", 0) != 0) {
          state = "UNKNOWN (gone from squeue and sacct; last seen " + job.state + ")";
        }
      } else if (task != q.tasks.end()) {
        state = task->second.word;
        ended = job_ended(task->second.state);
      }
      if (state != job.state) {
        job.state = state;
        store_.update_tune_job(job);
      }
      all_ended = all_ended && ended;
    }
    if (all_ended) return true;
    for (double slept = 0; slept < slurm_.poll_seconds; slept += 0.1) {
      if (train::stop_requested()) return false;
      nap(std::min(0.1, slurm_.poll_seconds - slept));
    }
  }
}

void SlurmTuneExecutor::merge_back(std::vector<records::TuneJobRow>& jobs) {
  std::vector<std::string> inputs;
  std::error_code ec;
  for (const auto& job : jobs) {
    if (fs::exists(job.task_db, ec)) inputs.push_back(job.task_db);
  }
  auto merge = [&](const std::vector<std::string>& some) {
    const records::MergeReport report = store_.merge(some, train::checkpoint_layout());
    int epochs = 0;
    for (const records::MergeCount& count : report.inputs) epochs += count.epochs;
    log::info("tune: merged " + std::to_string(some.size()) +
              " task database(s): " + std::to_string(epochs) + " epochs copied");
  };
  try {
    if (!inputs.empty()) merge(inputs);
  } catch (const StoreError& e) {  // one at a time: a bad one is that task's failure alone
    log::warn(std::string("tune: ") + e.what() + "; merging the task databases one by one");
    for (const std::string& input : inputs) {
      try {
        merge({input});
      } catch (const StoreError& one) {
        log::warn(std::string("tune: ") + one.what() + "; its run counts as not trained");
      }
    }
  }
  // A signal may have cut a merge short: the tasks stay in flight, merged again next time (a
  // merge done twice changes nothing), rather than count as not trained.
  if (train::stop_requested()) return;
  for (records::TuneJobRow& job : jobs) {
    job.ended_at = "now";
    store_.update_tune_job(job);
  }
}

std::string SlurmTuneExecutor::failure(const records::TuneJobRow& job) const {
  std::string why = "job state " + job.state;
  try {
    if (auto task = store::Store::open_read_only(job.task_db)) {
      const records::RunRow run = *store_.find_run(job.run_id);
      if (auto copy = task->find_run(run.name); copy && !copy->message.empty()) {
        why += ", run " + records::to_string(copy->status) + ": " + log::printable(copy->message);
      }
    }
  } catch (const Error& e) {
    why += " (its database " + job.task_db + " cannot be read: " + e.what() + ")";
  }
  return why + "; log " + job.log_path + log_tail(job.log_path);
}

}  // namespace amptune::app
