// Helpers for integration tests: a tiny IDX data set and the real amptune binary run as a child
// process (scratch directories and file helpers: support/scratch.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "store/store.h"
#include "support/scratch.h"  // scratch_dir, read_file, write_file

namespace amptune::testing {


// Writes DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte: `classes` classes of side x side grey
// images whose class is visible (a bright bar at a class-dependent row) plus seeded noise.
void write_tiny_idx(const std::string& dir, int train_n, int test_n, int side = 12,
                    int classes = 4);

struct Result {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the amptune binary with `args` in `cwd`, waits, returns exit code and output.
Result run_amptune(const std::vector<std::string>& args, const std::string& cwd);

// Starts amptune in the background (stdout/stderr to cwd/child.out and cwd/child.err);
// returns its pid.
pid_t spawn_amptune(const std::vector<std::string>& args, const std::string& cwd);

struct SpawnOptions {
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
  std::string log_stem = "child";  // stdout/stderr to cwd/<stem>.out and cwd/<stem>.err
};
pid_t spawn_amptune(const std::vector<std::string>& args, const std::string& cwd,
                    const SpawnOptions& options);

// Waits for `pid`; its exit code, or 128 + the signal that ended it.
int wait_exit_code(pid_t pid);

// The epoch rows of run `run` (id or name) in database `db`; a missing run is a test failure.
std::vector<store::EpochRow> epochs_of(const std::string& db, const std::string& run);


}  // namespace amptune::testing
