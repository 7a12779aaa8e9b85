// Data-parallel training with real processes: 2 Gloo ranks on the loopback, launched by
// `run --nproc 2`, by torchrun (python3 -m torch.distributed.run --no_python) and by a
// simulated srun environment; the equality of 2 ranks x B/2 with 1 rank x B (sync BN), an
// overflow on one rank, a killed rank, exact sharded evaluation and the refusals.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch/launch.h"
#include "harness.h"
#include "store/store.h"
#include "support/processes.h"  // children_of

namespace amptune::testing {
namespace {

namespace fs = std::filesystem;

// The tiny sweep of the harness with enough images for 2 ranks: epochs of `train_n` / 16 steps
// of one process (batch 16), an evaluation set of 44 images in batches of 8 (6 batches, the
// last one short).
TinySweep distributed_sweep(const std::string& tag, int epochs, int train_n,
                            const std::string& base = "") {
  TinyOptions o;
  o.dir_tag = tag;
  o.name = "dp";
  o.epochs = epochs;
  o.train_n = train_n;
  o.test_n = 44;
  o.loader_workers = 1;
  o.base = "  data.eval_batch_size: 8\n" + base;
  return make_tiny_sweep(o);
}

std::vector<std::string> run_args(const TinySweep& f, std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", f.yaml, "--db", f.db, "--no-progress"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// A TCP port in [lo, hi) that is free now.
int free_port_in(int lo, int hi) {
  for (int i = 0; i < hi - lo; ++i) {
    const int port = lo + (static_cast<int>(::getpid()) * 7 + i * 13) % (hi - lo);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (ok) return port;
  }
  ADD_FAILURE() << "no free port in " << lo << ".." << hi;
  return lo;
}

// Epochs run `run` of database `db` has recorded so far; 0 while the database or the run does
// not exist yet (a job being started).
int epochs_done(const std::string& db, const std::string& run) {
  if (!fs::exists(db)) return 0;
  try {
    store::Store store(db);
    const auto row = store.find_run(run);
    return row ? row->epochs_done : 0;
  } catch (const std::exception&) {  // being created
    return 0;
  }
}

// Starts the two ranks of a job with `env_of(rank)`; returns their exit codes.
std::vector<int> two_processes(
    const std::vector<std::string>& args, const std::string& cwd,
    const std::function<std::vector<std::pair<std::string, std::string>>(int)>& env_of,
    std::vector<pid_t>* pids = nullptr,
    const std::function<void(const std::vector<pid_t>&)>& meanwhile = {}) {
  std::vector<pid_t> started;
  std::vector<std::unique_ptr<StopOnExit>> guards;
  for (int rank = 0; rank < 2; ++rank) {
    started.push_back(spawn_amptune(args, cwd, {env_of(rank), "rank" + std::to_string(rank)}));
    guards.push_back(std::make_unique<StopOnExit>(started.back()));
  }
  if (pids) *pids = started;
  if (meanwhile) meanwhile(started);
  std::vector<int> codes;
  for (pid_t pid : started) codes.push_back(wait_exit_code(pid, 300));
  return codes;
}

std::vector<std::pair<std::string, std::string>> torchrun_env(int rank, int port) {
  return {{"RANK", std::to_string(rank)},       {"WORLD_SIZE", "2"},
          {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)}};
}

// The values of run 1 that must not depend on how (or whether) the job was interrupted or
// launched: per epoch the loss, the evaluation and the loss scale; bitwise.
void expect_same_epochs(const std::string& db_a, const std::string& db_b) {
  const auto a = epochs_of(db_a, "1"), b = epochs_of(db_b, "1");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].global_step, b[i].global_step) << "epoch " << i;
    EXPECT_EQ(a[i].train_loss, b[i].train_loss) << "epoch " << i;
    for (const char* m : {"acc1", "acc5", "val_loss", "val_samples", "loss_scale", "skipped_steps",
                          "train_images"}) {
      ASSERT_TRUE(a[i].metrics.count(m) && b[i].metrics.count(m)) << m;
      EXPECT_EQ(a[i].metrics.at(m), b[i].metrics.at(m)) << m << " epoch " << i;
    }
  }
}

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

