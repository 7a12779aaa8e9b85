// Running another program and waiting for it (core/child.h): gnuplot for `amptune report`,
// sbatch for `amptune slurm --submit`.
#pragma once

#include <string>
#include <vector>

namespace amptune::app {

struct ProgramRun {
  int exec_error = 0;  // errno when the program could not be started (ENOENT: not found); else 0
  int status = 0;      // its waitpid status when it ran
  std::string out;     // its standard output, when captured
  bool ok() const;     // it ran and exited with status 0
  // "exit status 2", "killed by signal 9 (SIGKILL)", "not started: <why>"
  std::string outcome() const;
};

// Runs argv[0] (a path, or a name searched in PATH) with `argv`, in directory `dir` when it is
// not empty, and waits. With `log`, stdout and stderr go to that file (created or truncated; a
// relative path is relative to this process's directory, not to `dir`); without, stdout is
// captured into ProgramRun::out and stderr is this process's. A log that cannot be opened, or a
// `dir` that cannot be entered, is an exec_error with that errno. Throws
// EnvironmentError only when no process can be made (pipe / fork failing); a program that is
// missing or fails is told by the result.
ProgramRun run_program(const std::vector<std::string>& argv, const std::string& dir = "",
                       const std::string& log = "");

}  // namespace amptune::app
