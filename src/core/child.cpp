#include "core/child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "core/error.h"

extern char** environ;

namespace amptune {
namespace {

// What failed in the child before its program ran (the first int of its report).
enum Stage : int { kOpenStdout = 1, kOpenStderr, kRedirect, kEnterDir, kExec, kTieToParent };

// Set while a ForwardSignals lives: its counts, and the actions it replaced (which a child gets
// back before exec).
volatile sig_atomic_t g_signal_count = 0;
volatile sig_atomic_t g_last_signal = 0;
bool g_forwarding = false;
struct sigaction g_old_int {};
struct sigaction g_old_term {};

void on_forwarded_signal(int sig) {
  g_last_signal = sig;
  g_signal_count = g_signal_count + 1;
}

// Strings and the char* array exec wants, built before fork: after fork in a multi-threaded
// process the child may only make async-signal-safe calls (no allocation).
struct CStrings {
  std::vector<std::string> strings;
  std::vector<char*> pointers;
  char* const* data() {
    pointers.clear();
    for (std::string& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
    return pointers.data();
  }
};

// This process's environment with spec.env added or replacing and spec.unset_env removed.
std::vector<std::string> child_environment(const ChildSpec& spec) {
  std::set<std::string_view> replaced(spec.unset_env.begin(), spec.unset_env.end());
  for (const auto& [name, value] : spec.env) replaced.insert(name);
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (!replaced.count(entry.substr(0, entry.find('=')))) out.emplace_back(entry);
  }
  for (const auto& [name, value] : spec.env) out.push_back(name + "=" + value);
  return out;
}

// Everything the child needs between fork and exec, made before fork.
struct Prepared {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;  // null: this process's
  const char* stdout_path = nullptr;
  const char* stderr_path = nullptr;
  bool same_file = false;  // stdout and stderr go to one file
  const char* dir = nullptr;
  int capture_fd = -1;  // the pipe's write end for a captured stdout
  int report_fd = -1;   // the close-on-exec pipe that tells the parent what failed
  bool search_path = true;
  pid_t parent = 0;  // this process, whose death the child follows
};

// The child after fork: async-signal-safe calls only. Never returns.
[[noreturn]] void become(const Prepared& p) {
  if (g_forwarding) {
    ::sigaction(SIGINT, &g_old_int, nullptr);
    ::sigaction(SIGTERM, &g_old_term, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const auto fail = [&](int stage) {
    const int report[2] = {stage, errno};
    [[maybe_unused]] const ssize_t ignored = ::write(p.report_fd, report, sizeof report);
    ::_exit(127);
  };
  // SIGKILL when the parent's forking thread ends. The kernel watches from this call on: a
  // parent that died since fork left this child to another (getppid changed); it must not run.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(kTieToParent);
  if (::getppid() != p.parent) ::_exit(128 + SIGKILL);
  const auto redirect = [&](const char* path, int stage, int target) {
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) fail(stage);
    // dup2 onto another descriptor clears close-on-exec; onto itself it does nothing.
    if (fd == target ? ::fcntl(fd, F_SETFD, 0) < 0 : ::dup2(fd, target) < 0) fail(kRedirect);
    if (p.same_file && ::dup2(fd, STDERR_FILENO) < 0) fail(kRedirect);
  };
  if (p.stdout_path) redirect(p.stdout_path, kOpenStdout, STDOUT_FILENO);
  if (p.stderr_path && !p.same_file) redirect(p.stderr_path, kOpenStderr, STDERR_FILENO);
  if (p.capture_fd >= 0 && ::dup2(p.capture_fd, STDOUT_FILENO) < 0) fail(kRedirect);
  if (p.dir && ::chdir(p.dir) != 0) fail(kEnterDir);
  char* const* envp = p.envp ? p.envp : environ;
  if (p.search_path) {
    ::execvpe(p.program, p.argv, envp);
  } else {
    ::execve(p.program, p.argv, envp);
  }
  fail(kExec);
  ::_exit(127);  // not reached
}

using Clock = std::chrono::steady_clock;

Clock::duration as_duration(double seconds) {  // capped at ~30 years: no overflow
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(seconds, 0.0, 1e9)));
}

}  // namespace

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    default:
      return "unnamed";
  }
}

