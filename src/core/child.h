// Child processes: start a program (environment, directory, standard streams), pass SIGINT /
// SIGTERM on to it while waiting, wait with a timeout, stop it (SIGTERM, then SIGKILL), and say
// how it ended. The one way amptune starts processes: the workers of `run --workers` and `tune
// --workers` (app/run/runner.cpp run_workers), the --nproc ranks (launch/launch.cpp), bench's
// data-parallel jobs (app/run/bench.cpp), gnuplot and sbatch (app/run/program.cpp). Linux. No
// torch.
//
// Every child dies with its parent: it gets SIGKILL when the process that started it ends, even
// by SIGKILL (PR_SET_PDEATHSIG, set between fork and exec; a parent that died before that is
// seen by the child, which then exits at once). So killing the top of a tree (`bench --nproc 2`:
// bench, its job, the job's ranks) ends every level. The kernel ties that signal to the *thread*
// that forked, not to the process: Child::start must be called from the main thread, which lives
// as long as the process (any other throws std::logic_error), never from a worker thread or a
// std::async that could end before the child. A set-user-ID program loses the tie at exec;
// amptune starts none. Tested by Child.DiesWithItsParentEvenBySigkill and
// tests/integration/children_test.cpp.
//
//   ForwardSignals forwarding;                 // SIGINT / SIGTERM are now for the children
//   ChildSpec spec;
//   spec.argv = {"gnuplot", "plots.gp"};
//   spec.dir = out;
//   spec.stdout_path = spec.stderr_path = out + "/gnuplot.log";
//   Child child = Child::start(spec);          // throws EnvironmentError when fork fails
//   if (child.start_error()) throw EnvironmentError(child.start_failure());
//   const ChildEnd end = child.wait(&forwarding);
//   if (!end.success()) log::warn("gnuplot " + end.describe());  // "was killed by signal 2 ..."
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace amptune {

// "SIGKILL" for 9, ... ("unnamed" for a signal without a common name).
const char* signal_name(int sig);

// How a child ended.
struct ChildEnd {
  int raw = 0;   // its waitpid status
  int lost = 0;  // errno when its status could not be read (reaped elsewhere: SIGCHLD ignored)
  bool exited() const;    // by exit(), with exit_status()
  bool signaled() const;  // by a signal, term_signal()
  int exit_status() const;
  int term_signal() const;
  bool success() const;  // exited with status 0
  // The exit status, 128 + the signal's number when a signal ended it (as a shell says it), 1
  // (ExitCode::kInternal) when the status is lost.
  int code() const;
  // "exited with status 3", "was killed by signal 9 (SIGKILL)", "ended, but its exit status is
  // lost: No child processes"; a subject goes before it ("rank 1 (pid 4242) was killed ...").
  std::string describe() const;
};

struct ChildSpec {
  // argv[0]: the program, a path or a name searched in PATH, unless `program` is set.
  std::vector<std::string> argv;
  std::string program;  // the file to execute when it is not argv[0] ("/proc/self/exe")
  bool search_path = true;  // false: the program is a path, never looked up in PATH
  // What the child is, for error messages ("rank 2 of 4", "worker process 1 of 3"); argv[0]
  // when empty.
  std::string name;
  // The environment: this process's, with `env` added (replacing values of the same name) and
  // the variables named in `unset_env` removed.
  std::map<std::string, std::string> env;
  std::vector<std::string> unset_env;
  std::string dir;  // working directory; this process's when empty
  // Standard output and error: this process's unless a path is given (opened by the child,
  // created or truncated, never through a symlink; a relative path is relative to this
  // process's directory, not to `dir`; the same path for both makes one file). With
  // capture_stdout, standard output is read by Child::read_stdout instead. Standard input is
  // always this process's.
  std::string stdout_path, stderr_path;
  bool capture_stdout = false;
};

class ForwardSignals;

// One started child. Movable, not copyable. A child still running when its Child object goes
// is killed (SIGKILL) and reaped: none outlives its owner unless waited for.
class Child {
 public:
  Child() = default;  // no process
  // Forks and executes `spec`, and returns once the program runs or could not be started
  // (start_error). The child gets the SIGINT / SIGTERM actions a ForwardSignals in scope
  // replaced, and no blocked signals, and dies with this process (above). Only async-signal-safe
  // calls happen between fork and exec. Throws EnvironmentError ("cannot start <name>: fork:
  // ...") when no process can be made, UsageError for an empty argv, std::logic_error when
  // called from a thread other than the main one.
  static Child start(const ChildSpec& spec);

  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }  // 0 for no process
  bool running() const { return pid_ > 0 && !end_; }
  // errno of what failed in the child before the program ran (opening a log, entering `dir`,
  // exec: ENOENT for a program not found); 0 when it runs. The child has then ended (status 127).
  int start_error() const { return start_error_; }
  // "cannot execute gnuplot: No such file or directory", "cannot open gnuplot.log: ...", "cannot
  // enter directory out: ..."; "" when it started.
  std::string start_failure() const;

  // How it ended, when it has (non-blocking; reaps it).
  std::optional<ChildEnd> poll();
  // Waits until it ends, at most `seconds` (nullopt when it still runs then). With
  // `forwarding`, each SIGINT / SIGTERM it received meanwhile is sent on to the child.
  std::optional<ChildEnd> wait_for(double seconds, ForwardSignals* forwarding = nullptr);
  ChildEnd wait(ForwardSignals* forwarding = nullptr);
  // Sends `sig` while it runs (nothing after it ended).
  void signal(int sig);
  // SIGTERM, then SIGKILL when it still runs `kill_after_seconds` later; how it ended.
  ChildEnd stop(double kill_after_seconds);
  // Its standard output up to its end (capture_stdout; "" otherwise). Call before wait.
  std::string read_stdout();

 private:
  void release();  // kills and reaps a running child, closes the pipe
  // Sets end_ when the child has ended (with `block`: once it ends).
  void reap(bool block);
  pid_t pid_ = 0;
  int start_error_ = 0;
  int start_stage_ = 0;  // what failed, with start_error_
  std::string program_, stdout_path_, stderr_path_, dir_;  // for start_failure
  int stdout_fd_ = -1;
  std::optional<ChildEnd> end_;
};

// While it lives, SIGINT and SIGTERM sent to this process are caught and recorded instead of
// acted on by the actions installed before (restored at its end), for the waiting code to pass
// on to its children (Child::wait, or take() in a loop over several). No SA_RESTART: a signal
// cuts a nap short. One at a time per process (a second throws std::logic_error).
class ForwardSignals {
 public:
  ForwardSignals();
  ~ForwardSignals();
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;

  // The last signal received while it lived; 0 when none.
  int received() const;
  // The last signal received since the previous take() (0 when none): the one to pass on now.
  int take();

 private:
  int taken_ = 0;  // signals counted when take() last looked
};

// Sleeps `seconds`, cut short by a signal: the pause of a loop that polls several children.
void nap(double seconds = 0.02);

}  // namespace amptune
