// How this process was launched (one process, torchrun, Slurm's srun, or `amptune run --nproc N`)
// and the local spawner behind --nproc. No torch here: the process group (c10d) is built by the
// caller from a LaunchEnv.
//
// Environment variables read by detect_launch, in this order of precedence:
//   torchrun   RANK or WORLD_SIZE set: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT required;
//              LOCAL_RANK / LOCAL_WORLD_SIZE default to RANK / WORLD_SIZE.
//   nproc      as torchrun, with AMPTUNE_LAUNCHER=nproc and AMPTUNE_RENDEZVOUS_FILE (both set by
//              spawn_local_ranks): the ranks meet in that file (a c10d FileStore) instead of a
//              TCP store, so MASTER_PORT is not needed; MASTER_ADDR defaults to 127.0.0.1.
//   slurm      an srun step of more than one task (SLURM_PROCID set, SLURM_STEP_NUM_TASKS > 1):
//              rank SLURM_PROCID, local rank SLURM_LOCALID, local world size this node's entry of
//              SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE; "2(x3),1" means 2, 2, 2, 1
//              tasks on nodes 0..3; the node is SLURM_NODEID, the first entry when that is unset).
//              Rendezvous host MASTER_ADDR, else the first host of SLURM_STEP_NODELIST (else
//              SLURM_JOB_NODELIST); port MASTER_PORT, else 15000 + SLURM_JOB_ID % 17000
//              (15000..31999: below Linux's ephemeral ports, the same on every task of the job;
//              two concurrent multi-task steps of one job need their own MASTER_PORT).
//              SLURM_NTASKS alone does not count: a batch script (sbatch --ntasks=4 without srun)
//              or an salloc shell is one process, whatever the job's task count.
//   single     otherwise.
// A variable set to the empty string counts as not set.
//
// Errors: ConfigError naming the variable, its value and what to do, for a missing or invalid
// variable (not an integer, rank >= world size, world size < 1, port outside 1..65535, ...).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace amptune::launch {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this machine
  int local_world_size = 1;  // processes of this job on this machine
  std::string master_addr;   // rendezvous host (rank 0's TCPStore); empty for a single process
  int master_port = 0;       // 0 for a single process and for a rendezvous file
  // --nproc: the file of the c10d FileStore the ranks of this machine meet in (no TCP listener);
  // empty otherwise.
  std::string rendezvous_file;
  std::string launcher = "single";  // "single", "torchrun", "slurm", "nproc"

  bool distributed() const { return world_size > 1; }
  // "rank 1 of 2 (local 1 of 2) via torchrun, rendezvous 127.0.0.1:29500" (or "rendezvous
  // file /tmp/amptune-rendezvous-Xq3k/store" for --nproc), or "single process".
  std::string describe() const;
};

// Reads one environment variable; nullopt when it is not set.
using GetEnv = std::function<std::optional<std::string>(const std::string&)>;

// ::getenv of this process.
GetEnv process_env();

// The launch this process belongs to, from `env` (see the top of this file). Throws ConfigError.
LaunchEnv detect_launch(const GetEnv& env = process_env());

// First host of a Slurm host list: "node[01-04,07],gpu5" -> "node01", "a,b" -> "a",
// "x-[3-5]" -> "x-3", "rack[2-3]-n[08-09]" -> "rack2-n08", "single" -> "single". The whole list
// is checked. Throws ConfigError for an empty or malformed list (unbalanced or nested brackets,
// an empty host, a range that is not digits "a" or "a-b" with a <= b).
std::string first_slurm_host(const std::string& nodelist);

// A TCP port that was free on 127.0.0.1 a moment ago (bind port 0, read it, close). Another
// process may take it before it is used, as with torchrun --standalone. Throws EnvironmentError.
int free_local_port();

struct SpawnOptions {
  int nproc = 2;                  // >= 1
  std::vector<std::string> argv;  // argv[0]: the executable's path (not searched in PATH)
  // After one rank failed: seconds the others get to exit by themselves before SIGTERM
  // (infinity: no limit), then kill_after_seconds more before SIGKILL.
  double grace_seconds = 60;
  double kill_after_seconds = 10;
  std::map<std::string, std::string> extra_env;  // added to (or replacing in) every child's
};

struct SpawnResult {
  // 0 when every rank exited 0; otherwise the status of the first rank seen to fail.
  int exit_code = 0;
  // Per rank: its exit status, or 128 + signal number when a signal ended it.
  std::vector<int> statuses;
  // SIGINT / SIGTERM the launcher received while waiting (and passed on); 0 when none.
  int forwarded_signal = 0;
};

// `amptune run ... --nproc N` (torchrun --standalone): starts ranks 0..N-1 of argv (fork +
// execve; stdin/stdout/stderr, working directory and the rest of the environment inherited) with
// RANK, WORLD_SIZE=N, LOCAL_RANK=RANK, LOCAL_WORLD_SIZE=N, MASTER_ADDR=127.0.0.1,
// AMPTUNE_LAUNCHER=nproc and AMPTUNE_RENDEZVOUS_FILE, replacing values this process has, and
// without MASTER_PORT. The rendezvous is a file in a directory of its own, private to this user
// (mkdtemp under $TMPDIR, else /tmp, mode 0700), which the call removes when every rank has
// ended: nothing of the job listens on a network port but Gloo's pairs, which bind to the
// loopback (dist/group.cpp); NCCL_SOCKET_IFNAME=lo is set for NCCL's bootstrap unless the
// environment sets it.
// While it waits, SIGINT / SIGTERM sent to this process are passed on to every living rank (its
// own handlers are restored afterwards). A rank that exits non-zero or by a signal is logged
// (log::warn: "rank 1 (pid 4242) was killed by signal 9 (SIGKILL)"); the others then get
// grace_seconds before they are stopped. Returns when every rank has ended. No child outlives
// the call, also when it throws; a child whose launcher dies gets SIGKILL (PR_SET_PDEATHSIG).
// Throws UsageError for nproc < 1, an empty argv or a negative grace, EnvironmentError when a
// rank cannot be started (fork or execve failed; the ranks already started are stopped).
// One call at a time per process: it owns SIGINT / SIGTERM while it runs.
SpawnResult spawn_local_ranks(const SpawnOptions& options);

}  // namespace amptune::launch
