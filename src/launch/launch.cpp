#include "launch/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/child.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::launch {
namespace {

// ---------------------------------------------------------------------------------------------
// Environment variables

// An environment variable holding "" is treated as not set (`export RANK=` clears it).
std::optional<std::string> lookup(const GetEnv& env, const std::string& name) {
  std::optional<std::string> value = env(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

[[noreturn]] void fail(const std::string& name, const std::string& value,
                       const std::string& problem, const std::string& todo) {
  throw ConfigError("environment variable " + name + "=" + value + " " + problem + ": " + todo);
}

// A whole decimal number in [lo, hi]; anything else (sign '+', spaces, "2.0", overflow) fails.
int64_t parse_integer(const std::string& name, const std::string& value, int64_t lo, int64_t hi,
                      const std::string& todo) {
  int64_t out = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end) fail(name, value, "is not an integer", todo);
  if (out < lo) fail(name, value, "is below " + std::to_string(lo), todo);
  if (out > hi) fail(name, value, "is above " + std::to_string(hi), todo);
  return out;
}

// The first host of a Slurm host list, or "" with `error` set. See first_slurm_host.
std::string first_host(const std::string& list, std::string& error) {
  const auto bad = [&](const std::string& why) {
    error = "Slurm host list '" + list + "' is malformed: " + why +
            " (expected names like node[01-04,07],gpu5)";
    return std::string();
  };
  if (list.empty()) return bad("it is empty");
  std::string first;
  size_t i = 0;
  for (bool first_item = true;; first_item = false) {
    std::string host;  // this item's first host
    const size_t start = i;
    while (i < list.size() && list[i] != ',') {
      if (list[i] == ']') return bad("']' without '['");
      if (list[i] != '[') {
        host += list[i++];
        continue;
      }
      const size_t close = list.find(']', i);
      if (close == std::string::npos) return bad("'[' without ']'");
      const std::string ranges = list.substr(i + 1, close - i - 1);
      if (ranges.find('[') != std::string::npos) return bad("nested '['");
      // "01-04,07": each range is "a" or "a-b" (digits, a <= b); the first host takes the first
      // range's start as written, so zero padding stays.
      std::string range_first;
      size_t r = 0;
      do {
        const size_t comma = std::min(ranges.find(',', r), ranges.size());
        const std::string range = ranges.substr(r, comma - r);
        const size_t dash = range.find('-');
        const std::string lo = range.substr(0, dash);
        const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
        const auto digits = [](const std::string& s) {
          return !s.empty() && s.size() <= 18 &&
                 s.find_first_not_of("0123456789") == std::string::npos;
        };
        if (!digits(lo) || !digits(hi)) return bad("range '" + range + "' in [" + ranges + "]");
        if (std::stoll(lo) > std::stoll(hi)) {
          return bad("range '" + range + "' counts down in [" + ranges + "]");
        }
        if (range_first.empty()) range_first = lo;
        r = comma + 1;
      } while (r <= ranges.size());
      host += range_first;
      i = close + 1;
    }
    if (i == start) return bad("an empty host name");
    if (first_item) first = host;
    if (i == list.size()) break;
    ++i;  // ','
    if (i == list.size()) return bad("an empty host name after the last ','");
  }
  return first;
}

// Tasks on node `node` of a Slurm tasks-per-node list such as "2(x3),1" (2, 2, 2, 1), or -1 when
// the list is malformed, or 0 when it has no entry `node`.
int64_t tasks_on_node(const std::string& list, int64_t node) {
  int64_t index = 0;
  size_t i = 0;
  while (i <= list.size()) {
    const size_t comma = std::min(list.find(',', i), list.size());
    const std::string entry = list.substr(i, comma - i);
    const size_t paren = entry.find('(');
    const std::string count_text = entry.substr(0, paren);
    int64_t count = 0, repeat = 1;
    const auto whole = [](const std::string& s, int64_t& out) {
      const char* end = s.data() + s.size();
      const auto [ptr, ec] = std::from_chars(s.data(), end, out);
      return !s.empty() && ec == std::errc() && ptr == end && out >= 1;
    };
    if (!whole(count_text, count)) return -1;
    if (paren != std::string::npos) {
      // "(xN)"
      if (entry.size() < paren + 4 || entry.compare(paren, 2, "(x") != 0 || entry.back() != ')') {
        return -1;
      }
      if (!whole(entry.substr(paren + 2, entry.size() - paren - 3), repeat)) return -1;
    }
    if (node >= index && node < index + repeat) return count;
    index += repeat;
    i = comma + 1;
  }
  return 0;
}

LaunchEnv detect_torchrun(const GetEnv& env) {
  const auto rank_text = lookup(env, "RANK");
  const auto world_text = lookup(env, "WORLD_SIZE");
  const std::string trigger = world_text ? "WORLD_SIZE=" + *world_text : "RANK=" + *rank_text;
  const auto require = [&](const std::string& name, const std::string& todo) {
    const auto value = lookup(env, name);
    if (!value) {
      throw ConfigError("environment variable " + name + " is not set, but " + trigger +
                        " asks for a distributed run: launch with torchrun (which sets it), or " +
                        todo);
    }
    return *value;
  };
  const std::string single = " (unset RANK and WORLD_SIZE for a single process)";
  const std::string rank_s = require("RANK", "set RANK as well" + single);
  const std::string world_s = require("WORLD_SIZE", "set WORLD_SIZE as well" + single);
  LaunchEnv out;
  out.launcher = lookup(env, "AMPTUNE_LAUNCHER").value_or("") == "nproc" ? "nproc" : "torchrun";
  // --nproc's ranks meet in a file (spawn_local_ranks): no host or port to know.
  const auto file = out.launcher == "nproc" ? lookup(env, "AMPTUNE_RENDEZVOUS_FILE") : std::nullopt;
  if (file && file->front() != '/') {
    fail("AMPTUNE_RENDEZVOUS_FILE", *file, "is not an absolute path",
         "it is set by `amptune run --nproc`; unset it and AMPTUNE_LAUNCHER");
  }
  const std::string addr = file ? lookup(env, "MASTER_ADDR").value_or("127.0.0.1")
                                 : require("MASTER_ADDR", "set MASTER_ADDR and MASTER_PORT");
  const std::string port_s =
      file ? "" : require("MASTER_PORT", "set MASTER_ADDR and MASTER_PORT");
  out.world_size = static_cast<int>(parse_integer("WORLD_SIZE", world_s, 1, INT_MAX,
                                                  "set it to the number of processes" + single));
  const std::string ranks = "0.." + std::to_string(out.world_size - 1);
  out.rank = static_cast<int>(parse_integer(
      "RANK", rank_s, 0, out.world_size - 1,
      "with WORLD_SIZE=" + world_s + " each process needs its own RANK in " + ranks + single));
  out.master_addr = addr;
  if (file) {
    out.rendezvous_file = *file;
  } else {
    out.master_port = static_cast<int>(parse_integer(
        "MASTER_PORT", port_s, 1, 65535, "set it to a free TCP port of MASTER_ADDR (1..65535)"));
  }

  const auto local_world_s = lookup(env, "LOCAL_WORLD_SIZE");
  out.local_world_size = local_world_s
                             ? static_cast<int>(parse_integer(
                                   "LOCAL_WORLD_SIZE", *local_world_s, 1, out.world_size,
                                   "set it to the number of processes on this machine (at most "
                                   "WORLD_SIZE=" +
                                       world_s + "), or unset it"))
                             : out.world_size;
  const auto local_rank_s = lookup(env, "LOCAL_RANK");
  if (local_rank_s) {
    out.local_rank = static_cast<int>(parse_integer(
        "LOCAL_RANK", *local_rank_s, 0, out.local_world_size - 1,
        "set it to this process's rank on this machine, 0..LOCAL_WORLD_SIZE-1 (LOCAL_WORLD_SIZE " +
            (local_world_s ? "is " + *local_world_s : "defaults to WORLD_SIZE=" + world_s) + ")"));
  } else {
    out.local_rank = out.rank;
    if (out.local_rank >= out.local_world_size) {
      throw ConfigError("environment variable LOCAL_RANK is not set, and RANK=" + rank_s +
                        " (its default) is not below LOCAL_WORLD_SIZE=" + *local_world_s +
                        ": set LOCAL_RANK to this process's rank on this machine");
    }
  }
  return out;
}

// std::nullopt when Slurm's variables describe no multi-task step.
// A variable srun sets is missing; `alternative` is what else the user can do.
[[noreturn]] void missing_srun_variable(const std::string& names, bool plural,
                                        const std::string& alternative,
                                        const std::string& tasks) {
  throw ConfigError("environment variable" + std::string(plural ? "s " : " ") + names +
                    (plural ? " are" : " is") + " not set, but SLURM_STEP_NUM_TASKS=" + tasks +
                    " asks for a distributed run: start amptune with srun, which sets " +
                    (plural ? "them" : "it") + alternative);
}

const char* const kUnsetProcid = "; or unset SLURM_PROCID for a single process";

// This node's tasks (SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE, at SLURM_NODEID) and
// this task's place among them (SLURM_LOCALID), into `out` (world_size set).
void slurm_local(const GetEnv& env, const std::string& tasks_s, LaunchEnv& out) {
  std::string per_node_var = "SLURM_STEP_TASKS_PER_NODE";
  auto per_node = lookup(env, per_node_var);
  if (!per_node) per_node_var = "SLURM_TASKS_PER_NODE", per_node = lookup(env, per_node_var);
  if (!per_node) {
    missing_srun_variable("SLURM_STEP_TASKS_PER_NODE and SLURM_TASKS_PER_NODE", true, "",
                          tasks_s);
  }
  int64_t node = 0;
  const auto node_s = lookup(env, "SLURM_NODEID");
  if (node_s) {
    node = parse_integer("SLURM_NODEID", *node_s, 0, INT_MAX, "srun sets this task's node index");
  }
  const int64_t local_world = tasks_on_node(*per_node, node);
  if (local_world < 0) {
    fail(per_node_var, *per_node, "is not a Slurm tasks-per-node list",
         "expected counts like 2(x3),1 (2 tasks on each of 3 nodes, then 1), as srun sets it");
  }
  if (local_world == 0) {
    fail(per_node_var, *per_node, "has no entry for SLURM_NODEID=" + *node_s,
         "srun sets both for the same step; do not set them by hand");
  }
  if (local_world > out.world_size) {
    fail(per_node_var, *per_node,
         "gives this node more tasks than SLURM_STEP_NUM_TASKS=" + tasks_s,
         "srun sets both for the same step; do not set them by hand");
  }
  out.local_world_size = static_cast<int>(local_world);
  const auto local_id = lookup(env, "SLURM_LOCALID");
  if (!local_id) missing_srun_variable("SLURM_LOCALID", false, "", tasks_s);
  out.local_rank = static_cast<int>(
      parse_integer("SLURM_LOCALID", *local_id, 0, out.local_world_size - 1,
                    per_node_var + "=" + *per_node + " gives this node " +
                        std::to_string(out.local_world_size) + " tasks" + kUnsetProcid));
}

// Where the ranks meet: MASTER_ADDR, else the first host of the step's (else the job's) node
// list; MASTER_PORT, else one derived from SLURM_JOB_ID.
void slurm_rendezvous(const GetEnv& env, const std::string& tasks_s, LaunchEnv& out) {
  if (const auto addr = lookup(env, "MASTER_ADDR")) {
    out.master_addr = *addr;
  } else {
    std::string list_var = "SLURM_STEP_NODELIST";
    auto list = lookup(env, list_var);
    if (!list) list_var = "SLURM_JOB_NODELIST", list = lookup(env, list_var);
    if (!list) {
      missing_srun_variable("SLURM_STEP_NODELIST and SLURM_JOB_NODELIST", true,
                            ", or set MASTER_ADDR to the host of rank 0", tasks_s);
    }
    std::string error;
    out.master_addr = first_host(*list, error);
    if (!error.empty()) {
      fail(list_var, *list, "is not a host list",
           error + "; set MASTER_ADDR to the host of rank 0");
    }
  }
  if (const auto port = lookup(env, "MASTER_PORT")) {
    out.master_port = static_cast<int>(parse_integer(
        "MASTER_PORT", *port, 1, 65535, "set it to a free TCP port of MASTER_ADDR (1..65535)"));
    return;
  }
  // The same port on every task without talking to each other; below Linux's ephemeral range
  // (32768..60999), where outgoing connections take their ports.
  const auto job_s = lookup(env, "SLURM_JOB_ID");
  if (!job_s) missing_srun_variable("SLURM_JOB_ID", false, ", or set MASTER_PORT", tasks_s);
  const int64_t job = parse_integer("SLURM_JOB_ID", *job_s, 0, INT64_MAX,
                                    "the rendezvous port is derived from it; set MASTER_PORT "
                                    "instead");
  out.master_port = static_cast<int>(15000 + job % 17000);
}

std::optional<LaunchEnv> detect_slurm(const GetEnv& env) {
  const auto procid_s = lookup(env, "SLURM_PROCID");
  if (!procid_s) return std::nullopt;
  // Only srun's step variable counts: the batch script of `sbatch --ntasks=4` (and an salloc
  // shell) has SLURM_PROCID=0 and SLURM_NTASKS=4 but is one process; taking SLURM_NTASKS there
  // would make it wait for 3 ranks that never come.
  const std::string tasks_var = "SLURM_STEP_NUM_TASKS";
  const auto tasks_s = lookup(env, tasks_var);
  if (!tasks_s) return std::nullopt;
  const int64_t tasks = parse_integer(tasks_var, *tasks_s, 1, INT_MAX,
                                      std::string("srun sets the number of tasks") + kUnsetProcid);
  if (tasks == 1) return std::nullopt;
  LaunchEnv out;
  out.launcher = "slurm";
  out.world_size = static_cast<int>(tasks);
  out.rank = static_cast<int>(parse_integer("SLURM_PROCID", *procid_s, 0, tasks - 1,
                                            "with " + tasks_var + "=" + *tasks_s +
                                                " each task's SLURM_PROCID is in 0.." +
                                                std::to_string(tasks - 1) + kUnsetProcid));
  slurm_local(env, *tasks_s, out);
  slurm_rendezvous(env, *tasks_s, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Spawning

struct Rank {
  Child child;                 // no process until started
  int status = 0;              // exit status, or 128 + signal
  bool stopped_by_us = false;  // got SIGTERM / SIGKILL from the launcher after another failed
};

// The private directory of a --nproc job's rendezvous file: made with mkdtemp (mode 0700) under
// $TMPDIR (else /tmp); the destructor removes the file and the directory it made, nothing else.
// Declared before the ranks are started, so it outlives them.
class RendezvousDir {
 public:
  RendezvousDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp && *tmp == '/' ? tmp : "/tmp";
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    std::string pattern = base + "/amptune-rendezvous-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      throw EnvironmentError("cannot make the rendezvous directory of the ranks under " + base +
                             ": " + std::strerror(errno) +
                             "; set TMPDIR to a writable local directory");
    }
    dir_ = pattern;
    file_ = dir_ + "/store";
  }
  ~RendezvousDir() {
    ::unlink(file_.c_str());
    ::rmdir(dir_.c_str());
  }
  RendezvousDir(const RendezvousDir&) = delete;
  RendezvousDir& operator=(const RendezvousDir&) = delete;
  const std::string& file() const { return file_; }

 private:
  std::string dir_, file_;
};

std::string count_ranks(size_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

std::string who(size_t rank, const Child& child) {
  return "rank " + std::to_string(rank) + " (pid " + std::to_string(child.pid()) + ")";
}

}  // namespace

std::string LaunchEnv::describe() const {
  if (launcher == "single" && world_size == 1) return "single process";
  const std::string host =
      master_addr.find(':') != std::string::npos ? "[" + master_addr + "]" : master_addr;
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + " of " + std::to_string(local_world_size) + ") via " +
         launcher + ", rendezvous " +
         (rendezvous_file.empty() ? host + ":" + std::to_string(master_port)
                                  : "file " + rendezvous_file);
}

GetEnv process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
}

