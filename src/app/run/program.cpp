#include "app/run/program.h"

#include <cstring>

#include "core/child.h"
#include "core/error.h"

namespace amptune::app {

bool ProgramRun::ok() const { return exec_error == 0 && ChildEnd{status}.success(); }

std::string ProgramRun::outcome() const {
  if (exec_error) return std::string("not started: ") + std::strerror(exec_error);
  const ChildEnd end{status};
  if (end.exited()) return "exit status " + std::to_string(end.exit_status());
  return "killed by signal " + std::to_string(end.term_signal()) + " (" +
         signal_name(end.term_signal()) + ")";
}

ProgramRun run_program(const std::vector<std::string>& argv, const std::string& dir,
                       const std::string& log) {
  if (argv.empty()) throw EnvironmentError("run_program: no program given");
  ChildSpec spec;
  spec.argv = argv;
  spec.dir = dir;
  if (log.empty()) {
    spec.capture_stdout = true;
  } else {
    spec.stdout_path = spec.stderr_path = log;
  }
  Child child = Child::start(spec);
  ProgramRun run;
  run.exec_error = child.start_error();
  run.out = child.read_stdout();
  run.status = child.wait().raw;
  return run;
}

}  // namespace amptune::app
