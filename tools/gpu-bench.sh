#!/usr/bin/env bash
# ResNet-50 like for like on one GPU: amptune against PyTorch eager with the same recipe, cell by
# cell (docs/PERFORMANCE.md "GPU benchmark (like for like)"). Prints the table and writes it, with
# results.json and every log, to OUTDIR.
#
#   tools/gpu-bench.sh [--amptune BIN] [--modes S,P] [--reps N] OUTDIR
#   tools/gpu-bench.sh --cpu-dry-run [--amptune BIN] OUTDIR   the same pipeline on this CPU: a
#                      tiny model (the quickstart's ResNet-18 width 0.25, 3 channels, 32 px), batch
#                      8, 1 + 3 steps, bf16 cells for fp16 ones (the CPU has no fp16 kernels):
#                      proves the script, measures nothing
#
# Mode S (the training step): data.format synthetic on amptune's side, --synthetic on eager's:
# one batch of random input made once on the device in the run's layout and reused. Mode P (the
# pipeline): the same JPEG folder (`amptune data export-imagefolder` of Fashion-MNIST, resized to
# 224 by the training transform) read by amptune's loader with WORKERS threads and by a PyTorch
# DataLoader with WORKERS processes, pinned memory and persistent workers; each loader alone is
# timed beside (its ceiling). Both sides: ResNet-50 v1.5, batch 256, SGD momentum 0.9, weight
# decay 1e-4, no Nesterov, constant lr 0.1, dynamic loss scale from 65536 where the cell scales.
# A cell is PRECISION:LAYOUT:CUDNN, PRECISION O0 | O1-fp16 | O1-bf16 | O2-fp16 (| O2-bf16), LAYOUT
# cl (channels_last) | nchw, CUDNN on | off (cuDNN's autotuner: amptune's key cudnn_benchmark,
# eager's torch.backends.cudnn.benchmark). Each cell runs amptune then eager, REPS times (A B A B):
# median and spread (min-max) of img/s = images / elapsed over STEPS steps after WARMUP (amptune:
# its metric train_fps_elapsed; eager: between two synchronisations). MFU = img/s x amptune's
# recorded training FLOPs per sample / the peak of the cell's precision amptune recorded for the
# device (train/peak.h). Peak memory: the most device memory in use during the process (nvidia-smi,
# every process; the GPU runs nothing else), the same gauge for both sides.
#
# Environment: PYTHON (python3 with torch and torchvision; the dry run: /usr/bin/python3),
# WORKERS (loader workers, default nproc), REPS (2), STEPS and WARMUP (24 and 8; dry: 3 and 1),
# S_CELLS and P_CELLS (space-separated cells; defaults below), IDX (the Fashion-MNIST IDX folder
# the JPEGs are made from, default /usr/share/datasets/fashion-mnist). Sized for about 6 minutes
# on one H100 / H200 with the defaults (an estimate: 10 cells x 2 sides x 2 repetitions, each a
# fresh process, not yet timed on a GPU; the script prints its elapsed time and the per-cell
# progress); the build is not included.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

dry=0 amptune_bin=$repo/build/amptune modes=S,P
while [ $# -gt 1 ]; do
  case "$1" in
    --cpu-dry-run) dry=1; shift ;;
    --amptune) amptune_bin=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || { sed -n '2,35p' "$0"; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
work=$out/work
rm -rf "$work" && mkdir -p "$work"
table=$out/table.txt
: >"$table"
fail() { echo "gpu-bench: $*" >&2; exit 1; }
[ -x "$amptune_bin" ] || fail "no amptune binary at $amptune_bin (tools/build.sh, or --amptune BIN)"
if ((dry)); then PYTHON=${PYTHON:-/usr/bin/python3}; else PYTHON=${PYTHON:-python3}; fi
"$PYTHON" -c 'import torch, torchvision' 2>/dev/null ||
  fail "$PYTHON cannot import torch and torchvision (set PYTHON=...)"
REPS=${REPS:-2}
if ((dry)); then WORKERS=${WORKERS:-2}; else WORKERS=${WORKERS:-$(nproc)}; fi
IDX=${IDX:-/usr/share/datasets/fashion-mnist}
[ "$REPS" -ge 1 ] 2>/dev/null || fail "--reps / REPS must be a number >= 1, got '$REPS'"

if ((dry)); then
  device=cpu backend=auto arch=tiny image=32 batch=8 STEPS=${STEPS:-3} WARMUP=${WARMUP:-1}
  model="{name: resnet18, in_channels: 3, width: 0.25, small_input: true"
  # bf16 in place of fp16 where this CPU's PyTorch runs bf16 convolutions (oneDNN refuses them
  # without AVX-512, or under ONEDNN_MAX_CPU_ISA=AVX2); fp32 cells otherwise.
  if "$PYTHON" -c 'import torch; torch.nn.functional.conv2d(torch.ones(1, 3, 8, 8).bfloat16(),
      torch.ones(4, 3, 3, 3).bfloat16())' 2>/dev/null; then
    S_CELLS=${S_CELLS:-"O0:nchw:off O1-bf16:cl:off O2-bf16:cl:off"}
    P_CELLS=${P_CELLS:-"O2-bf16:cl:off"}
  else
    echo "gpu-bench: $PYTHON runs no bf16 convolution on this CPU: the dry run's cells are fp32" >&2
    S_CELLS=${S_CELLS:-"O0:nchw:off O0:cl:off"}
    P_CELLS=${P_CELLS:-"O0:cl:off"}
  fi
  jpegs=64
