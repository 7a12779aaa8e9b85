// Launch environments from variable maps (torchrun, Slurm, single), Slurm host lists, and the
// --nproc spawner with real child processes (/bin/sh). Children started here write their pid to
// <scratch>/pid_<rank> and carry AMPTUNE_TEST_SWEEP=<scratch> in their environment, so each spawn
// test can check afterwards that none is left, and kill any that is.
#include "launch/launch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "support/scratch.h"

namespace amptune::launch {
namespace {

using Vars = std::map<std::string, std::string>;

GetEnv env_of(const Vars& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The message of the ConfigError detect_launch throws for `vars` ("" and a failure when none).
std::string launch_error(const Vars& vars) {
  try {
    const LaunchEnv env = detect_launch(env_of(vars));
    ADD_FAILURE() << "no ConfigError; detected " << env.describe();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const Vars kTorchrun = {{"RANK", "1"},
                        {"WORLD_SIZE", "4"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "10.0.0.1"},
                        {"MASTER_PORT", "29500"}};

Vars with(Vars vars, const Vars& changes) {
  for (const auto& [k, v] : changes) vars[k] = v;
  return vars;
}

Vars without(Vars vars, const std::string& name) {
  vars.erase(name);
  return vars;
}

// ----- torchrun ---------------------------------------------------------------------------------

TEST(DetectLaunch, TorchrunFullSet) {
  const LaunchEnv env = detect_launch(env_of(kTorchrun));
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_TRUE(env.distributed());
  EXPECT_EQ(env.describe(), "rank 1 of 4 (local 1 of 2) via torchrun, rendezvous 10.0.0.1:29500");
}

TEST(DetectLaunch, LocalRankAndWorldDefaultToRankAndWorld) {
  const LaunchEnv env =
      detect_launch(env_of(without(without(kTorchrun, "LOCAL_RANK"), "LOCAL_WORLD_SIZE")));
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  // LOCAL_WORLD_SIZE given, LOCAL_RANK defaulted to RANK: must still fit.
  const LaunchEnv local_only = detect_launch(env_of(without(kTorchrun, "LOCAL_RANK")));
  EXPECT_EQ(local_only.local_rank, 1);
  EXPECT_EQ(local_only.local_world_size, 2);
  const std::string error = launch_error(with(without(kTorchrun, "LOCAL_RANK"), {{"RANK", "3"}}));
  EXPECT_NE(error.find("LOCAL_RANK is not set"), std::string::npos) << error;
  EXPECT_NE(error.find("LOCAL_WORLD_SIZE=2"), std::string::npos) << error;
}

TEST(DetectLaunch, WorldSizeOneUnderTorchrunIsNotDistributed) {
  const LaunchEnv env = detect_launch(env_of(
      with(kTorchrun,
           {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}})));
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_FALSE(env.distributed());
}

TEST(DetectLaunch, NprocSpawnerIsReportedAsNproc) {
  EXPECT_EQ(detect_launch(env_of(with(kTorchrun, {{"AMPTUNE_LAUNCHER", "nproc"}}))).launcher,
            "nproc");
  EXPECT_EQ(detect_launch(env_of(with(kTorchrun, {{"AMPTUNE_LAUNCHER", "other"}}))).launcher,
            "torchrun");
}

// --nproc's ranks meet in a file: no MASTER_PORT needed, MASTER_ADDR defaults to the loopback.
TEST(DetectLaunch, NprocRendezvousFileNeedsNoPort) {
  const Vars nproc = {{"RANK", "1"},
                      {"WORLD_SIZE", "2"},
                      {"AMPTUNE_LAUNCHER", "nproc"},
                      {"AMPTUNE_RENDEZVOUS_FILE", "/tmp/amptune-rendezvous-x/store"}};
  const LaunchEnv env = detect_launch(env_of(nproc));
  EXPECT_EQ(env.rendezvous_file, "/tmp/amptune-rendezvous-x/store");
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 0);
  EXPECT_EQ(env.describe(),
            "rank 1 of 2 (local 1 of 2) via nproc, rendezvous file /tmp/amptune-rendezvous-x/store");
  EXPECT_EQ(launch_error(with(nproc, {{"AMPTUNE_RENDEZVOUS_FILE", "store"}})),
            "environment variable AMPTUNE_RENDEZVOUS_FILE=store is not an absolute path: it is "
            "set by `amptune run --nproc`; unset it and AMPTUNE_LAUNCHER");
  // Without AMPTUNE_LAUNCHER=nproc the file means nothing: a torchrun launch needs its port.
  EXPECT_EQ(launch_error(without(with(nproc, {{"MASTER_ADDR", "h"}}), "AMPTUNE_LAUNCHER")),
            "environment variable MASTER_PORT is not set, but WORLD_SIZE=2 asks for a distributed "
            "run: launch with torchrun (which sets it), or set MASTER_ADDR and MASTER_PORT");
}

TEST(DetectLaunch, MissingTorchrunVariableIsNamed) {
  const Vars base = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  for (const std::string name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    const std::string error = launch_error(without(base, name));
    EXPECT_NE(error.find("environment variable " + name + " is not set"), std::string::npos)
        << name << ": " << error;
    EXPECT_NE(error.find(name == "WORLD_SIZE" ? "RANK=0" : "WORLD_SIZE=2"), std::string::npos)
        << name << ": " << error;
    EXPECT_NE(error.find("torchrun"), std::string::npos) << error;
  }
  EXPECT_EQ(launch_error(without(base, "MASTER_PORT")),
            "environment variable MASTER_PORT is not set, but WORLD_SIZE=2 asks for a distributed "
            "run: launch with torchrun (which sets it), or set MASTER_ADDR and MASTER_PORT");
}

TEST(DetectLaunch, InvalidTorchrunValuesAreNamedWithTheirValue) {
  struct Case {
    Vars changes;
    std::string expected;  // part of the message
  };
  const std::vector<Case> cases = {
      {{{"RANK", "abc"}}, "environment variable RANK=abc is not an integer"},
      {{{"RANK", "1.0"}}, "environment variable RANK=1.0 is not an integer"},
      {{{"RANK", " 1"}}, "environment variable RANK= 1 is not an integer"},
      {{{"RANK", "-1"}}, "environment variable RANK=-1 is below 0"},
      {{{"RANK", "4"}}, "environment variable RANK=4 is above 3: with WORLD_SIZE=4"},
      {{{"WORLD_SIZE", "0"}}, "environment variable WORLD_SIZE=0 is below 1"},
      {{{"WORLD_SIZE", "99999999999"}}, "environment variable WORLD_SIZE=99999999999 is above"},
      {{{"MASTER_PORT", "0"}}, "environment variable MASTER_PORT=0 is below 1"},
      {{{"MASTER_PORT", "65536"}}, "environment variable MASTER_PORT=65536 is above 65535"},
      {{{"MASTER_PORT", "29500x"}}, "environment variable MASTER_PORT=29500x is not an integer"},
      {{{"LOCAL_RANK", "2"}}, "environment variable LOCAL_RANK=2 is above 1"},
      {{{"LOCAL_WORLD_SIZE", "5"}}, "environment variable LOCAL_WORLD_SIZE=5 is above 4"},
      {{{"LOCAL_WORLD_SIZE", "0"}}, "environment variable LOCAL_WORLD_SIZE=0 is below 1"},
  };
  for (const Case& c : cases) {
    const std::string error = launch_error(with(kTorchrun, c.changes));
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
  }
}

TEST(DetectLaunch, EmptyVariablesCountAsUnset) {
  const LaunchEnv env = detect_launch(env_of({{"RANK", ""}, {"WORLD_SIZE", ""}}));
  EXPECT_EQ(env.launcher, "single");
  const std::string error = launch_error(with(kTorchrun, {{"MASTER_ADDR", ""}}));
  EXPECT_NE(error.find("MASTER_ADDR is not set"), std::string::npos) << error;
}

TEST(DetectLaunch, NothingSetIsASingleProcess) {
  const LaunchEnv env = detect_launch(env_of({{"PATH", "/bin"}, {"LOCAL_RANK", "3"}}));
  EXPECT_EQ(env.launcher, "single");
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "");
  EXPECT_EQ(env.master_port, 0);
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.describe(), "single process");
}

TEST(DetectLaunch, ProcessEnvReadsThisProcess) {
  const GetEnv env = process_env();
  ::setenv("AMPTUNE_LAUNCH_TEST_VAR", "value 1", 1);
  EXPECT_EQ(env("AMPTUNE_LAUNCH_TEST_VAR"), std::optional<std::string>("value 1"));
  ::unsetenv("AMPTUNE_LAUNCH_TEST_VAR");
  EXPECT_EQ(env("AMPTUNE_LAUNCH_TEST_VAR"), std::nullopt);
}

// ----- Slurm ------------------------------------------------------------------------------------

// Task 1 of a 2-task srun step on nodes node07 and node08, one task each.
const Vars kSlurm = {{"SLURM_PROCID", "1"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_NODEID", "1"},
                     {"SLURM_STEP_NUM_TASKS", "2"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                     {"SLURM_TASKS_PER_NODE", "4(x2)"},
                     {"SLURM_STEP_NODELIST", "node[07-08]"},
                     {"SLURM_JOB_NODELIST", "node[01-08]"},
                     {"SLURM_JOB_ID", "123456"}};

TEST(DetectLaunch, SlurmStep) {
  const LaunchEnv env = detect_launch(env_of(kSlurm));
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);  // the step's, not the job's 8
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "node07");
  EXPECT_EQ(env.master_port, 15000 + 123456 % 17000);
  EXPECT_EQ(env.master_port, 19456);
  EXPECT_EQ(env.describe(), "rank 1 of 2 (local 0 of 1) via slurm, rendezvous node07:19456");
}

TEST(DetectLaunch, SlurmMasterAddrAndPortOverride) {
  const LaunchEnv env = detect_launch(env_of(with(
      without(kSlurm, "SLURM_JOB_ID"), {{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "29400"}})));
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.master_addr, "10.1.1.1");
  EXPECT_EQ(env.master_port, 29400);
}

