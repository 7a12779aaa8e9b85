// The shared option parsing (cli/options.h): options land in the typed variables they are
// declared with, defaults and "not given" are told apart, --help prints the usage and the table,
// and bad values are the documented errors (UsageError, or Boost's, which dispatch maps to 2).
#include <gtest/gtest.h>

#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

#include "cli/options.h"
#include "core/error.h"
#include "core/log.h"
#include "support/errors.h"

namespace amptune::cli {
namespace {

// What `amptune t` is asked: a RUN, --db, --threads, --format, a value that may be absent and a
// switch, declared as the commands declare theirs.
struct Parsed {
  std::string run, db, format;
  bool db_given = false;
  int threads = -7;
  std::optional<int> epoch;
  std::optional<std::string> shard;
  bool all = false;
};

bool parse(const std::vector<std::string>& args, Parsed* p, Options* opts) {
  opts->run(&p->run).db(&p->db, &p->db_given).threads(&p->threads).quiet();
  opts->format(&p->format, {"text", "csv", "json"});
  opts->add()("epoch", optional_value(&p->epoch), "an epoch (0-based)")(
      "shard", optional_value(&p->shard), "K/N")("all", po::bool_switch(&p->all), "every one");
  return opts->parse(args);
}

TEST(CliOptions, ValuesLandInTheirTypedVariables) {
  Parsed p;
  Options opts("t", "usage: amptune t RUN");
  ASSERT_TRUE(parse({"r1", "--db", "x.sqlite", "--threads", "3", "--format", "csv", "--epoch", "0",
                     "--shard", "1/2", "--all"},
                    &p, &opts));
  EXPECT_EQ(p.run, "r1");
  EXPECT_EQ(p.db, "x.sqlite");
  EXPECT_TRUE(p.db_given);
  EXPECT_EQ(p.threads, 3);
  EXPECT_EQ(p.format, "csv");
  EXPECT_EQ(p.epoch, std::optional<int>(0));  // 0 given is not "not given"
  EXPECT_EQ(p.shard, std::optional<std::string>("1/2"));
  EXPECT_TRUE(p.all);
  EXPECT_FALSE(opts.is_quiet());
}

TEST(CliOptions, WhatIsNotGivenKeepsItsDefaultOrStaysEmpty) {
  Parsed p;
  Options opts("t", "usage: amptune t RUN");
  ASSERT_TRUE(parse({"r1"}, &p, &opts));
  EXPECT_EQ(p.db, default_db());
  EXPECT_FALSE(p.db_given);
  EXPECT_EQ(p.threads, 0);
  EXPECT_EQ(p.format, "text");  // the first choice
  EXPECT_FALSE(p.epoch.has_value());
  EXPECT_FALSE(p.shard.has_value());
  EXPECT_FALSE(p.all);
  // --db naming the default path is still given.
  Parsed q;
  Options again("t", "");
  ASSERT_TRUE(parse({"r1", "--db", default_db()}, &q, &again));
  EXPECT_TRUE(q.db_given);
}

TEST(CliOptions, QuietIsToldToTheCommand) {
  Parsed p;
  Options opts("t", "");
  ASSERT_TRUE(parse({"-q", "r1"}, &p, &opts));
  EXPECT_TRUE(opts.is_quiet());
  log::set_quiet(false);  // parse() switched info lines off for the whole process
}

TEST(CliOptions, HelpPrintsTheUsageAndTheOptionTable) {
  Parsed p;
  Options opts("t", "usage: amptune t RUN\n\nDoes t.");
  std::ostringstream out;
  std::streambuf* saved = std::cout.rdbuf(out.rdbuf());
  const bool go_on = parse({"--help"}, &p, &opts);  // no RUN: --help comes first
  std::cout.rdbuf(saved);
  EXPECT_FALSE(go_on);
  const std::string text = out.str();
  EXPECT_EQ(text.rfind("usage: amptune t RUN\n\nDoes t.\n\namptune t options:\n", 0), 0u) << text;
  EXPECT_NE(text.find("--db arg (=" + default_db() + ")"), std::string::npos) << text;
  EXPECT_NE(text.find("--format arg (=text)"), std::string::npos) << text;
  EXPECT_NE(text.find("text | csv | json"), std::string::npos) << text;
  EXPECT_NE(text.find("--epoch arg "), std::string::npos) << text;  // no default shown
  EXPECT_NE(text.find("--all  "), std::string::npos) << text;       // a switch takes no arg
  EXPECT_EQ(text.find("--all arg"), std::string::npos) << text;
}

TEST(CliOptions, RefusedValuesAreUsageErrorsNamingTheOption) {
  auto usage_error = [](const std::vector<std::string>& args) {
    return testing::message_of<UsageError>([&] {
      Parsed p;
      Options opts("t", "");
      parse(args, &p, &opts);
    });
  };
  EXPECT_EQ(usage_error({"r1", "--format", "xml"}),
            "--format must be one of text, csv, json, not 'xml'");
  EXPECT_EQ(usage_error({"--threads", "2"}), "amptune t needs a run id or name (see amptune list)");
  EXPECT_EQ(usage_error({"r1"}), "<no exception>");
}

TEST(CliOptions, MalformedValuesAreBoostErrorsNamingTheOption) {
  auto boost_error = [](const std::vector<std::string>& args) {
    return testing::message_of<po::error>([&] {
      Parsed p;
      Options opts("t", "");
      parse(args, &p, &opts);
    });
  };
  EXPECT_EQ(boost_error({"r1", "--threads", "abc"}),
            "the argument ('abc') for option '--threads' is invalid");
  EXPECT_EQ(boost_error({"r1", "--epoch", "1.5"}),
            "the argument ('1.5') for option '--epoch' is invalid");
  EXPECT_EQ(boost_error({"r1", "--all=1"}), "option '--all' does not take any arguments");
  EXPECT_EQ(boost_error({"r1", "--all", "--all"}),
            "option '--all' cannot be specified more than once");
  EXPECT_EQ(boost_error({"r1", "--epoch"}),
            "the required argument for option '--epoch' is missing");
  EXPECT_EQ(boost_error({"r1", "r2"}),
            "too many positional options have been specified on the command line");
}

TEST(CliOptions, AGlobThatMatchesNothingIsAUsageErrorNamingIt) {
  const std::string pattern = "/nonexistent-amptune-dir/x.shard-*.sqlite";
  EXPECT_EQ(testing::message_of<UsageError>([&] { expand_globs({pattern}); }),
            "no file matches '" + pattern + "'");
  EXPECT_EQ(expand_globs({"plain.sqlite"}), std::vector<std::string>{"plain.sqlite"});
}

}  // namespace
}  // namespace amptune::cli
