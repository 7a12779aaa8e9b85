#!/usr/bin/env bash
# Training images/s of the quickstart's narrow ResNet-18 as amptune's built-in resnet18 and as
# the same network from torchvision's code scripted to TorchScript (model.name torchscript), under
# O0 and emulated fp16 O1, measured by the real trainer in one sweep whose cells alternate
# (built-in, scripted, built-in, scripted ...) so that machine noise hits both alike; printed per
# cell and as the scripted / built-in ratio of the medians. Nothing is kept.
#   tools/bench-torchscript.sh [AMPTUNE_BINARY] [STEPS] [ROUNDS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/amptune}
STEPS=${2:-30}
ROUNDS=${3:-3}
THREADS=${4:-2}
SKIP=5
source tools/bench-lib.sh
DATA=$bench_data
bench_checks bench-torchscript "$BIN"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 - "$TMP/resnet18.pt" <<'PY'
import sys, torch
sys.path.insert(0, "tools")
from make_model_fixtures import NarrowResNet
from torchvision.models.resnet import BasicBlock
from export_torchscript import export_model
net = NarrowResNet(BasicBlock, [2, 2, 2, 2], 0.25, 10, 1, True)
export_model(net, sys.argv[1], verbose=False)
PY
{
  cat <<YAML
name: bench_torchscript
base:
  model: {num_classes: 10, in_channels: 1, width: 0.25, small_input: true, path: $TMP/resnet18.pt}
  data: {format: idx, root: $DATA, train_split: train, val_split: t10k, mean: [0.286],
         std: [0.353], batch_size: 128, workers: 1}
  optim: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0005}
  schedule: {epochs: 1, training_step_per_epoch: $((STEPS + SKIP)), eval_step_per_epoch: 0,
             skip_steps: $SKIP}
  threads: $THREADS
zip:
YAML
  names="" levels="" backends="" seeds=""
  for ((r = 0; r < ROUNDS; r++)); do
    for level in O0 O1; do
      for model in resnet18 torchscript; do
        names+="$model, "; levels+="$level, "; seeds+="$r, "
        [ "$level" = O0 ] && backends+="auto, " || backends+="emulate, "
      done
    done
  done
  echo "  - {model.name: [${names%, }], amp.opt_level: [${levels%, }],"
  echo "     amp.backend: [${backends%, }], seed: [${seeds%, }]}"
} > "$TMP/bench.yaml"
"$BIN" run "$TMP/bench.yaml" --db "$TMP/bench.sqlite" --quiet >/dev/null
sqlite3 -header -column "$TMP/bench.sqlite" "
  SELECT r.opt_level, r.model, COUNT(*) AS cells,
         group_concat(CAST(round(e.train_fps_mean) AS INT), ' ') AS img_per_s
  FROM runs r JOIN epochs e ON e.run_id = r.id
  GROUP BY r.opt_level, r.model ORDER BY r.opt_level, r.model;"
echo "($STEPS timed steps per cell after $SKIP warm-up steps, batch 128, $THREADS threads, $(nproc) cores; medians: compare the middle values)"
