// `amptune report`: a self-contained HTML page (DIR/index.html + PNG plots in DIR) with the
// comparison table of a sweep and plots drawn by gnuplot. The data is app::build_report, the
// files app::write_report (app/views/report.h).
#include <cstdlib>
#include <iostream>

#include "app/views/inspect.h"
#include "app/views/report.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/version.h"

namespace amptune::cli {

int cmd_report(const Invocation& inv) {
  std::string db, sweep, out_dir;
  Options opts("report",
               "usage: amptune report --sweep NAME --out DIR [options]\n\n"
               "Writes DIR/index.html (no network needed to view it) with the comparison table\n"
               "(as `amptune compare --also` the model's headline metrics, e.g. mrpe beside\n"
               "ap_root_25) and PNG plots drawn by gnuplot (package gnuplot-nox;\n"
               "AMPTUNE_GNUPLOT overrides the program): primary metric vs epoch (a fork continues\n"
               "its parent's line), train loss vs epoch, loss scale vs step, per-module error of\n"
               "diagnosed runs (first departing module marked), img/s and time per run.\n");
  opts.db(&db);
  opts.add()("sweep", po::value(&sweep), "the sweep to report (required)")(
      "out", po::value(&out_dir), "output directory: index.html and the plots (required)");
  if (!opts.parse(inv.args)) return 0;
  if (sweep.empty()) throw UsageError("amptune report needs --sweep NAME");
  if (out_dir.empty()) throw UsageError("amptune report needs --out DIR");
  store::Store store = app::open_existing(db);
  const app::ReportModel model = app::build_report(store, sweep);
  app::ReportOutput output;
  output.dir = out_dir;
  const char* gnuplot = std::getenv("AMPTUNE_GNUPLOT");
  if (gnuplot && *gnuplot) output.gnuplot = gnuplot;
  output.written_by = std::string("amptune ") + kVersion + " (" + kGitCommit + ")";
  const app::ReportFiles files = app::write_report(model, output);
  std::cout << "wrote " << files.index << " (" << model.runs << " runs, " << files.plots
            << " plots)\n";
  return 0;
}

}  // namespace amptune::cli
