#!/usr/bin/env bash
# Step time of the quickstart model (narrow ResNet-18, Fashion-MNIST, batch 128) under O0,
# O1 emulated fp16, O2 emulated fp16 and O1 native bf16, measured side by side in one process by
# the real trainer (`amptune run`, training steps only, no evaluation, the first SKIP steps left
# out), printed as ms per step and relative to O0. Nothing is kept: the database lives in a temp
# directory.
#   tools/bench-amp.sh [AMPTUNE_BINARY] [STEPS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/amptune}
STEPS=${2:-30}
THREADS=${3:-2}
SKIP=5
source tools/bench-lib.sh
bench_checks bench-amp "$BIN"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
{
  echo "name: bench_amp"
  echo "base:"
  bench_quickstart_base "$STEPS" "$SKIP" "$THREADS"
  cat <<YAML
zip:
  - {amp.opt_level: [O0, O1, O2, O1], amp.dtype: [fp16, fp16, fp16, bf16],
     amp.backend: [auto, emulate, emulate, native]}
YAML
} > "$TMP/bench.yaml"
"$BIN" run "$TMP/bench.yaml" --db "$TMP/bench.sqlite" --quiet >/dev/null
sqlite3 -header -column "$TMP/bench.sqlite" "
  WITH t AS (SELECT r.cell_index, r.opt_level, r.dtype, r.backend,
                    128.0 / e.train_fps_mean * 1000 AS ms
             FROM runs r JOIN epochs e ON e.run_id = r.id)
  SELECT opt_level, dtype, backend, round(ms, 1) AS ms_per_step,
         round(ms / (SELECT ms FROM t WHERE cell_index = 0), 2) AS vs_O0
  FROM t ORDER BY cell_index;"
echo "($STEPS timed steps each after $SKIP warm-up steps, batch 128, $THREADS threads, $(nproc) cores)"
