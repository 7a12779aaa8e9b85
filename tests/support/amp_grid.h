// experiments/amp_grid.yaml's cells as the heatmap tests store them (tests/unit/app/heatmap_test
// and tests/integration/heatmap_test): each cell's fate - cell 4 (fp16 O1 128) pruned, 7 (fp16 O2
// 128) diverged, 11 (fp16 O3 1) failed, the others done - and a tune search answered by cell 12
// (bf16 O1 dynamic).
#pragma once

#include <cstdint>
#include <vector>

#include "store/store.h"

namespace amptune::testing {

// Ends run `id` of amp_grid's cell `cell` as the tests' grid has it.
inline void settle_amp_grid_cell(store::Store& store, int64_t id, int cell) {
  if (cell == 4) {
    records::PruneDecisionRow decision;
    decision.run_id = id;
    decision.epoch = 1;
    decision.rule = PruneRule::kAsha;
    decision.metric = "acc1";
    decision.reason = "below the rung";
    store.prune_run(decision);
    return;
  }
  store.finish_run(id,
                   cell == 7    ? records::RunStatus::kDiverged
                   : cell == 11 ? records::RunStatus::kFailed
                                : records::RunStatus::kDone,
                   "", "{}");
}

// The tune search over amp_grid's runs `ids` (in cell order): reference cell 0, start and answer
// cell 12.
inline void add_amp_grid_search(store::Store& store, const std::vector<int64_t>& ids) {
  records::TuneSearchRow search;
  search.sweep_id = store.ensure_sweep("amp_grid", "", "", "");
  search.block_json = "{}";
  search.metric = "acc1";
  search.reference_run_id = ids.at(0);
  search.start_run_id = ids.at(12);
  search = store.ensure_tune_search(search);
  search.status = records::TuneStatus::kAnswered;
  search.answer_run_id = ids.at(12);
  store.finish_tune_search(search);
}

}  // namespace amptune::testing
