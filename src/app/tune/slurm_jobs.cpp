// app/tune/slurm_jobs.h: Slurm job states parsed, and asked of squeue and sacct.
#include "app/tune/slurm_jobs.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

#include "app/run/program.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::app {
namespace {

// Slurm's words (long forms, and squeue's short codes where they differ) and what they mean.
const std::pair<const char*, JobState> kWords[] = {{"PENDING", JobState::kPending},
                                                   {"PD", JobState::kPending},
                                                   {"CONFIGURING", JobState::kConfiguring},
                                                   {"CF", JobState::kConfiguring},
                                                   {"RUNNING", JobState::kRunning},
                                                   {"R", JobState::kRunning},
                                                   {"SUSPENDED", JobState::kSuspended},
                                                   {"S", JobState::kSuspended},
                                                   {"STOPPED", JobState::kSuspended},
                                                   {"ST", JobState::kSuspended},
                                                   {"COMPLETING", JobState::kCompleting},
                                                   {"CG", JobState::kCompleting},
                                                   {"REQUEUED", JobState::kRequeued},
                                                   {"RQ", JobState::kRequeued},
                                                   {"REQUEUE_FED", JobState::kRequeued},
                                                   {"REQUEUE_HOLD", JobState::kRequeued},
                                                   {"RESIZING", JobState::kResizing},
                                                   {"RS", JobState::kResizing},
                                                   {"COMPLETED", JobState::kCompleted},
                                                   {"CD", JobState::kCompleted},
                                                   {"FAILED", JobState::kFailed},
                                                   {"F", JobState::kFailed},
                                                   {"CANCELLED", JobState::kCancelled},
                                                   {"CA", JobState::kCancelled},
                                                   {"TIMEOUT", JobState::kTimeout},
                                                   {"TO", JobState::kTimeout},
                                                   {"NODE_FAIL", JobState::kNodeFail},
                                                   {"NF", JobState::kNodeFail},
                                                   {"PREEMPTED", JobState::kPreempted},
                                                   {"PR", JobState::kPreempted},
                                                   {"OUT_OF_MEMORY", JobState::kOutOfMemory},
                                                   {"OOM", JobState::kOutOfMemory},
                                                   {"BOOT_FAIL", JobState::kBootFail},
                                                   {"BF", JobState::kBootFail},
                                                   {"DEADLINE", JobState::kDeadline},
                                                   {"DL", JobState::kDeadline},
                                                   {"REVOKED", JobState::kRevoked},
                                                   {"RV", JobState::kRevoked},
                                                   {"SPECIAL_EXIT", JobState::kSpecialExit},
                                                   {"SE", JobState::kSpecialExit}};

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

[[noreturn]] void bad_line(const std::string& line, const std::string& why) {
  throw EnvironmentError("squeue/sacct printed '" + log::clipped(log::printable(line), 120) +
                         "', not a job line (" + why + ")");
}

// The task indices of "[1-3,7%2]" (the brackets stripped by the caller): ranges and single
// indices, the throttle after % ignored.
std::vector<int> expand_range(const std::string& line, std::string spec) {
  spec = spec.substr(0, spec.find('%'));
  std::vector<int> tasks;
  std::istringstream parts(spec);
  for (std::string part; std::getline(parts, part, ',');) {
    const size_t dash = part.find('-');
    const std::string first = part.substr(0, dash);
    const std::string last = dash == std::string::npos ? first : part.substr(dash + 1);
    const size_t colon = last.find(':');  // a step ("0-14:2")
    const std::string end = last.substr(0, colon);
    if (!all_digits(first) || !all_digits(end) || first.size() > 9 || end.size() > 9) {
      bad_line(line, "array range '" + part + "'");
    }
    const int step =
        colon == std::string::npos ? 1 : std::max(1, std::atoi(last.c_str() + colon + 1));
    for (int k = std::stoi(first); k <= std::stoi(end); k += step) tasks.push_back(k);
  }
  return tasks;
}

// The output of a command run_program wrote to `path`.
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

JobState parse_job_state(const std::string& word) {
  std::string w = trimmed(word);
  w = w.substr(0, w.find(' '));                        // "CANCELLED by 1000"
  while (!w.empty() && w.back() == '+') w.pop_back();  // sacct's mark of a cut word
  std::transform(w.begin(), w.end(), w.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const auto& [name, state] : kWords) {
    if (w == name) return state;
  }
  return JobState::kOther;
}

bool job_ended(JobState state) {
  switch (state) {
    case JobState::kPending:
    case JobState::kConfiguring:
    case JobState::kRunning:
    case JobState::kSuspended:
    case JobState::kCompleting:
    case JobState::kRequeued:
    case JobState::kResizing:
    case JobState::kOther:  // a word this build does not know: wait, rather than judge early
      return false;
    default:
      return true;
  }
}

std::vector<TaskState> parse_job_lines(const std::string& text) {
  std::vector<TaskState> tasks;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (trimmed(line).empty()) continue;
    const size_t bar = line.find('|');
    if (bar == std::string::npos) bad_line(line, "no '|'");
    const std::string id = trimmed(line.substr(0, bar));
    const std::string rest = line.substr(bar + 1);
    const std::string word = trimmed(rest.substr(0, rest.find('|')));
    if (id.find('.') != std::string::npos || id.find('+') != std::string::npos) continue;
    const size_t under = id.find('_');
    TaskState t;
    t.job_id = id.substr(0, under);
    t.state = parse_job_state(word);
    t.word = word;
    if (!all_digits(t.job_id)) bad_line(line, "job id '" + t.job_id + "'");
    if (under == std::string::npos) {
      tasks.push_back(t);
      continue;
    }
    std::string index = id.substr(under + 1);
    if (index.size() >= 2 && index.front() == '[' && index.back() == ']') {
      for (const int k : expand_range(line, index.substr(1, index.size() - 2))) {
        t.task = k;
        tasks.push_back(t);
      }
      continue;
    }
    if (!all_digits(index) || index.size() > 9) bad_line(line, "array task '" + index + "'");
    t.task = std::stoi(index);
    tasks.push_back(t);
  }
  return tasks;
}