LaunchEnv detect_launch(const GetEnv& env) {
  if (lookup(env, "RANK") || lookup(env, "WORLD_SIZE")) return detect_torchrun(env);
  if (auto slurm = detect_slurm(env)) return *slurm;
  return LaunchEnv{};
}

std::string first_slurm_host(const std::string& nodelist) {
  std::string error;
  std::string host = first_host(nodelist, error);
  if (!error.empty()) throw ConfigError(error);
  return host;
}

int free_local_port() {
  const auto fail_with = [](const std::string& what) {
    throw EnvironmentError("cannot find a free TCP port on 127.0.0.1 (" + what + ": " +
                           std::strerror(errno) + "); set MASTER_PORT by hand and use torchrun");
  };
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_with("socket");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail_with("bind");
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) fail_with("getsockname");
  return ntohs(addr.sin_port);
}

namespace {

// UsageError for options spawn_local_ranks cannot run.
void check_spawn_options(const SpawnOptions& options) {
  if (options.nproc < 1) {
    throw UsageError("--nproc must be at least 1, got " + std::to_string(options.nproc));
  }
  if (options.argv.empty() || options.argv[0].empty()) {
    throw UsageError("spawn_local_ranks needs the command line of the ranks (argv[0] empty)");
  }
  if (!(options.grace_seconds >= 0) || !(options.kill_after_seconds >= 0)) {
    throw UsageError("the waits before stopping the other ranks must be >= 0 seconds, got " +
                     std::to_string(options.grace_seconds) + " and " +
                     std::to_string(options.kill_after_seconds));
  }
}

// What each rank starts with. Its environment: ours, then extra_env, then the launcher's own
// (which win), without MASTER_PORT (no TCP rendezvous).
std::vector<ChildSpec> rank_specs(const SpawnOptions& options, const std::string& rendezvous_file) {
  const int n = options.nproc;
  std::map<std::string, std::string> launcher_vars = {{"WORLD_SIZE", std::to_string(n)},
                                                      {"LOCAL_WORLD_SIZE", std::to_string(n)},
                                                      {"MASTER_ADDR", "127.0.0.1"},
                                                      {"AMPTUNE_LAUNCHER", "nproc"},
                                                      {"AMPTUNE_RENDEZVOUS_FILE", rendezvous_file}};
  // NCCL's bootstrap listens on the interface it picks; on one machine that is the loopback.
  if (!lookup(process_env(), "NCCL_SOCKET_IFNAME")) launcher_vars["NCCL_SOCKET_IFNAME"] = "lo";
  std::vector<ChildSpec> specs(n);
  for (int r = 0; r < n; ++r) {
    launcher_vars["RANK"] = launcher_vars["LOCAL_RANK"] = std::to_string(r);
    ChildSpec& spec = specs[r];
    spec.argv = options.argv;
    spec.search_path = false;
    spec.name = "rank " + std::to_string(r) + " of " + std::to_string(n);
    spec.env = launcher_vars;
    spec.env.insert(options.extra_env.begin(), options.extra_env.end());  // launcher's win
    spec.unset_env = {"MASTER_PORT"};
  }
  return specs;
}

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration after_seconds(double s) {  // capped at ~30 years: no overflow
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(s, 1e9)));
}

