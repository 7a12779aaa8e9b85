// Helpers for integration tests: a tiny IDX data set and the real amptune binary run as a child
// process (scratch directories and file helpers: support/scratch.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "store/store.h"
#include "support/scratch.h"    // scratch_dir, read_file, write_file
#include "support/tiny_data.h"  // write_tiny_idx

namespace amptune::testing {


// A tiny sweep over the IDX set of write_tiny_idx, the fixture of most integration tests:
// `model` (a narrow ResNet-18 on 12x12 grey images by default), batch 16, SGD lr 0.05, one thread.
struct TinyOptions {
  std::string name = "tiny";  // the sweep's name
  int epochs = 1;
  int train_n = 96, test_n = 48;  // images written per split
  int loader_workers = 2;         // data.workers
  std::string schedule = ", skip_steps: 1";  // more schedule keys: ", key: value"
  std::string base;  // more base lines, two-space indented ("  amp: {opt_level: O1}\n")
  std::string tail;  // sections after base: "grid:\n  optim.lr: [0.05, 0.1]\n"
  std::string model =
      "{name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, small_input: true}";
  std::string dir_tag;  // scratch_dir(dir_tag): tell apart several sweeps of one test
};
// The quicker variant several tests share: 64 training and 32 test images, one loader worker,
// no extra schedule keys, `epochs` epochs, `tail` after base (the grid).
TinyOptions quick_tiny(const std::string& tail, int epochs = 1);

struct TinySweep {
  std::string dir;   // a fresh scratch_dir()
  std::string db;    // dir/results/amptune.sqlite (results/ exists)
  std::string yaml;  // dir/sweep.yaml
};
// Writes the data (dir/data) and the sweep file.
TinySweep make_tiny_sweep(const TinyOptions& options);

struct Result {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the amptune binary with `args` in `cwd`, waits, returns exit code and output. `env`:
// variables set in the child ({"AMPTUNE_TRUST_LEGACY_CHECKPOINTS", "1"}).
Result run_amptune(const std::vector<std::string>& args, const std::string& cwd);
Result run_amptune(const std::vector<std::string>& args, const std::string& cwd,
                   const std::vector<std::pair<std::string, std::string>>& env);

// Starts amptune in the background (stdout/stderr to cwd/child.out and cwd/child.err);
// returns its pid.
pid_t spawn_amptune(const std::vector<std::string>& args, const std::string& cwd);

struct SpawnOptions {
  SpawnOptions() = default;
  SpawnOptions(std::vector<std::pair<std::string, std::string>> env_, std::string log_stem_)
      : env(std::move(env_)), log_stem(std::move(log_stem_)) {}
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
  std::string log_stem = "child";  // stdout/stderr to cwd/<stem>.out and cwd/<stem>.err
  bool die_with_parent = false;    // SIGTERM when the test process dies (daemons)
};
pid_t spawn_amptune(const std::vector<std::string>& args, const std::string& cwd,
                    const SpawnOptions& options);
// Another program (argv[0] searched in PATH), stdin from /dev/null, output as above.
pid_t spawn_program(const std::vector<std::string>& argv, const std::string& cwd,
                    const SpawnOptions& options);

// Waits for `pid` at most `timeout_seconds`; its exit code, or 128 + the signal that ended it.
// Past the timeout the process is killed, the test fails, and -1 is returned.
int wait_exit_code(pid_t pid, double timeout_seconds = 600);

// Stops `pid` when the scope ends while it still runs (SIGTERM, which amptune passes on to its
// workers, then SIGKILL after 10 s) and reaps it: a test that fails half-way leaves no process.
class StopOnExit {
 public:
  explicit StopOnExit(pid_t pid) : pid_(pid) {}
  ~StopOnExit();
  StopOnExit(const StopOnExit&) = delete;
  StopOnExit& operator=(const StopOnExit&) = delete;

 private:
  pid_t pid_;
};

// The epoch rows of run `run` (id or name) in database `db`; a missing run is a test failure.
std::vector<records::EpochRow> epochs_of(const std::string& db, const std::string& run);


}  // namespace amptune::testing
