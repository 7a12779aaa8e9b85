# Sourced by the benchmarks on the quickstart's data (bench-amp.sh, bench-torchscript.sh): the
# checks they share, each a clear message and exit 2.
#   bench_checks NAME BINARY
bench_data=/usr/share/datasets/fashion-mnist
bench_checks() {
  [ -x "$2" ] || { echo "$1: no amptune binary at $2 (build it: tools/build.sh)" >&2; exit 2; }
  [ -d "$bench_data" ] || { echo "$1: $bench_data is missing (apt-get install dataset-fashion-mnist)" >&2; exit 2; }
  command -v sqlite3 >/dev/null || { echo "$1: needs the sqlite3 shell (apt-get install sqlite3)" >&2; exit 2; }
}
