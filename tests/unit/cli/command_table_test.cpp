// The command table (cli/command_table.h): the usage text lists exactly the commands dispatch
// reaches, in the table's layout; every command answers --help; a bad command line gets the
// message and exit code README "Exit codes" documents. Runs cli::dispatch in this process with
// std::cout and std::cerr captured; no case gets as far as a database or a sweep file.
#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_table.h"
#include "core/error.h"

namespace amptune::cli {
namespace {

struct Outcome {
  int code = -1;
  std::string out, err;
};

// `amptune args...` through dispatch, with what it prints.
Outcome run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "amptune");
  std::ostringstream out, err;
  std::streambuf* saved_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* saved_err = std::cerr.rdbuf(err.rdbuf());
  Outcome outcome;
  outcome.code = dispatch(args);
  std::cout.rdbuf(saved_out);
  std::cerr.rdbuf(saved_err);
  outcome.out = out.str();
  outcome.err = err.str();
  return outcome;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The first word of each line of the usage text's command list ("  run SWEEP.yaml  ..." -> run).
std::multiset<std::string> listed_commands(const std::string& usage) {
  std::multiset<std::string> listed;
  for (const std::string& line : lines_of(usage)) {
    if (line.size() > 2 && line.rfind("  ", 0) == 0 && line[2] != ' ') {
      listed.insert(line.substr(2, line.find(' ', 2) - 2));
    }
  }
  return listed;
}

constexpr int kUsageExit = static_cast<int>(ExitCode::kUsage);

TEST(CliCommandTable, EveryCommandHasAFunctionAndAUsageLineUnderItsName) {
  std::set<std::string_view> spellings;
  ASSERT_FALSE(commands().empty());
  for (const Command& command : commands()) {
    SCOPED_TRACE(std::string(command.name));
    EXPECT_FALSE(command.name.empty());
    EXPECT_NE(command.run, nullptr);
    EXPECT_TRUE(spellings.insert(command.name).second) << "listed twice";
    if (!command.alias.empty()) {
      EXPECT_TRUE(spellings.insert(command.alias).second);
    }
    ASSERT_FALSE(command.usage.empty());
    for (const UsageLine& line : command.usage) {
      const std::string synopsis(line.synopsis);
      EXPECT_EQ(synopsis.substr(0, synopsis.find(' ')), command.name);
      EXPECT_FALSE(line.summary.empty()) << synopsis;
      EXPECT_NE(line.summary.back(), '\n') << synopsis;
    }
  }
}

TEST(CliCommandTable, TheUsageListsExactlyTheCommandsDispatchReaches) {
  const std::multiset<std::string> listed = listed_commands(usage_text());
  std::multiset<std::string> expected;
  for (const Command& command : commands()) {
    for (size_t i = 0; i < command.usage.size(); ++i) expected.insert(std::string(command.name));
    EXPECT_EQ(find_command(command.name), &command) << command.name;
    if (!command.alias.empty()) {
      EXPECT_EQ(find_command(command.alias), &command);
    }
  }
  EXPECT_EQ(listed, expected);
  for (const std::string& name : listed) EXPECT_NE(find_command(name), nullptr) << name;
  EXPECT_EQ(find_command("nope"), nullptr);
  EXPECT_EQ(find_command(""), nullptr);
  // The scanner above sees what it is to see.
  EXPECT_EQ(listed_commands("commands:\n  a B  x\n                      y\n  c\n"),
            (std::multiset<std::string>{"a", "c"}));
}

TEST(CliCommandTable, UsageLinesKeepTheTwoColumnLayout) {
  const std::string usage = usage_text();
  EXPECT_EQ(usage.rfind("usage: amptune <command> [options]\n\ncommands:\n", 0), 0u);
  EXPECT_NE(usage.find("\n  run SWEEP.yaml      train every cell of a sweep"), std::string::npos);
  EXPECT_NE(usage.find("\n  fork RUN --epoch N  a new run from RUN's"), std::string::npos);
  // A synopsis wider than its column has a line of its own; continuations share the column.
  EXPECT_NE(usage.find("\n  merge A.sqlite B.sqlite ... --into FILE\n"
                       "                      merge results databases"),
            std::string::npos);
  EXPECT_NE(usage.find("ETA of\n                      running runs\n"), std::string::npos);
  EXPECT_NE(usage.find("\n`amptune <command> --help` describes each command's options.\n"),
            std::string::npos);
  for (const std::string& line : lines_of(usage)) EXPECT_LE(line.size(), 100u) << line;
}

TEST(CliCommandTable, NoCommandOrHelpPrintsTheUsage) {
  const Outcome none = run_cli({});
  EXPECT_EQ(none.code, kUsageExit);
  EXPECT_EQ(none.out, usage_text());
  for (const char* help : {"--help", "-h", "help"}) {
    const Outcome asked = run_cli({help});
    EXPECT_EQ(asked.code, 0) << help;
    EXPECT_EQ(asked.out, usage_text()) << help;
    EXPECT_EQ(asked.err, "") << help;
  }
}

TEST(CliCommandTable, AnUnknownCommandIsABadCommandLine) {
  const Outcome outcome = run_cli({"nope", "--help"});
  EXPECT_EQ(outcome.code, kUsageExit);
  EXPECT_EQ(outcome.out, "");
  EXPECT_EQ(outcome.err, "amptune: unknown command 'nope'\n\n" + usage_text());
}

TEST(CliCommandTable, EveryCommandAnswersHelp) {
  for (const Command& command : commands()) {
    const std::string name(command.name);
    const Outcome outcome = run_cli({name, "--help"});
    EXPECT_EQ(outcome.code, 0) << name << ": " << outcome.err;
    EXPECT_EQ(outcome.err, "") << name;
    if (name == "version") {  // takes no options: prints itself
      EXPECT_EQ(outcome.out.rfind("amptune ", 0), 0u) << outcome.out;
      EXPECT_NE(outcome.out.find("\nLibTorch "), std::string::npos) << outcome.out;
      continue;
    }
    EXPECT_EQ(outcome.out.rfind("usage: amptune " + name + " ", 0), 0u) << outcome.out;
    if (name != "data") {  // data lists its actions, each of which has options
      EXPECT_NE(outcome.out.find("amptune " + name + " options:\n"), std::string::npos)
          << outcome.out;
      EXPECT_NE(outcome.out.find("-h [ --help ]"), std::string::npos) << outcome.out;
    }
  }
  for (const char* action : {"export-imagefolder", "synth-rootnet", "plant-weights"}) {
    const Outcome outcome = run_cli({"data", action, "--help"});
    EXPECT_EQ(outcome.code, 0) << action;
    EXPECT_NE(outcome.out.find("amptune data " + std::string(action) + " options:\n"),
              std::string::npos)
        << outcome.out;
  }
  EXPECT_EQ(run_cli({"--version"}).out, run_cli({"version"}).out);
}

TEST(CliCommandTable, AnOptionBoostRefusesNamesTheCommandAndItsHelp) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "x.yaml", "--bogus"}, "amptune run: unrecognised option '--bogus'"},
      {{"run", "x.yaml", "--threads", "abc"},
       "amptune run: the argument ('abc') for option '--threads' is invalid"},
      {{"gc", "--dry-run=yes"}, "amptune gc: option '--dry-run' does not take any arguments"},
      {{"eval", "r", "--all", "--all"},
       "amptune eval: option '--all' cannot be specified more than once"},
      {{"fork", "r", "--epoch", "x"},
       "amptune fork: the argument ('x') for option '--epoch' is invalid"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome outcome = run_cli(args);
    EXPECT_EQ(outcome.code, kUsageExit) << message;
    EXPECT_EQ(outcome.err, message + " (see amptune " + args[0] + " --help)\n");
  }
}

