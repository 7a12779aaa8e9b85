// Store: diagnoses (amptune diagnose; migration 8): their rows and advice, their FP8 rows
// (migration 22), and the report's per-module errors.
#include <string>
#include <utility>
#include <vector>

#include "store/columns.h"
#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {

using sql::Statement;

void Store::record_diagnosis(const records::Diagnosis& d) {
  const std::string action = "recording the diagnosis of epoch " + std::to_string(d.epoch) +
                             " of run " + std::to_string(d.run_id);
  detail::guarded_write(path_, db_, action, [&] {
    detail::require_run(db_, path_, d.run_id, action);
    // Its rows and advice cascade.
    sql::run(db_, "DELETE FROM diagnoses WHERE run_id = ? AND epoch = ?", d.run_id, d.epoch);
    sql::run(db_,
             "INSERT INTO diagnoses (run_id, epoch, against, batches, cosine_min, "
             "loss_scale, seconds, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
             d.run_id, d.epoch, to_string(d.against), d.batches, d.cosine_min, d.loss_scale,
             d.seconds, detail::now_utc());
    Statement row(db_,
                  "INSERT INTO diagnostics (run_id, epoch, kind, batch, seq, module, dtype, "
                  "numel, cosine, max_abs_err, max_rel_err, frac_rel_err_1e3, "
                  "frac_rel_err_5e3, overflow_frac, underflow_frac, input_nonfinite_frac) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const auto& r : d.rows) {
      row.bind_all(d.run_id, d.epoch, to_string(r.kind), r.batch, r.seq, r.module,
                   to_string(r.dtype), r.numel, r.cosine, r.max_abs_err, r.max_rel_err,
                   r.frac_rel_err_1e3, r.frac_rel_err_5e3, r.overflow_frac, r.underflow_frac,
                   r.input_nonfinite_frac)
          .run();
    }
    Statement fp8(db_,
                  "INSERT INTO fp8_diagnostics (run_id, epoch, batch, seq, module, role, format, "
                  "numel, saturated_frac, flushed_frac, sqnr_db, amax, scale, history_min, "
                  "history_max, history_len) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const auto& r : d.fp8_rows) {
      fp8.bind_all(d.run_id, d.epoch, r.batch, r.seq, r.module, r.role, r.format, r.numel,
                   r.saturated_frac, r.flushed_frac, r.sqnr_db, r.amax, r.scale, r.history_min,
                   r.history_max, r.history_len)
          .run();
    }
    Statement advice(db_,
                     "INSERT INTO diagnosis_advice (run_id, epoch, seq, rule, module, advice) "
                     "VALUES (?, ?, ?, ?, ?, ?)");
    for (size_t i = 0; i < d.advice.size(); ++i) {
      const auto& a = d.advice[i];
      advice
          .bind_all(d.run_id, d.epoch, static_cast<int64_t>(i), records::to_string(a.rule),
                    a.module, a.advice)
          .run();
    }
  });
}

std::optional<Store::Fp8Diagnosis> Store::fp8_diagnosis(int64_t run_id) const {
  return detail::guarded(
      path_, "reading the FP8 rows of the diagnoses of run " + std::to_string(run_id),
      [&]() -> std::optional<Fp8Diagnosis> {
        Statement newest(db_,
                         "SELECT g.epoch FROM diagnoses g WHERE g.run_id = ? AND EXISTS (SELECT "
                         "1 FROM fp8_diagnostics f WHERE f.run_id = g.run_id AND f.epoch = "
                         "g.epoch) ORDER BY g.recorded_at DESC, g.epoch DESC LIMIT 1",
                         run_id);
        if (!newest.step()) return std::nullopt;
        Fp8Diagnosis out;
        out.epoch = static_cast<int>(newest.column_int(0));
        Statement select(db_,
                         "SELECT *, rowid AS row_id FROM fp8_diagnostics WHERE run_id = ? AND "
                         "epoch = ? ORDER BY batch, seq",
                         run_id, int64_t{out.epoch});
        const detail::Row row(path_, detail::table("fp8_diagnostics"), select, "row_id");
        while (select.step()) {
          records::Fp8DiagnosticRow r;
          r.batch = row.small("batch");
          r.seq = row.small("seq");
          r.module = row.text("module");
          r.role = row.text("role");
          r.format = row.text("format");
          r.numel = row.integer("numel");
          r.saturated_frac = row.number("saturated_frac");
          r.flushed_frac = row.number("flushed_frac");
          r.sqnr_db = row.number("sqnr_db");
          r.amax = row.number("amax");
          r.scale = row.number("scale");
          r.history_min = row.number("history_min");
          r.history_max = row.number("history_max");
          r.history_len = row.integer("history_len");
          out.rows.push_back(std::move(r));
        }
        return out;
      });
}

