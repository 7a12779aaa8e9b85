#!/usr/bin/env bash
# amptune against PyTorch eager on identical work, side by side (docs/PERFORMANCE.md "amptune
# versus PyTorch eager"): PAIRS rounds of tools/eager_bench.py then `amptune run` of the same
# cell (one epoch of WARMUP + STEPS training steps, the first WARMUP untimed, then EVAL
# evaluation batches), each a whole process, after one untimed round of all. Two eager peers by
# default, each round running both: "default" (PyTorch's defaults: glibc's malloc, NCHW tensors)
# and "tuned" (as users tune it: tcmalloc preloaded and --channels-last, what amptune does by
# default). Prints, per peer, each round's ratios amptune / eager (training img/s, evaluation
# img/s, start-up seconds) and their medians, and amptune's time breakdown of the last round.
# Nothing is kept: the databases live in a temp dir.
#
#   tools/bench-vs-eager.sh quickstart|resnet50 [PAIRS] [STEPS] [WARMUP] [EVAL] [THREADS]
#
# Environment: PEERS (default "default tuned"; "default" alone runs the old pairs), AMPTUNE
# (binary, default build/amptune), DATA (resnet50's ImageFolder, default
# data/fashion-imagefolder: build/amptune data export-imagefolder --out data/fashion-imagefolder
# --limit 2000), AMPTUNE_SET (extra --set KEY=VALUE words for amptune), AMPTUNE_ENV (VAR=VALUE
# words set for amptune only, e.g. GLIBC_TUNABLES=glibc.malloc.trim_threshold=...), EAGER_ARGS (extra
# arguments of eager_bench.py for the default peer, e.g. --channels-last), EAGER_ENV (VAR=VALUE
# words for the default peer's eager script only, e.g.
# LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4), TUNED_ARGS (default
# --channels-last) and TUNED_ENV (default LD_PRELOAD= Debian's libtcmalloc_minimal.so.4) for the
# tuned peer, PY (default /usr/bin/python3, which has Debian's python3-torch and
# python3-torchvision).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKLOAD=${1:?usage: tools/bench-vs-eager.sh quickstart|resnet50 [PAIRS] [STEPS] [WARMUP] [EVAL] [THREADS]}
PAIRS=${2:-3}
THREADS=${6:-2}
BIN=${AMPTUNE:-build/amptune}
PY=${PY:-/usr/bin/python3}
case "$WORKLOAD" in
  quickstart) STEPS=${3:-60}; WARMUP=${4:-5}; EVAL=${5:-10}; EVAL_BATCH=500 ;;
  resnet50) STEPS=${3:-15}; WARMUP=${4:-3}; EVAL=${5:-10}; EVAL_BATCH=8
            DATA=${DATA:-data/fashion-imagefolder}
            [ -d "$DATA/train" ] && [ -d "$DATA/val" ] || {
              echo "bench-vs-eager: $DATA/{train,val} missing: build/amptune data export-imagefolder --out $DATA --limit 2000" >&2
              exit 2; } ;;
  *) echo "bench-vs-eager: workload must be quickstart or resnet50, got '$WORKLOAD'" >&2; exit 2 ;;
esac
[ -x "$BIN" ] || { echo "bench-vs-eager: no amptune binary at $BIN (tools/build.sh)" >&2; exit 2; }
"$PY" -c 'import torch' 2>/dev/null || { echo "bench-vs-eager: $PY has no torch (apt-get install python3-torch python3-torchvision)" >&2; exit 2; }
PEERS=${PEERS:-default tuned}
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
TCMALLOC=/usr/lib/$MULTIARCH/libtcmalloc_minimal.so.4
TUNED_ARGS=${TUNED_ARGS:---channels-last}
TUNED_ENV=${TUNED_ENV:-LD_PRELOAD=$TCMALLOC}
for peer in $PEERS; do
  case "$peer" in
    default) ;;
    tuned) [ "$TUNED_ENV" != "LD_PRELOAD=$TCMALLOC" ] || [ -f "$TCMALLOC" ] || {
             echo "bench-vs-eager: $TCMALLOC missing for the tuned peer (apt-get install libtcmalloc-minimal4)" >&2
             exit 2; } ;;
    *) echo "bench-vs-eager: PEERS takes default and tuned, got '$peer'" >&2; exit 2 ;;
  esac
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ "$WORKLOAD" = quickstart ]; then
  SWEEP=experiments/quickstart.yaml
  ONLY=(--only optim.lr=0.1)
else
  SWEEP=$TMP/resnet50.yaml
  ONLY=()
  cat > "$SWEEP" <<YAML
name: bench_resnet50
base:
  model: {name: resnet50, num_classes: 10, in_channels: 3}
  data: {format: imagefolder, root: $(realpath "$DATA"), image_size: 224, resize_size: 256,
         batch_size: 8, eval_batch_size: $EVAL_BATCH, workers: 1}
  optim: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0005}
  schedule: {lr_policy: cosine}
YAML
fi

