// A real Slurm on this machine (label slurm): installs slurm-wlm and munge when missing
// (tools/install-deps.sh slurm), writes a single-node slurm.conf for this host in the test's
// scratch directory (no cgroups: proctrack/linuxproc, task/none; its own ports, state, spool and
// munge socket, so a Slurm already on the machine is not touched), starts munged, slurmctld and
// slurmd as children of the test, submits what `amptune slurm --submit` wrote for a 2-task array
// over a tiny sweep, waits for both jobs and checks the merged database. The daemons are stopped
// by their pids when the test ends, however it ends (and get SIGTERM should the test process
// die). The test is skipped, saying why, only when the daemons cannot be started here
// (packages not installable, not root, no hostname, a daemon that exits or never gets ready).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {

namespace fs = std::filesystem;

std::string tail(const std::string& path, size_t chars = 1500) {
  const std::string text = read_file(path);
  return text.size() > chars ? "..." + text.substr(text.size() - chars) : text;
}

// A TCP port free on this machine a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof address;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

// munged, slurmctld and slurmd of a one-node cluster living in `dir`.
class LocalSlurm {
 public:
  explicit LocalSlurm(const std::string& dir) : dir_(dir) { start(); }
  ~LocalSlurm() { stop(); }
  LocalSlurm(const LocalSlurm&) = delete;
  LocalSlurm& operator=(const LocalSlurm&) = delete;

  // Empty when the cluster is up; otherwise why it is not.
  const std::string& why_not() const { return why_not_; }
  std::vector<std::pair<std::string, std::string>> env() const {
    return {{"SLURM_CONF", dir_ + "/slurm.conf"}};
  }
  // Runs a Slurm client command against this cluster; its stdout (stderr in `*err`).
  std::string client(const std::vector<std::string>& argv, int* exit_code = nullptr,
                     std::string* err = nullptr) const {
    SpawnOptions options;
    options.env = env();
    options.log_stem = "client";
    const int code = wait_exit_code(spawn_program(argv, dir_, options), 120);
    if (exit_code) *exit_code = code;
    if (err) *err = read_file(dir_ + "/client.err");
    return read_file(dir_ + "/client.out");
  }

 private:
  // Runs a command to its end (install, hostname); its exit code.
  int run(const std::vector<std::string>& argv, const std::string& stem, double seconds) {
    SpawnOptions options;
    options.log_stem = stem;
    return wait_exit_code(spawn_program(argv, dir_, options), seconds);
  }

  pid_t daemon(const std::vector<std::string>& argv, const std::string& stem) {
    SpawnOptions options;
    options.env = env();
    options.log_stem = stem;
    options.die_with_parent = true;
    const pid_t pid = spawn_program(argv, dir_, options);
    daemons_.push_back({pid, stem, std::make_unique<StopOnExit>(pid)});
    return pid;
  }

  // The first daemon that has exited, as a reason; "" while all run.
  std::string exited() {
    for (auto& d : daemons_) {
      int status = 0;
      if (::waitpid(d.pid, &status, WNOHANG) == d.pid) {
        d.stop.reset();
        d.pid = -1;
        return d.stem + " exited (" +
               (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                  : "signal " + std::to_string(WTERMSIG(status))) +
               "): " + tail(dir_ + "/" + d.stem + ".err") + tail(dir_ + "/" + d.stem + ".log");
      }
    }
    return "";
  }