bool ChildEnd::exited() const { return !lost && WIFEXITED(raw); }
bool ChildEnd::signaled() const { return !lost && WIFSIGNALED(raw); }
int ChildEnd::exit_status() const { return exited() ? WEXITSTATUS(raw) : -1; }
int ChildEnd::term_signal() const { return signaled() ? WTERMSIG(raw) : 0; }
bool ChildEnd::success() const { return exited() && exit_status() == 0; }

int ChildEnd::code() const {
  if (signaled()) return 128 + term_signal();
  if (exited()) return exit_status();
  return static_cast<int>(ExitCode::kInternal);
}

std::string ChildEnd::describe() const {
  if (signaled()) {
    return "was killed by signal " + std::to_string(term_signal()) + " (" +
           signal_name(term_signal()) + ")";
  }
  if (exited()) return "exited with status " + std::to_string(exit_status());
  return std::string("ended, but its exit status is lost: ") + std::strerror(lost);
}

Child Child::start(const ChildSpec& spec) {
  // PR_SET_PDEATHSIG follows the forking thread: from a thread that may end first, the child
  // would be killed with it (child.h).
  if (::syscall(SYS_gettid) != ::getpid()) {
    throw std::logic_error(
        "Child::start called from a thread other than the main one: the child would be killed "
        "when that thread ends");
  }
  if (spec.argv.empty() || (spec.program.empty() && spec.argv[0].empty())) {
    throw UsageError("cannot start a child process: no program given");
  }
  const std::string name = spec.name.empty() ? spec.argv[0] : spec.name;
  Child child;
  child.program_ = spec.program.empty() ? spec.argv[0] : spec.program;
  child.stdout_path_ = spec.stdout_path;
  child.stderr_path_ = spec.stderr_path;
  child.dir_ = spec.dir;

  CStrings argv, envp;
  argv.strings = spec.argv;
  const bool own_env = !spec.env.empty() || !spec.unset_env.empty();
  if (own_env) envp.strings = child_environment(spec);
  Prepared p;
  p.program = child.program_.c_str();
  p.argv = argv.data();
  p.envp = own_env ? envp.data() : nullptr;
  p.stdout_path = spec.stdout_path.empty() ? nullptr : spec.stdout_path.c_str();
  p.stderr_path = spec.stderr_path.empty() ? nullptr : spec.stderr_path.c_str();
  p.same_file = p.stdout_path && spec.stdout_path == spec.stderr_path;
  p.dir = spec.dir.empty() ? nullptr : spec.dir.c_str();
  p.search_path = spec.search_path;
  p.parent = ::getpid();

  // The child's report (what failed, errno) comes back through a close-on-exec pipe; a
  // successful exec closes it unwritten.
  int report[2], output[2] = {-1, -1};
  if (::pipe2(report, O_CLOEXEC) != 0) {
    throw EnvironmentError("cannot start " + name + ": pipe: " + std::strerror(errno));
  }
  if (spec.capture_stdout && ::pipe2(output, O_CLOEXEC) != 0) {
    const int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    throw EnvironmentError("cannot start " + name + ": pipe: " + std::strerror(error));
  }
  p.report_fd = report[1];
  p.capture_fd = output[1];
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    for (int fd : {report[0], report[1], output[0], output[1]}) {
      if (fd >= 0) ::close(fd);
    }
    throw EnvironmentError("cannot start " + name + ": fork: " + std::strerror(error) +
                           " (process limit or memory)");
  }
  if (pid == 0) become(p);
  ::close(report[1]);
  if (output[1] >= 0) ::close(output[1]);
  child.pid_ = pid;
  child.stdout_fd_ = output[0];
  int failure[2] = {0, 0};
  ssize_t got;
  while ((got = ::read(report[0], failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (got > 0) {
    child.start_stage_ = failure[0];
    child.start_error_ = failure[1] ? failure[1] : EIO;
    child.wait();  // it exits 127 at once
  }
  return child;
}

Child::Child(Child&& other) noexcept { *this = std::move(other); }

Child& Child::operator=(Child&& other) noexcept {
  if (this == &other) return *this;
  release();
  pid_ = std::exchange(other.pid_, 0);
  start_error_ = other.start_error_;
  start_stage_ = other.start_stage_;
  program_ = std::move(other.program_);
  stdout_path_ = std::move(other.stdout_path_);
  stderr_path_ = std::move(other.stderr_path_);
  dir_ = std::move(other.dir_);
  stdout_fd_ = std::exchange(other.stdout_fd_, -1);
  end_ = std::exchange(other.end_, std::nullopt);
  return *this;
}

Child::~Child() { release(); }

void Child::release() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    reap(true);
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
  pid_ = 0;
  end_.reset();
}

std::string Child::start_failure() const {
  if (!start_error_) return "";
  std::string what;
  switch (start_stage_) {
    case kOpenStdout:
      what = "cannot open " + stdout_path_;
      break;
    case kOpenStderr:
      what = "cannot open " + stderr_path_;
      break;
    case kRedirect:
      what = "cannot redirect the standard streams of " + program_;
      break;
    case kEnterDir:
      what = "cannot enter directory " + dir_;
      break;
    case kTieToParent:
      what = "cannot make " + program_ + " die with amptune (prctl PR_SET_PDEATHSIG)";
      break;
    default:
      what = "cannot execute " + program_;
  }
  return what + ": " + std::strerror(start_error_);
}

void Child::reap(bool block) {
  if (end_ || pid_ <= 0) return;
  int raw = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &raw, block ? 0 : WNOHANG);
  } while (got < 0 && errno == EINTR && block);
  if (got == 0 || (got < 0 && errno == EINTR)) return;
  ChildEnd end;
  if (got < 0) {
    end.lost = errno;
  } else {
    end.raw = raw;
  }
  end_ = end;
}

