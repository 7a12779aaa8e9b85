# Sourced by the benchmarks on the quickstart's data (bench-amp.sh, bench-fp8.sh,
# bench-torchscript.sh): the checks they share, each a clear message and exit 2, and the
# quickstart cell's base the step benchmarks time.
#   bench_checks NAME BINARY
#   bench_quickstart_base STEPS SKIP THREADS   prints the `base:` lines of the sweep
bench_data=/usr/share/datasets/fashion-mnist
bench_checks() {
  [ -x "$2" ] || { echo "$1: no amptune binary at $2 (build it: tools/build.sh)" >&2; exit 2; }
  [ -d "$bench_data" ] || { echo "$1: $bench_data is missing (apt-get install dataset-fashion-mnist)" >&2; exit 2; }
  command -v sqlite3 >/dev/null || { echo "$1: needs the sqlite3 shell (apt-get install sqlite3)" >&2; exit 2; }
}
# The quickstart model (narrow ResNet-18, Fashion-MNIST, batch 128, SGD), STEPS + SKIP training
# steps and no evaluation, as the lines of a sweep's `base:` (two-space indented).
bench_quickstart_base() {
  cat <<YAML
  model: {name: resnet18, num_classes: 10, in_channels: 1, width: 0.25, small_input: true}
  data: {format: idx, root: $bench_data, train_split: train, val_split: t10k, mean: [0.286],
         std: [0.353], batch_size: 128, workers: 1}
  optim: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0005}
  schedule: {epochs: 1, training_step_per_epoch: $(($1 + $2)), eval_step_per_epoch: 0,
             skip_steps: $2}
  threads: $3
YAML
}
