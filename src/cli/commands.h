// One function per subcommand. Each parses its own options (Boost.Program_options), prints its
// own --help, and returns the process exit code; errors are thrown as amptune::Error and mapped
// to exit codes in main.cpp.
#pragma once

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/variables_map.hpp>

#include "cli/options.h"

namespace amptune::cli {

struct Invocation {
  std::vector<std::string> args;  // after the subcommand name
  std::string command_line;       // the whole command line, recorded with each run
};

int cmd_run(const Invocation& inv);
int cmd_resume(const Invocation& inv);
int cmd_fork(const Invocation& inv);
int cmd_list(const Invocation& inv);
int cmd_show(const Invocation& inv);
int cmd_data(const Invocation& inv);
int cmd_bench(const Invocation& inv);
// cmd_status.cpp / cmd_compare.cpp / cmd_report.cpp: the query side of the results database.
int cmd_status(const Invocation& inv);
int cmd_compare(const Invocation& inv);
int cmd_report(const Invocation& inv);
// cmd_checkpoints.cpp: evaluate / export saved checkpoints, delete unreferenced files.
int cmd_eval(const Invocation& inv);
int cmd_export(const Invocation& inv);
int cmd_gc(const Invocation& inv);

// Parses `args` with `desc` plus one positional argument (stored in `*positional`): the shared
// shape of run / resume / show / bench. Throws boost::program_options errors.
boost::program_options::variables_map parse_args(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    std::string* positional);


}  // namespace amptune::cli
