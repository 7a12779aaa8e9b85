// `amptune bench`: loader and training throughput of sweep cells, measured side by side.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "app/bench.h"
#include "app/table.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/sweep.h"
#include "train/bench.h"

namespace amptune::cli {
namespace {

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> counts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || n < 1) {
      throw UsageError("--nproc takes process counts >= 1 separated by commas (1,2), got '" +
                       text + "'");
    }
    counts.push_back(n);
    start = comma + 1;
  }
  return counts;
}

int bench_parallel(const std::vector<Cell>& cells, const std::vector<int>& counts, int64_t steps,
                   int64_t warmup, int threads) {
  app::Table table({"cell", "settings", "processes", "img/s", "rank img/s min-max",
                    "allreduce ms/step", "allreduce share", "linearity"});
  for (const auto& cell : cells) {
    const Config config = cell.config();
    double one = 0;
    for (int n : counts) {
      const app::ParallelBench r = app::bench_data_parallel(config, n, steps, warmup, threads);
      if (n == 1) one = r.fps;
      table.add({std::to_string(cell.index), cell.label(), std::to_string(n), app::fixed(r.fps, 1),
                 app::fixed(r.rank_fps_min, 1) + "-" + app::fixed(r.rank_fps_max, 1),
                 app::fixed(r.allreduce_ms, 2), app::fixed(100 * r.allreduce_share, 1) + " %",
                 one > 0 ? app::fixed(100 * r.fps / (n * one), 1) + " %" : "-"});
    }
  }
  table.print(std::cout);
  return 0;
}

}  // namespace

int cmd_bench(const Invocation& inv) {
  std::string sweep_path;
  std::vector<std::string> sets, only;
  int64_t steps = 50, warmup = 5;
  int threads = 0;
  std::string nproc;
  Options opts("bench",
               "usage: amptune bench SWEEP.yaml [options]\n\nFor each cell: images/s of the data "
               "loader alone, then of full training steps, in one process. Nothing is recorded.\n"
               "With --nproc 1,2: images/s of data-parallel jobs of 1 and 2 processes (the real "
               "trainer on a scratch database) and the linearity fps(N) / (N x fps(1)).");
  opts.positional(&sweep_path).sweep_selection(&sets, &only).threads(&threads);
  opts.add()("steps", po::value(&steps)->default_value(50), "timed batches per measurement")(
      "warmup", po::value(&warmup)->default_value(5), "untimed batches before timing")(
      "nproc", po::value(&nproc),
      "comma-separated process counts of data-parallel jobs to time, e.g. 1,2 (each process "
      "with --threads threads)");
  if (!opts.parse(inv.args)) return 0;
  if (sweep_path.empty()) throw UsageError("amptune bench needs a sweep file");
  if (steps < 1 || warmup < 0) throw UsageError("--steps must be >= 1 and --warmup >= 0");
  Sweep sweep = load_sweep(sweep_path, sets);
  auto cells = filter_cells(sweep.cells, only);
  if (!nproc.empty()) return bench_parallel(cells, parse_counts(nproc), steps, warmup, threads);
  app::Table table({"cell", "settings", "threads", "loader img/s", "train img/s", "step ms"});
  for (auto& cell : cells) {
    auto r = train::bench(cell.config(), steps, warmup, threads);
    table.add({std::to_string(cell.index), cell.label(), std::to_string(r.threads),
               app::fixed(r.loader_fps, 1), app::fixed(r.train_fps, 1), app::fixed(r.step_ms, 2)});
  }
  table.print(std::cout);
  return 0;
}

}  // namespace amptune::cli
