#include "dist/cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/error.h"
#include "core/log.h"
#include "dist/cluster_impl.h"

namespace amptune::dist {
namespace {

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string from_bytes(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string first_line(const std::string& text) {
  const auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

}  // namespace

bool have_gloo() {
#ifdef AMPTUNE_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

bool have_nccl() {
#ifdef AMPTUNE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Cluster::Cluster(const launch::LaunchEnv& env, std::unique_ptr<Impl> impl)
    : env_(env), impl_(std::move(impl)) {}

Cluster::~Cluster() = default;

std::unique_ptr<Cluster> Cluster::join(const launch::LaunchEnv& env, double timeout_seconds) {
  if (!have_gloo() && !have_nccl()) {
    throw EnvironmentError(
        "this amptune was built without a c10d process group, so it cannot train with " +
        std::to_string(env.world_size) + " processes (" + env.describe() +
        "): install libgloo-dev (tools/install-deps.sh) and rebuild, or run one process");
  }
  // A peer that closes its socket must not kill this process with SIGPIPE: the write fails
  // and the collective reports the lost rank instead.
  ::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  const bool file = !env.rendezvous_file.empty();
  const std::string where = file ? env.rendezvous_file
                                 : env.master_addr + ":" + std::to_string(env.master_port);
  try {
    if (file) {
      // --nproc: every rank is on this machine and meets in a file of the launcher's private
      // directory; nothing listens on a port.
      impl->store = c10::make_intrusive<c10d::FileStore>(env.rendezvous_file, env.world_size);
      impl->store->setTimeout(impl->timeout);
    } else {
      c10d::TCPStoreOptions options;
      options.port = static_cast<std::uint16_t>(env.master_port);
      options.isServer = env.rank == 0;
      options.numWorkers = static_cast<std::size_t>(env.world_size);
      options.waitWorkers = true;
      options.timeout = impl->timeout;
      impl->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    }
  } catch (const std::exception& e) {
    const std::string what = first_line(e.what());
    if (env.rank == 0 && what.find("ddress already in use") != std::string::npos) {
      throw EnvironmentError("rank 0 cannot serve the rendezvous on " + where +
                             ": the port is in use; set MASTER_PORT to a free port (" + what + ")");
    }
    throw RankLostError("rendezvous at " + where + " failed for " + env.describe() + " within " +
                        std::to_string(static_cast<int>(timeout_seconds)) + " s (" +
                        (file ? "can this process write there?" : "did every rank start? is MASTER_ADDR reachable?") +
                        "): " + what);
  }
  std::unique_ptr<Cluster> cluster(new Cluster(env, std::move(impl)));
  auto& store = *cluster->impl_->store;
  store.set("proc/" + std::to_string(env.rank),
            to_bytes("pid " + std::to_string(::getpid()) + " on " + hostname()));
  cluster->processes_.resize(static_cast<size_t>(env.world_size));
  try {
    for (int r = 0; r < env.world_size; ++r) {
      cluster->processes_[static_cast<size_t>(r)] =
          from_bytes(store.get("proc/" + std::to_string(r)));
    }
  } catch (const std::exception& e) {
    throw RankLostError("rendezvous at " + where +
                        ": not every rank announced itself: " + first_line(e.what()));
  }
  if (file) {
    // A file store does not notice that the leader is gone; on one machine its pid does.
    const std::string& leader = cluster->processes_.front();
    if (leader.rfind("pid ", 0) == 0) cluster->impl_->leader_pid = std::atoi(leader.c_str() + 4);
  }
  log::info("joined " + env.describe());
  return cluster;
}

void Cluster::publish(const std::string& message) {
  try {
    impl_->store->set("msg/" + std::to_string(sent_++), to_bytes(message));
  } catch (const std::exception& e) {
    throw RankLostError("the rendezvous store failed: " + first_line(e.what()));
  }
}

std::string Cluster::receive() {
  const std::string key = "msg/" + std::to_string(received_);
  try {
    // Polls rather than blocks in get(): the store's own wait ends with an error after its
    // timeout, while a follower may wait for as long as the leader prepares the next run.
    for (int polls = 1; !impl_->store->check({key}); ++polls) {
      if (polls % 50 == 0 && impl_->leader_pid > 0 && ::kill(impl_->leader_pid, 0) != 0 &&
          errno == ESRCH) {
        throw std::runtime_error("the process has ended");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string message = from_bytes(impl_->store->get(key));
    ++received_;
    impl_->store->add("ack/" + std::to_string(rank()), 1);
    return message;
  } catch (const std::exception& e) {
    throw RankLostError("lost contact with the leader, " + describe_rank(0) +
                        ", whose store served this job: " + first_line(e.what()));
  }
}

bool Cluster::await_receipt(double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  try {
    for (int r = 1; r < size(); ++r) {
      while (impl_->store->add("ack/" + std::to_string(r), 0) < sent_) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  } catch (const std::exception& e) {
    log::warn(std::string("waiting for the other ranks: ") + first_line(e.what()));
    return false;
  }
  return true;
}

std::string Cluster::describe_rank(int rank) const {
  const auto r = static_cast<size_t>(rank);
  std::string who = "rank " + std::to_string(rank);
  if (r < processes_.size() && !processes_[r].empty()) who += " (" + processes_[r] + ")";
  return who;
}

std::string Cluster::peers_of(int rank) const {
  if (size() == 2) return describe_rank(1 - rank);
  std::string out = "one of ";
  for (int r = 0; r < size(); ++r) {
    if (r == rank) continue;
    out += (out.size() > 7 ? ", " : "") + describe_rank(r);
  }
  return out;
}

}  // namespace amptune::dist
