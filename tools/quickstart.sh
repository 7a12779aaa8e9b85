#!/usr/bin/env bash
# First run on a fresh machine: dependencies, Release build of the binary, then the quickstart
# sweep (a small ResNet on the real Fashion-MNIST). Running it again continues / skips finished
# cells. Extra arguments go to `amptune run` (e.g. --set schedule.epochs=1).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
BUILD_TARGET=amptune tools/build.sh
build/amptune run experiments/quickstart.yaml "$@"
echo
echo "Results:"
echo "  sqlite3 -header -column results/amptune.sqlite \"select * from run_summary where sweep = 'quickstart'\""
echo "  build/amptune list --sweep quickstart"
