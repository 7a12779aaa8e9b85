// Benchmark (not a test): wall time of Store::record_epoch per epoch, as the trainer calls it at
// the end of every epoch (one transaction: epoch row with a checkpoint, 6 metrics, a loss-scale
// event). docs/PERFORMANCE.md "Results database at scale".
//
//   store_record_epoch_bench DB [EPOCHS]
//
// Adds one sweep "record_epoch_bench_<pid>" with one run to DB (created when missing; an existing
// database, e.g. one from tools/gen-synthetic-db, shows the cost at that size) and records EPOCHS
// (default 200) epochs, then prints the median, mean, p95 and max time per call.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "store/store.h"
#include "unit/store/typical_epoch.h"

int main(int argc, char** argv) {
  using namespace amptune::store;
  using namespace amptune::records;
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s DB [EPOCHS]\n", argv[0]);
    return 2;
  }
  const int epochs = argc == 3 ? std::atoi(argv[2]) : 200;
  if (epochs < 1) {
    std::fprintf(stderr, "EPOCHS must be >= 1\n");
    return 2;
  }
  try {
    Store store(argv[1]);
    const std::string sweep = "record_epoch_bench_" + std::to_string(::getpid());
    const int64_t sweep_id = store.ensure_sweep(sweep, "store_record_epoch_bench", "", "");
    RunSpec spec;
    spec.sweep_name = sweep;
    spec.label = "bench";
    spec.config_json = "{}";
    spec.config_hash = "bench" + std::to_string(::getpid()) + "00000000";
    spec.axes_json = R"({"optim.lr": 0.1})";
    const int64_t run = store.ensure_run(sweep_id, spec).id;
    store.mark_running(run, Provenance{});

    std::vector<double> ms;
    for (int e = 0; e < epochs; ++e) {
      const EpochRecord record =
          typical_epoch(run, e, "checkpoints/bench/epoch_" + std::to_string(e) + ".pt");
      const auto start = std::chrono::steady_clock::now();
      store.record_epoch(record);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    store.finish_run(run, RunStatus::kDone, "", "{}");
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double v : ms) sum += v;
    std::printf("record_epoch: %d epochs into %s: median %.3f ms, mean %.3f ms, p95 %.3f ms, "
                "max %.3f ms\n",
                epochs, argv[1], sorted[sorted.size() / 2], sum / ms.size(),
                sorted[std::min(sorted.size() - 1, sorted.size() * 95 / 100)], sorted.back());
    return 0;
  } catch (const amptune::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return static_cast<int>(error.code());
  }
}
