// `amptune status`: per sweep, how many runs are done / running / pending / failed / diverged,
// and for each running run its epoch, heartbeat age and ETA.
#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <map>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "core/error.h"
#include "core/process.h"

namespace po = boost::program_options;

namespace amptune::cli {
namespace {

// A heartbeat older than this means the worker died (Store::claim_run reclaims such runs).
constexpr double kStaleSeconds = 60;

// Seconds since an ISO-8601 UTC timestamp ("2024-05-01T12:00:00.123Z"); NaN when unparsable.
double age_seconds(const std::string& stamp) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0;
  double second = 0;
  if (std::sscanf(stamp.c_str(), "%d-%d-%dT%d:%d:%lfZ", &year, &month, &day, &hour, &minute,
                  &second) != 6) {
    return std::nan("");
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = 0;
  const double then = static_cast<double>(timegm(&tm)) + second;
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  return now - then;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  const long s = std::lround(std::max(0.0, seconds));
  if (s < 120) return std::to_string(s) + " s";
  if (s < 7200) return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
  return std::to_string(s / 3600) + " h " + std::to_string((s % 3600) / 60) + " min";
}

// The run's planned number of epochs: the epochs column, else schedule.epochs of its config.
int planned_epochs(const store::RunRow& run) {
  if (auto it = run.columns.find("epochs"); it != run.columns.end()) {
    try {
      return nlohmann::json::parse(it->second).get<int>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  try {
    auto config = nlohmann::json::parse(run.config_json);
    return config.at("schedule").at("epochs").get<int>();
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
}

}  // namespace

int cmd_status(const Invocation& inv) {
  std::string db, sweep;
  po::options_description desc("amptune status options");
  desc.add_options()("help,h", "show this help")(
      "db", po::value(&db)->default_value(default_db()), "results database (env AMPTUNE_DB)")(
      "sweep", po::value(&sweep), "only this sweep");
  po::variables_map vm;
  po::store(po::command_line_parser(inv.args).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: amptune status [options]\n\n"
                 "Per sweep: done / running / pending / failed / diverged counts; for each running\n"
                 "run its epoch, heartbeat age and ETA (mean epoch seconds x epochs left). A\n"
                 "running run whose process on this host is gone, or (another host) whose\n"
                 "heartbeat is older than 60 s, is shown as stale.\n\n"
              << desc;
    return 0;
  }
  store::Store store = open_existing(db);
  auto runs = store.runs(sweep.empty() ? std::nullopt : std::optional<std::string>(sweep));
  if (!sweep.empty() && runs.empty() &&
      store.query("SELECT 1 FROM sweeps WHERE name = ?1", {sweep}).rows.empty()) {
    throw UsageError("no sweep '" + sweep + "' in " + db + " (see amptune status)");
  }
  std::vector<std::string> order;
  std::map<std::string, std::vector<const store::RunRow*>> by_sweep;
  for (const auto& run : runs) {
    if (!by_sweep.count(run.sweep_name)) order.push_back(run.sweep_name);
    by_sweep[run.sweep_name].push_back(&run);
  }
  if (order.empty()) std::cout << "no runs in " << db << "\n";
  for (const auto& name : order) {
    std::map<store::RunStatus, int> counts;
    Table running({"run", "label", "epoch", "heartbeat", "eta"});
    int running_rows = 0;
    for (const store::RunRow* run : by_sweep[name]) {
      ++counts[run->status];
      if (run->status != store::RunStatus::kRunning) continue;
      const int planned = planned_epochs(*run);
      const double age = age_seconds(run->heartbeat_at);
      double seconds = 0;
      int timed = 0;
      for (const auto& epoch : store.epochs(run->id)) {
        if (std::isfinite(epoch.epoch_seconds)) {
          seconds += epoch.epoch_seconds;
          ++timed;
        }
      }
      std::string eta;
      const bool here = run->holder && run->holder->machine == current_process().machine;
      if (here && !process_alive(*run->holder)) {
        eta = "stale (its process " + std::to_string(run->holder->pid) + " is gone)";
      } else if (std::isfinite(age) && age > kStaleSeconds) {
        eta = here ? "no heartbeat (process " + std::to_string(run->holder->pid) +
                         " lives: hung?)"
                   : "stale (worker died?)";
      } else if (timed == 0) {
        eta = "-";
      } else {
        eta = duration_text(seconds / timed * std::max(0, planned - run->epochs_done));
      }
      running.add({run->name, run->label,
                   std::to_string(run->epochs_done) + "/" + std::to_string(planned),
                   std::isfinite(age) ? duration_text(age) + " ago" : "-", eta});
      ++running_rows;
    }
    std::cout << "sweep " << name << ": " << by_sweep[name].size() << " runs: done "
              << counts[store::RunStatus::kDone] << ", running "
              << counts[store::RunStatus::kRunning] << ", pending "
              << counts[store::RunStatus::kPending] << ", failed "
              << counts[store::RunStatus::kFailed] << ", diverged "
              << counts[store::RunStatus::kDiverged] << "\n";
    if (running_rows) running.print(std::cout);
  }
  return 0;
}

}  // namespace amptune::cli
