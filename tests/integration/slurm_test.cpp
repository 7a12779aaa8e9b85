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
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <map>
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


// --- tune --slurm (docs/TUNE.md "On a cluster") --------------------------------------------

// The planted problem of tune_cli_test (tiny images left unnormalised: conv1 overflows fp16
// under O1), an O1 start with the static scale 128, the O0 reference; 3 short epochs.
const std::vector<std::string> kPlanted = {"--set", "data.mean=[-1.0]", "--set",
                                           "data.std=[0.000016]"};

TinySweep planted_sweep(const std::string& tag, int test_n = 32) {
  TinyOptions o = quick_tiny(
      "tune:\n  metric: train_loss\n  tolerance: {abs: 0.1}\n  reference: {amp.opt_level: O0}\n"
      "  start: {amp.opt_level: O1, amp.loss_scale: 128}\n",
      3);
  o.name = "tuned";
  o.dir_tag = tag;
  o.test_n = test_n;
  o.base = "  amp: {loss_scale: dynamic, max_loss_scale: 1024}\n";
  return make_tiny_sweep(o);
}

std::vector<std::string> tune_args(const TinySweep& f, bool slurm,
                                   const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"tune", f.yaml, "--db", f.db, "--no-progress"};
  args.insert(args.end(), kPlanted.begin(), kPlanted.end());
  if (slurm) {
    for (const char* a : {"--slurm", "--poll-seconds", "1", "--time", "20:00"}) args.push_back(a);
  }
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// A search as stored: its path (round, move, run, rung, outcome), its answer and its ledger.
struct Stored {
  records::TuneSearchRow search;
  std::vector<std::string> path;  // round, move, rung, outcome of each candidate
  std::vector<std::string> runs;  // their runs' names
  std::vector<records::TuneJobRow> jobs;
  int epoch_rows = 0;
};

Stored stored(const std::string& db) {
  store::Store store(db);
  Stored s;
  const auto searches = store.tune_searches("tuned");
  EXPECT_EQ(searches.size(), 1u) << db;
  if (searches.empty()) return s;
  s.search = searches.back();
  for (const auto& c : store.tune_candidates(s.search.id)) {
    s.path.push_back(std::to_string(c.round) + " " + (c.move ? to_string(*c.move) : "") +
                     " rung " + std::to_string(c.rung) + " " + records::to_string(c.outcome));
    s.runs.push_back(store.find_run(c.run_id)->name);
  }
  s.jobs = store.tune_jobs(s.search.id);
  for (const auto& run : store.runs("tuned")) {
    s.epoch_rows += static_cast<int>(store.epochs(run.id).size());
  }
  return s;
}

// (run, epoch) of every epoch a task trained: the epochs of its run whose checkpoint lies in
// its own folder, next to its database. Each at most once: nothing was trained twice.
std::multiset<std::pair<std::string, int>> trained_by_tasks(const Stored& s) {
  std::multiset<std::pair<std::string, int>> trained;
  for (const auto& job : s.jobs) {
    if (!fs::exists(job.task_db)) continue;
    store::Store task(job.task_db);
    const std::string own = (fs::path(job.task_db).parent_path() / "checkpoints").string();
    for (const auto& run : task.runs("tuned")) {
      for (const auto& e : task.epochs(run.id)) {
        if (e.checkpoint && e.checkpoint->path.rfind(own, 0) == 0) {
          trained.insert({run.name, e.epoch});
        }
      }
    }
  }
  return trained;
}

size_t distinct(const std::multiset<std::pair<std::string, int>>& trained) {
  return std::set<std::pair<std::string, int>>(trained.begin(), trained.end()).size();
}

void expect_same_search(const Stored& local, const Stored& slurm) {
  EXPECT_EQ(records::to_string(slurm.search.status), records::to_string(local.search.status));
  EXPECT_EQ(slurm.search.answer_yaml, local.search.answer_yaml);
  EXPECT_EQ(slurm.path, local.path);
  EXPECT_EQ(slurm.runs, local.runs);
  EXPECT_EQ(slurm.search.epochs_spent, local.search.epochs_spent);
  EXPECT_EQ(slurm.epoch_rows, local.epoch_rows);
  EXPECT_EQ(slurm.search.answer_value, local.search.answer_value) << "trained alike";
}

