// `amptune bench`: loader and training throughput of sweep cells, measured side by side.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "app/run/bench.h"
#include "app/views/table.h"
#include "cli/commands.h"
#include "core/error.h"

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

void print_parallel(const std::vector<app::CellBench>& cells, const std::vector<int>& counts) {
  app::Table table({"cell", "settings", "processes", "img/s", "rank img/s min-max",
                    "allreduce ms/step", "allreduce share", "linearity"});
  for (const auto& b : cells) {
    double one = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const int n = counts[i];
      const app::ParallelBench& r = b.parallel.at(i);
      if (n == 1) one = r.fps;
      table.add({std::to_string(b.cell.index), b.cell.label(), std::to_string(n),
                 app::fixed(r.fps, 1),
                 app::fixed(r.rank_fps_min, 1) + "-" + app::fixed(r.rank_fps_max, 1),
                 app::fixed(r.allreduce_ms, 2), app::fixed(100 * r.allreduce_share, 1) + " %",
                 one > 0 ? app::fixed(100 * r.fps / (n * one), 1) + " %" : "-"});
    }
  }
  table.print(std::cout);
}

}  // namespace

int cmd_bench(const Invocation& inv) {
  app::BenchRequest request;
  std::string nproc;
  Options opts("bench",
               "usage: amptune bench SWEEP.yaml [options]\n\nFor each cell: images/s of the data "
               "loader alone, then of full training steps, in one process. Nothing is recorded.\n"
               "With --nproc 1,2: images/s of data-parallel jobs of 1 and 2 processes (the real "
               "trainer on a scratch database) and the linearity fps(N) / (N x fps(1)).");
  opts.positional(&request.sweep_path)
      .sweep_selection(&request.sets, &request.only)
      .threads(&request.threads);
  opts.add()("steps", po::value(&request.steps)->default_value(50),
             "timed batches per measurement")(
      "warmup", po::value(&request.warmup)->default_value(5), "untimed batches before timing")(
      "nproc", po::value(&nproc),
      "comma-separated process counts of data-parallel jobs to time, e.g. 1,2 (each process "
      "with --threads threads)");
  if (!opts.parse(inv.args)) return 0;
  if (request.sweep_path.empty()) throw UsageError("amptune bench needs a sweep file");
  if (!nproc.empty()) request.nproc = parse_counts(nproc);
  const std::vector<app::CellBench> cells = app::bench_sweep(request);
  if (!request.nproc.empty()) {
    print_parallel(cells, request.nproc);
    return 0;
  }
  app::Table table({"cell", "settings", "threads", "loader img/s", "train img/s", "step ms"});
  for (const auto& b : cells) {
    const train::BenchResult& r = b.one;
    table.add({std::to_string(b.cell.index), b.cell.label(), std::to_string(r.threads),
               app::fixed(r.loader_fps, 1), app::fixed(r.train_fps, 1), app::fixed(r.step_ms, 2)});
  }
  table.print(std::cout);
  return 0;
}

}  // namespace amptune::cli
