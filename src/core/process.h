// Identity of a process, for deciding whether the holder of a run's claim is still alive.
// Linux: /proc and kill(2). No torch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace amptune {

struct ProcessIdentity {
  // The pid space this process lives in: "<boot id>/<pid namespace>" (so two containers on one
  // kernel, or a rebooted machine, never compare pids), or $AMPTUNE_HOST_ID when set. Processes
  // with equal `machine` can test each other's liveness; others cannot.
  std::string machine;
  int64_t pid = 0;
  // Start time of the process (clock ticks after boot, /proc/PID/stat field 22): a reused pid
  // has another start time. 0 when unknown.
  int64_t start_ticks = 0;
};

bool operator==(const ProcessIdentity& a, const ProcessIdentity& b);

// This process. Read from /proc once per process (a forked child reads its own again).
ProcessIdentity current_process();

// Seconds since this process started (/proc/uptime against its start time; 10 ms ticks), for
// the start-up time of a run; negative when /proc cannot tell.
double process_age_seconds();

// Whether `p` (of this machine: p.machine == current_process().machine) still runs: the pid
// exists and, when both are known, has the same start time.
bool process_alive(const ProcessIdentity& p);

// Whether `p` lives, when it is a process of this machine's pid space (then its liveness is
// known); unset for a process elsewhere (or of unknown machine), whose liveness only a heartbeat
// can tell.
std::optional<bool> alive_if_local(const ProcessIdentity& p);

// Stopping on SIGINT / SIGTERM (docs/SECURITY.md "Stopping"). cli/main.cpp's handler calls
// on_stop_signal. Outside a GracefulStop scope the process ends at once with exit code 130: the
// work there writes nothing, or writes inside one SQLite transaction (merge, eval), which a dead
// process never leaves half-done, so parsing a sweep, fingerprinting data, a long query and a
// rendezvous wait all stop within a second. Inside a scope (a run being trained, a process that
// waits for its children) the first signal only sets the flag the work polls (stop_requested):
// the trainer ends the step, puts its run back to pending and returns. A second signal inside a
// scope is a forced exit: work that never polls (a user's scripted forward that never returns)
// cannot hold the process. Async-signal-safe.
//
// A forced exit (the second signal inside a scope, or any signal outside one while a hook is
// registered) runs the registered ForcedExitHooks on a watcher thread, woken through a pipe (the
// handler only writes one byte), for at most kForcedExitHookSeconds in all, then ends the process
// with exit code 130, whether or not they returned. A hook must not rely on the thread that is
// stuck: it uses its own resources (a run's claim is released through a new database
// connection, app/run/store_recorder.cpp). In a process forked from the one that registered hooks
// (no exec) the signal ends the process at once, as before.
void on_stop_signal();
constexpr double kForcedExitHookSeconds = 2.0;
class ForcedExitHook {  // registered for its lifetime; not copyable
 public:
  explicit ForcedExitHook(std::function<void()> hook);
  ~ForcedExitHook();
  ForcedExitHook(const ForcedExitHook&) = delete;
  ForcedExitHook& operator=(const ForcedExitHook&) = delete;

 private:
  int64_t id_;
};
void request_stop();    // what a signal does inside a GracefulStop scope
bool stop_requested();
class GracefulStop {  // nests; not copyable
 public:
  GracefulStop();
  ~GracefulStop();
  GracefulStop(const GracefulStop&) = delete;
  GracefulStop& operator=(const GracefulStop&) = delete;
};

// A bound on the work of the calling thread: a deadline and a test that the work is no longer
// wanted (a web page whose client left: docs/SERVE.md). Long loops call check_work_bound(); the
// store's SQLite progress handler asks work_bound_passed() and interrupts its query, then throws
// WorkAbandoned. Outside a WorkBound scope both cost an atomic-free thread-local read and never
// stop anything. Scopes nest: the innermost holds. `abandoned` is asked at most every 50 ms.
class WorkAbandoned : public std::runtime_error {  // never reaches main: the scope's owner catches
 public:
  WorkAbandoned(bool timed_out, const std::string& what)
      : std::runtime_error(what), timed_out_(timed_out) {}
  bool timed_out() const { return timed_out_; }  // else: abandoned

 private:
  bool timed_out_;
};
class WorkBound {  // not copyable
 public:
  WorkBound(std::chrono::steady_clock::time_point deadline, std::function<bool()> abandoned);
  ~WorkBound();
  WorkBound(const WorkBound&) = delete;
  WorkBound& operator=(const WorkBound&) = delete;

 private:
  friend bool work_bound_passed();
  friend void check_work_bound();
  std::chrono::steady_clock::time_point deadline_;
  std::function<bool()> abandoned_;
  std::chrono::steady_clock::time_point next_ask_;
  int passed_ = 0;  // 0 not yet, 1 timed out, 2 abandoned
  WorkBound* outer_;
};
bool work_bound_passed();
void check_work_bound();  // throws WorkAbandoned once work_bound_passed()

// The malloc this process runs on, found at run time (so an LD_PRELOAD counts too): "tcmalloc",
// "jemalloc", "glibc", "asan" (a sanitizer build), else the file name of the library that
// serves it. The amptune binary links tcmalloc when the build found it
// (AMPTUNE_ALLOCATOR, docs/PERFORMANCE.md "Allocator").
std::string allocator_name();

}  // namespace amptune
