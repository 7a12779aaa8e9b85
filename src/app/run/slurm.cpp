#include "app/run/slurm.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "app/run/program.h"
#include "app/run/shard.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"

namespace amptune::app {

namespace fs = std::filesystem;

// `text` as one bash word: single-quoted, a single quote as '\''.
std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A value written into a script line (a #SBATCH directive or a comment cannot be quoted): no
// line break or other control character, which would end the line and start a command.
void require_one_line(const std::string& what, const std::string& value) {
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      throw UsageError(what + " holds a line break or another control character; a batch "
                       "script line cannot: '" + log::printable(value) + "'");
    }
  }
}

// Written whole (core/files.h), then made executable: sbatch reads the script, so the moment
// between the rename and the chmod shows a complete script without its x bits.
void write_executable(const std::string& path, const std::string& text) {
  write_file_atomic(path, text);
  std::error_code ec;
  fs::permissions(path,
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  ec);
  if (ec) throw EnvironmentError("cannot make " + path + " executable: " + ec.message());
}

// The job id `sbatch --parsable` printed ("123" or "123;cluster").
std::string parsable_job_id(const std::string& printed, const std::string& script) {
  std::string id = printed.substr(0, printed.find_first_of(";\n"));
  id.erase(std::remove_if(id.begin(), id.end(), [](char c) { return c == ' ' || c == '\r'; }),
           id.end());
  if (id.empty() ||
      !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw EnvironmentError("sbatch --parsable " + script + " printed '" + printed +
                           "', not a job id");
  }
  return id;
}

namespace {

void check(const SlurmOptions& o) {
  if (o.shards < 0) throw UsageError("--array must be at least 1, got " + std::to_string(o.shards));
  if (o.nodes_per_run < 1 || o.tasks_per_node < 1) {
    throw UsageError("--nodes-per-run and --tasks-per-node must be at least 1");
  }
  if (o.gpus_per_task < 0 || o.cpus_per_task < 0) {
    throw UsageError("--gpus-per-task and --cpus-per-task cannot be negative");
  }
  for (const auto& [what, value] : {std::pair<std::string, std::string>{"--partition", o.partition},
                                    {"--time", o.time},
                                    {"--into", o.into},
                                    {"the sweep path", o.sweep_path},
                                    {"--out", o.script},
                                    {"the working directory (run amptune slurm from another)",
                                     o.workdir},
                                    {"the amptune binary's path", o.binary},
                                    {"the command line", o.command_line}}) {
    require_one_line(what, value);
  }
  for (const auto& s : o.sets) require_one_line("--set", s);
  for (const auto& s : o.only) require_one_line("--only", s);
  for (const auto& option : o.sbatch) {
    require_one_line("--sbatch", option);
    if (option.empty() || option[0] != '-') {
      throw UsageError("--sbatch takes an sbatch option such as --account=proj, not '" + option +
                       "'");
    }
  }
}

// The #SBATCH lines both jobs share.
std::string shared_directives(const SlurmOptions& o) {
  std::string out = "#SBATCH --chdir=" + o.workdir + "\n";
  if (!o.partition.empty()) out += "#SBATCH --partition=" + o.partition + "\n";
  if (!o.time.empty()) out += "#SBATCH --time=" + o.time + "\n";
  for (const auto& option : o.sbatch) out += "#SBATCH " + option + "\n";
  return out;
}

std::string array_script(const Plan& plan, const SlurmOptions& o, const SlurmJob& job,
                         const std::string& log_dir) {
  const std::string& sweep = plan.sweep.name;
  const std::string n = std::to_string(job.shards);
  const int ranks = o.nodes_per_run * o.tasks_per_node;
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# The shards of sweep " << sweep << " (" << plan.cells.size()
    << " cells) as a Slurm array job, written by: " << o.command_line << "\n"
    << "# Array task K trains shard K/" << n << " into results/" << sweep << ".shard-K-of-" << n
    << ".sqlite; cells per shard:";
  for (int k = 0; k < job.shards; ++k)
    s << (k > 0 && k % 20 == 0 ? "\n#" : "") << " " << job.cells[k];
  s << "\n"
    << "# Submit it, then " << job.merge_path << " with --dependency=afterany:<this job's id>\n"
    << "# (amptune slurm --submit does both). Submitting it again continues every shard from its\n"
    << "# database; sbatch --array=K " << job.array_path << " runs shard K alone.\n"
    << "#SBATCH --job-name=amptune-" << sweep << "\n"
    << "#SBATCH --array=0-" << job.shards - 1 << "\n"
    << "#SBATCH --output=" << log_dir << "/" << sweep << "-%A_%a.out\n"
    << "#SBATCH --nodes=" << o.nodes_per_run << "\n"
    << "#SBATCH --ntasks-per-node=" << o.tasks_per_node << "\n";
  if (o.gpus_per_task > 0) s << "#SBATCH --gpus-per-task=" << o.gpus_per_task << "\n";
  if (o.cpus_per_task > 0) s << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
  s << shared_directives(o) << "set -euo pipefail\n"
    << "cd " << shell_quote(o.workdir) << "\n"
    << "mkdir -p results\n"
    << "# "
    << (ranks > 1 ? std::to_string(ranks) +
                        " processes per run, started by srun "
                        "(docs/DISTRIBUTED.md)"
                  : "one process per run")
    << "\n"
    << "exec " << (ranks > 1 ? "srun " : "") << shell_quote(o.binary) << " run "
    << shell_quote(o.sweep_path)
    << " --shard \"$SLURM_ARRAY_TASK_ID/" << n << "\" --no-progress";
  for (const auto& set : o.sets) s << " --set " << shell_quote(set);
  for (const auto& only : o.only) s << " --only " << shell_quote(only);
  s << "\n";
  return s.str();
}

std::string merge_script(const Plan& plan, const SlurmOptions& o, const SlurmJob& job,
                         const std::string& log_dir) {
  const std::string& sweep = plan.sweep.name;
  const std::string n = std::to_string(job.shards);
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Merges the shard databases of sweep " << sweep << " into " << o.into
    << " once the array job\n"
    << "# " << job.array_path << " has ended (submit with --dependency=afterany:<its id>), "
    << "written by: " << o.command_line << "\n"
    << "#SBATCH --job-name=amptune-" << sweep << "-merge\n"
    << "#SBATCH --output=" << log_dir << "/" << sweep << "-merge-%j.out\n"
    << "#SBATCH --ntasks=1\n"
    << shared_directives(o) << "set -euo pipefail\n"
    << "cd " << shell_quote(o.workdir) << "\n"
    << "shards=()\n"
    << "missing=0\n"
    << "for k in $(seq 0 " << job.shards - 1 << "); do\n"
    << "  db=\"results/" << sweep << ".shard-$k-of-" << n << ".sqlite\"\n"
    << "  if [ -f \"$db\" ]; then\n"
    << "    shards+=(\"$db\")\n"
    << "  else\n"
    << "    echo \"amptune merge job: $db is missing (did array task $k run?)\" >&2\n"
    << "    missing=1\n"
    << "  fi\n"
    << "done\n"
    << "[ ${#shards[@]} -gt 0 ] || exit 5\n"
    << shell_quote(o.binary) << " merge \"${shards[@]}\" --into " << shell_quote(o.into) << "\n"
    << shell_quote(o.binary) << " status --db " << shell_quote(o.into) << " --sweep "
    << shell_quote(sweep) << "\n"
    << "exit $((missing ? 5 : 0))\n";
  return s.str();
}

}  // namespace

