// amptune: the process around the command table (cli/command_table.h): its output escaped, the
// signals that stop it, then dispatch, which runs the command and maps errors to exit codes
// (README "Exit codes").
#include <csignal>
#include <string>
#include <vector>

#include "cli/command_table.h"
#include "cli/terminal.h"
#include "core/process.h"

namespace {

void on_signal(int) { amptune::on_stop_signal(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace amptune;
  // Error messages and output carry text from files and databases: escaped on the way out.
  const cli::EscapedTerminal escaped;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // A file-size limit (ulimit -f, or a quota) must fail the write with EFBIG and a clear error,
  // not kill the process half-way.
  std::signal(SIGXFSZ, SIG_IGN);
  return cli::dispatch(std::vector<std::string>(argv, argv + argc));
}
