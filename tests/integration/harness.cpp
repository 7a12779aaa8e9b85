#include "integration/harness.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace amptune::testing {
namespace fs = std::filesystem;


std::vector<records::EpochRow> epochs_of(const std::string& db, const std::string& run) {
  store::Store s(db);
  auto r = s.find_run(run);
  EXPECT_TRUE(r.has_value()) << run;
  return r ? s.epochs(r->id) : std::vector<records::EpochRow>{};
}

TinyOptions quick_tiny(const std::string& tail, int epochs) {
  TinyOptions o;
  o.epochs = epochs;
  o.train_n = 64;
  o.test_n = 32;
  o.loader_workers = 1;
  o.schedule = "";
  o.tail = tail;
  return o;
}

TinySweep make_tiny_sweep(const TinyOptions& o) {
  TinySweep f;
  f.dir = scratch_dir(o.dir_tag);
  write_tiny_idx(f.dir + "/data", o.train_n, o.test_n);
  f.db = f.dir + "/results/amptune.sqlite";
  fs::create_directories(f.dir + "/results");
  f.yaml = f.dir + "/sweep.yaml";
  write_file(f.yaml, "name: " + o.name + "\n"
                     "base:\n"
                     "  model: " + o.model + "\n"
                     "  data: {format: idx, root: " + f.dir + "/data, val_split: t10k, "
                     "mean: [0.3], std: [0.3],\n"
                     "         batch_size: 16, workers: " + std::to_string(o.loader_workers) + "}\n"
                     "  optim: {name: sgd, lr: 0.05}\n"
                     "  schedule: {epochs: " + std::to_string(o.epochs) + o.schedule + "}\n"
                     "  threads: 1\n" + o.base + o.tail);
  return f;
}

pid_t spawn_program(const std::vector<std::string>& argv, const std::string& cwd,
                    const SpawnOptions& options) {
  if (argv.empty()) throw std::runtime_error("spawn_program: empty argv");
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (options.die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::chdir(cwd.c_str()) != 0) _exit(126);
    std::string out = cwd + "/" + options.log_stem + ".out";
    std::string err = cwd + "/" + options.log_stem + ".err";
    if (!std::freopen("/dev/null", "r", stdin) || !std::freopen(out.c_str(), "w", stdout) ||
        !std::freopen(err.c_str(), "w", stderr)) {
      _exit(126);
    }
    for (const auto& [name, value] : options.env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

pid_t spawn_amptune(const std::vector<std::string>& args, const std::string& cwd,
                    const SpawnOptions& options) {
  std::vector<std::string> argv = {AMPTUNE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn_program(argv, cwd, options);
}

pid_t spawn_amptune(const std::vector<std::string>& args, const std::string& cwd) {
  return spawn_amptune(args, cwd, SpawnOptions{});
}

namespace {

// Polls `pid` until it exits or `seconds` pass; the wait status, or nullopt on timeout.
std::optional<int> reap_within(pid_t pid, double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return std::nullopt;  // not our child (already reaped)
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int wait_exit_code(pid_t pid, double timeout_seconds) {
  const std::optional<int> status = reap_within(pid, timeout_seconds);
  if (!status) {
    ADD_FAILURE() << "process " << pid << " still ran after " << timeout_seconds << " s; killed";
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

StopOnExit::~StopOnExit() {
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != 0) return;  // reaped already, or exited just now
  ::kill(pid_, SIGTERM);
  if (reap_within(pid_, 10)) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

Result run_amptune(const std::vector<std::string>& args, const std::string& cwd) {
  return run_amptune(args, cwd, {});
}

Result run_amptune(const std::vector<std::string>& args, const std::string& cwd,
                   const std::vector<std::pair<std::string, std::string>>& env) {
  pid_t pid = spawn_amptune(args, cwd, SpawnOptions(env, "child"));
  Result r;
  r.exit_code = wait_exit_code(pid);
  r.out = read_file(cwd + "/child.out");
  r.err = read_file(cwd + "/child.err");
  return r;
}

}  // namespace amptune::testing