# One amptune round: prints the database path.
amptune_round() {
  local db=$TMP/run$1.sqlite
  # shellcheck disable=SC2086
  env ${AMPTUNE_ENV:-} "$BIN" run "$SWEEP" "${ONLY[@]}" --db "$db" --quiet \
    --set schedule.epochs=1 --set schedule.training_step_per_epoch=$((STEPS + WARMUP)) \
    --set schedule.skip_steps="$WARMUP" --set schedule.eval_step_per_epoch="$EVAL" \
    --set threads="$THREADS" --set checkpoint.dir="$TMP/ckpt$1" ${AMPTUNE_SET:-} >/dev/null 2>"$TMP/amptune$1.log" ||
    { cat "$TMP/amptune$1.log" >&2; exit 1; }
  echo "$db"
}
# One eager round of peer $2 (default | tuned).
eager_round() {
  local env_words=${EAGER_ENV:-} args=${EAGER_ARGS:-}
  if [ "$2" = tuned ]; then env_words=$TUNED_ENV args=$TUNED_ARGS; fi
  # shellcheck disable=SC2086
  env $env_words "$PY" tools/eager_bench.py --workload "$WORKLOAD" --steps "$STEPS" --warmup "$WARMUP" \
    --threads "$THREADS" --eval-batches "$EVAL" --eval-batch "$EVAL_BATCH" \
    ${DATA:+--data "$DATA"} --json $args > "$TMP/eager-$2$1.json"
}

echo "warm-up round (untimed)..." >&2
for peer in $PEERS; do eager_round 0 "$peer"; done
amptune_round 0 >/dev/null
for i in $(seq 1 "$PAIRS"); do
  echo "round $i/$PAIRS: eager ($PEERS), then amptune" >&2
  for peer in $PEERS; do eager_round "$i" "$peer"; done
  amptune_round "$i" >/dev/null
done

"$PY" - "$TMP" "$PAIRS" "$EVAL" "$EVAL_BATCH" "$PEERS" <<'PY'
import json, sqlite3, statistics, sys
tmp, pairs, eval_batches, eval_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
peers = sys.argv[5].split()
cols = ["data_wait_seconds", "forward_seconds", "backward_seconds", "optimizer_seconds",
        "eval_seconds", "checkpoint_seconds", "db_seconds"]
f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"
for peer in peers:
    rows, ratios = [], {"train": [], "eval": [], "startup": []}
    for i in range(1, pairs + 1):
        e = json.load(open(f"{tmp}/eager-{peer}{i}.json"))
        db = sqlite3.connect(f"{tmp}/run{i}.sqlite")
        r = db.execute("SELECT train_fps_mean, epoch_seconds, startup_seconds, "
                       + ", ".join(cols) + " FROM epochs").fetchone()
        images = db.execute("SELECT value FROM metrics WHERE name = 'train_images'").fetchone()
        a_train, epoch_s, a_start = r[0], r[1], r[2]
        t = dict(zip(cols, r[3:]))
        a_eval = eval_batches * eval_batch / t["eval_seconds"] if eval_batches else None
        ratios["train"].append(a_train / e["img_per_s"])
        if a_eval and e["eval_img_per_s"]:
            ratios["eval"].append(a_eval / e["eval_img_per_s"])
        ratios["startup"].append(a_start / e["startup_s"])
        wall = epoch_s + (t["checkpoint_seconds"] or 0) + (t["db_seconds"] or 0)
        compute = t["forward_seconds"] + t["backward_seconds"] + t["optimizer_seconds"]
        rows.append((i, e["img_per_s"], a_train, ratios["train"][-1], e["eval_img_per_s"], a_eval,
                     ratios["eval"][-1] if ratios["eval"] else None, e["startup_s"], a_start,
                     ratios["startup"][-1], t, wall, compute))
    what = "PyTorch's defaults" if peer == "default" else "tuned: tcmalloc + channels_last"
    print(f"eager peer '{peer}' ({what}):")
    print(f"{'pair':>4} {'eager img/s':>11} {'amptune':>8} {'ratio':>6} | {'eager eval':>10} "
          f"{'amptune':>8} {'ratio':>6} | {'eager start s':>13} {'amptune':>8} {'ratio':>6}")
    for (i, et, at, rt, ee, ae, re_, es, as_, rs, _, _, _) in rows:
        print(f"{i:>4} {f(et):>11} {f(at):>8} {f(rt,3):>6} | {f(ee):>10} {f(ae):>8} {f(re_,3):>6} | "
              f"{f(es,2):>13} {f(as_,2):>8} {f(rs,3):>6}")
    med = {k: (statistics.median(v) if v else None) for k, v in ratios.items()}
    print(f"median ratio amptune/eager ({peer}): training {f(med['train'],3)}, evaluation "
          f"{f(med['eval'],3)}, start-up {f(med['startup'],3)} (start-up: lower is better)")
t, wall, compute = rows[-1][10], rows[-1][11], rows[-1][12]
print("amptune time breakdown of the last pair (s): " +
      ", ".join(f"{c.replace('_seconds','')} {f(t[c],3)}" for c in cols) +
      f"; wall {wall:.2f}. Of the wall time without evaluation: forward+backward+optimizer "
      f"{100*compute/(wall-t['eval_seconds']):.1f} %, runner overhead (data wait, checkpoint, db "
      f"and the rest) {100*(wall-compute-t['eval_seconds'])/(wall-t['eval_seconds']):.2f} %")
PY
echo "($WORKLOAD: $STEPS timed training steps after $WARMUP, $EVAL evaluation batches of $EVAL_BATCH, $THREADS threads, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
