#!/usr/bin/env bash
# ctest gpu_bench_dry_run (label slow): tools/gpu-bench.sh --cpu-dry-run end to end on this CPU.
# Checks the table's structure (both modes, a row per cell with both sides' img/s, the ratio, the
# loaders' line) and results.json (every cell measured by both sides, every repetition, work
# counted). Skipped (77) without Fashion-MNIST or a python3 with torch and torchvision.
#   tests/integration/gpu_bench_test.sh AMPTUNE_BINARY SCRATCH_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
amptune=${1:?usage: gpu_bench_test.sh AMPTUNE_BINARY SCRATCH_DIR}
out=${2:?usage: gpu_bench_test.sh AMPTUNE_BINARY SCRATCH_DIR}
python=${PYTHON:-/usr/bin/python3}
[ -d /usr/share/datasets/fashion-mnist ] || { echo "skipped: no Fashion-MNIST"; exit 77; }
"$python" -c 'import torch, torchvision' 2>/dev/null || { echo "skipped: no torchvision"; exit 77; }
rm -rf "$out"
mkdir -p "$out"
rc=0
PYTHON=$python "$repo/tools/gpu-bench.sh" --cpu-dry-run --amptune "$amptune" "$out" || rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: gpu-bench.sh --cpu-dry-run exited $rc"; exit 1; }
"$python" - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
table = open(f"{out}/table.txt").read()
res = json.load(open(f"{out}/results.json"))
errors = []
def check(ok, what):
    if not ok:
        errors.append(what)
num = r"\d+\.\d"
# The cells the run chose (bf16 ones where this CPU's PyTorch runs bf16 convolutions), as its
# env.txt says: "cells: S [A B C] P [D]  reps ...".
chosen = re.search(r"cells: S \[([^]]*)\] P \[([^]]*)\]", open(f"{out}/env.txt").read())
check(chosen, "env.txt names no cells")
cells = {"S": chosen.group(1).split(), "P": chosen.group(2).split()} if chosen else {}
check(sum(len(v) for v in cells.values()) >= 3, f"too few cells: {cells}")
blocks = re.split(r"\nmode ", "\n" + table)
for mode, names in cells.items():
    block = next((b for b in blocks if b.startswith(mode + ":")), "")
    check(block, f"no 'mode {mode}:' block")
    check(re.search(r"cell\s+amptune img/s \(min-max\)\s+eager img/s \(min-max\)\s+ratio", block),
          f"mode {mode}: no header line")
    for name in names:
        row = re.search(rf"^{re.escape(name)}\s+({num}) \(({num})-({num})\)\s+({num}) "
                        rf"\(({num})-({num})\)\s+(\d+\.\d+)", block, re.M)
        check(row, f"mode {mode}: no row with both sides' figures for {name}")
        if row:
            a, amin, amax, e, emin, emax = (float(row.group(i)) for i in range(1, 7))
            check(amin <= a <= amax and emin <= e <= emax, f"{mode} {name}: median outside min-max")
            c = next((c for c in res["cells"] if c["mode"] == mode and c["cell"] == name), {})
            ratio = c.get("ratio")
            check(ratio and row.group(7) == f"{ratio:.3f}", f"{mode} {name}: ratio shown")
            check(ratio and abs(ratio - c["amptune_img_s"] / c["eager_img_s"]) < 1e-9 * ratio,
                  f"{mode} {name}: ratio of the medians")
            check(row.group(1) == f"{c.get('amptune_img_s', 0):.1f}", f"{mode} {name}: amptune")
            check(row.group(4) == f"{c.get('eager_img_s', 0):.1f}", f"{mode} {name}: eager")
    loaders = rf"loaders alone .*: amptune {num} img/s .*DataLoader {num} img/s"
    check(mode != "P" or re.search(loaders, block), "mode P: no loaders' line with two figures")
check("dry run on the CPU" in table, "the table does not say it is a dry run")
check(re.search(r"gpu-bench: \d+ s in all", table), "no elapsed time")
check(res["dry_run"] is True, "results.json: dry_run")
n = sum(len(v) for v in cells.values())
check(len(res["cells"]) == n, f"results.json: {len(res['cells'])} cells, expected {n}")
for c in res["cells"]:
    what = f"results.json {c['mode']} {c['cell']}"
    check(c["amptune_img_s"] and c["amptune_img_s"] > 0, what + ": amptune img/s")
    check(c["eager_img_s"] and c["eager_img_s"] > 0, what + ": eager img/s")
    check(c["runs"] == {"amptune": 2, "eager": 2}, what + f": runs {c['runs']}")
    check(not c["failed"], what + f": failed {c['failed']}")
    check(c["gflop_per_sample"] and c["gflop_per_sample"] > 0, what + ": no work counted")
    check(c["mfu_amptune"] and c["mfu_eager"], what + ": no MFU")
check(res["loaders"]["amptune_img_s"] and res["loaders"]["eager_img_s"], "results.json: loaders")
for e in errors:
    print("FAIL:", e)
if errors:
    print(table)
sys.exit(1 if errors else 0)
PY
echo "gpu-bench dry run: table and results checked"