  void start() {
    if (::geteuid() != 0) {
      why_not_ = "not root: slurmd runs jobs as their user and the packages need installing";
      return;
    }
    const std::string deps = std::string(AMPTUNE_SOURCE_DIR) + "/tools/install-deps.sh";
    if (run({deps, "slurm"}, "install", 600) != 0) {
      why_not_ = "tools/install-deps.sh slurm failed: " + tail(dir_ + "/install.err");
      return;
    }
    if (run({"hostname", "-s"}, "hostname", 10) != 0) {
      why_not_ = "hostname -s failed";
      return;
    }
    std::string host = read_file(dir_ + "/hostname.out");
    host.erase(host.find_last_not_of(" \n") + 1);
    if (run({"slurmd", "-C"}, "node", 30) != 0) {
      why_not_ = "slurmd -C failed: " + tail(dir_ + "/node.err");
      return;
    }
    // "NodeName=vm CPUs=2 Boards=1 ... RealMemory=24105" (this machine as slurmd sees it)
    std::string node = read_file(dir_ + "/node.out");
    node = node.substr(0, node.find('\n'));
    if (node.rfind("NodeName=", 0) != 0) {
      why_not_ = "slurmd -C printed no NodeName line: " + node;
      return;
    }
    fs::create_directories(dir_ + "/state");
    fs::create_directories(dir_ + "/spool");
    {
      std::ofstream key(dir_ + "/munge.key", std::ios::binary);
      std::random_device random;
      for (int i = 0; i < 1024; ++i) key.put(static_cast<char>(random()));
    }
    fs::permissions(dir_ + "/munge.key", fs::perms::owner_read);
    const int ctld_port = free_port();
    int slurmd_port = free_port();
    while (slurmd_port == ctld_port) slurmd_port = free_port();
    std::ostringstream conf;
    conf << "ClusterName=amptunetest\n"
         << "SlurmctldHost=" << host << "\n"
         << "AuthType=auth/munge\nCredType=cred/munge\n"
         << "AuthInfo=socket=" << dir_ << "/munge.socket\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "SlurmctldPort=" << ctld_port << "\nSlurmdPort=" << slurmd_port << "\n"
         << "StateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << dir_ << "/spool\n"
         << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\n"
         << "SlurmdPidFile=" << dir_ << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\n"
         << "SlurmdLogFile=" << dir_ << "/slurmd.log\n"
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
         << "SchedulerType=sched/builtin\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
         << "ReturnToService=2\nJobCompType=jobcomp/none\n"
         << "AccountingStorageType=accounting_storage/none\n"
         << "JobAcctGatherType=jobacct_gather/none\n"
         << node << " State=UNKNOWN\n"
         << "PartitionName=debug Nodes=" << host << " Default=YES MaxTime=INFINITE State=UP\n";
    write_file(dir_ + "/slurm.conf", conf.str());
    daemon({"munged", "--foreground", "--force", "--key-file=" + dir_ + "/munge.key",
            "--socket=" + dir_ + "/munge.socket", "--pid-file=" + dir_ + "/munged.pid",
            "--log-file=" + dir_ + "/munged.log", "--seed-file=" + dir_ + "/munged.seed"},
           "munged");
    for (int i = 0; i < 100 && !fs::exists(dir_ + "/munge.socket"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    daemon({"slurmctld", "-D", "-i", "-f", dir_ + "/slurm.conf"}, "slurmctld");
    daemon({"slurmd", "-D", "-f", dir_ + "/slurm.conf"}, "slurmd");
    // Up when the node is idle.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string state;
    while (std::chrono::steady_clock::now() < deadline) {
      if (const std::string gone = exited(); !gone.empty()) {
        why_not_ = gone;
        return;
      }
      state = client({"sinfo", "-h", "-o", "%T"});
      if (state.rfind("idle", 0) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    why_not_ = "the node is not idle after 60 s (sinfo: '" + state +
               "'); slurmctld.log: " + tail(dir_ + "/slurmctld.log") +
               " slurmd.log: " + tail(dir_ + "/slurmd.log");
  }

  void stop() {
    bool running = false;
    for (const auto& d : daemons_) running = running || d.pid > 0;
    if (running && why_not_.empty()) {
      // Jobs first, while slurmd can still end their steps: a slurmstepd whose slurmd is gone
      // stays behind.
      client({"scancel", "--full", "--user=root"});
      for (int i = 0; i < 60 && !client({"squeue", "-h", "-o", "%i"}).empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    }
    // slurmd, then slurmctld, then munged: the reverse of starting (StopOnExit: SIGTERM, 10 s,
    // then SIGKILL, and reaped).
    while (!daemons_.empty()) daemons_.pop_back();
  }

  struct Daemon {
    pid_t pid;
    std::string stem;
    std::unique_ptr<StopOnExit> stop;
  };
  std::string dir_;
  std::string why_not_;
  std::vector<Daemon> daemons_;
};

// "JobState=COMPLETED" etc. of every record of `job` (one per array task).
std::vector<std::string> job_states(const LocalSlurm& slurm, const std::string& job) {
  const std::string text = slurm.client({"scontrol", "-o", "show", "job", job});
  std::vector<std::string> states;
  static const std::regex state(R"(JobState=(\S+).*ExitCode=(\S+))");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, state)) states.push_back(m[1].str() + " " + m[2].str());
  }
  return states;
}

TEST(Slurm, AnArrayJobOfShardsAndItsMergeJob) {
  const TinySweep f = make_tiny_sweep(quick_tiny("grid:\n  optim.lr: [0.05, 0.2]\n"));
  const std::string cluster = f.dir + "/cluster";
  fs::create_directories(cluster);
  LocalSlurm slurm(cluster);
  if (!slurm.why_not().empty()) GTEST_SKIP() << "no local Slurm: " << slurm.why_not();

  SpawnOptions with_slurm;
  with_slurm.env = slurm.env();
  const int code =
      wait_exit_code(spawn_amptune({"slurm", f.yaml, "--array", "2", "--into",
                                    "results/merged.sqlite", "--time", "10:00", "--submit"},
                                   f.dir, with_slurm),
                     120);
  const std::string out = read_file(f.dir + "/child.out");
  ASSERT_EQ(code, 0) << out << read_file(f.dir + "/child.err");
  std::smatch ids;
  ASSERT_TRUE(std::regex_search(out, ids, std::regex(R"(array job (\d+) and merge job (\d+))")))
      << out;
  const std::string array_job = ids[1], merge_job = ids[2];

  // Wait for the merge job (it waits for the array job) to end.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  std::vector<std::string> merge_state;
  for (;;) {
    merge_state = job_states(slurm, merge_job);
    // COMPLETING: the job's processes ended and Slurm is still finishing it (its epilog);
    // under a slow build (ASan) the test saw it instead of COMPLETED.
    const bool done = merge_state.size() == 1 && merge_state[0].find("PENDING") != 0 &&
                      merge_state[0].find("RUNNING") != 0 &&
                      merge_state[0].find("COMPLETING") != 0 &&
                      merge_state[0].find("CONFIGURING") != 0;
    if (done) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "jobs still not done: array " << ::testing::PrintToString(job_states(slurm, array_job))
        << ", merge " << ::testing::PrintToString(merge_state);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const auto array_state = job_states(slurm, array_job);
  const std::string logs = "slurm/tiny-" + array_job + "_";
  EXPECT_EQ(array_state, (std::vector<std::string>{"COMPLETED 0:0", "COMPLETED 0:0"}))
      << tail(f.dir + "/" + logs + "0.out") << tail(f.dir + "/" + logs + "1.out");
  const std::string merge_log = f.dir + "/slurm/tiny-merge-" + merge_job + ".out";
  ASSERT_EQ(merge_state, std::vector<std::string>{"COMPLETED 0:0"}) << tail(merge_log);

  // Each array task trained its shard into its own database; the merge job joined them.
  size_t shard_runs = 0;
  for (int k = 0; k < 2; ++k) {
    const std::string shard = f.dir + "/results/tiny.shard-" + std::to_string(k) + "-of-2.sqlite";
    ASSERT_TRUE(fs::exists(shard)) << shard;
    shard_runs += store::Store(shard).runs("tiny").size();
  }
  EXPECT_EQ(shard_runs, 2u);
  const std::string merged = f.dir + "/results/merged.sqlite";
  ASSERT_TRUE(fs::exists(merged)) << tail(merge_log);
  store::Store store(merged);
  EXPECT_EQ(store.integrity_check(), "ok");
  const auto runs = store.runs("tiny");
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& run : runs) {
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.name;
    const auto epochs = store.epochs(run.id);
    ASSERT_EQ(epochs.size(), 1u) << run.name;
    EXPECT_GT(epochs[0].metrics.at("acc1"), 0) << run.name;
    ASSERT_TRUE(epochs[0].checkpoint) << run.name;
    EXPECT_TRUE(fs::exists(f.dir + "/" + epochs[0].checkpoint->path)) << epochs[0].checkpoint->path;
  }
  const std::string log = read_file(merge_log);
  EXPECT_NE(log.find("merged 2 databases into results/merged.sqlite: 2 runs added"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("sweep tiny: 2 runs: done 2"), std::string::npos) << log;
}

}  // namespace
}  // namespace amptune::testing