// (Short test names and tags: munged's socket path, in the scratch directory, must stay under
// 108 bytes.)
// The planted search through --slurm answers as the local one, on the same path, in the same
// epochs, each training step one array job whose tasks all completed; killed (SIGKILL) while a
// round's job runs and started again, it waits for that job and trains nothing twice; no job is
// left behind; a task cancelled with scancel is submitted once more and the search ends alike.
TEST(Slurm, TuneAnswersAsLocallyAndRestarts) {
  const TinySweep local = planted_sweep("l");
  const Result here = run_amptune(tune_args(local, false), local.dir);
  ASSERT_EQ(here.exit_code, 0) << here.err;
  const Stored expected = stored(local.db);
  ASSERT_EQ(records::to_string(expected.search.status), "answered") << expected.search.note;

  const TinySweep f = planted_sweep("s");
  const std::string cluster = f.dir + "/cluster";
  fs::create_directories(cluster);
  LocalSlurm slurm(cluster);
  if (!slurm.why_not().empty()) GTEST_SKIP() << "no local Slurm: " << slurm.why_not();
  const Result r = run_amptune(tune_args(f, true), f.dir, slurm.env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Stored s = stored(f.db);
  expect_same_search(expected, s);
  ASSERT_FALSE(s.jobs.empty());
  std::map<std::string, std::set<int>> epochs_of_job;
  for (const auto& job : s.jobs) {
    EXPECT_EQ(job.attempt, 1) << job.job_id;
    EXPECT_FALSE(job.ended_at.empty()) << job.job_id;
    epochs_of_job[job.job_id].insert(job.epoch);
  }
  for (const auto& [job, epochs] : epochs_of_job) {
    EXPECT_EQ(epochs.size(), 1u) << "array job " << job << " is one step";
    for (const std::string& state : job_states(slurm, job)) {
      EXPECT_EQ(state, "COMPLETED 0:0") << "array job " << job;
    }
  }
  const auto trained = trained_by_tasks(s);
  EXPECT_EQ(static_cast<int>(trained.size()), s.search.epochs_spent);
  EXPECT_EQ(distinct(trained), trained.size()) << "an epoch trained twice";
  EXPECT_NE(r.out.find("(answer)"), std::string::npos) << r.out;

  // Killed while a round's array job runs (slow epochs: 5000 test images each: other data, so
  // other run names), then again.
  const TinySweep k = planted_sweep("k", 5000);
  const pid_t pid = spawn_amptune(tune_args(k, true), k.dir, SpawnOptions(slurm.env(), "child"));
  {
    StopOnExit guard(pid);
    bool in_round = false;
    for (int i = 0; i < 3000 && !in_round; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!fs::exists(k.db)) continue;
      try {
        store::Store store(k.db);
        in_round = store.query("SELECT COUNT(*) FROM tune_jobs j JOIN tune_candidates c ON "
                               "c.run_id = j.run_id WHERE j.ended_at IS NULL")
                       .rows.at(0)[0] != "0";
      } catch (const std::exception&) {
        // the schema is being created
      }
    }
    ASSERT_TRUE(in_round) << read_file(k.dir + "/child.err");
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_EQ(wait_exit_code(pid), 128 + SIGKILL);
  }
  const Result status = run_amptune({"tune", k.yaml, "--db", k.db, "--status"}, k.dir);
  EXPECT_NE(status.out.find("in flight"), std::string::npos) << status.out;
  const Result again = run_amptune(tune_args(k, true), k.dir, slurm.env());
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  const Stored resumed = stored(k.db);
  EXPECT_EQ(resumed.search.answer_yaml, expected.search.answer_yaml);
  EXPECT_EQ(resumed.path, expected.path);
  EXPECT_EQ(resumed.search.epochs_spent, expected.search.epochs_spent);
  const auto again_trained = trained_by_tasks(resumed);
  EXPECT_EQ(static_cast<int>(again_trained.size()), resumed.search.epochs_spent);
  EXPECT_EQ(distinct(again_trained), again_trained.size()) << "an epoch trained twice";
  for (const auto& job : resumed.jobs) EXPECT_EQ(job.attempt, 1) << job.job_id;
  EXPECT_EQ(slurm.client({"squeue", "-h", "-o", "%i"}), "") << "a job left behind";

  // A task cancelled with scancel while it runs is a run that did not get there: submitted once
  // more, and the search ends as before (not a hung search).
  const TinySweep c = planted_sweep("c", 5000);
  const pid_t searching =
      spawn_amptune(tune_args(c, true), c.dir, SpawnOptions(slurm.env(), "child"));
  StopOnExit guard(searching);
  std::string running;
  for (int i = 0; i < 3000 && running.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(c.db)) continue;
    try {
      store::Store store(c.db);
      const auto q = store.query("SELECT job_id || '_' || task FROM tune_jobs WHERE "
                                 "ended_at IS NULL AND state = 'RUNNING' LIMIT 1");
      if (!q.rows.empty()) running = *q.rows[0][0];
    } catch (const std::exception&) {
      // the schema is being created
    }
  }
  ASSERT_FALSE(running.empty()) << read_file(c.dir + "/child.err");
  slurm.client({"scancel", running});
  ASSERT_EQ(wait_exit_code(searching), 0) << read_file(c.dir + "/child.err");
  const Stored retried = stored(c.db);
  EXPECT_EQ(retried.search.answer_yaml, expected.search.answer_yaml);
  EXPECT_EQ(retried.path, expected.path);
  bool cancelled = false, again_submitted = false;
  for (const auto& job : retried.jobs) {
    cancelled = cancelled || (job.job_id + "_" + std::to_string(job.task) == running &&
                              job.state.rfind("CANCELLED", 0) == 0);
    again_submitted = again_submitted || job.attempt == 2;
  }
  EXPECT_TRUE(cancelled) << running;
  EXPECT_TRUE(again_submitted);
  const auto retried_trained = trained_by_tasks(retried);
  EXPECT_EQ(distinct(retried_trained), retried_trained.size()) << "an epoch trained twice";
  EXPECT_NE(read_file(c.dir + "/child.err").find("submitting it once more"), std::string::npos);
}