std::optional<ChildEnd> Child::poll() {
  reap(false);
  return end_;
}

std::optional<ChildEnd> Child::wait_for(double seconds, ForwardSignals* forwarding) {
  const Clock::time_point deadline = Clock::now() + as_duration(seconds);
  for (;;) {
    if (forwarding) {
      if (const int sig = forwarding->take()) signal(sig);
    }
    if (auto end = poll()) return end;
    if (pid_ <= 0) return std::nullopt;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return std::nullopt;
    nap(std::min(0.02, std::chrono::duration<double>(deadline - now).count()));
  }
}

ChildEnd Child::wait(ForwardSignals* forwarding) {
  if (pid_ <= 0) throw std::logic_error("Child::wait: no process");
  if (!forwarding) reap(true);
  while (!end_) wait_for(1e9, forwarding);
  return *end_;
}

void Child::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

ChildEnd Child::stop(double kill_after_seconds) {
  signal(SIGTERM);
  if (auto end = wait_for(kill_after_seconds)) return *end;
  signal(SIGKILL);
  return wait();
}

std::string Child::read_stdout() {
  std::string out;
  if (stdout_fd_ < 0) return out;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(stdout_fd_, buffer, sizeof buffer);
    if (got > 0) {
      out.append(buffer, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(stdout_fd_);
  stdout_fd_ = -1;
  return out;
}

ForwardSignals::ForwardSignals() {
  if (g_forwarding) throw std::logic_error("ForwardSignals: one at a time per process");
  g_signal_count = 0;
  g_last_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_forwarded_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &g_old_int);
  ::sigaction(SIGTERM, &action, &g_old_term);
  g_forwarding = true;
}

ForwardSignals::~ForwardSignals() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_forwarding = false;
}

int ForwardSignals::received() const { return g_signal_count > 0 ? g_last_signal : 0; }

int ForwardSignals::take() {
  const int count = g_signal_count;
  if (count == taken_) return 0;
  taken_ = count;
  return g_last_signal;
}

void nap(double seconds) {
  const double s = std::clamp(seconds, 0.0, 1e9);
  timespec ts;
  ts.tv_sec = static_cast<time_t>(s);
  ts.tv_nsec = static_cast<long>((s - static_cast<double>(ts.tv_sec)) * 1e9);
  ::nanosleep(&ts, nullptr);  // EINTR: a signal, which is what the caller waits for too
}

}  // namespace amptune
