// The command table: every subcommand of amptune once, with the function that runs it and its
// lines in `amptune --help`. The usage text and the dispatch both come from it, so no command is
// listed without being reachable or reachable without being listed.
//
//   int main(int argc, char** argv) {
//     return cli::dispatch({argv, argv + argc});  // {"amptune", "run", "x.yaml", "--dry-run"}
//   }
//
// A new command is a function in commands.h and one entry in commands() (command_table.cpp), in
// the place its usage line is to have.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"

namespace amptune::cli {

// One entry of `amptune --help`: what to type and what it does.
struct UsageLine {
  std::string_view synopsis;  // "run SWEEP.yaml": the command's name and its main arguments
  std::string_view summary;   // one line; a '\n' starts a continuation line under it
};

struct Command {
  std::string_view name;          // the first argument: "run"
  int (*run)(const Invocation&);  // its function (commands.h): the exit code
  // Its entries in `amptune --help`, in order: one, or one per action worth listing (data).
  std::vector<UsageLine> usage;
  std::string_view alias = {};  // another spelling dispatched to it ("--version"), or empty
};

// Every command, in the order `amptune --help` lists them.
const std::vector<Command>& commands();

// The command named `name` (or spelled as its alias); nullptr when there is none.
const Command* find_command(std::string_view name);

// `amptune --help`: the commands' usage lines (synopsis, then the summary in a column; a synopsis
// wider than the column takes a line of its own), and how to ask a command for its options.
std::string usage_text();

// Runs a command line (argv[0], the program, first) and returns the exit code (README "Exit
// codes"): no command, --help, -h or help print usage_text() (exit 2 for none, 0 otherwise); an
// unknown command says so above it (exit 2); a command gets the arguments after its name and the
// whole line (Invocation). Every error a command throws is caught here, once: amptune::Error
// by its code, a Boost.Program_options error as a bad command line (2, naming the command and its
// --help), anything else as an internal error (1); the message goes to std::cerr.
int dispatch(const std::vector<std::string>& args);

}  // namespace amptune::cli