// A task that cannot write its checkpoints (checkpoint.dir where no folder can be made) fails
// on the node: reported with its job state and log, submitted once more, then failed; the
// reference failing ends the search, exhausted, exit 8.
TEST(Slurm, TuneTaskFailureEndsTheSearch) {
  const TinySweep f = planted_sweep("f");
  const std::string cluster = f.dir + "/cluster";
  fs::create_directories(cluster);
  LocalSlurm slurm(cluster);
  if (!slurm.why_not().empty()) GTEST_SKIP() << "no local Slurm: " << slurm.why_not();
  const Result r = run_amptune(
      tune_args(f, true, {"--set", "checkpoint.dir=/proc/amptune-no-such-folder"}), f.dir,
      slurm.env());
  EXPECT_EQ(r.exit_code, 8) << r.out << r.err;
  EXPECT_NE(r.err.find("submitting it once more"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("task-0.out"), std::string::npos) << r.err;
  // The log's last lines follow its path (read from the end of the file).
  EXPECT_NE(r.err.find("task-0.out\n    "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("no answer"), std::string::npos) << r.out;
  const Stored s = stored(f.db);
  EXPECT_EQ(records::to_string(s.search.status), "exhausted");
  int second = 0;
  for (const auto& job : s.jobs) second += job.attempt == 2;
  EXPECT_GT(second, 0);
  store::Store store(f.db);
  EXPECT_EQ(store.find_run(s.search.reference_run_id)->status, records::RunStatus::kFailed);
  EXPECT_EQ(slurm.client({"squeue", "-h", "-o", "%i"}), "") << "a job left behind";
}

}  // namespace
}  // namespace amptune::testing
