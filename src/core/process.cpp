#include "core/process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

namespace amptune {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

struct ProcStat {
  char state = '?';  // field 3: R, S, D, Z (zombie: exited, not yet reaped), ...
  int64_t start_ticks = 0;  // field 22
};

// /proc/PID/stat; start_ticks 0 when unreadable. The command name (field 2) may hold spaces
// and parentheses, so fields are counted after the last ')'.
ProcStat proc_stat(int64_t pid) {
  ProcStat out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return out;
    if (i == 3) out.state = field.empty() ? '?' : field[0];
  }
  out.start_ticks = std::strtoll(field.c_str(), nullptr, 10);
  return out;
}

std::string machine_id() {
  if (const char* env = std::getenv("AMPTUNE_HOST_ID"); env && *env) return env;
  std::string boot = first_line("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    boot = host;
  }
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) == 0) boot += "/" + std::to_string(ns.st_ino);
  return boot;
}

}  // namespace

bool operator==(const ProcessIdentity& a, const ProcessIdentity& b) {
  return a.machine == b.machine && a.pid == b.pid && a.start_ticks == b.start_ticks;
}

ProcessIdentity current_process() {
  // Every store write of a claimed run asks; the answer changes only in a forked child.
  static thread_local ProcessIdentity cached;
  if (cached.pid != ::getpid()) {
    cached.machine = machine_id();
    cached.pid = ::getpid();
    cached.start_ticks = proc_stat(cached.pid).start_ticks;
  }
  return cached;
}

double process_age_seconds() {
  const int64_t ticks = current_process().start_ticks;
  const long hz = ::sysconf(_SC_CLK_TCK);
  double uptime = -1;
  std::istringstream(first_line("/proc/uptime")) >> uptime;
  if (ticks <= 0 || hz <= 0 || uptime < 0) return -1;
  return uptime - static_cast<double>(ticks) / static_cast<double>(hz);
}

bool process_alive(const ProcessIdentity& p) {
  if (p.pid <= 0) return false;
  if (::kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH) return false;
  const ProcStat stat = proc_stat(p.pid);
  if (stat.state == 'Z' || stat.state == 'X') return false;  // exited (zombie) or dying
  return p.start_ticks == 0 || stat.start_ticks == 0 || stat.start_ticks == p.start_ticks;
}

std::optional<bool> alive_if_local(const ProcessIdentity& p) {
  if (p.machine.empty() || p.machine != current_process().machine) return std::nullopt;
  return process_alive(p);
}