std::vector<Store::ModuleError> Store::module_errors(const std::string& sweep) const {
  return detail::guarded(path_, "reading the diagnoses of sweep " + sweep, [&] {
    std::vector<ModuleError> out;
    Statement select(
        db_,
        "SELECT d.run_id, d.epoch, d.seq, d.module, MIN(d.dtype) AS dtype, "
        "MAX(d.numel) AS numel, COUNT(*) AS batches, "
        "CASE WHEN COUNT(d.cosine) < COUNT(*) THEN NULL ELSE MIN(d.cosine) END AS cosine, "
        "MAX(d.max_abs_err) AS max_abs_err, MAX(d.max_rel_err) AS max_rel_err, "
        "MAX(d.frac_rel_err_1e3) AS frac_rel_err_1e3, MAX(d.frac_rel_err_5e3) AS "
        "frac_rel_err_5e3, MAX(d.overflow_frac) AS overflow_frac, MAX(d.underflow_frac) AS "
        "underflow_frac, g.cosine_min, MIN(d.rowid) AS row_id, g.rowid AS diagnosis_row "
        "FROM diagnostics d "
        "JOIN diagnoses g ON g.run_id = d.run_id AND g.epoch = d.epoch "
        "JOIN runs r ON r.id = d.run_id JOIN sweeps s ON s.id = r.sweep_id "
        "WHERE s.name = ? AND d.kind = 'forward' "
        "GROUP BY d.run_id, d.epoch, d.seq, d.module ORDER BY d.run_id, d.epoch, d.seq",
        sweep);
    // Checked as read (a group's values are its rows'; a bad one is named by the group's first
    // row): NULL -> NaN, a TEXT (MAX over a group prefers it) refused.
    const detail::Row row(path_, detail::table("diagnostics"), select, "row_id");
    const detail::Row diagnosis(path_, detail::table("diagnoses"), select, "diagnosis_row");
    while (select.step()) {
      ModuleError e;
      e.run_id = row.value("run_id").raw_integer();
      e.epoch = row.small("epoch");
      e.worst.kind = records::DiagnosticKind::kForward;
      e.worst.seq = row.small("seq");
      e.worst.module = row.text("module");
      e.worst.dtype = row.word("dtype", parse_tensor_dtype);
      e.worst.numel = row.integer("numel");
      e.worst.batch = static_cast<int>(row.value("batches").raw_integer());  // COUNT(*)
      e.worst.cosine = row.number("cosine");
      e.worst.max_abs_err = row.number("max_abs_err");
      e.worst.max_rel_err = row.number("max_rel_err");
      e.worst.frac_rel_err_1e3 = row.number("frac_rel_err_1e3");
      e.worst.frac_rel_err_5e3 = row.number("frac_rel_err_5e3");
      e.worst.overflow_frac = row.number("overflow_frac");
      e.worst.underflow_frac = row.number("underflow_frac");
      e.cosine_min = diagnosis.number("cosine_min");
      out.push_back(std::move(e));
    }
    return out;
  });
}

}  // namespace amptune::store