// One child per spec, in rank order; none more once a signal came (those keep pid 0 and count as
// ended by it). A rank that cannot start is an EnvironmentError (the started ones are stopped by
// their destructors).
std::vector<Rank> start_ranks(const std::vector<ChildSpec>& specs,
                              const ForwardSignals& forwarding) {
  std::vector<Rank> ranks(specs.size());
  for (size_t r = 0; r < specs.size(); ++r) {
    if (forwarding.received()) break;  // interrupted while starting: start no more
    try {
      ranks[r].child = Child::start(specs[r]);
    } catch (const EnvironmentError& e) {
      throw EnvironmentError(std::string(e.what()) + "; use a smaller --nproc");
    }
    if (ranks[r].child.start_error()) {
      throw EnvironmentError("cannot start rank " + std::to_string(r) + ": " +
                             ranks[r].child.start_failure());
    }
  }
  for (Rank& rank : ranks) {
    if (rank.child.pid() == 0) rank.status = 128 + forwarding.received();
  }
  return ranks;
}

// The launcher's watch over its started ranks: reaps those that end, and once one has failed
// stops the others (SIGTERM after options.grace_seconds, SIGKILL options.kill_after_seconds
// later).
class RankWatch {
 public:
  RankWatch(std::vector<Rank>& ranks, const SpawnOptions& options, SpawnResult& result)
      : ranks_(ranks), options_(options), result_(result) {
    for (const Rank& rank : ranks_) running_ += rank.child.running();
  }
  size_t running() const { return running_; }

