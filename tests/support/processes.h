// Processes a test watches, read from /proc (Linux): the children of a process, whether one still
// lives, and a guard that kills what a test leaves behind. Header-only.
//
//   testing::KillOnExit guard;                        // SIGKILLs every survivor when it goes
//   for (pid_t pid : testing::descendants_of(top)) guard.watch(pid);
//   ::kill(top, SIGKILL);
//   EXPECT_EQ(guard.survivors(5.0), std::vector<pid_t>{});  // polls every 50 ms up to 5 s
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/scratch.h"  // read_file

namespace amptune::testing {

// The fields of /proc/<pid>/stat a test needs; nullopt when the process does not exist.
struct ProcStat {
  char state = '?';  // R, S, Z (a zombie: ended, not reaped yet), ...
  pid_t ppid = 0;
  unsigned long long start = 0;  // clock ticks after boot: tells a reused pid apart
};

inline std::optional<ProcStat> proc_stat(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");  // "" when gone
  const size_t close = stat.rfind(')');  // the name in parentheses may hold spaces
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  ProcStat out;
  std::string skip;
  if (!(rest >> out.state >> out.ppid)) return std::nullopt;
  for (int field = 5; field < 22; ++field) rest >> skip;  // pgrp .. itrealvalue
  rest >> out.start;
  return out;
}

// The processes whose parent is `parent` now.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    const auto stat = proc_stat(pid);
    if (stat && stat->ppid == parent) out.push_back(pid);
  }
  return out;
}

// Its command line, arguments separated by NULs ("" when it is gone): a child differs from its
// parent once it has executed its program.
inline std::string cmdline(pid_t pid) {
  return read_file("/proc/" + std::to_string(pid) + "/cmdline");
}

// Children, their children, ... of `root` now (not `root`), parents before their children.
inline std::vector<pid_t> descendants_of(pid_t root) {
  std::vector<pid_t> out = children_of(root);
  for (size_t i = 0; i < out.size(); ++i) {
    for (pid_t child : children_of(out[i])) out.push_back(child);
  }
  return out;
}

// Kills (SIGKILL) the processes it watches that still live when it goes, also when the test
// failed half-way: none is left behind. A pid is known with its start time, so a pid the system
// reused for another process is neither killed nor counted.
class KillOnExit {
 public:
  KillOnExit() = default;
  KillOnExit(const KillOnExit&) = delete;
  KillOnExit& operator=(const KillOnExit&) = delete;
  ~KillOnExit() {
    for (pid_t pid : living()) ::kill(pid, SIGKILL);
  }

  void watch(pid_t pid) {
    if (const auto stat = proc_stat(pid)) watched_.push_back({pid, stat->start});
  }
  size_t watched() const { return watched_.size(); }

  // The watched processes that live (a zombie has ended).
  std::vector<pid_t> living() const {
    std::vector<pid_t> out;
    for (const Watched& w : watched_) {
      const auto stat = proc_stat(w.pid);
      if (stat && stat->start == w.start && stat->state != 'Z') out.push_back(w.pid);
    }
    return out;
  }

  // The watched processes that still live after up to `seconds` (polled every 50 ms): a bound
  // for the kernel to deliver SIGKILL, not a timing.
  std::vector<pid_t> survivors(double seconds) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::vector<pid_t> left = living();
    while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      left = living();
    }
    return left;
  }

 private:
  struct Watched {
    pid_t pid;
    unsigned long long start;
  };
  std::vector<Watched> watched_;
};

}  // namespace amptune::testing