JobQuery query_job(const std::string& job_id, const std::string& scratch_dir) {
  JobQuery query;
  const std::string log = scratch_dir + "/query-" + job_id + ".out";
  // stdout and stderr share the file: a warning line on stderr holds no '|' and is left out.
  auto ask = [&](const std::vector<std::string>& argv) {
    const ProgramRun run = run_program(argv, "", log);
    std::string text, jobs;
    text = read_text(log);
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.find('|') != std::string::npos) jobs += line + "\n";
    }
    return std::make_tuple(run, text, jobs);
  };
  // squeue prints nothing on stdout for a job it no longer holds ("Invalid job id specified" on
  // stderr, exit 1): then sacct.
  const auto [squeue, squeue_text, squeue_jobs] =
      ask({"squeue", "-h", "-r", "-t", "all", "-j", job_id, "-o", "%i|%T"});
  std::vector<TaskState> tasks;
  if (squeue.ok()) {
    tasks = parse_job_lines(squeue_jobs);
  } else if (squeue_text.find("Invalid job id") == std::string::npos) {
    query.error = "squeue " + squeue.outcome() + ": " + log::clipped(trimmed(squeue_text), 200);
    return query;
  }
  if (tasks.empty()) {
    const auto [sacct, sacct_text, sacct_jobs] =
        ask({"sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,ExitCode"});
    if (sacct.ok()) tasks = parse_job_lines(sacct_jobs);
  }
  for (const TaskState& t : tasks) {
    if (t.job_id == job_id) query.tasks[t.task] = t;
  }
  query.gone = query.tasks.empty();
  return query;
}

}  // namespace amptune::app
