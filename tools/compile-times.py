#!/usr/bin/env python3
"""CPU seconds (user time) to compile source files with the build's own flags, from
BUILD/compile_commands.json (docs/PERFORMANCE.md "Build time"). Each file is compiled ROUNDS
times into a scratch object; prints the median per file and the sum.

  tools/compile-times.py [--build build] [--rounds 1] [--no-pch] src/train/trainer.cpp ...

--no-pch drops the precompiled torch header (-include .../cmake_pch.hxx) from the command: what a
file costs without it. --root DIR compiles DIR/<file> with the same flags and -I DIR/src first
(another checkout of the tree, e.g. an older commit: git worktree add --detach /tmp/old REV).
"""
import argparse, json, os, resource, shlex, statistics, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("files", nargs="+")
ap.add_argument("--build", default="build")
ap.add_argument("--rounds", type=int, default=1)
ap.add_argument("--no-pch", action="store_true")
ap.add_argument("--root", default=None)
a = ap.parse_args()
here = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
commands = {os.path.realpath(e["file"]): e for e in json.load(open(os.path.join(here, a.build, "compile_commands.json")))}
total = 0.0
with tempfile.TemporaryDirectory() as tmp:
    for f in a.files:
        entry = commands.get(os.path.realpath(os.path.join(here, f)))
        if not entry:
            sys.exit(f"compile-times: {f} is not in {a.build}/compile_commands.json (a file of the build?)")
        argv = shlex.split(entry["command"])
        out, src = [], os.path.join(a.root, f) if a.root else entry["file"]
        skip = 0
        for i, w in enumerate(argv):
            if skip:
                skip -= 1
                continue
            if a.no_pch and w == "-include" and argv[i + 1].endswith("cmake_pch.hxx"):
                skip = 1
                continue
            if w in ("-o", "-c"):
                skip = 1
                continue
            if w in ("-Winvalid-pch",) and a.no_pch:
                continue
            out.append(w)
        if a.root:
            out.insert(1, "-I" + os.path.join(a.root, "src"))
        times = []
        for _ in range(a.rounds):
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
            subprocess.run(out + ["-o", os.path.join(tmp, "x.o"), "-c", src], check=True,
                           cwd=entry["directory"])
            times.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before)
        t = statistics.median(times)
        total += t
        print(f"{t:7.2f} s  {f}")
print(f"{total:7.2f} s  total ({len(a.files)} files, median of {a.rounds}, load average {os.getloadavg()[0]:.1f})")
