// `amptune compare`: the pivot table of a sweep (one row per combination of --by values), as
// text, CSV or JSON. The table is app::build_compare (app/views/compare.h).
#include <iostream>
#include <sstream>

#include "app/views/compare.h"
#include "cli/commands.h"
#include "core/error.h"

namespace amptune::cli {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string current;
  std::istringstream in(text);
  while (std::getline(in, current, separator)) {
    if (!current.empty()) parts.push_back(current);
  }
  return parts;
}

// --baseline values ("key=value,key=value", repeatable) as pairs.
std::vector<std::pair<std::string, std::string>> baseline_pairs(
    const std::vector<std::string>& specs) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& spec : specs) {
    for (const auto& item : split(spec, ',')) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw UsageError("--baseline takes key=value[,key=value...], not '" + item + "'");
      }
      pairs.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
  }
  return pairs;
}

}  // namespace

int cmd_compare(const Invocation& inv) {
  std::vector<std::string> dbs;
  std::string by, also, format;
  std::vector<std::string> baseline;
  app::CompareOptions options;
  Options opts("compare",
               "usage: amptune compare --sweep NAME [options]\n\n"
               "One row per combination of the --by values: the metric (mean over the group's\n"
               "runs), its epoch, mean train img/s, overflow and skipped steps summed over\n"
               "epochs, status, rank (1 = best) and, with --baseline, the difference to the\n"
               "baseline row. Rows are ordered best first.\n");
  opts.dbs(&dbs);
  opts.add()("sweep", po::value(&options.sweep), "the sweep to compare (required)")(
      "by", po::value(&by),
      "comma-separated grouping keys: swept keys (optim.lr) or run columns (opt_level, "
      "loss_scale, seed, ...); default: every swept key")(
      "metric", po::value(&options.metric), "metric to compare (default: the primary metric)")(
      "also", po::value(&also),
      "comma-separated metrics shown beside it, each at the epoch the metric was taken from "
      "(amptune report shows the model's headline metrics so: mrpe,ap_root_25 for RootNet)")(
      "epoch", po::value(&options.epoch)->default_value("best"),
      "best | last | N (0-based): which epoch's value each run contributes")(
      "baseline", po::value(&baseline)->multitoken(),
      "key=value,... of --by keys: the row that `delta` is measured from");
  opts.format(&format, {"text", "csv", "json"});
  if (!opts.parse(inv.args)) return 0;
  if (options.sweep.empty()) {
    throw UsageError("amptune compare needs --sweep NAME (see amptune list)");
  }
  options.by = split(by, ',');
  options.also = split(also, ',');
  options.baseline = baseline_pairs(baseline);
  const auto store = open_results(dbs);
  const app::CompareTable table = app::build_compare(*store, options);
  if (format == "csv") {
    app::write_compare_csv(table, std::cout);
  } else if (format == "json") {
    std::cout << app::compare_json(table).dump(2) << "\n";
  } else {
    app::write_compare_text(table, std::cout);
  }
  return 0;
}

}  // namespace amptune::cli
