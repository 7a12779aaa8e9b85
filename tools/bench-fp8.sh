#!/usr/bin/env bash
# What FP8 emulation costs per training step: the quickstart model (narrow ResNet-18,
# Fashion-MNIST, batch 128) under O1 emulated bf16 alone and with FP8 (delayed and current
# scaling: every convolution and the Linear take FP8 inputs, weights and output gradients), and
# O0 fp32 alone and with FP8 delayed, measured side by side in one process by the real trainer
# (`amptune run`, training steps only, the first SKIP steps left out), printed as ms per step and
# relative to the O1 bf16 cell. Nothing is kept: the database lives in a temp directory.
#   tools/bench-fp8.sh [AMPTUNE_BINARY] [STEPS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/amptune}
STEPS=${2:-30}
THREADS=${3:-2}
SKIP=5
source tools/bench-lib.sh
bench_checks bench-fp8 "$BIN"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
{
  echo "name: bench_fp8"
  echo "base:"
  bench_quickstart_base "$STEPS" "$SKIP" "$THREADS"
  echo '  amp: {dtype: bf16, backend: emulate}'
  cat <<YAML
zip:
  - {amp.opt_level: [O1, O1, O1, O0, O0], amp.fp8.enabled: [false, true, true, false, true],
     amp.fp8.recipe: [delayed, delayed, current, delayed, delayed]}
YAML
} > "$TMP/bench.yaml"
"$BIN" run "$TMP/bench.yaml" --db "$TMP/bench.sqlite" --quiet >/dev/null
sqlite3 -header -column "$TMP/bench.sqlite" "
  WITH t AS (SELECT r.cell_index, r.opt_level, r.dtype,
                    CASE json_extract(r.config_json, '$.amp.fp8.enabled') WHEN 1
                      THEN 'fp8 ' || json_extract(r.config_json, '$.amp.fp8.recipe')
                      ELSE '-' END AS fp8,
                    128.0 / e.train_fps_mean * 1000 AS ms
             FROM runs r JOIN epochs e ON e.run_id = r.id)
  SELECT opt_level, CASE opt_level WHEN 'O0' THEN 'fp32' ELSE dtype END AS base, fp8,
         round(ms, 1) AS ms_per_step,
         round(ms / (SELECT ms FROM t WHERE cell_index = 0), 2) AS vs_O1_bf16
  FROM t ORDER BY cell_index;"
