// c10d process groups and the gradient reducer over real Gloo, two ranks as two threads of this
// process on the loopback (a rendezvous of their own per test).
#include "dist/group.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/cluster.h"
#include "dist/reducer.h"
#include "launch/launch.h"
#include "support/scratch.h"

namespace amptune::dist {
namespace {

using launch::free_local_port;
using launch::LaunchEnv;

// PyTorch 2.x's c10d flight recorder (one per process) adds a process group's status to a map
// outside its lock (FlightRecorder::recordWithResetEnabled, 2.11). These tests run two ranks,
// two process groups, as threads of one process, whose first collectives can meet there: a
// segfault about once in 30 runs under load. amptune's ranks are processes of their own. The
// recorder is off (no buffer) before any process group exists; LibTorch 1.13 has none.
const int kNoFlightRecorder = setenv("TORCH_FR_BUFFER_SIZE", "0", 1);

// Runs body(rank, group) on two threads that form a job; rethrows the first failure.
// With `rendezvous_file` the two meet in that c10d FileStore (as --nproc's ranks), else in a
// TCPStore on a free port (as torchrun's).
void two_ranks(const std::function<void(int, Cluster&, ProcessGroup&)>& body,
               double timeout_seconds = 30, const std::string& rendezvous_file = "") {
  const int port = rendezvous_file.empty() ? free_local_port() : 0;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        LaunchEnv env;
        env.rank = env.local_rank = rank;
        env.world_size = env.local_world_size = 2;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        env.rendezvous_file = rendezvous_file;
        env.launcher = rendezvous_file.empty() ? "torchrun" : "nproc";
        auto cluster = Cluster::join(env, timeout_seconds);
        ProcessGroup group(*cluster, cluster->next_group_name(), DistBackend::kAuto,
                           timeout_seconds, torch::Device(torch::kCPU));
        body(rank, *cluster, group);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
  }
}

TEST(DistGroup, BuildHasGloo) { EXPECT_TRUE(have_gloo()); }

void collectives_and_the_control_channel(const std::string& rendezvous_file) {
  two_ranks(
      [](int rank, Cluster& cluster, ProcessGroup& group) {
        EXPECT_EQ(group.backend(), DistBackend::kGloo);
        EXPECT_EQ(group.size(), 2);
        std::string bytes = rank == 0 ? std::string("state\0with a zero", 17) : "";
        group.broadcast_bytes(bytes);
        EXPECT_EQ(bytes, std::string("state\0with a zero", 17));
        std::string empty = rank == 0 ? "" : "ignored";
        group.broadcast_bytes(empty);
        EXPECT_EQ(empty, "");
        const auto all = group.allgather_bytes(rank == 0 ? "a" : "longer");
        EXPECT_EQ(all, (std::vector<std::string>{"a", "longer"}));
        auto t = torch::tensor({1.0 + rank, 10.0 * rank}, torch::kDouble);
        auto low = t.clone(), high = t.clone();
        group.allreduce(t);
        group.allreduce(low, ProcessGroup::Op::kMin);
        group.allreduce(high, ProcessGroup::Op::kMax);
        EXPECT_TRUE(torch::equal(t, torch::tensor({3.0, 10.0}, torch::kDouble)));
        EXPECT_TRUE(torch::equal(low, torch::tensor({1.0, 0.0}, torch::kDouble)));
        EXPECT_TRUE(torch::equal(high, torch::tensor({2.0, 10.0}, torch::kDouble)));
        if (cluster.leader()) {
          cluster.publish("first");
          cluster.publish("second");
          EXPECT_TRUE(cluster.await_receipt(20));  // its store must outlive the follower's reads
        } else {
          EXPECT_EQ(cluster.receive(), "first");
          EXPECT_EQ(cluster.receive(), "second");
        }
        EXPECT_NE(
            cluster.describe_rank(1 - rank).find("rank " + std::to_string(1 - rank) + " (pid "),
            std::string::npos);
      },
      30, rendezvous_file);
}

TEST(DistGroup, CollectivesAndTheControlChannel) { collectives_and_the_control_channel(""); }

// --nproc's rendezvous: a file store, the same collectives and messages.
TEST(DistGroup, CollectivesAndTheControlChannelOverARendezvousFile) {
  testing::ScratchDir dir("rendezvous");
  collectives_and_the_control_channel((dir.path() / "store").string());
}

// A file store cannot tell that the leader is gone; a follower waiting for its next message
// notices through the leader's pid (same machine) and stops naming it, instead of waiting until
// the launcher's grace runs out.
TEST(DistGroup, AFollowerOfARendezvousFileNoticesThatTheLeaderIsGone) {
  testing::ScratchDir dir("rendezvous");
  const std::string file = (dir.path() / "store").string();
  // The leader: a process that announced itself and ended (reaped, so its pid is free).
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(gone, &status, 0), gone);
  {
    c10d::FileStore leader(file, 2);
    const std::string self = "pid " + std::to_string(gone) + " on here";
    leader.set("proc/0", std::vector<uint8_t>(self.begin(), self.end()));
  }
  LaunchEnv env;
  env.rank = env.local_rank = 1;
  env.world_size = env.local_world_size = 2;
  env.master_addr = "127.0.0.1";
  env.rendezvous_file = file;
  env.launcher = "nproc";
  auto cluster = Cluster::join(env, 10);
  const auto start = std::chrono::steady_clock::now();
  try {
    cluster->receive();
    ADD_FAILURE() << "received a message nobody sent";
  } catch (const RankLostError& e) {
    EXPECT_NE(std::string(e.what()).find("lost contact with the leader, rank 0 (pid " +
                                         std::to_string(gone) + " on here)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Gradients after finish() are the mean of what each rank's backward produced, for every way of
// reducing them (buckets from hooks, several small buckets, after backward, one flat buffer).
TEST(DistReducer, AveragesGradientsOverTheRanks) {
  struct Case {
    ReducerOptions options;
    size_t min_buckets;
  };
  std::vector<Case> cases;
  cases.push_back({ReducerOptions{25, true, false}, 1});
  cases.push_back({ReducerOptions{0.00001, true, false}, 4});  // ~10 bytes: one tensor each
  cases.push_back({ReducerOptions{25, false, false}, 1});
  cases.push_back({ReducerOptions{0.00005, true, true}, 1});  // one_buffer ignores the cap
  for (const Case& c : cases) {
    two_ranks([&c](int rank, Cluster&, ProcessGroup& group) {
      // No torch RNG here: the two threads share its generator.
      torch::nn::Sequential model(torch::nn::Linear(4, 3), torch::nn::ReLU(),
                                  torch::nn::Linear(3, 2));
      {
        torch::NoGradGuard no_grad;
        double v = 0.1;
        for (auto& p : model->parameters()) {
          p.copy_(torch::sin(torch::arange(p.numel(), torch::kFloat) * 1.7 + v).view_as(p));
          v += 0.5;
        }
      }
      auto input = [](int r) {
        return torch::cos(torch::arange(20, torch::kFloat) * (0.3 + r)).view({5, 4});
      };
      // What each rank's backward gives alone, and their mean.
      std::vector<torch::Tensor> expected;
      for (int r = 0; r < 2; ++r) {
        model->zero_grad();
        model->forward(input(r)).pow(2).mean().backward();
        for (size_t k = 0; k < model->parameters().size(); ++k) {
          auto g = model->parameters()[k].grad().clone();
          if (r == 0) {
            expected.push_back(g);
          } else {
            expected[k] = (expected[k] + g) / 2;
          }
        }
      }
      GradReducer reducer(group, model->parameters(), c.options);
      EXPECT_GE(reducer.buckets(), c.min_buckets);
      if (c.options.one_buffer) {
        EXPECT_EQ(reducer.buckets(), 1u);
      }
      for (int step = 0; step < 2; ++step) {  // twice: buckets reset between steps
        model->zero_grad();
        reducer.prepare();
        model->forward(input(rank)).pow(2).mean().backward();
        reducer.finish();
        for (size_t k = 0; k < expected.size(); ++k) {
          EXPECT_TRUE(torch::allclose(model->parameters()[k].grad(), expected[k], 1e-6, 1e-7))
              << "parameter " << k << " step " << step << " bucket_mb " << c.options.bucket_mb;
        }
      }
    });
  }
}

TEST(DistReducer, UnionOverRanks) {
  two_ranks([](int rank, Cluster&, ProcessGroup& group) {
    const std::vector<std::string> mine =
        rank == 0 ? std::vector<std::string>{"b", "a"} : std::vector<std::string>{};
    EXPECT_EQ(union_over_ranks(group, mine), (std::vector<std::string>{"a", "b"}));
    const std::vector<std::string> both =
        rank == 0 ? std::vector<std::string>{"x\ty", ""} : std::vector<std::string>{"z", "x\ty"};
    EXPECT_EQ(union_over_ranks(group, both), (std::vector<std::string>{"", "x\ty", "z"}));
    // A name that would split on the wire is refused before anything is sent (by every rank).
    EXPECT_THROW(union_over_ranks(group, {std::string("a\0b", 3)}), std::invalid_argument);
  });
}

// As DDP: the first bucket (the last layers) holds at most 1 MiB, so it starts during backward;
// the rest share dist.bucket_mb.
TEST(DistReducer, TheFirstBucketHoldsAtMostOneMiB) {
  two_ranks([](int, Cluster&, ProcessGroup& group) {
    torch::nn::Sequential model(torch::nn::Linear(600, 600), torch::nn::Linear(600, 4));
    EXPECT_EQ(GradReducer(group, model->parameters(), ReducerOptions{25, true, false}).buckets(),
              2u);  // [last layer + first bias: 12 KB], [600 x 600 weight: 1.4 MB]
    EXPECT_EQ(GradReducer(group, model->parameters(), ReducerOptions{25, true, true}).buckets(),
              1u);
  });
}

// A rank that leaves (its process group gone, as when its process is killed) makes the other's
// next collective fail at once with RankLostError naming it, not hang.
TEST(DistGroup, ALostRankIsNamed) {
  std::string message;
  two_ranks(
      [&message](int rank, Cluster&, ProcessGroup& group) {
        auto t = torch::ones({4});
        group.allreduce(t);     // both alive
        if (rank == 1) return;  // leaves: its group is destroyed when the body returns
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        try {
          auto u = torch::ones({4});
          group.allreduce(u);
          ADD_FAILURE() << "the all-reduce with a departed rank succeeded";
        } catch (const RankLostError& e) {
          message = e.what();
        }
      },
      /*timeout_seconds=*/20);
  EXPECT_NE(message.find("lost contact with rank 1 (pid"), std::string::npos) << message;
}

// issue 46 item 14: Gloo refuses bool (a transformer's causal mask) with "Invalid scalar type",
// which was reported as "rank 0 lost contact with rank 1". Every dtype a module holds is now
// broadcast (as its bytes when the backend does not carry it) and floating ones summed; an error
// of the operation is an EnvironmentError naming it and the tensor, never a lost rank.
TEST(DistGroup, EveryDtypeAModuleHoldsGoesThroughAndAnOperationsErrorIsNoLostRank) {
  two_ranks([](int rank, Cluster&, ProcessGroup& group) {
    const torch::Tensor causal = torch::ones({4, 4}).tril().to(torch::kBool);
    torch::Tensor mask = rank == 0 ? causal.clone() : torch::zeros({4, 4}, torch::kBool);
    group.broadcast(mask);
    EXPECT_TRUE(mask.equal(causal)) << "bool";
    torch::Tensor transposed =
        rank == 0 ? causal.clone().t() : torch::zeros({4, 4}, torch::kBool).t();
    group.broadcast(transposed);  // not contiguous: received into a copy, written back
    EXPECT_TRUE(transposed.equal(causal.t())) << "bool, transposed";
    const torch::Tensor values = torch::arange(6).to(torch::kBFloat16) / 3;
    torch::Tensor brain = rank == 0 ? values.clone() : torch::zeros({6}, torch::kBFloat16);
    group.broadcast(brain);
    EXPECT_TRUE(brain.equal(values)) << "bfloat16";
    const torch::Tensor complex =
        torch::view_as_complex(torch::arange(6, torch::kFloat).reshape({3, 2}));
    torch::Tensor c = rank == 0 ? complex.clone() : torch::zeros({3}, torch::kComplexFloat);
    group.broadcast(c);
    EXPECT_TRUE(c.equal(complex)) << "complex64";

    torch::Tensor sum = torch::full({3}, rank + 1, torch::kBFloat16);
    group.allreduce(sum);
    EXPECT_TRUE(sum.equal(torch::full({3}, 3, torch::kBFloat16))) << sum;
    torch::Tensor async = torch::full({3}, 2 * rank + 1, torch::kBFloat16);
    ProcessGroup::Pending pending = group.allreduce_async(async);
    pending.wait();
    EXPECT_TRUE(async.equal(torch::full({3}, 4, torch::kBFloat16))) << async;

    auto error_of = [](const std::function<void()>& fn) -> std::string {
      try {
        fn();
      } catch (const RankLostError& e) {
        return std::string("RankLostError: ") + e.what();
      } catch (const EnvironmentError& e) {
        return e.what();
      }
      return "no error";
    };
    std::string msg = error_of([&] {
      torch::Tensor flags = torch::ones({2}, torch::kBool);
      group.allreduce(flags);
    });
    EXPECT_NE(msg.find("cannot all-reduce a Bool tensor [2]"), std::string::npos) << msg;
    msg = error_of([&] {
      torch::Tensor t = torch::ones({2});
      group.broadcast(t, /*root=*/5);  // the backend's own error, on both ranks
    });
    EXPECT_NE(msg.find("the broadcast of a Float tensor [2] (gloo) failed"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("lost contact"), std::string::npos) << msg;
    torch::Tensor after = torch::ones({2});  // both ranks still there
    group.allreduce(after);
    EXPECT_TRUE(after.equal(torch::full({2}, 2.0f)));
  });
}

TEST(DistGroup, BackendChoices) {
  const torch::Device cpu(torch::kCPU);
  EXPECT_EQ(resolve_backend(DistBackend::kAuto, cpu), DistBackend::kGloo);
  EXPECT_EQ(resolve_backend(DistBackend::kGloo, cpu), DistBackend::kGloo);
  try {
    resolve_backend(DistBackend::kNccl, cpu);
    ADD_FAILURE() << "nccl on CPU accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dist.backend: nccl needs CUDA"), std::string::npos);
  }
  // The group's constructor resolves its backend first: with no GPU, NCCL is refused as a config
  // error (exit 3) in every build, before c10d's ProcessGroupNCCL (built in with a CUDA LibTorch)
  // would throw from inside.
  if (!torch::cuda::is_available()) {
    try {
      resolve_backend(DistBackend::kNccl, torch::Device(torch::kCUDA, 0));
      ADD_FAILURE() << "nccl without a CUDA device accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("nccl needs CUDA devices, and this machine has none"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace amptune::dist