// 2 ranks x batch 8 with dist.sync_bn equal 1 rank x batch 16: the ranks' step-s batches hold
// the samples of the single process's step s (DistributedSampler), the averaged gradient is the
// batch-16 gradient and synchronised BatchNorm sees the batch-16 statistics. Only fp32 reduction
// order differs (sums of 8 + 8 instead of 16 values, and the two-pass variance of the
// synchronised layers): after 20 SGD steps train_loss and val_loss agree to a relative 1e-4
// (measured: train_loss 1e-9, val_loss 1e-5 of a loss of 0.0011). Without sync_bn each rank
// normalises with its own 8 samples, as DDP does, and the runs part by far more than that.
// NCHW weights and inputs (model.memory_format contiguous): oneDNN's channels_last convolutions
// (the CPU default) sum a batch of 8 in another order than one of 16, and after 20 steps at this
// loss the runs part by more than the tolerance (measured: train_loss 1.3e-4, val_loss 9e-2).
TEST(Distributed, TwoRanksWithSyncBnEqualOneRankWithTheWholeBatch) {
  const std::vector<std::string> nchw = {"--set", "model.memory_format=contiguous"};
  auto with = [&nchw](std::vector<std::string> extra) {
    extra.insert(extra.end(), nchw.begin(), nchw.end());
    return extra;
  };
  const TinySweep one = distributed_sweep("one", 1, 320);
  ASSERT_EQ(run_amptune(run_args(one, nchw), one.dir).exit_code, 0);
  const TinySweep synced = distributed_sweep("synced", 1, 320);
  auto r = run_amptune(run_args(synced, with({"--nproc", "2", "--set", "data.batch_size=8",
                                              "--set", "dist.sync_bn=true"})),
                       synced.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const TinySweep ddp = distributed_sweep("ddp", 1, 320);
  r = run_amptune(run_args(ddp, with({"--nproc", "2", "--set", "data.batch_size=8"})), ddp.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const auto a = epochs_of(one.db, "1").at(0), b = epochs_of(synced.db, "1").at(0),
             c = epochs_of(ddp.db, "1").at(0);
  EXPECT_EQ(a.global_step, 20);
  EXPECT_EQ(b.global_step, 20);
  EXPECT_EQ(a.metrics.at("train_images"), 320);
  EXPECT_EQ(b.metrics.at("train_images"), 320);  // both ranks' images
  EXPECT_LT(relative(b.train_loss, a.train_loss), 1e-4) << b.train_loss << " vs " << a.train_loss;
  EXPECT_LT(relative(b.metrics.at("val_loss"), a.metrics.at("val_loss")), 1e-4)
      << b.metrics.at("val_loss") << " vs " << a.metrics.at("val_loss");
  // Per-rank BatchNorm statistics (DDP's default) are another computation.
  EXPECT_GT(relative(c.metrics.at("val_loss"), a.metrics.at("val_loss")), 1e-3)
      << c.metrics.at("val_loss") << " vs " << a.metrics.at("val_loss");

  store::Store store(synced.db);
  const auto run = store.find_run("1");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->provenance.world_size, 2);
  EXPECT_EQ(run->provenance.global_batch, 16);
  const auto summary = nlohmann::json::parse(run->summary_json);
  EXPECT_EQ(summary.at("world_size"), 2);
  EXPECT_EQ(summary.at("local_rank"), 0);
  EXPECT_EQ(summary.at("batch_size"), 8);
  EXPECT_EQ(summary.at("global_batch"), 16);
  EXPECT_EQ(b.metrics.at("world_size"), 2);
  EXPECT_GT(b.metrics.at("allreduce_ms"), 0);
  EXPECT_LE(b.metrics.at("rank_fps_min"), b.metrics.at("rank_fps_max"));
  // MFU (docs/PERFORMANCE.md): the job's peak is one process's x 2, as its img/s is the ranks'
  // sum; the FLOPs per sample are the config's, whatever the batch.
  const records::RunWork alone = store::Store(one.db).find_run("1")->work;
  EXPECT_EQ(run->work.peak_flops, 2 * alone.peak_flops);
  EXPECT_EQ(run->work.peak_source, alone.peak_source + " x 2 processes");
  EXPECT_EQ(run->work.train_flops_per_sample, alone.train_flops_per_sample);
  EXPECT_GT(alone.train_flops_per_sample, 0);
}

// FP8 with delayed scaling (docs/AMP.md "FP8: the recipe"): the ranks take the maximum of each
// step's amaxes before the histories move (dist::allreduce_amax), so both hold one state. Each
// rank evaluates its shard with its own delayed scales, and `amptune eval` evaluates every batch
// in one process with the scales of rank 0's checkpoint: the metrics are the same only when the
// ranks' scales are (without the reduction each rank's input amaxes are its own batches').
TEST(Distributed, Fp8RanksKeepOneScalingState) {
  const TinySweep f = distributed_sweep("fp8", 1, 160);
  auto r = run_amptune(run_args(f, {"--nproc", "2", "--set", "data.batch_size=8", "--set",
                                    "amp.fp8.enabled=true", "--set",
                                    "amp.fp8.amax_history_len=4"}),
                       f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto before = epochs_of(f.db, "1").back();
  r = run_amptune({"eval", "1", "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto after = epochs_of(f.db, "1").back();
  for (const char* m : {"acc1", "acc5", "val_loss", "val_samples"}) {
    EXPECT_EQ(before.metrics.at(m), after.metrics.at(m)) << m;
  }
}

// FP8 slots are made by a rank's first quantisation. A rank whose first step had no sample
// (every image of its batch corrupt) has made none while the other has made them all: the ranks
// agree on the union before they all-reduce the step's amaxes, and the run trains on.
TEST(Distributed, Fp8RanksAgreeOnTheirSlotsWhenOneQuantisedNothing) {
  const std::string dir = scratch_dir("dp_fp8_empty");
  write_tiny_idx(dir + "/idx", 8, 8);
  auto r = run_amptune({"data", "export-imagefolder", "--idx", dir + "/idx", "--out",
                        dir + "/jpeg", "--names", "generic"},
                       dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One training image of 8 left: in its step one rank quantises, the other has nothing.
  int corrupted = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/jpeg/train")) {
    if (e.is_regular_file() && corrupted < 7) {
      write_file(e.path().string(), "this is not a JPEG");
      ++corrupted;
    }
  }
  ASSERT_EQ(corrupted, 7);
  write_file(dir + "/sweep.yaml",
             "name: dp_fp8\n"
             "base:\n"
             "  model: {name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, "
             "small_input: true}\n"
             "  data: {format: imagefolder, root: " + dir + "/jpeg, image_size: 12, "
             "resize_size: 12, mean: [0.3], std: [0.3], batch_size: 1, workers: 1}\n"
             "  amp: {opt_level: O1, dtype: bf16, fp8: {enabled: true}}\n"
             "  optim: {lr: 0.05}\n"
             "  schedule: {epochs: 1}\n"
             "  dist: {timeout_s: 60}\n"  // (before the agreement: a hang until the timeout)
             "  threads: 1\n");
  const std::string db = dir + "/amptune.sqlite";
  r = run_amptune({"run", dir + "/sweep.yaml", "--db", db, "--no-progress", "--nproc", "2"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto epochs = epochs_of(db, "1");
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0].skipped_samples, 7);
  EXPECT_TRUE(std::isfinite(epochs[0].train_loss));
}

// torchrun, --nproc 2 and srun's environment are one behaviour: the same run rows and the
// same metrics, bitwise. The sharded evaluation equals `amptune eval` of the checkpoint in one
// process, bitwise (which also shows both ranks hold the same weights).
TEST(Distributed, TorchrunNprocAndSrunGiveTheSameRunsAndEvaluationIsExact) {
  const TinySweep nproc = distributed_sweep("nproc", 2, 192);
  auto r = run_amptune(run_args(nproc, {"--nproc", "2"}), nproc.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const TinySweep torchrun = distributed_sweep("torchrun", 2, 192);
  {
    const int port = launch::free_local_port();
    const pid_t pid = spawn_program(
        {"/usr/bin/python3", "-m", "torch.distributed.run", "--no_python", "--nnodes", "1", "--nproc_per_node", "2",
         "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:" + std::to_string(port),
         // torchrun 1.13 under Python 3.11 cannot parse its default --redirects 0 (its Std
         // flag enum lost the zero member); redirect stderr and tee it back instead.
         "--redirects", "2", "--tee", "2", "--log_dir", torchrun.dir + "/torchrun-logs",
         AMPTUNE_BINARY, "run", torchrun.yaml, "--db", torchrun.db, "--no-progress"},
        torchrun.dir, {{}, "torchrun"});
    StopOnExit stop(pid);
    ASSERT_EQ(wait_exit_code(pid, 300), 0) << read_file(torchrun.dir + "/torchrun.err");
  }

  const TinySweep srun = distributed_sweep("srun", 2, 192);
  // srun's variables only; the rendezvous port comes from the job id (15000 + id % 17000).
  const int port = free_port_in(15000, 32000);
  const auto codes = two_processes(run_args(srun, {}), srun.dir, [&](int rank) {
    return std::vector<std::pair<std::string, std::string>>{
        {"SLURM_PROCID", std::to_string(rank)},
        {"SLURM_LOCALID", std::to_string(rank)},
        {"SLURM_STEP_NUM_TASKS", "2"},
        {"SLURM_STEP_TASKS_PER_NODE", "2"},
        {"SLURM_NODEID", "0"},
        {"SLURM_STEP_NODELIST", "localhost"},
        {"SLURM_JOB_ID", std::to_string(port - 15000 + 17000 * 3)}};
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}))
      << read_file(srun.dir + "/rank0.err") << read_file(srun.dir + "/rank1.err");
  EXPECT_NE(read_file(srun.dir + "/rank0.err").find("via slurm"), std::string::npos);
  EXPECT_NE(read_file(torchrun.dir + "/torchrun.err").find("via torchrun"), std::string::npos);

  for (const TinySweep* other : {&torchrun, &srun}) {
    expect_same_epochs(nproc.db, other->db);
    store::Store a(nproc.db), b(other->db);
    EXPECT_EQ(a.runs().size(), b.runs().size());  // (configs differ in data.root only)
    EXPECT_EQ(a.find_run("1")->label, b.find_run("1")->label);
    EXPECT_EQ(a.find_run("1")->provenance.global_batch, b.find_run("1")->provenance.global_batch);
    EXPECT_EQ(b.find_run("1")->provenance.world_size, 2);
    EXPECT_EQ(b.find_run("1")->status, records::RunStatus::kDone);
  }

  // `amptune eval` evaluates the last checkpoint in one process and records its metrics over
  // the ones the two ranks recorded: they must not change.
  const auto before = epochs_of(nproc.db, "1").back();
  r = run_amptune({"eval", "1", "--db", nproc.db}, nproc.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto after = epochs_of(nproc.db, "1").back();
  for (const char* m : {"acc1", "acc5", "val_loss", "val_samples"}) {
    EXPECT_EQ(before.metrics.at(m), after.metrics.at(m)) << m;
  }
  EXPECT_EQ(after.metrics.at("val_samples"), 44);
}

// The TCP sockets that `pids` hold, as "STATE LOCAL" with /proc/net/tcp{,6}'s notation: state
// 0A is LISTEN, 01 ESTABLISHED; local "0100007F:9C41" or "00000000000000000000000001000000:9C41".
std::set<std::string> tcp_sockets(const std::vector<pid_t>& pids) {
  std::set<std::string> inodes;
  for (pid_t pid : pids) {
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      const std::string target = fs::read_symlink(fd.path(), ec).string();
      if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::set<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
          inode;
      if (inodes.count(inode)) out.insert(state + " " + local);
    }
  }
  return out;
}

// 127.0.0.0/8, ::1 or ::ffff:127.x.y.z in /proc/net/tcp{,6}'s notation (32-bit words in host
// order: 127.0.0.1 is 0100007F on this little-endian machine).
bool loopback(const std::string& address) {
  const std::string host = address.substr(0, address.find(':'));
  if (host.size() == 8) return host.substr(6, 2) == "7F";
  return host == "00000000000000000000000001000000" ||
         (host.substr(0, 24) == "0000000000000000FFFF0000" && host.substr(30, 2) == "7F");
}

// `run --nproc N` keeps its job on this machine: the ranks meet in a file of a private
// directory and nothing of theirs listens on a port other interfaces reach (a TCP store on all
// interfaces took any host's connection: its control channel tells the ranks what to train).
// The ranks' TCP sockets are sampled from /proc while the job trains: every one, listening or
// connected (Gloo's pairs), is on the loopback.
TEST(Distributed, AnNprocJobListensOnTheLoopbackOnly) {
  const TinySweep f = distributed_sweep("loopback", 2, 1600);
  const pid_t launcher = spawn_amptune(run_args(f, {"--nproc", "2"}), f.dir, {{}, "job"});
  StopOnExit stop(launcher);
  std::set<std::string> seen;
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(launcher), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == launcher) {
      break;  // ended (not reaped yet)
    }
    for (const std::string& socket : tcp_sockets(children_of(launcher))) seen.insert(socket);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(wait_exit_code(launcher, 10), 0) << read_file(f.dir + "/job.err");
  bool connected = false;
  for (const std::string& socket : seen) {
    const std::string state = socket.substr(0, 2), local = socket.substr(3);
    connected |= state == "01";
    EXPECT_TRUE(loopback(local)) << "a rank's socket (state " << state << ") is on " << local;
  }
  EXPECT_TRUE(connected) << "no connection between the ranks seen: the sampling missed them";
  const std::string err = read_file(f.dir + "/job.err");
  const auto at = err.find("rendezvous file ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string file = err.substr(at + 16, err.find('\n', at) - at - 16);
  EXPECT_FALSE(fs::exists(fs::path(file).parent_path())) << "the launcher removes " << file;
}

// An overflow found on rank 1 alone (AMPTUNE_FAULT_OVERFLOW: an inf gradient after averaging)
// skips the step and halves the scale on both ranks: rank 0 records the skip, and the run is
// bitwise the run whose overflow was found on rank 0.
// The initial weights evaluated by 2 ranks, each its shard of the batches, equal one process's
// evaluation exactly: an evaluation-only cell, and schedule.eval_initial before training.
TEST(Distributed, TwoRanksEvaluateInitialWeightsAsOneProcess) {
  const std::string zip =
      "zip:\n  - {schedule.epochs: [0, 1], schedule.eval_initial: [false, true]}\n";
  const TinySweep one = distributed_sweep("one", 1, 64, zip);
  auto r = run_amptune(run_args(one, {}), one.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const TinySweep two = distributed_sweep("two", 1, 64, zip);
  r = run_amptune(run_args(two, {"--nproc", "2", "--set", "data.batch_size=8"}), two.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto a = epochs_of(one.db, "1"), b = epochs_of(two.db, "1");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].global_step, 0);
  EXPECT_EQ(b[0].metrics.at("val_samples"), 44);
  EXPECT_EQ(a[0].metrics, b[0].metrics);
  store::Store sa(one.db), sb(two.db);
  EXPECT_EQ(sa.initial_metrics(2), a[0].metrics);  // same seed: the same initial weights
  EXPECT_EQ(sb.initial_metrics(2), a[0].metrics);
  EXPECT_EQ(epochs_of(two.db, "2").size(), 1u);
}

TEST(Distributed, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  const std::string amp = "  amp: {opt_level: O1, loss_scale: dynamic}\n";
  std::vector<TinySweep> runs;
  for (const char* fault : {"", "1:3", "0:3"}) {
    runs.push_back(distributed_sweep(std::string("fault") + fault, 1, 192, amp));
    const TinySweep& f = runs.back();
    const pid_t pid = spawn_amptune(run_args(f, {"--nproc", "2"}), f.dir,
                                    {{{"AMPTUNE_FAULT_OVERFLOW", fault}}, "job"});
    StopOnExit stop(pid);
    ASSERT_EQ(wait_exit_code(pid, 300), 0) << read_file(f.dir + "/job.err");
  }
  // The injected overflow is one skipped step and one halving more than the clean run has.
  const auto clean = epochs_of(runs[0].db, "1").at(0), e = epochs_of(runs[1].db, "1").at(0);
  EXPECT_EQ(e.metrics.at("skipped_steps"), clean.metrics.at("skipped_steps") + 1);
  EXPECT_EQ(e.metrics.at("overflow_steps"), clean.metrics.at("overflow_steps") + 1);
  EXPECT_EQ(e.metrics.at("loss_scale"), clean.metrics.at("loss_scale") / 2);
  EXPECT_EQ(e.global_step, clean.global_step);
  expect_same_epochs(runs[1].db, runs[2].db);
}

// The divergence rule on 2 ranks (train/divergence.h, docs/AMP.md "Divergence"): a step's loss
// is inf/NaN when any rank's is, and the row of such losses counts across a stop and a resume as
// on one process. Inputs of about 10^6 overflow fp16 in conv1 under O1, so every loss is NaN;
// 1280 images in batches of 16 on 2 ranks are 40 steps an epoch, and the 100th NaN in a row is
// step 19 of epoch 2, whether the job ran straight or stopped after epoch 0 and ran again (which
// restarted the count at step 40 before, and then finished the run as done).
TEST(Distributed, ANonFiniteStreakDivergesAtTheSameStepAcrossAResume) {
  const std::string amp = "  amp: {opt_level: O1, loss_scale: dynamic}\n";
  std::vector<std::string> messages;
  for (const bool stop : {false, true}) {
    const TinySweep f = distributed_sweep(stop ? "nan-staged" : "nan-straight", 3, 1280, amp);
    const auto args = run_args(f, {"--nproc", "2", "--set", "data.std=[0.000001]"});
    if (stop) {
      auto first = args;
      first.insert(first.end(), {"--stop-after-epoch", "0"});
      auto r = run_amptune(first, f.dir);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      ASSERT_EQ(epochs_of(f.db, "1").size(), 1u);
    }
    auto r = run_amptune(args, f.dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    store::Store store(f.db);
    const auto run = store.find_run("1");
    EXPECT_EQ(run->status, records::RunStatus::kDiverged) << run->message;
    messages.push_back(run->message);
    const auto epochs = store.epochs(run->id);
    ASSERT_EQ(epochs.size(), 2u);
    EXPECT_EQ(epochs[0].metrics.at("nonfinite_streak"), 40);
    EXPECT_EQ(epochs[1].metrics.at("nonfinite_streak"), 80);
  }
  EXPECT_NE(messages[0].find("100 steps in a row"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("at epoch 2 step 19"), std::string::npos) << messages[0];
  EXPECT_EQ(messages[1], messages[0]);
}

// SIGKILL of rank 1 in the middle of training: rank 0 stops at once (its collective fails),
// names the lost rank, leaves the run resumable and exits 9; the same command then finishes the
// run, and every epoch equals an uninterrupted 2-rank run bitwise.
TEST(Distributed, AKilledRankLeavesTheRunResumableAndTheRerunEqualsAnUninterruptedRun) {
  const int epochs = 3;
  const TinySweep reference = distributed_sweep("reference", epochs, 1600);
  auto r = run_amptune(run_args(reference, {"--nproc", "2"}), reference.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const TinySweep f = distributed_sweep("killed", epochs, 1600);
  const int port = launch::free_local_port();
  const auto args = run_args(f, {"--set", "dist.timeout_s=60"});
  const auto codes = two_processes(
      args, f.dir, [port](int rank) { return torchrun_env(rank, port); }, nullptr,
      [&](const std::vector<pid_t>& pids) {
        // Once epoch 0 is recorded, rank 1 dies mid-epoch 1.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
        while (epochs_done(f.db, "1") < 1) {
          ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "epoch 0 never recorded";
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ::kill(pids[1], SIGKILL);
      });
  EXPECT_EQ(codes[1], 128 + SIGKILL);
  EXPECT_EQ(codes[0], 9) << read_file(f.dir + "/rank0.err");
  const std::string err = read_file(f.dir + "/rank0.err");
  EXPECT_NE(err.find("lost contact with rank 1 (pid"), std::string::npos) << err;
  {
    store::Store store(f.db);
    const auto run = store.find_run("1");
    EXPECT_EQ(run->status, records::RunStatus::kPending) << run->message;
    EXPECT_GE(run->epochs_done, 1);
    EXPECT_LT(run->epochs_done, epochs);
  }
  // The same command again.
  const int port2 = launch::free_local_port();
  const auto again =
      two_processes(args, f.dir, [port2](int rank) { return torchrun_env(rank, port2); });
  ASSERT_EQ(again, (std::vector<int>{0, 0})) << read_file(f.dir + "/rank0.err");
  EXPECT_NE(read_file(f.dir + "/rank0.err").find("continuing after epoch"), std::string::npos);
  expect_same_epochs(reference.db, f.db);
}

// A hung rank (SIGSTOP: its sockets stay open) is noticed through dist.timeout_s: rank 0 stops
// with exit 9 soon after the timeout instead of waiting for ever, and the run stays resumable.
TEST(Distributed, AHungRankStopsTheOthersAfterTheTimeout) {
  const TinySweep f = distributed_sweep("hung", 3, 1600);
  const int port = launch::free_local_port();
  const auto args = run_args(f, {"--set", "dist.timeout_s=5"});
  const pid_t leader = spawn_amptune(args, f.dir, {torchrun_env(0, port), "rank0"});
  StopOnExit stop_leader(leader);
  const pid_t hung = spawn_amptune(args, f.dir, {torchrun_env(1, port), "rank1"});
  StopOnExit stop_hung(hung);
  // Once epoch 0 is recorded (the database may exist before run 1 does).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (epochs_done(f.db, "1") < 1) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "epoch 0 never recorded";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(hung, SIGSTOP);
  EXPECT_EQ(wait_exit_code(leader, 120), 9);  // (timeout 5 s; generous for a busy CI)
  ::kill(hung, SIGKILL);
  ::kill(hung, SIGCONT);
  EXPECT_EQ(wait_exit_code(hung, 60), 128 + SIGKILL);
  const std::string err = read_file(f.dir + "/rank0.err");
  EXPECT_NE(err.find("lost contact with rank 1 (pid"), std::string::npos) << err;
  store::Store store(f.db);
  EXPECT_EQ(store.find_run("1")->status, records::RunStatus::kPending);
}

// `bench --nproc 1,2` times real jobs of 1 and 2 processes (the trainer on a scratch database)
// and prints the linearity of the second against the first.
TEST(Distributed, BenchPrintsTheLinearityOfJobsOfOneAndTwoProcesses) {
  const TinySweep f = distributed_sweep("bench", 1, 192);
  const auto r = run_amptune(
      {"bench", f.yaml, "--nproc", "1,2", "--steps", "3", "--warmup", "1", "--threads", "1"},
      f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // header + one row per process count
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_NE(lines[0].find("linearity"), std::string::npos);
  EXPECT_NE(lines[1].find("100.0 %"), std::string::npos) << lines[1];  // 1 process: itself
  std::istringstream row(lines[2]);
  std::string cell, settings, processes;
  row >> cell >> settings >> processes;  // settings: "base" (one cell)
  EXPECT_EQ(processes, "2") << lines[2];
  EXPECT_FALSE(fs::exists(f.db));  // nothing recorded where the sweep's database would be

  const auto bad = run_amptune({"bench", f.yaml, "--nproc", "1,x"}, f.dir);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

// What cannot run is refused before anything is written.
TEST(Distributed, Refusals) {
  // More processes than the data holds batches for: 24 images, 2 x batch 16.
  const TinySweep small = distributed_sweep("small", 1, 24);
  auto r = run_amptune(run_args(small, {"--nproc", "2"}), small.dir);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("fewer than 2 processes x data.batch_size 16"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(small.db));

  // NCCL needs CUDA.
  const TinySweep f = distributed_sweep("f", 1, 96);
  r = run_amptune(run_args(f, {"--nproc", "2", "--set", "dist.backend=nccl"}), f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("dist.backend: nccl needs CUDA"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(f.db));

  // An invalid config is refused by the launching process before any rank starts: said once,
  // with no word from a rank.
  r = run_amptune(run_args(f, {"--nproc", "2", "--set", "amp.opt_level=O1", "--set",
                               "amp.keep_batchnorm_fp32=true"}),
                  f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const std::string refusal = "keep_batchnorm_fp32";
  const size_t first = r.err.find(refusal);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(refusal, r.err.find('\n', first)), std::string::npos)
      << "said more than once:\n" << r.err;
  EXPECT_EQ(r.err.find("rank"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(f.db));

  // A launch environment without its rendezvous.
  const pid_t pid =
      spawn_amptune(run_args(f, {}), f.dir, {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "partial"});
  StopOnExit stop(pid);
  EXPECT_EQ(wait_exit_code(pid, 60), 3);
  EXPECT_NE(read_file(f.dir + "/partial.err").find("MASTER_ADDR is not set"), std::string::npos)
      << read_file(f.dir + "/partial.err");
  EXPECT_FALSE(fs::exists(f.db));

  r = run_amptune(run_args(f, {"--nproc", "2", "--workers", "2"}), f.dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace amptune::testing
