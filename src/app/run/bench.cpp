#include "app/run/bench.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/run/runner.h"
#include "core/child.h"
#include "core/config.h"
#include "core/error.h"
#include "store/store.h"

namespace amptune::app {
namespace fs = std::filesystem;

ParallelBench bench_data_parallel(const Config& config, int nproc, int64_t steps, int64_t warmup,
                                  int threads) {
  std::string pattern = (fs::temp_directory_path() / "amptune-bench-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) {
    throw EnvironmentError("bench: cannot create a scratch directory under " +
                           fs::temp_directory_path().string() + ": " + std::strerror(errno));
  }
  const fs::path dir = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{dir};

  Config cell = config;
  cell.set("schedule.epochs", 1);
  cell.set("schedule.training_step_per_epoch", warmup + steps);
  cell.set("schedule.skip_steps", warmup);
  cell.set("schedule.eval_step_per_epoch", 0);
  if (threads > 0) cell.set("threads", threads);
  // JSON is YAML: the cell's whole config as the base of a one-cell sweep.
  const fs::path sweep = dir / "bench.yaml";
  std::ofstream(sweep) << "name: bench\nbase: " << cell.nested().dump() << "\n";
  const std::string db = (dir / "bench.sqlite").string();
  const std::string log = (dir / "bench.log").string();

  std::vector<std::string> args = {"run", sweep.string(), "--db", db, "--no-progress"};
  if (nproc > 1) {
    args.push_back("--nproc");
    args.push_back(std::to_string(nproc));
  }
  ChildSpec spec = self_command(args);
  spec.name = "the " + std::to_string(nproc) + "-process job";
  spec.stdout_path = "/dev/null";
  spec.stderr_path = log;
  // The job and its ranks die with this process (core/child.h): none writes on in the scratch
  // directory once this process is gone.
  ForwardSignals forwarding;  // Ctrl-C stops the job, then this process
  Child job = Child::start(spec);
  if (job.start_error()) throw EnvironmentError("bench: " + job.start_failure());
  const ChildEnd end = job.wait(&forwarding);
  if (const int sig = forwarding.received()) {
    throw Error(ExitCode::kInterrupted,
                std::string("bench: interrupted by ") + signal_name(sig) + "; the job " +
                    end.describe());
  }
  if (!end.success()) {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    throw EnvironmentError("bench: " + spec.name + " " + end.describe() + ":\n" + text);
  }
  store::Store store(db);
  const auto epochs = store.epochs(1);
  if (epochs.empty()) throw EnvironmentError("bench: the job recorded no epoch; its log:\n" + log);
  const auto& e = epochs.front();
  auto metric = [&](const char* name, double fallback) {
    auto it = e.metrics.find(name);
    return it == e.metrics.end() ? fallback : it->second;
  };
  ParallelBench r;
  r.nproc = nproc;
  r.fps = e.train_fps_mean;
  r.rank_fps_min = metric("rank_fps_min", e.train_fps_mean);
  r.rank_fps_max = metric("rank_fps_max", e.train_fps_mean);
  r.allreduce_ms = metric("allreduce_ms", 0);
  r.allreduce_share = metric("allreduce_share", 0);
  return r;
}

std::vector<CellBench> bench_sweep(const BenchRequest& request) {
  if (request.steps < 1 || request.warmup < 0) {
    throw UsageError("--steps must be >= 1 and --warmup >= 0");
  }
  const Sweep sweep = load_sweep(request.sweep_path, request.sets);
  std::vector<CellBench> out;
  for (const Cell& cell : filter_cells(sweep.cells, request.only)) {
    CellBench b{cell, {}, {}};
    const Config config = cell.config();
    if (request.nproc.empty()) {
      b.one = train::bench(config, request.steps, request.warmup, request.threads);
    }
    for (const int n : request.nproc) {
      b.parallel.push_back(
          bench_data_parallel(config, n, request.steps, request.warmup, request.threads));
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace amptune::app