std::string allocator_name() {
  // The library that defines the `malloc` the dynamic linker resolved first for this process.
  void* symbol = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  const std::string file = info.dli_fname;
  if (file.find("tcmalloc") != std::string::npos) return "tcmalloc";
  if (file.find("jemalloc") != std::string::npos) return "jemalloc";
  if (file.find("libc.so") != std::string::npos) return "glibc";
  if (file.find("libasan") != std::string::npos) return "asan";  // AddressSanitizer's runtime
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_graceful{0};
std::atomic<int> g_signals{0};
// The forced-exit watcher: the write end of its pipe and the process that started it (a forked
// child has neither the thread nor a reason to wake its parent's).
std::atomic<int> g_wake_fd{-1};
std::atomic<pid_t> g_watcher_pid{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
                  std::atomic<pid_t>::is_always_lock_free,
              "used from a signal handler");

std::mutex& hooks_mutex() {
  static std::mutex m;
  return m;
}
std::map<int64_t, std::function<void()>>& hooks() {
  static std::map<int64_t, std::function<void()>> h;
  return h;
}

void say(const char* text, size_t size) { (void)!::write(STDERR_FILENO, text, size); }

// Runs the hooks on a thread of their own and waits for them at most kForcedExitHookSeconds:
// a hook stuck on a lock the stuck thread holds must not keep the process alive.
[[noreturn]] void forced_exit() {
  std::vector<std::function<void()>> todo;
  {
    std::lock_guard<std::mutex> lock(hooks_mutex());
    for (const auto& [id, hook] : hooks()) todo.push_back(hook);
  }
  const std::string line = std::string("amptune: interrupted") +
                           (g_signals.load() > 1 ? " again" : "") + ": exiting now" +
                           (todo.empty() ? "" : ", releasing what this process holds") + "\n";
  say(line.data(), line.size());
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([todo, done] {
    for (const auto& hook : todo) {
      try {
        hook();
      } catch (const std::exception& e) {
        const std::string line = std::string("amptune: on exit: ") + e.what() + "\n";
        say(line.data(), line.size());
      } catch (...) {
      }
    }
    *done = true;
  }).detach();
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int>(kForcedExitHookSeconds * 1000));
  while (!*done && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::_exit(130);
}

// Started with the first hook: blocks SIGINT / SIGTERM in itself (the handler runs elsewhere) and
// waits for the handler's byte.
void start_watcher() {
  static std::once_flag once;
  std::call_once(once, [] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;  // no watcher: a signal ends the process at once
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    std::thread([read_fd = fds[0]] {
      char byte = 0;
      for (;;) {
        const ssize_t n = ::read(read_fd, &byte, 1);
        if (n == 1) forced_exit();
        if (n < 0 && errno == EINTR) continue;
        return;  // cannot happen: the write end stays open
      }
    }).detach();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    g_wake_fd = fds[1];
    g_watcher_pid = ::getpid();
  });
}
}  // namespace

void on_stop_signal() {
  g_stop = true;
  const int signals = ++g_signals;
  if (g_graceful.load() > 0 && signals == 1) return;
  const int fd = g_wake_fd.load();
  if (fd >= 0 && g_watcher_pid.load() == ::getpid()) {
    const char byte = 1;
    if (::write(fd, &byte, 1) == 1) return;  // the watcher runs the hooks, then _exit(130)
  }
  static const char kMessage[] = "amptune: interrupted\n";
  say(kMessage, sizeof kMessage - 1);
  ::_exit(130);
}

ForcedExitHook::ForcedExitHook(std::function<void()> hook) {
  static std::atomic<int64_t> next_id{0};
  id_ = ++next_id;
  {
    std::lock_guard<std::mutex> lock(hooks_mutex());
    hooks()[id_] = std::move(hook);
  }
  start_watcher();
}

ForcedExitHook::~ForcedExitHook() {
  std::lock_guard<std::mutex> lock(hooks_mutex());
  hooks().erase(id_);
}

void request_stop() { g_stop = true; }
bool stop_requested() { return g_stop; }
GracefulStop::GracefulStop() { ++g_graceful; }
GracefulStop::~GracefulStop() { --g_graceful; }

namespace {
thread_local WorkBound* t_bound = nullptr;
}  // namespace

WorkBound::WorkBound(std::chrono::steady_clock::time_point deadline,
                     std::function<bool()> abandoned)
    : deadline_(deadline), abandoned_(std::move(abandoned)), outer_(t_bound) {
  t_bound = this;
}
WorkBound::~WorkBound() { t_bound = outer_; }

bool work_bound_passed() {
  WorkBound* b = t_bound;
  if (b == nullptr) return false;
  if (b->passed_ != 0) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now >= b->deadline_) {
    b->passed_ = 1;
  } else if (b->abandoned_ && now >= b->next_ask_) {
    b->next_ask_ = now + std::chrono::milliseconds(50);
    if (b->abandoned_()) b->passed_ = 2;
  }
  return b->passed_ != 0;
}

void check_work_bound() {
  if (!work_bound_passed()) return;
  const bool timed_out = t_bound->passed_ == 1;
  throw WorkAbandoned(timed_out, timed_out ? "the work took longer than its time bound"
                                           : "the work is no longer wanted");
}

}  // namespace amptune