else
  "$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
    fail "$PYTHON's torch sees no CUDA device"
  device=cuda backend=native arch=resnet50 image=224 batch=256
  STEPS=${STEPS:-24} WARMUP=${WARMUP:-8}
  model="{name: resnet50, in_channels: 3"
  s_cells="O1-fp16:cl:on O1-bf16:cl:on O2-fp16:cl:on O1-fp16:nchw:on O2-fp16:nchw:on"
  S_CELLS=${S_CELLS:-"$s_cells O1-fp16:cl:off O2-fp16:cl:off"}
  P_CELLS=${P_CELLS:-"O1-fp16:cl:on O1-bf16:cl:on O2-fp16:cl:on"}
  jpegs=$(((STEPS + WARMUP) * batch))
fi
# amptune's cuDNN autotuner key (schemas/config.yaml).
cudnn_key=cudnn_benchmark

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  host: $(hostname)" \
    "mode: $( ((dry)) && echo cpu-dry-run || echo gpu)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
    echo "nvidia-smi: none"
  "$PYTHON" -c 'import torch, torchvision; print("torch", torch.__version__,
    "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
    "torchvision", torchvision.__version__)'
  "$amptune_bin" version 2>/dev/null | sed -n 1p || true
  echo "amptune: $amptune_bin  cudnn key: ${cudnn_key:-none: amptune runs at the LibTorch default}"
  echo "cells: S [$S_CELLS] P [$P_CELLS]  reps $REPS  steps $WARMUP + $STEPS" \
    " batch $batch  workers $WORKERS"
} | tee "$out/env.txt"

# ---- the device memory gauge -----------------------------------------------------------------
# gauge LOG CMD...: runs CMD (stdout to LOG, stderr to LOG.err) while sampling the device memory
# in use every 0.2 s; prints the peak in MiB ("-" without nvidia-smi). Returns CMD's status.
gauge() {
  local log=$1 peak=$work/peak.$$ rc=0
  shift
  echo 0 >"$peak"
  "$@" >"$log" 2>"$log.err" &
  local pid=$!
  if command -v nvidia-smi >/dev/null && ! ((dry)); then
    while kill -0 "$pid" 2>/dev/null; do
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null |
        awk -v f="$peak" 'NR == 1 { getline p < f; close(f); if ($1 + 0 > p + 0) print $1 > f }'
      sleep 0.2
    done
  fi
  wait "$pid" || rc=$?
  if command -v nvidia-smi >/dev/null && ! ((dry)); then cat "$peak"; else echo -; fi
  return $rc
}

