// `amptune list` and `amptune show`: options and output; app/views/inspect.h reads the database.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/views/inspect.h"
#include "app/views/table.h"
#include "cli/commands.h"
#include "core/log.h"

namespace amptune::cli {
namespace {

std::string metric_or_dash(const std::map<std::string, double>& m, const std::string& name,
                           int decimals) {
  auto it = m.find(name);
  return it == m.end() ? "-" : app::fixed(it->second, decimals);
}

// Where each epoch's time went (records::EpochTimes), in seconds, and the profile traces.
void print_time_breakdown(const std::vector<records::EpochRow>& epochs) {
  app::Table table({"epoch", "data wait", "forward", "backward", "optimizer", "eval", "other",
                    "checkpoint", "db", "compute %", "start-up", "profile trace"});
  for (const auto& e : epochs) {
    if (!e.times) continue;
    const records::EpochTimes& t = *e.times;
    auto secs = [](double v) { return v < 0 ? std::string("-") : app::fixed(v, 2); };
    const double wall = e.epoch_seconds + t.checkpoint + std::max(0.0, t.db);
    table.add({std::to_string(e.epoch), secs(t.data_wait), secs(t.forward), secs(t.backward),
               secs(t.optimizer), secs(t.eval), secs(e.epoch_seconds - t.inside_epoch()),
               secs(t.checkpoint), secs(t.db),
               wall > 0 ? app::fixed(100 * (t.forward + t.backward + t.optimizer) / wall, 1) : "-",
               secs(t.startup), e.profile_trace.empty() ? "-" : e.profile_trace});
  }
  if (table.empty()) return;
  std::cout << "time per epoch (seconds; compute = forward + backward + optimizer of the wall "
               "time incl. checkpoint and db)\n";
  table.print(std::cout);
}

// A setting column's value (records::RunRow::columns, JSON text) as shown: a string without its
// quotes, anything else (a number in a database edited by hand) as it is.
std::string setting_text(const std::string& json_text) {
  const nlohmann::json value = nlohmann::json::parse(json_text, nullptr, false);
  return value.is_string() ? value.get<std::string>() : json_text;
}

}  // namespace

int cmd_list(const Invocation& inv) {
  std::string db, sweep;
  Options opts("list", "usage: amptune list [options]\n");
  opts.db(&db);
  opts.add()("sweep", po::value(&sweep), "only the runs of this sweep");
  if (!opts.parse(inv.args)) return 0;
  const auto lines =
      app::list_runs(db, sweep.empty() ? std::nullopt : std::optional<std::string>(sweep));
  app::Table table({"id", "run", "status", "epochs", "best", "settings"});
  for (const auto& line : lines) {
    const records::RunRow& r = line.run;
    table.add({std::to_string(r.id), r.name, records::to_string(r.status),
               std::to_string(r.epochs_done),
               line.best ? r.primary_metric + " " + app::fixed(*line.best, 2) : "-", r.label});
  }
  table.print(std::cout);
  std::cout << lines.size() << " runs\n";
  return 0;
}

// Why a prune rule stopped the run, or let a pruned run continue (docs/PRUNING.md), with the
// runs each decision compared it with.
static void print_prune_decisions(const std::vector<records::PruneDecisionRow>& decisions) {
  if (decisions.empty()) return;
  std::cout << "prune decisions:\n";
  app::Table table(
      {"epoch", "action", "rule", "rung", "value", "threshold", "compared with", "reason"});
  for (const auto& d : decisions) {
    std::string compared;
    for (const auto& other : nlohmann::json::parse(d.compared_json)) {
      compared +=
          (compared.empty() ? "" : " ") + std::to_string(other.at("run_id").get<int64_t>()) + ":" +
          (other.at("value").is_null() ? "nan" : app::fixed(other.at("value").get<double>(), 4));
    }
    table.add({std::to_string(d.epoch), records::to_string(d.action), to_string(d.rule),
               d.rung < 0 ? "-" : std::to_string(d.rung), app::fixed(d.value, 4),
               app::fixed(d.threshold, 4), compared.empty() ? "-" : compared,
               log::printable(d.reason)});
  }
  table.print(std::cout);
}

// The percentage of the peak that an epoch's img/s achieved; "-" when not known.
static std::string mfu_text(const records::RunWork& work, const records::EpochRow& e) {
  const auto mfu = e.global_step > 0 ? work.mfu(e.train_fps_mean) : std::nullopt;
  return mfu ? app::significant(100.0 * *mfu, 3) + "%" : "-";
}

// The run's work and peak (docs/PERFORMANCE.md "MFU"), and what its last trained epoch achieved.
static void print_work(const records::RunWork& work, const std::vector<records::EpochRow>& epochs) {
  if (work.train_flops_per_sample <= 0 && work.peak_source.empty()) return;  // never started
  std::cout << "work "
            << (work.train_flops_per_sample > 0
                    ? app::significant(work.train_flops_per_sample / 1e9, 4)
                    : std::string("-"))
            << " GFLOP per training sample; peak "
            << (work.peak_flops > 0 ? app::significant(work.peak_flops / 1e12, 4) : "-")
            << " TFLOP/s " << work.peak_precision << " (" << log::printable(work.peak_source)
            << ")\n";
  if (!work.uncounted_ops.empty()) {
    std::cout << "work is partial: the products of " << log::printable(work.uncounted_ops)
              << " (fused kernels) are not counted, so the MFU is a lower bound\n";
  }
  for (auto e = epochs.rbegin(); e != epochs.rend(); ++e) {
    if (e->global_step == 0 || !(e->train_fps_mean > 0)) continue;
    std::cout << "epoch " << e->epoch << ": "
              << app::significant(e->train_fps_mean * work.train_flops_per_sample / 1e12, 4)
              << " TFLOP/s achieved, MFU " << mfu_text(work, *e) << "\n";
    return;
  }
}

// The lines above a run's epoch table: name, status, identity, backend, FP8 recipe, provenance.
void print_run_header(const app::RunDetails& details) {
  const records::RunRow& run = details.run;
  std::cout << "run " << run.id << " " << log::printable(run.name) << "  ["
            << log::printable(run.label) << "]\n"
            << "status " << records::to_string(run.status)
            << (run.message.empty() ? "" : " (" + log::printable(run.message) + ")") << "\n"
            << "identity " << run.config_hash.substr(0, 12) << "  data "
            << (run.data_fingerprint.empty() ? "-" : run.data_fingerprint.substr(0, 12))
            << "  started " << run.started_at << "  finished "
            << (run.finished_at.empty() ? "-" : run.finished_at) << "\n";
  if (auto it = run.columns.find("backend"); it != run.columns.end()) {
    auto reason = run.columns.find("backend_reason");
    std::cout << "amp backend " << log::printable(setting_text(it->second))
              << (reason == run.columns.end()
                      ? ""
                      : " (" + log::printable(setting_text(reason->second)) + ")")
              << "\n";
  }
  // The FP8 recipe (amp.fp8.*, docs/AMP.md "FP8: the recipe") of a run that has it.
  if (!details.fp8_recipe.empty()) std::cout << "amp " << details.fp8_recipe << "\n";
  if (!run.provenance.host.empty()) {
    const records::Provenance& p = run.provenance;
    std::cout << "ran on " << log::printable(p.host) << " (" << p.device << ", " << p.threads
              << " threads"
              << (p.world_size > 1 ? ", " + std::to_string(p.world_size) + " processes" : "")
              << "), amptune " << p.amptune_version << ", LibTorch " << p.torch_version
              << (p.allocator.empty() ? "" : ", malloc " + p.allocator)
              << (p.blas.empty() ? "" : ", BLAS " + log::printable(p.blas)) << "\n";
  }
}

int cmd_show(const Invocation& inv) {
  std::string db, run_ref;
  bool print_config = false;
  Options opts("show", "usage: amptune show RUN [options]\n\nRUN is a run id or name.\n");
  opts.db(&db).run(&run_ref);
  opts.add()("config", po::bool_switch(&print_config),
             "also print the run's full resolved config (JSON)");
  if (!opts.parse(inv.args)) return 0;
  const app::RunDetails details = app::show_run(db, run_ref);
  const records::RunRow& run = details.run;
  // Checked before anything is printed (the store's CHECK json_valid, unless the file was edited).
  const nlohmann::json config = nlohmann::json::parse(run.config_json, nullptr, false);
  if (print_config && config.is_discarded()) {
    throw StoreError(db + ": table runs, row " + std::to_string(run.id) +
                     ", column config_json is not JSON; correct the row or leave it out");
  }
  print_run_header(details);
  if (print_config) {
    std::cout << config.dump(2) << "\n";
  }
  print_work(run.work, details.epochs);
  app::Table table({"epoch", "lr", "train_loss", "acc1", "acc5", "val_loss", "img/s", "MFU",
                    "seconds", "skipped", "checkpoint"});
  for (auto& e : details.epochs) {
    // global_step 0: the evaluation of the initial weights of an evaluation-only run.
    const bool trained = e.global_step > 0;
    table.add({std::to_string(e.epoch), trained ? app::fixed(e.lr, 6) : "-",
               trained ? app::fixed(e.train_loss, 4) : "-", metric_or_dash(e.metrics, "acc1", 2),
               metric_or_dash(e.metrics, "acc5", 2), metric_or_dash(e.metrics, "val_loss", 4),
               trained ? app::fixed(e.train_fps_mean, 1) : "-", mfu_text(run.work, e),
               app::fixed(e.epoch_seconds, 1), std::to_string(e.skipped_samples),
               e.checkpoint ? e.checkpoint->path : (trained ? "-" : "- (initial weights)")});
  }
  table.print(std::cout);
  if (!details.initial_metrics.empty()) {
    std::cout << "initial weights (before training):";
    for (const auto& [name, value] : details.initial_metrics) {
      std::cout << " " << name << " " << value;
    }
    std::cout << "\n";
  }
  print_time_breakdown(details.epochs);
  print_prune_decisions(details.prune_decisions);
  if (const auto& fp8 = details.fp8) {
    std::cout << "FP8 (diagnosis of "
              << (fp8->epoch >= 0 ? "epoch " + std::to_string(fp8->epoch) : "the initial weights")
              << "):\n";
    app::fp8_table(fp8->slots).print(std::cout);
    for (const auto& a : fp8->advice) std::cout << "advice: " << a.advice << "\n";
  }
  if (!run.summary_json.empty()) std::cout << run.summary_json << "\n";
  return 0;
}

}  // namespace amptune::cli
