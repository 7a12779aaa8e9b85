#include "app/views/inspect.h"

#include <cmath>
#include <filesystem>
#include <utility>

#include "amp/policy.h"
#include "app/run/run_input.h"
#include "core/error.h"
#include "train/diagnose_fp8.h"

namespace amptune::app {

store::Store open_existing(const std::string& db) {
  if (!std::filesystem::exists(db)) {
    throw StoreError("database " + db + " does not exist; run a sweep first or pass --db FILE");
  }
  return store::Store(db);
}

records::RunRow find_run(const store::Store& store, const std::string& ref) {
  std::optional<records::RunRow> run = store.find_run(ref);
  if (!run) {
    throw UsageError("no run '" + ref + "' in " + store.path() + " (see amptune list --db " +
                     store.path() + ")");
  }
  return std::move(*run);
}

std::vector<RunLine> list_runs(const std::string& db, const std::optional<std::string>& sweep) {
  return list_runs(open_existing(db), sweep);
}

std::unique_ptr<store::Store> open_read_only(const std::string& db) {
  return store::Store::open_read_only(db);
}

RunDetails show_run(const std::string& db, const std::string& ref) {
  return show_run(open_existing(db), ref);
}

RunDetails show_run(const store::Store& store, const std::string& ref) {
  RunDetails details;
  details.run = find_run(store, ref);
  details.epochs = store.epochs(details.run.id);
  details.initial_metrics = store.initial_metrics(details.run.id);
  details.prune_decisions = store.prune_decisions(details.run.id);
  try {  // the policy's own words; a config this build cannot read shows without them
    const train::RunInput input = resolve_run(details.run);
    details.fp8_recipe = amp::apex_properties(input.settings().amp).fp8.summary();
  } catch (const Error&) {
  }
  if (auto fp8 = store.fp8_diagnosis(details.run.id)) {
    records::Diagnosis d;
    d.fp8_rows = std::move(fp8->rows);
    details.fp8 = Fp8Findings{fp8->epoch, train::worst_fp8_rows(d),
                              store.diagnosis_advice(details.run.id, fp8->epoch).value_or(
                                  std::vector<records::DiagnosisAdvice>{})};
  }
  return details;
}

Table fp8_table(const std::vector<records::Fp8DiagnosticRow>& slots) {
  auto text = [](double v, int digits = 4) {
    return std::isnan(v) ? std::string("-") : significant(v, digits);
  };
  auto share = [](double v) { return std::isnan(v) ? std::string("-") : fixed(v * 100, 2); };
  Table table({"module", "role", "format", "saturated %", "flushed %", "SQNR dB", "amax", "scale",
               "history min", "max", "ratio"});
  for (const auto& r : slots) {
    const bool history = r.history_len > 0;
    table.add({r.module, r.role, r.format, share(r.saturated_frac), share(r.flushed_frac),
               std::isnan(r.sqnr_db) ? std::string("exact") : fixed(r.sqnr_db, 1), text(r.amax),
               text(r.scale), history ? text(r.history_min) : "-",
               history ? text(r.history_max) : "-",
               history && r.history_min > 0 ? text(r.history_max / r.history_min, 3) : "-"});
  }
  return table;
}

}  // namespace amptune::app