# ---- the two sides of one cell ---------------------------------------------------------------
# amptune_sets CELL: the --set words of a cell.
amptune_sets() {
  local precision=${1%%:*} rest=${1#*:}
  local layout=${rest%%:*} cudnn=${rest#*:}
  local level=${precision%%-*} dtype=${precision#*-}
  [ "$level" = O0 ] && dtype=fp16
  local scale=dynamic
  [ "$dtype" = bf16 ] && scale=1.0  # as eager's bf16 autocast: no scaler
  echo "--set amp.opt_level=$level --set amp.dtype=$dtype --set amp.loss_scale=$scale"
  echo "--set amp.backend=$( [ "$level" = O0 ] && echo auto || echo "$backend")"
  echo "--set model.memory_format=$( [ "$layout" = cl ] && echo channels_last || echo contiguous)"
  if [ -n "$cudnn_key" ]; then
    echo "--set $cudnn_key=$( [ "$cudnn" = on ] && echo true || echo false)"
  fi
}

# eager_args CELL: eager_bench.py's arguments of a cell.
eager_args() {
  local precision=${1%%:*} rest=${1#*:}
  local layout=${rest%%:*} cudnn=${rest#*:}
  echo "--precision $precision"
  [ "$layout" = cl ] && echo "--channels-last"
  [ "$cudnn" = on ] && echo "--cudnn-benchmark"
  true
}

# sweep MODE: the sweep file of a mode (one cell; the cell's settings come as --set words).
sweep() {
  local f=$work/mode_$1.yaml data classes
  if [ "$1" = S ]; then
    classes=1000
    data="{format: synthetic, image_size: $image, synthetic_samples: $(((STEPS + WARMUP) * batch)),"
    data+=" batch_size: $batch}"
  else
    classes=10
    data="{format: imagefolder, root: $work/jpeg, image_size: $image,"
    data+=" resize_size: $((image * 8 / 7)),"
    data+=" batch_size: $batch, workers: $WORKERS, prefetch: 8}"
  fi
  cat >"$f" <<EOF
name: gpu_bench_$1
base:
  model: $model, num_classes: $classes}
  data: $data
  optim: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0.0001}
  schedule: {epochs: 1, warmup_epochs: 0, training_step_per_epoch: $((STEPS + WARMUP)),
             skip_steps: $WARMUP, eval_step_per_epoch: 0}
  device: $device
  threads: 0
EOF
  echo "$f"
}

# one_cell MODE CELL REP: amptune, then eager; one line of results.tsv each.
one_cell() {
  local mode=$1 cell=$2 rep=$3 tag mem rc=0
  tag=$mode.$(echo "$cell" | tr : _).$rep
  local db=$work/$tag.sqlite
  # shellcheck disable=SC2046  # the --set words split on purpose
  mem=$(gauge "$out/amptune.$tag.log" "$amptune_bin" run "$(sweep "$mode")" --db "$db" \
    --no-progress --set "checkpoint.dir=$work/ckpt.$tag" $(amptune_sets "$cell")) || rc=$?
  rm -rf "$work/ckpt.$tag"
  printf 'amptune\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$cell" "$rep" "$rc" "$mem" "$db" \
    >>"$work/results.tsv"
  rc=0
  local data_args=(--synthetic)
  [ "$mode" = P ] && data_args=(--data "$work/jpeg" --workers "$WORKERS")
  # shellcheck disable=SC2046
  mem=$(gauge "$out/eager.$tag.log" "$PYTHON" "$repo/tools/eager_bench.py" --workload matched \
    --arch "$arch" --device "$device" --image-size "$image" --batch "$batch" --classes \
    "$( [ "$mode" = S ] && echo 1000 || echo 10)" --steps "$STEPS" --warmup "$WARMUP" \
    --threads "$(nproc)" "${data_args[@]}" $(eager_args "$cell") --json) || rc=$?
  printf 'eager\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$cell" "$rep" "$rc" "$mem" \
    "$out/eager.$tag.log" >>"$work/results.tsv"
  echo "gpu-bench: $mode $cell rep $rep done at $SECONDS s" >&2
}

: >"$work/results.tsv"
if [[ $modes == *P* ]]; then
  "$amptune_bin" data export-imagefolder --idx "$IDX" --out "$work/jpeg" --limit "$jpegs" \
    >"$out/export.log" 2>&1 || fail "the JPEG export failed: $out/export.log"
  # The loaders alone (mode P's ceilings): amptune bench's loader figure, eager's DataLoader.
  "$amptune_bin" bench "$(sweep P)" --steps "$STEPS" --warmup "$WARMUP" \
    >"$out/amptune_loader.log" 2>&1 ||
    echo "gpu-bench: amptune bench failed ($out/amptune_loader.log)" >&2
  "$PYTHON" "$repo/tools/eager_bench.py" --workload matched --loader-only --device "$device" \
    --image-size "$image" --batch "$batch" --steps "$STEPS" --warmup "$WARMUP" \
    --data "$work/jpeg" --workers "$WORKERS" --json >"$out/eager_loader.log" 2>&1 ||
    echo "gpu-bench: the eager loader failed ($out/eager_loader.log)" >&2
fi
for rep in $(seq 1 "$REPS"); do
  if [[ $modes == *S* ]]; then for cell in $S_CELLS; do one_cell S "$cell" "$rep"; done; fi
  if [[ $modes == *P* ]]; then for cell in $P_CELLS; do one_cell P "$cell" "$rep"; done; fi
done

status=0
"$PYTHON" "$repo/tools/gpu_bench_table.py" "$work/results.tsv" "$out" "$dry" "$WORKERS" \
  "$cudnn_key" | tee -a "$table" || status=$?
echo "gpu-bench: $SECONDS s in all; the table in $table, results.json and logs in $out" |
  tee -a "$table"
exit $status
