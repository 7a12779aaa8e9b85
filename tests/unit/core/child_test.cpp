// Child processes with real children (/bin/sh): how they end and how that is said, a program
// that cannot start, redirection, environment and directory, signals passed on while waiting,
// a wait that times out, SIGTERM then SIGKILL, no child left behind, none outliving its parent
// (even killed by SIGKILL) and none started from a thread that may end first.
#include "core/child.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "support/processes.h"
#include "support/scratch.h"

namespace amptune {
namespace {

namespace fs = std::filesystem;

ChildSpec shell(const std::string& script) {
  ChildSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  return spec;
}

// Waits (at most 30 s) until `path` exists.
bool wait_for_file(const std::string& path) {
  for (int i = 0; i < 3000; ++i) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

TEST(Child, ExitStatusIsToldAndDescribed) {
  Child child = Child::start(shell("exit 3"));
  EXPECT_EQ(child.start_error(), 0);
  EXPECT_EQ(child.start_failure(), "");
  const ChildEnd end = child.wait();
  EXPECT_TRUE(end.exited());
  EXPECT_FALSE(end.signaled());
  EXPECT_FALSE(end.success());
  EXPECT_EQ(end.exit_status(), 3);
  EXPECT_EQ(end.code(), 3);
  EXPECT_EQ(end.describe(), "exited with status 3");
  EXPECT_FALSE(child.running());
  EXPECT_TRUE(Child::start(shell("exit 0")).wait().success());
}

TEST(Child, KilledChildIsDescribedWithTheSignalsName) {
  const ChildEnd end = Child::start(shell("kill -9 $$")).wait();
  EXPECT_TRUE(end.signaled());
  EXPECT_EQ(end.term_signal(), SIGKILL);
  EXPECT_EQ(end.code(), 128 + SIGKILL);
  EXPECT_EQ(end.describe(), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(std::string(signal_name(SIGTERM)), "SIGTERM");
  EXPECT_EQ(std::string(signal_name(64)), "unnamed");
}

TEST(Child, ProgramThatCannotStartIsToldNotThrown) {
  const std::string dir = testing::scratch_dir();
  ChildSpec spec;
  spec.argv = {dir + "/no-such-program"};
  Child missing = Child::start(spec);
  EXPECT_EQ(missing.start_error(), ENOENT);
  EXPECT_EQ(missing.start_failure(),
            "cannot execute " + dir + "/no-such-program: No such file or directory");
  EXPECT_FALSE(missing.running());
  EXPECT_EQ(missing.wait().exit_status(), 127);

  spec.argv = {"amptune-child-test-no-such-program"};  // searched in PATH
  EXPECT_EQ(Child::start(spec).start_error(), ENOENT);
  spec.argv = {"sh", "-c", "exit 4"};
  EXPECT_EQ(Child::start(spec).wait().exit_status(), 4);
  spec.search_path = false;  // "sh" is then a path relative to this directory
  EXPECT_EQ(Child::start(spec).start_error(), ENOENT);

  ChildSpec no_dir = shell("exit 0");
  no_dir.dir = dir + "/missing";
  Child not_entered = Child::start(no_dir);
  EXPECT_EQ(not_entered.start_error(), ENOENT);
  EXPECT_EQ(not_entered.start_failure(),
            "cannot enter directory " + dir + "/missing: No such file or directory");

  ChildSpec no_log = shell("exit 0");
  no_log.stdout_path = dir + "/missing/out.log";
  EXPECT_EQ(Child::start(no_log).start_failure(),
            "cannot open " + dir + "/missing/out.log: No such file or directory");

  EXPECT_THROW(Child::start(ChildSpec{}), UsageError);
}

TEST(Child, OutputEnvironmentAndDirectory) {
  const std::string dir = testing::scratch_dir();
  fs::create_directories(dir + "/work");
  ::setenv("AMPTUNE_CHILD_TEST_GONE", "x", 1);
  ::setenv("AMPTUNE_CHILD_TEST_KEPT", "kept", 1);
  ChildSpec spec = shell("echo \"$AMPTUNE_CHILD_TEST_KEPT ${AMPTUNE_CHILD_TEST_GONE-unset} "
                         "$AMPTUNE_CHILD_TEST_SET $(basename \"$PWD\")\"; echo oops >&2");
  spec.env["AMPTUNE_CHILD_TEST_SET"] = "set";
  spec.unset_env = {"AMPTUNE_CHILD_TEST_GONE"};
  spec.dir = dir + "/work";
  spec.capture_stdout = true;
  spec.stderr_path = dir + "/err.log";
  Child child = Child::start(spec);
  EXPECT_EQ(child.read_stdout(), "kept unset set work\n");
  EXPECT_TRUE(child.wait().success());
  EXPECT_EQ(testing::read_file(dir + "/err.log"), "oops\n");
  ::unsetenv("AMPTUNE_CHILD_TEST_GONE");
  ::unsetenv("AMPTUNE_CHILD_TEST_KEPT");

  // One file for both streams, its path relative to this process's directory, not `dir`.
  const fs::path here = fs::current_path();
  fs::current_path(dir);
  ChildSpec both = shell("echo out; echo err >&2");
  both.dir = dir + "/work";
  both.stdout_path = both.stderr_path = "both.log";
  const ChildEnd end = Child::start(both).wait();
  fs::current_path(here);
  EXPECT_TRUE(end.success()) << end.describe();
  EXPECT_EQ(testing::read_file(dir + "/both.log"), "out\nerr\n");
}

TEST(Child, WaitTimesOutAndStopEscalatesToSigkill) {
  Child child = Child::start(shell("exec sleep 30"));
  EXPECT_FALSE(child.wait_for(0.2).has_value());
  EXPECT_TRUE(child.running());
  EXPECT_FALSE(child.poll().has_value());
  EXPECT_EQ(child.stop(10).describe(), "was killed by signal 15 (SIGTERM)");

  const std::string dir = testing::scratch_dir();
  Child stubborn = Child::start(shell("trap '' TERM; touch " + dir + "/ready; exec sleep 30"));
  ASSERT_TRUE(wait_for_file(dir + "/ready"));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(stubborn.stop(0.3).term_signal(), SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(Child, NoChildOutlivesItsObject) {
  pid_t pid = 0;
  {
    Child child = Child::start(shell("exec sleep 30"));
    pid = child.pid();
    Child moved = std::move(child);
    EXPECT_EQ(child.pid(), 0);
    EXPECT_TRUE(moved.running());
  }
  EXPECT_FALSE(alive(pid));
}

std::atomic<int> g_marker_calls{0};
void marker_handler(int) { ++g_marker_calls; }

TEST(Child, SignalsAreForwardedWhileWaitingAndHandlersRestored) {
  struct sigaction mine {}, old_int{}, after{};
  mine.sa_handler = marker_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGINT, &mine, &old_int), 0);
  g_marker_calls = 0;
  const std::string dir = testing::scratch_dir();
  {
    ForwardSignals forwarding;
    EXPECT_EQ(forwarding.received(), 0);
    EXPECT_THROW(ForwardSignals second, std::logic_error);
    Child child = Child::start(shell("touch " + dir + "/ready; exec sleep 30"));
    std::thread interrupter([&] {
      if (wait_for_file(dir + "/ready")) ::kill(::getpid(), SIGINT);
    });
    const ChildEnd end = child.wait(&forwarding);
    interrupter.join();
    EXPECT_EQ(end.describe(), "was killed by signal 2 (SIGINT)");
    EXPECT_EQ(forwarding.received(), SIGINT);
    EXPECT_EQ(forwarding.take(), 0) << "wait() took it and passed it on";
  }
  ::sigaction(SIGINT, nullptr, &after);
  ::sigaction(SIGINT, &old_int, nullptr);
  EXPECT_EQ(after.sa_handler, &marker_handler);
  EXPECT_EQ(g_marker_calls.load(), 0);
}

// The rule of child.h: every child dies with the process that started it, even when that one is
// killed by SIGKILL (no destructor runs). A middle process starts the child and is killed.
TEST(Child, DiesWithItsParentEvenBySigkill) {
  const std::string dir = testing::scratch_dir();
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    try {
      Child child = Child::start(shell("echo $$ > " + dir + "/pid.tmp; mv " + dir + "/pid.tmp " +
                                       dir + "/pid; exec sleep 30"));
      for (;;) ::pause();  // until killed
    } catch (...) {
      ::_exit(1);  // never on into the rest of the tests
    }
  }
  testing::KillOnExit guard;
  guard.watch(middle);
  const bool started = wait_for_file(dir + "/pid");
  if (started) guard.watch(std::atoi(testing::read_file(dir + "/pid").c_str()));
  ASSERT_EQ(guard.living().size(), 2u) << "the middle process or its child is missing";
  ASSERT_EQ(::kill(middle, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(middle, &status, 0), middle);
  EXPECT_EQ(guard.survivors(5.0), std::vector<pid_t>{}) << "the child outlived its parent";
}

// PR_SET_PDEATHSIG follows the forking thread: a child started from a thread that ends first
// would be killed with it, so Child refuses any thread but the main one.
TEST(Child, StartsFromTheMainThreadOnly) {
  std::string refused;
  std::thread other([&] {
    try {
      Child child = Child::start(shell("exit 0"));
    } catch (const std::logic_error& e) {
      refused = e.what();
    }
  });
  other.join();
  EXPECT_NE(refused.find("thread other than the main one"), std::string::npos) << refused;
}

}  // namespace
}  // namespace amptune
