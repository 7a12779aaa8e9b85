#include "core/process.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

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
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "used from a signal handler");
}  // namespace

void on_stop_signal() {
  g_stop = true;
  if (g_graceful.load() > 0) return;
  static const char kMessage[] = "amptune: interrupted\n";
  (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  ::_exit(130);
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
