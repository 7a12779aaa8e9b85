// Identity of a process, for deciding whether the holder of a run's claim is still alive.
// Linux: /proc and kill(2). No torch.
#pragma once

#include <cstdint>
#include <optional>
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
// waits for its children) the signal only sets the flag the work polls (stop_requested): the
// trainer ends the step, puts its run back to pending and returns. Async-signal-safe.
void on_stop_signal();
void request_stop();    // what a signal does inside a GracefulStop scope
bool stop_requested();
class GracefulStop {  // nests; not copyable
 public:
  GracefulStop();
  ~GracefulStop();
  GracefulStop(const GracefulStop&) = delete;
  GracefulStop& operator=(const GracefulStop&) = delete;
};

// The malloc this process runs on, found at run time (so an LD_PRELOAD counts too): "tcmalloc",
// "jemalloc", "glibc", "asan" (a sanitizer build), else the file name of the library that
// serves it. The amptune binary links tcmalloc when the build found it
// (AMPTUNE_ALLOCATOR, docs/PERFORMANCE.md "Allocator").
std::string allocator_name();

}  // namespace amptune
