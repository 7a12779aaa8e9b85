#!/usr/bin/env bash
# Two amptune builds on the same quickstart cell, side by side (docs/PERFORMANCE.md "Two builds
# side by side"): PAIRS rounds of `A run` then `B run` of one epoch (WARMUP + STEPS training
# steps, the first WARMUP untimed, EVAL evaluation batches), each a whole process, after one
# untimed round of both. Prints each pair's training img/s (train_fps_mean) and evaluation img/s
# and the ratios B / A with their medians. Nothing is kept: the databases live in a temp dir.
#
#   tools/bench-binaries.sh A B [PAIRS] [STEPS] [WARMUP] [EVAL] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: tools/bench-binaries.sh A B [PAIRS] [STEPS] [WARMUP] [EVAL] [THREADS]}
B=${2:?usage: tools/bench-binaries.sh A B [PAIRS] [STEPS] [WARMUP] [EVAL] [THREADS]}
PAIRS=${3:-3}
STEPS=${4:-60}
WARMUP=${5:-5}
EVAL=${6:-10}
THREADS=${7:-2}
for bin in "$A" "$B"; do
  [ -x "$bin" ] || { echo "bench-binaries: no amptune binary at $bin" >&2; exit 2; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

round() {  # round BINARY TAG
  "$1" run experiments/quickstart.yaml --only optim.lr=0.1 --db "$TMP/$2.sqlite" --quiet \
    --set schedule.epochs=1 --set schedule.training_step_per_epoch=$((STEPS + WARMUP)) \
    --set schedule.skip_steps="$WARMUP" --set schedule.eval_step_per_epoch="$EVAL" \
    --set threads="$THREADS" --set checkpoint.dir="$TMP/ckpt-$2" >/dev/null 2>"$TMP/$2.log" ||
    { cat "$TMP/$2.log" >&2; exit 1; }
}

echo "warm-up round (untimed)..." >&2
round "$A" a0
round "$B" b0
for i in $(seq 1 "$PAIRS"); do
  echo "pair $i/$PAIRS: A, then B" >&2
  round "$A" "a$i"
  round "$B" "b$i"
done

/usr/bin/python3 - "$TMP" "$PAIRS" "$EVAL" <<'PY'
import sqlite3, statistics, sys
tmp, pairs, eval_batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def figures(tag):
    db = sqlite3.connect(f"{tmp}/{tag}.sqlite")
    fps, eval_s = db.execute("SELECT train_fps_mean, eval_seconds FROM epochs").fetchone()
    return fps, (eval_batches * 500 / eval_s if eval_batches and eval_s else None)
train, evals = [], []
print(f"{'pair':>4} {'A img/s':>9} {'B img/s':>9} {'B/A':>6} | {'A eval':>8} {'B eval':>8} {'B/A':>6}")
for i in range(1, pairs + 1):
    (at, ae), (bt, be) = figures(f"a{i}"), figures(f"b{i}")
    train.append(bt / at)
    if ae and be:
        evals.append(be / ae)
    print(f"{i:>4} {at:>9.1f} {bt:>9.1f} {train[-1]:>6.3f} | {ae or 0:>8.1f} {be or 0:>8.1f} "
          f"{(be / ae if ae and be else 0):>6.3f}")
print(f"median B/A: training {statistics.median(train):.3f}"
      + (f", evaluation {statistics.median(evals):.3f}" if evals else ""))
PY
echo "($STEPS timed training steps after $WARMUP, $EVAL evaluation batches of 500, $THREADS threads, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