TEST(DetectLaunch, SlurmFallsBackToTheJobsTasksPerNodeAndNodeList) {
  // A 7-task step without the step's per-node and node-list variables: 2,2,2,1 tasks on
  // gpu[3-4],x (the job's lists); task 6 is on node 3.
  const Vars vars = {{"SLURM_PROCID", "6"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_NODEID", "3"},
                     {"SLURM_STEP_NUM_TASKS", "7"},
                     {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                     {"SLURM_JOB_NODELIST", "gpu[3-4],x"},
                     {"SLURM_JOB_ID", "17001"}};
  const LaunchEnv env = detect_launch(env_of(vars));
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.world_size, 7);
  EXPECT_EQ(env.rank, 6);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "gpu3");
  EXPECT_EQ(env.master_port, 15001);
  // Without SLURM_NODEID, the first entry.
  const LaunchEnv first = detect_launch(
      env_of(with(without(vars, "SLURM_NODEID"), {{"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "1"}})));
  EXPECT_EQ(first.local_world_size, 2);
  EXPECT_EQ(first.local_rank, 1);
}

TEST(DetectLaunch, SlurmWithOneTaskIsASingleProcess) {
  EXPECT_EQ(
      detect_launch(env_of(with(kSlurm, {{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}})))
          .launcher,
      "single");  // the step's one task, though the job has 8
  EXPECT_EQ(detect_launch(env_of({{"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "5"}})).launcher,
            "single");  // no task count at all
}

TEST(DetectLaunch, SbatchScriptWithoutSrunIsASingleProcess) {
  // What the batch script of `sbatch --nodes=4 --ntasks=4` sees: the job's task count, but no
  // srun step. Counting SLURM_NTASKS would make rank 0 of 4 wait for ranks that never start.
  const Vars batch = {{"SLURM_PROCID", "0"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "0"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_NPROCS", "4"},
                      {"SLURM_TASKS_PER_NODE", "1(x4)"},
                      {"SLURM_JOB_ID", "200505"},
                      {"SLURM_JOB_NODELIST", "gnode[10,20,25,37]"},
                      {"SLURM_NODELIST", "gnode[10,20,25,37]"}};
  EXPECT_EQ(detect_launch(env_of(batch)).launcher, "single");
  // srun inside that script adds the step's variables.
  const LaunchEnv step =
      detect_launch(env_of(with(batch, {{"SLURM_STEP_NUM_TASKS", "4"},
                                        {"SLURM_STEP_TASKS_PER_NODE", "1(x4)"},
                                        {"SLURM_STEP_NODELIST", "gnode[10,20,25,37]"},
                                        {"SLURM_PROCID", "2"},
                                        {"SLURM_NODEID", "2"}})));
  EXPECT_EQ(step.describe(), "rank 2 of 4 (local 0 of 1) via slurm, rendezvous gnode10:" +
                                 std::to_string(15000 + 200505 % 17000));
}

TEST(DetectLaunch, TorchrunTakesPrecedenceOverSlurm) {
  Vars vars = kSlurm;
  for (const auto& [k, v] : kTorchrun) vars[k] = v;
  const LaunchEnv env = detect_launch(env_of(vars));
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(DetectLaunch, SlurmErrorsNameTheVariable) {
  struct Case {
    Vars vars;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {without(kSlurm, "SLURM_LOCALID"),
       "environment variable SLURM_LOCALID is not set, but SLURM_STEP_NUM_TASKS=2 asks for a "
       "distributed run: start amptune with srun"},
      {without(kSlurm, "SLURM_JOB_ID"), "SLURM_JOB_ID is not set"},
      {without(without(kSlurm, "SLURM_STEP_NODELIST"), "SLURM_JOB_NODELIST"),
       "SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are not set"},
      {without(without(kSlurm, "SLURM_STEP_TASKS_PER_NODE"), "SLURM_TASKS_PER_NODE"),
       "SLURM_STEP_TASKS_PER_NODE and SLURM_TASKS_PER_NODE are not set"},
      {with(kSlurm, {{"SLURM_STEP_NODELIST", "node[07-"}}),
       "environment variable SLURM_STEP_NODELIST=node[07- is not a host list"},
      {with(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "2(x3"}}),
       "environment variable SLURM_STEP_TASKS_PER_NODE=2(x3 is not a Slurm tasks-per-node list"},
      {with(kSlurm, {{"SLURM_NODEID", "2"}}),
       "SLURM_STEP_TASKS_PER_NODE=1(x2) has no entry for SLURM_NODEID=2"},
      {with(kSlurm, {{"SLURM_PROCID", "2"}}), "environment variable SLURM_PROCID=2 is above 1"},
      {with(kSlurm, {{"SLURM_LOCALID", "1"}}), "environment variable SLURM_LOCALID=1 is above 0"},
      {with(kSlurm, {{"SLURM_STEP_NUM_TASKS", "two"}}),
       "environment variable SLURM_STEP_NUM_TASKS=two is not an integer"},
      {with(kSlurm, {{"SLURM_JOB_ID", "12x"}}),
       "environment variable SLURM_JOB_ID=12x is not an integer"},
      {with(kSlurm, {{"MASTER_PORT", "70000"}}),
       "environment variable MASTER_PORT=70000 is above 65535"},
  };
  for (const Case& c : cases) {
    const std::string error = launch_error(c.vars);
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
  }
}

// ----- Slurm host lists -------------------------------------------------------------------------

TEST(FirstSlurmHost, FirstHostOfTheList) {
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("x-[3-5]"), "x-3");
  EXPECT_EQ(first_slurm_host("single"), "single");
  EXPECT_EQ(first_slurm_host("node[007,010-012]"), "node007");
  EXPECT_EQ(first_slurm_host("rack[2-3]-n[08-09]"), "rack2-n08");
  EXPECT_EQ(first_slurm_host("gpu5,node[01-04]"), "gpu5");
  EXPECT_EQ(first_slurm_host("n[9]suffix"), "n9suffix");
}

TEST(FirstSlurmHost, MalformedListsThrow) {
  for (const std::string list : {"", "node[01-", "node[]", "node[01-04", "a,,b", "a,", ",a", "x]",
                                 "n[1-[2]]", "n[04-01]", "n[a-b]", "n[1-2,]", "ok,bad["}) {
    try {
      const std::string host = first_slurm_host(list);
      ADD_FAILURE() << "'" << list << "' gave '" << host << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("Slurm host list '" + list + "' is malformed"),
                std::string::npos)
          << e.what();
    }
  }
}

// ----- free port --------------------------------------------------------------------------------

TEST(FreeLocalPort, IsAPortThatCanBeBound) {
  const int port = free_local_port();
  ASSERT_GE(port, 1);
  ASSERT_LE(port, 65535);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << port;
  ::close(fd);
}

// ----- spawner ----------------------------------------------------------------------------------

// A scratch directory for spawned children. When it goes, every child that wrote a pid file
// there and still runs with AMPTUNE_TEST_SWEEP=<dir> is killed, and the test fails: the spawner
// must not leave one behind.
class Children {
 public:
  Children() : dir_(testing::scratch_dir()) {}
  ~Children() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("pid_", 0) != 0) continue;
      const pid_t pid = std::atoi(testing::read_file(entry.path().string()).c_str());
      if (pid <= 0) continue;
      const std::string env_text = testing::read_file("/proc/" + std::to_string(pid) + "/environ");
      if (env_text.find("AMPTUNE_TEST_SWEEP=" + dir_ + '\0') == std::string::npos) continue;
      ::kill(pid, SIGKILL);
      ADD_FAILURE() << "child " << pid << " (" << name << ") outlived spawn_local_ranks";
    }
  }
  const std::string& dir() const { return dir_; }

  // A /bin/sh -c `script` rank that first writes its pid file.
  SpawnOptions options(int nproc, const std::string& script) const {
    SpawnOptions o;
    o.nproc = nproc;
    o.argv = {"/bin/sh", "-c", "echo $$ > " + dir_ + "/pid_$RANK; " + script};
    o.extra_env["AMPTUNE_TEST_SWEEP"] = dir_;
    return o;
  }

  // Waits (at most 30 s) until `n` pid files exist.
  bool wait_started(int n) const {
    for (int i = 0; i < 3000; ++i) {
      int found = 0;
      for (int r = 0; r < n; ++r)
        found += std::filesystem::exists(dir_ + "/pid_" + std::to_string(r));
      if (found == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  std::string dir_;
};

// Sets an environment variable for the scope, then puts the old value back.
class ScopedEnv {
 public:
  // Sets `name` to `value`, or unsets it for nullopt, until the end of the scope.
  ScopedEnv(const std::string& name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name.c_str())) old_ = old;
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// `env` output (NAME=value lines) as a map.
Vars parse_env_dump(const std::string& text) {
  Vars vars;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

TEST(SpawnLocalRanks, EachRankGetsItsVariables) {
  Children children;
  // The parent's own launch variables are replaced, the rest inherited.
  ScopedEnv rank("RANK", "7"), addr("MASTER_ADDR", "bogus"), launcher("AMPTUNE_LAUNCHER", "x");
  ScopedEnv port("MASTER_PORT", "29500"), nccl("NCCL_SOCKET_IFNAME", std::nullopt);
  ScopedEnv inherited("AMPTUNE_LAUNCH_TEST_INHERITED", "kept");
  const std::string dir = children.dir();
  SpawnOptions options = children.options(
      3,
      "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
      "${MASTER_PORT-unset} $AMPTUNE_LAUNCHER $AMPTUNE_LAUNCH_TEST_INHERITED $EXTRA "
      "$NCCL_SOCKET_IFNAME $AMPTUNE_RENDEZVOUS_FILE $(stat -c %a \"$(dirname "
      "\"$AMPTUNE_RENDEZVOUS_FILE\")\") > " +
          dir +
          "/rank_$RANK; "
          "env > " +
          dir + "/env_$RANK");
  options.extra_env["EXTRA"] = "extra";
  options.extra_env["RANK"] = "99";  // the launcher's own variables win
  const SpawnResult result = spawn_local_ranks(options);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.statuses, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(result.forwarded_signal, 0);

  std::string file;
  for (int r = 0; r < 3; ++r) {
    const std::string line = testing::read_file(dir + "/rank_" + std::to_string(r));
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    ASSERT_EQ(f.size(), 12u) << line;
    EXPECT_EQ(f[0], std::to_string(r));
    EXPECT_EQ(f[1], "3");
    EXPECT_EQ(f[2], std::to_string(r));
    EXPECT_EQ(f[3], "3");
    EXPECT_EQ(f[4], "127.0.0.1");
    EXPECT_EQ(f[5], "unset") << "no TCP rendezvous: the parent's MASTER_PORT is not passed on";
    EXPECT_EQ(f[6], "nproc");
    EXPECT_EQ(f[7], "kept");
    EXPECT_EQ(f[8], "extra");
    EXPECT_EQ(f[9], "lo");
    if (r == 0) file = f[10];
    EXPECT_EQ(f[10], file) << "every rank meets in the same file";
    EXPECT_EQ(f[10].rfind("/", 0), 0u) << f[10];
    EXPECT_NE(f[10].find("/amptune-rendezvous-"), std::string::npos) << f[10];
    EXPECT_EQ(f[11], "700") << "the rendezvous directory is private to this user";

    // What a rank detects from the environment it got.
    const LaunchEnv env = detect_launch(
        env_of(parse_env_dump(testing::read_file(dir + "/env_" + std::to_string(r)))));
    EXPECT_EQ(env.describe(), "rank " + std::to_string(r) + " of 3 (local " + std::to_string(r) +
                                  " of 3) via nproc, rendezvous file " + file);
  }
  // The launcher removed the directory it made.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(file).parent_path())) << file;
}

TEST(SpawnLocalRanks, AnNcclInterfaceOfTheEnvironmentIsKept) {
  Children children;
  ScopedEnv nccl("NCCL_SOCKET_IFNAME", "ib0");
  const std::string dir = children.dir();
  const SpawnResult result = spawn_local_ranks(
      children.options(1, "echo $NCCL_SOCKET_IFNAME > " + dir + "/nccl_$RANK"));
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(testing::read_file(dir + "/nccl_0"), "ib0\n");
}

TEST(SpawnLocalRanks, FailingRankStopsTheOthersAfterTheGrace) {
  Children children;
  SpawnOptions options =
      children.options(2, "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 30");
  options.grace_seconds = 1;
  ::testing::internal::CaptureStderr();
  const SpawnResult result = spawn_local_ranks(options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(result.exit_code, 3);
  ASSERT_EQ(result.statuses.size(), 2u);
  EXPECT_EQ(result.statuses[1], 3);
  EXPECT_EQ(result.statuses[0], 128 + SIGTERM) << "rank 0 was not stopped by the launcher";
  EXPECT_NE(log.find("rank 1 (pid "), std::string::npos) << log;
  EXPECT_NE(log.find(") exited with status 3"), std::string::npos) << log;
  EXPECT_NE(log.find(") was killed by signal 15 (SIGTERM), stopped by the launcher after rank 1 "
                     "failed"),
            std::string::npos)
      << log;
}

TEST(SpawnLocalRanks, RankThatIgnoresSigtermGetsSigkill) {
  Children children;
  SpawnOptions options =
      children.options(2, "if [ \"$RANK\" = 0 ]; then exit 5; fi; trap '' TERM; exec sleep 30");
  options.grace_seconds = 0.2;
  options.kill_after_seconds = 0.5;
  const SpawnResult result = spawn_local_ranks(options);
  EXPECT_EQ(result.exit_code, 5);
  EXPECT_EQ(result.statuses, (std::vector<int>{5, 128 + SIGKILL}));
}

TEST(SpawnLocalRanks, RankKilledBySignalGives128PlusSignal) {
  Children children;
  ::testing::internal::CaptureStderr();
  const SpawnResult result =
      spawn_local_ranks(children.options(2, "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exit 0"));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(result.exit_code, 137);
  EXPECT_EQ(result.statuses, (std::vector<int>{137, 0}));
  EXPECT_NE(log.find("rank 0 (pid "), std::string::npos) << log;
  EXPECT_NE(log.find(") was killed by signal 9 (SIGKILL)"), std::string::npos) << log;
}

std::atomic<int> g_marker_calls{0};
void marker_handler(int) { ++g_marker_calls; }

TEST(SpawnLocalRanks, SigintIsPassedOnAndHandlersRestored) {
  Children children;
  // A handler of the caller's, which must be back afterwards (and not called meanwhile).
  struct sigaction mine {
  }, old_int{}, after{};
  mine.sa_handler = marker_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGINT, &mine, &old_int), 0);
  g_marker_calls = 0;

  std::thread interrupter([&] {
    if (children.wait_started(2)) ::kill(::getpid(), SIGINT);
  });
  SpawnOptions options = children.options(2, "exec sleep 30");
  options.grace_seconds = 30;  // the ranks end by the passed-on SIGINT, not by the grace
  const SpawnResult result = spawn_local_ranks(options);
  interrupter.join();
  ::sigaction(SIGINT, nullptr, &after);
  ::sigaction(SIGINT, &old_int, nullptr);

  EXPECT_EQ(result.forwarded_signal, SIGINT);
  EXPECT_EQ(result.exit_code, 128 + SIGINT);
  EXPECT_EQ(result.statuses, (std::vector<int>{128 + SIGINT, 128 + SIGINT}));
  EXPECT_EQ(after.sa_handler, &marker_handler);
  EXPECT_EQ(g_marker_calls.load(), 0);
}

TEST(SpawnLocalRanks, ProgramThatCannotBeExecutedThrows) {
  Children children;
  SpawnOptions options;
  options.nproc = 2;
  options.argv = {children.dir() + "/no-such-program"};
  try {
    spawn_local_ranks(options);
    ADD_FAILURE() << "no EnvironmentError";
  } catch (const EnvironmentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot start rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("no-such-program: No such file or directory"), std::string::npos) << what;
  }
}

TEST(SpawnLocalRanks, InvalidOptionsThrowUsageError) {
  SpawnOptions options;
  options.argv = {"/bin/true"};
  options.nproc = 0;
  EXPECT_THROW(spawn_local_ranks(options), UsageError);
  options.nproc = 1;
  options.grace_seconds = -1;
  EXPECT_THROW(spawn_local_ranks(options), UsageError);
  options.grace_seconds = 1;
  options.argv.clear();
  EXPECT_THROW(spawn_local_ranks(options), UsageError);
  options.argv = {"/bin/true"};
  EXPECT_EQ(spawn_local_ranks(options).exit_code, 0);
}

}  // namespace
}  // namespace amptune::launch