// Values the typed options hold but the command refuses: a UsageError (exit 2) that names the
// option, before any file is opened.
TEST(CliCommandTable, RefusedValuesAreUsageErrorsNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run"}, "amptune run needs a sweep file: amptune run SWEEP.yaml"},
      {{"run", "x.yaml", "--workers", "0"}, "--workers must be at least 1, got 0"},
      {{"tune", "x.yaml", "--stop-after-epoch", "1"},
       "amptune tune decides where each run stops: no --stop-after-epoch"},
      {{"fork", "r"}, "amptune fork needs --epoch N: the parent's epoch to start from"},
      {{"show"}, "amptune show needs a run id or name (see amptune list)"},
      {{"eval", "r", "--epoch", "1", "--all"}, "amptune eval takes --epoch N or --all, not both"},
      {{"eval", "r", "--epoch", "-1"}, "--epoch must be >= 0"},
      {{"eval", "r", "--max-batches", "0"},
       "--max-batches must be -1 (whole split) or >= 1, got 0"},
      {{"export", "r", "--out", "w.pt"}, "amptune export needs --epoch N (>= 0)"},
      {{"diagnose", "r", "--epoch", "-3"}, "--epoch must be >= 0"},
      {{"compare", "--sweep", "s", "--format", "xml"},
       "--format must be one of text, csv, json, not 'xml'"},
      {{"serve", "--max-connections", "0"}, "--max-connections 0 is out of range (1-100000)"},
      {{"bench", "x.yaml", "--nproc", "1,a"},
       "--nproc takes process counts >= 1 separated by commas (1,2), got '1,a'"},
      {{"data", "export-imagefolder", "--out", "d", "--quality", "0"},
       "--quality must be in 1..100"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome outcome = run_cli(args);
    EXPECT_EQ(outcome.code, kUsageExit) << message;
    EXPECT_EQ(outcome.err, "amptune: error: " + message + "\n");
    EXPECT_EQ(outcome.out, "") << message;
  }
}

TEST(CliCommandTable, DataListsItsActionsAndRefusesAnUnknownOne) {
  const Outcome listed = run_cli({"data"});
  EXPECT_EQ(listed.code, kUsageExit);
  for (const char* action : {"export-imagefolder", "synth-rootnet", "plant-weights"}) {
    EXPECT_NE(listed.out.find("\n  " + std::string(action) + " "), std::string::npos) << action;
  }
  const Outcome unknown = run_cli({"data", "nope"});
  EXPECT_EQ(unknown.code, kUsageExit);
  EXPECT_EQ(unknown.err, "amptune: error: unknown data action 'nope'\n" + listed.out + "\n");
}

}  // namespace
}  // namespace amptune::cli
