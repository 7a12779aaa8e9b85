// Not a test: wall time and peak memory of planning a large sweep (app::plan_sweep, the work of
// `amptune run --dry-run` before printing), docs/PERFORMANCE.md "Planning large sweeps".
//
//   build/tests/bench/app_plan_bench [CELLS]   (default 100000; 10 lr values x CELLS/10 seeds)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "app/run/runner.h"

int main(int argc, char** argv) {
  const long cells = argc > 1 ? std::atol(argv[1]) : 100000;
  if (cells < 10 || cells % 10 != 0) {
    std::fprintf(stderr, "usage: app_plan_bench [CELLS, a multiple of 10]\n");
    return 2;
  }
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("amptune_plan_bench_" + std::to_string(cells) + ".yaml");
  {
    std::ofstream out(path);
    out << "name: big\nbase:\n  model: {name: resnet18, num_classes: 10, in_channels: 1, width: "
           "0.25, small_input: true}\ngrid:\n  optim.lr: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, "
           "0.9, 1.0]\n  seed: [";
    for (long i = 0; i < cells / 10; ++i) out << (i ? "," : "") << i;
    out << "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const amptune::app::Plan plan = amptune::app::plan_sweep(path.string(), {}, {}, /*data=*/false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  std::printf("%zu cells planned and checked in %.2f s, peak RSS %.0f MB\n", plan.cells.size(),
              seconds, static_cast<double>(usage.ru_maxrss) / 1024.0);
  std::filesystem::remove(path);
  return 0;
}
