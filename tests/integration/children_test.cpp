// No process outlives amptune (core/child.h, docs/SECURITY.md "Child processes"): each command
// that starts processes is killed by SIGKILL once they run - `tune --workers 2`, `run --workers
// 2`, `run --nproc 2` (the ranks), `bench --nproc 2` (its job and the job's ranks: grandchildren),
// `report` (gnuplot) and `slurm --submit` (sbatch), the last two with a stand-in program that
// sleeps - and none of its descendants may live 5 s later. Whatever a test leaves is killed by
// pid when it ends (KillOnExit).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "integration/harness.h"
#include "support/processes.h"

namespace amptune::testing {
namespace {

// Whether every process of `pids` runs its own program (exec done: the tie to its parent is
// the kernel's from now on, not the check of the fork's first instructions).
bool all_executed(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    const auto stat = proc_stat(pid);
    if (!stat || cmdline(pid) == cmdline(stat->ppid)) return false;
  }
  return true;
}

// Waits (at most 300 s: a busy machine) until `top` has `count` descendants that run their
// programs, and its log `err` holds `ready` (an epoch trained), and watches them; false when
// `top` ends first or they do not all come.
bool watch_descendants(pid_t top, size_t count, const std::string& err, const std::string& ready,
                       KillOnExit& guard) {
  for (int i = 0; i < 6000; ++i) {
    if (::waitpid(top, nullptr, WNOHANG) != 0) return false;  // it ended: reaped now
    const std::vector<pid_t> found = descendants_of(top);
    if (found.size() >= count && all_executed(found) &&
        read_file(err).find(ready) != std::string::npos) {
      for (pid_t pid : found) guard.watch(pid);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Kills `top` (an amptune started in `dir`) by SIGKILL once its `count` descendants run (and
// its standard error holds `ready`), and expects none of them alive after up to 5 s.
void expect_all_die_with(pid_t top, size_t count, const std::string& dir,
                         const std::string& ready = "") {
  StopOnExit stop(top);
  KillOnExit guard;  // goes first: the descendants that survive are killed by pid
  const std::string err = dir + "/child.err";
  ASSERT_TRUE(watch_descendants(top, count, err, ready, guard))
      << "amptune ended, or started fewer than " << count << " processes:\n"
      << read_file(err);
  ASSERT_EQ(guard.living().size(), guard.watched()) << "a process ended before the kill";
  ASSERT_EQ(::kill(top, SIGKILL), 0);
  EXPECT_EQ(wait_exit_code(top, 60), 128 + SIGKILL);
  EXPECT_EQ(guard.survivors(5.0), std::vector<pid_t>{})
      << "processes outlived amptune killed by SIGKILL";
}

// amptune in `f`'s directory with `env`; TMPDIR too: what a killed process leaves there (bench's
// scratch database, the ranks' rendezvous directory) stays in the test's directory.
pid_t spawn_in(const TinySweep& f, const std::vector<std::string>& args,
               std::vector<std::pair<std::string, std::string>> env = {}) {
  env.emplace_back("TMPDIR", f.dir);
  return spawn_amptune(args, f.dir, SpawnOptions(env, "child"));
}

// A program in `dir` that stands in for gnuplot or sbatch: it runs until killed.
std::string sleeper(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  write_file(path, "#!/bin/sh\nexec sleep 300\n");
  EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
  return path;
}

// Epochs enough that no process ends by itself in the test (the tiny set trains 50 in 3 s).
TinySweep long_sweep(const std::string& tail, const std::string& tag, int train_n = 64) {
  TinyOptions o = quick_tiny(tail, 100000);
  o.train_n = train_n;
  o.dir_tag = tag;
  return make_tiny_sweep(o);
}

TEST(Children, TuneWorkersDieWithTheCommand) {
  const TinySweep f = long_sweep(
      "tune:\n  metric: train_loss\n  tolerance: {abs: 0.1}\n"
      "  reference: {amp.opt_level: O0}\n  start: {amp.opt_level: O1}\n",
      "tune");
  const pid_t pid = spawn_in(f, {"tune", f.yaml, "--db", f.db, "--no-progress", "--workers", "2"});
  expect_all_die_with(pid, 2, f.dir, " epoch 0: ");  // killed while training
}

TEST(Children, RunWorkersDieWithTheCommand) {
  const TinySweep f = long_sweep("grid:\n  optim.lr: [0.05, 0.1]\n", "run");
  const pid_t pid = spawn_in(f, {"run", f.yaml, "--db", f.db, "--no-progress", "--workers", "2"});
  expect_all_die_with(pid, 2, f.dir, " epoch 0: ");  // killed while training
}

TEST(Children, NprocRanksDieWithTheLauncher) {
  const TinySweep f = long_sweep("", "nproc", 128);
  const pid_t pid = spawn_in(f, {"run", f.yaml, "--db", f.db, "--no-progress", "--nproc", "2"});
  expect_all_die_with(pid, 2, f.dir, " epoch 0: ");  // killed while training
}

// Three levels: bench starts a job (`run --nproc 2`), which starts two ranks. The job trains one
// epoch of at most --steps steps: 100,000 images make it long.
TEST(Children, BenchJobAndItsRanksDieWithBench) {
  const TinySweep f = long_sweep("", "bench", 100000);
  const pid_t pid = spawn_in(
      f, {"bench", f.yaml, "--nproc", "2", "--steps", "100000", "--warmup", "1", "--threads", "1"});
  expect_all_die_with(pid, 3, f.dir);
}

TEST(Children, GnuplotDiesWithReport) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  const Result trained = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;  // an epoch to plot: gnuplot is started
  const pid_t pid =
      spawn_in(f, {"report", "--db", f.db, "--sweep", "tiny", "--out", f.dir + "/report"},
               {{"AMPTUNE_GNUPLOT", sleeper(f.dir, "gnuplot")}});
  expect_all_die_with(pid, 1, f.dir);
}

// sbatch submits and exits; one that hangs goes with amptune too.
TEST(Children, SbatchDiesWithSlurmSubmit) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  const std::string bin = f.dir + "/bin";
  sleeper(bin, "sbatch");
  const char* path = std::getenv("PATH");
  const pid_t pid = spawn_in(f, {"slurm", f.yaml, "--submit"},
                             {{"PATH", bin + ":" + (path ? path : "/usr/bin:/bin")}});
  expect_all_die_with(pid, 1, f.dir);
}

}  // namespace
}  // namespace amptune::testing