SlurmJob slurm_job(const Plan& plan, const SlurmOptions& options) {
  check(options);
  SlurmJob job;
  job.shards = options.shards > 0
                   ? options.shards
                   : static_cast<int>(std::clamp<size_t>(plan.cells.size(), 1, kMaxDefaultShards));
  for (int size : shard_sizes(plan_shards(cell_hashes(plan.cells), job.shards), job.shards)) {
    job.cells.push_back(static_cast<size_t>(size));
  }
  job.array_path = options.script;
  const fs::path script(options.script);
  job.merge_path = (script.parent_path() / (script.stem().string() + ".merge.sbatch")).string();
  const fs::path dir = (fs::path(options.workdir) / script).lexically_normal().parent_path();
  job.array_script = array_script(plan, options, job, dir.string());
  job.merge_script = merge_script(plan, options, job, dir.string());
  return job;
}

void write_slurm_job(const SlurmJob& job) {
  const fs::path dir = fs::path(job.array_path).parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) {
    throw EnvironmentError("cannot create " + dir.string() +
                           " for the batch scripts: " + ec.message() + "; choose another --out");
  }
  write_executable(job.array_path, job.array_script);
  write_executable(job.merge_path, job.merge_script);
}

SubmittedJobs submit_slurm_job(const SlurmJob& job) {
  SubmittedJobs jobs;
  const ProgramRun array = run_program({"sbatch", "--parsable", job.array_path});
  if (array.exec_error) {
    throw EnvironmentError("cannot run sbatch (" + array.outcome() +
                           "): install Slurm's client commands (Debian: slurm-client), or submit "
                           "from a machine that has them: sbatch " +
                           job.array_path + ", then sbatch --dependency=afterany:<its job id> " +
                           job.merge_path);
  }
  if (!array.ok()) {
    throw EnvironmentError("sbatch " + job.array_path + " failed (" + array.outcome() +
                           "; its message is above); nothing was submitted");
  }
  jobs.array_job = parsable_job_id(array.out, job.array_path);
  const std::string after = "--dependency=afterany:" + jobs.array_job;
  const ProgramRun merge = run_program({"sbatch", "--parsable", after, job.merge_path});
  if (!merge.ok()) {
    throw EnvironmentError("array job " + jobs.array_job + " was submitted, but sbatch " +
                           job.merge_path + " failed (" + merge.outcome() +
                           "); submit the merge job with: sbatch " + after + " " + job.merge_path);
  }
  jobs.merge_job = parsable_job_id(merge.out, job.merge_path);
  return jobs;
}

}  // namespace amptune::app
