"""The table of tools/gpu-bench.sh: reads its results.tsv (one line per side, cell and
repetition: side, mode, cell, rep, exit status, peak device MiB, the run's database or the eager
log) and prints, per mode, each cell's img/s on both sides (median and min-max), the ratio of the
medians, the MFU of each side and the peak device memory; mode P with both loaders alone. Writes
OUT/results.json with the same figures.

  python3 tools/gpu_bench_table.py WORK/results.tsv OUT DRY(0|1) WORKERS CUDNN_KEY
"""
import json
import os
import re
import sqlite3
import statistics
import sys


def amptune_figures(db):
    """img/s (train_fps_elapsed), FLOPs per sample, peak FLOP/s and its precision of the one run
    in `db`; {} when the run did not finish."""
    if not os.path.exists(db):
        return {}
    con = sqlite3.connect(db)
    row = con.execute("SELECT r.id, r.status, r.train_flops_per_sample, r.peak_flops, "
                      "r.peak_precision FROM runs r ORDER BY r.id LIMIT 1").fetchone()
    if not row:
        return {}
    rid, status, flops, peak, precision = row
    fps = con.execute("SELECT value FROM metrics WHERE run_id = ? AND name = 'train_fps_elapsed' "
                      "ORDER BY epoch DESC LIMIT 1", (rid,)).fetchone()
    return {"status": status, "img_per_s": fps[0] if fps else None, "flops": flops,
            "peak": peak, "peak_precision": precision}


def eager_figures(log):
    """The JSON line eager_bench.py printed; {} when none."""
    try:
        for line in open(log):
            if line.startswith("{"):
                return json.loads(line)
    except (OSError, ValueError):
        pass
    return {}


def spread(values):
    v = [x for x in values if x]
    if not v:
        return None, None, None
    return statistics.median(v), min(v), max(v)


def fmt(v, nd=1, unit=""):
    return "-" if v is None else f"{v:.{nd}f}{unit}"


def amptune_loader(out):
    """amptune bench's 'loader img/s' column (its first row)."""
    try:
        lines = open(os.path.join(out, "amptune_loader.log")).read().splitlines()
    except OSError:
        return None
    for i, line in enumerate(lines):
        if "loader img/s" in line and i + 1 < len(lines):
            head = re.split(r"\s{2,}", line.strip())
            row = re.split(r"\s{2,}", lines[i + 1].strip())
            try:
                return float(row[head.index("loader img/s")])
            except (ValueError, IndexError):
                return None
    return None


def collect(tsv):
    cells = {}  # (mode, cell) -> {"amptune": [...], "eager": [...]}
    for line in open(tsv):
        side, mode, cell, rep, rc, mem, where = line.rstrip("\n").split("\t")
        f = amptune_figures(where) if side == "amptune" else eager_figures(where)
        f.update({"rep": int(rep), "exit": int(rc),
                  "peak_mib": None if mem in ("-", "0", "") else float(mem)})
        cells.setdefault((mode, cell), {"amptune": [], "eager": []})[side].append(f)
    return cells


def summarise(cells):
    rows = []
    for (mode, cell), sides in cells.items():
        a = spread([r.get("img_per_s") for r in sides["amptune"]])
        e = spread([r.get("img_per_s") for r in sides["eager"]])
        done = [r for r in sides["amptune"] if r.get("flops") and r.get("peak")]
        flops = done[0]["flops"] if done else None
        peak = done[0]["peak"] if done else None
        mfu = lambda fps: (100 * fps * flops / peak) if fps and flops and peak else None
        mem = lambda side: max([r["peak_mib"] for r in sides[side] if r["peak_mib"]], default=None)
        rows.append({"mode": mode, "cell": cell,
                     "amptune_img_s": a[0], "amptune_min": a[1], "amptune_max": a[2],
                     "eager_img_s": e[0], "eager_min": e[1], "eager_max": e[2],
                     "ratio": a[0] / e[0] if a[0] and e[0] else None,
                     "mfu_amptune": mfu(a[0]), "mfu_eager": mfu(e[0]),
                     "gflop_per_sample": flops / 1e9 if flops else None,
                     "peak_tflops": peak / 1e12 if peak else None,
                     "peak_mib_amptune": mem("amptune"), "peak_mib_eager": mem("eager"),
                     "runs": {k: len(v) for k, v in sides.items()},
                     "failed": [f"{k} rep {r['rep']} exit {r['exit']}" for k, v in sides.items()
                                for r in v if r["exit"] != 0 or not r.get("img_per_s")]})
    return rows


def main(tsv, out, dry, workers, cudnn_key):
    rows = summarise(collect(tsv))
    loaders = {"amptune_img_s": amptune_loader(out),
               "eager_img_s": eager_figures(os.path.join(out, "eager_loader.log")).get(
                   "loader_img_per_s"), "workers": int(workers)}
    head = (f"{'cell':<18}{'amptune img/s (min-max)':>26}{'eager img/s (min-max)':>26}"
            f"{'ratio':>7}{'MFU a':>8}{'MFU e':>8}{'mem a MiB':>11}{'mem e MiB':>11}")
    what = {"S": "mode S: the training step (one resident device batch, no loader)",
            "P": f"mode P: the pipeline (the same JPEGs, {workers} loader workers)"}
    for mode in ("S", "P"):
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        print()
        print(what[mode])
        print(head)
        for r in mine:
            a = f"{fmt(r['amptune_img_s'])} ({fmt(r['amptune_min'])}-{fmt(r['amptune_max'])})"
            e = f"{fmt(r['eager_img_s'])} ({fmt(r['eager_min'])}-{fmt(r['eager_max'])})"
            print(f"{r['cell']:<18}{a:>26}{e:>26}{fmt(r['ratio'], 3):>7}"
                  f"{fmt(r['mfu_amptune'], 1, '%'):>8}{fmt(r['mfu_eager'], 1, '%'):>8}"
                  f"{fmt(r['peak_mib_amptune'], 0):>11}{fmt(r['peak_mib_eager'], 0):>11}")
            if r["failed"]:
                print(f"  failed or without a figure: {', '.join(r['failed'])}")
        if mode == "P":
            print(f"loaders alone (the ceiling of mode P): amptune {fmt(loaders['amptune_img_s'])}"
                  f" img/s ({workers} threads), eager DataLoader {fmt(loaders['eager_img_s'])} "
                  f"img/s ({workers} processes, pinned memory on CUDA)")
    work = next((r for r in rows if r["gflop_per_sample"]), None)
    if work:
        print(f"MFU: img/s x {work['gflop_per_sample']:.3f} GFLOP per trained image (amptune's "
              f"count) / the cell's peak (e.g. {work['peak_tflops']:.1f} TFLOP/s for "
              f"{work['cell']}); memory: the device's peak in use during the process (nvidia-smi)")
    print(f"cuDNN on/off: amptune's key {cudnn_key}, eager's torch.backends.cudnn.benchmark")
    if dry == "1":
        print("dry run on the CPU: the pipeline only, no GPU figures")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"dry_run": dry == "1", "cells": rows, "loaders": loaders}, f, indent=1)
    return 0 if rows and not any(r["failed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
