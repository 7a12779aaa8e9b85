#!/usr/bin/env bash
# Data-parallel linearity on this machine (docs/PERFORMANCE.md "Data-parallel linearity"), in
# rounds that interleave three measurements of the same cell so that machine noise hits them
# alike: one process alone, two independent single processes at the same time (no
# communication: what this machine gives two processes), and a 2-rank job. Prints each round and
# the medians: linearity = job / (2 x alone), and job / independent pair (amptune's own cost).
#   tools/bench-linearity.sh [ROUNDS] [amptune bench options...]
# Default: the quickstart model, 1 thread per process, no loader thread, 40 timed steps.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
bin=${AMPTUNE:-build/amptune}
opts=("$@")
if ((${#opts[@]} == 0)); then
  opts=(--only optim.lr=0.1 --threads 1 --steps 40 --warmup 5 --set data.workers=0)
fi
sweep=experiments/quickstart.yaml
fps() { awk 'NR == 2 { print $4 }'; }  # img/s column of `bench --nproc N` (one row)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-6s %10s %16s %10s %11s %12s\n' round alone "2 independent" "2-rank" linearity "job/indep"
for r in $(seq "$rounds"); do
  alone=$("$bin" bench "$sweep" "${opts[@]}" --nproc 1 | fps)
  "$bin" bench "$sweep" "${opts[@]}" --nproc 1 | fps >"$tmp/a" &
  pid=$!
  b=$("$bin" bench "$sweep" "${opts[@]}" --nproc 1 | fps)
  wait "$pid"
  pair=$(awk -v a="$(cat "$tmp/a")" -v b="$b" 'BEGIN { print a + b }')
  job=$("$bin" bench "$sweep" "${opts[@]}" --nproc 2 | fps)
  awk -v r="$r" -v s="$alone" -v p="$pair" -v j="$job" 'BEGIN {
    printf "%-6s %10.1f %16.1f %10.1f %10.1f%% %11.1f%%\n", r, s, p, j, 100 * j / (2 * s), 100 * j / p }'
done | tee "$tmp/rounds"
awk 'NR > 0 { s[NR] = $2; p[NR] = $3; j[NR] = $4; l[NR] = $5; q[NR] = $6; n = NR }
  function median(a, n,   i, k, t, b) { for (i = 1; i <= n; i++) b[i] = a[i] + 0;
    for (i = 1; i <= n; i++) for (k = i + 1; k <= n; k++) if (b[k] < b[i]) { t = b[i]; b[i] = b[k]; b[k] = t }
    return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
  END { printf "%-6s %10.1f %16.1f %10.1f %10.1f%% %11.1f%%\n", "median", median(s, n), median(p, n),
        median(j, n), median(l, n), median(q, n) }' "$tmp/rounds"