  void forward(int sig) {
    result_.forwarded_signal = sig;
    log::warn(std::string("received ") + signal_name(sig) + ", passing it on to " +
              count_ranks(running_));
    for (Rank& rank : ranks_) rank.child.signal(sig);
  }

  // Polls each running rank once.
  void reap() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      Rank& rank = ranks_[r];
      if (!rank.child.running()) continue;
      const std::optional<ChildEnd> end = rank.child.poll();
      if (!end) continue;
      --running_;
      rank.status = end->code();
      if (rank.status == 0) continue;
      // A lost status: reaped elsewhere (SIGCHLD ignored by the caller?).
      log::warn(who(r, rank.child) + " " + end->describe() +
                (rank.stopped_by_us ? ", stopped by the launcher after rank " +
                                          std::to_string(first_failed_) + " failed"
                                    : ""));
      if (first_failed_ >= 0) continue;
      first_failed_ = static_cast<int>(r);
      result_.exit_code = rank.status;
      if (running_ > 0 && std::isfinite(options_.grace_seconds)) {
        term_at_ = Clock::now() + after_seconds(options_.grace_seconds);
      }
    }
  }

  // SIGTERM to the others once the grace after a failure is over, SIGKILL after that.
  void escalate() {
    const Clock::time_point now = Clock::now();
    if (!terminated_ && now >= term_at_) {
      log::warn("stopping the other " + count_ranks(running_) +
                " (SIGTERM) after rank " + std::to_string(first_failed_) + " failed");
      for (Rank& rank : ranks_) {
        if (!rank.child.running()) continue;
        rank.child.signal(SIGTERM);
        rank.stopped_by_us = true;
      }
      terminated_ = true;
      kill_at_ = now + after_seconds(options_.kill_after_seconds);
    } else if (terminated_ && now >= kill_at_) {
      log::warn("killing " + count_ranks(running_) +
                " still running after SIGTERM (SIGKILL)");
      for (Rank& rank : ranks_) rank.child.signal(SIGKILL);
      kill_at_ = Clock::time_point::max();
    }
  }

 private:
  std::vector<Rank>& ranks_;
  const SpawnOptions& options_;
  SpawnResult& result_;
  size_t running_ = 0;
  int first_failed_ = -1;
  // When the others get SIGTERM (set at the first failure), then SIGKILL; max: not yet.
  Clock::time_point term_at_ = Clock::time_point::max(), kill_at_ = Clock::time_point::max();
  bool terminated_ = false;
};

}  // namespace

SpawnResult spawn_local_ranks(const SpawnOptions& options) {
  check_spawn_options(options);
  const RendezvousDir rendezvous;
  const std::vector<ChildSpec> specs = rank_specs(options, rendezvous.file());
  log::info("starting " + count_ranks(options.nproc) + " of " + options.argv[0] +
            ", rendezvous file " + rendezvous.file());
  ForwardSignals forwarding;
  // Declared after `forwarding`: children are stopped (Child's destructor) before the handlers
  // go back, whatever ends the call.
  std::vector<Rank> ranks = start_ranks(specs, forwarding);
  SpawnResult result;
  RankWatch watch(ranks, options, result);
  while (watch.running() > 0) {
    if (const int sig = forwarding.take()) watch.forward(sig);
    watch.reap();
    if (watch.running() == 0) break;
    watch.escalate();
    nap();  // cut short by a signal, which is what the loop wants
  }
  for (const Rank& rank : ranks) result.statuses.push_back(rank.status);
  if (forwarding.received()) result.forwarded_signal = forwarding.received();
  for (size_t r = 0; r < result.statuses.size() && result.exit_code == 0; ++r) {
    result.exit_code = result.statuses[r];
  }
  return result;
}

}  // namespace amptune::launch
