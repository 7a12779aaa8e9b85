// `amptune bench`: loader and training throughput of sweep cells, measured side by side.
#include <iostream>

#include "cli/commands.h"
#include "app/table.h"
#include "core/error.h"
#include "core/sweep.h"
#include "train/bench.h"

namespace amptune::cli {

int cmd_bench(const Invocation& inv) {
  std::string sweep_path;
  std::vector<std::string> sets, only;
  int64_t steps = 50, warmup = 5;
  int threads = 0;
  Options opts("bench",
               "usage: amptune bench SWEEP.yaml [options]\n\nFor each cell: images/s of the data "
               "loader alone, then of full training steps, in one process. Nothing is recorded.");
  opts.positional(&sweep_path);
  opts.add()("set", po::value(&sets)->composing(), "override a base key: key=value; repeatable")(
      "only", po::value(&only)->composing(), "bench only the matching cells: key=value")(
      "steps", po::value(&steps)->default_value(50), "timed batches per measurement")(
      "warmup", po::value(&warmup)->default_value(5), "untimed batches before timing")(
      "threads", po::value(&threads)->default_value(0), "LibTorch threads; 0 = the config's");
  if (!opts.parse(inv.args)) return 0;
  if (sweep_path.empty()) throw UsageError("amptune bench needs a sweep file");
  if (steps < 1 || warmup < 0) throw UsageError("--steps must be >= 1 and --warmup >= 0");
  Sweep sweep = load_sweep(sweep_path, sets);
  auto cells = filter_cells(sweep.cells, only);
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
