// Option parsing every subcommand shares: --help (usage text plus the option table), --db,
// --quiet, --format, --threads, --set / --only of a sweep, --stale-after, one positional argument
// or the RUN a command works on, set up in one call each: an option several commands take is
// declared here, once.
//
//   std::string db, sweep;
//   Options opts("compare", "usage: amptune compare --sweep NAME [options]\n\n...\n");
//   opts.db(&db).format(&format, {"text", "csv", "json"});
//   opts.add()("sweep", po::value(&sweep), "the sweep to compare (required)");
//   if (!opts.parse(inv.args)) return 0;  // --help was printed
//
// parse() throws boost::program_options errors (main maps them to exit code 2) and UsageError
// for a --format outside its choices; with quiet(), -q silences info lines (log::set_quiet).
#pragma once

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/positional_options.hpp>
#include <boost/program_options/value_semantic.hpp>
#include <boost/program_options/variables_map.hpp>


namespace amptune::cli {

namespace po = boost::program_options;

class Options {
 public:
  // `command` names the option table ("amptune run options"); `usage` is printed above it.
  Options(const std::string& command, std::string usage);

  po::options_description_easy_init add() { return desc_.add_options(); }
  Options& db(std::string* path);  // --db FILE, default default_db()
  // --db FILE|GLOB..., repeatable, default {default_db()}: several databases read as one
  // (app::open_databases); expand with expand_globs.
  Options& dbs(std::vector<std::string>* paths);
  Options& quiet();                // -q/--quiet: no info or progress lines
  Options& format(std::string* format, std::vector<std::string> choices);  // first = default
  Options& positional(std::string* value);  // one positional argument (RUN, SWEEP.yaml, ...)
  Options& positionals(std::vector<std::string>* values);  // any number of them (FILE...)
  // RUN (a run id or name) as the positional argument; parse() throws UsageError "amptune
  // <command> needs a run id or name" when it is missing (app::find_run looks it up).
  Options& run(std::string* ref);
  Options& threads(int* threads);  // --threads N, default 0: the config's `threads`
  // --set key=value and --only key=value of a sweep file, repeatable (run, bench).
  Options& sweep_selection(std::vector<std::string>* sets, std::vector<std::string>* only);
  // --stale-after SECONDS, default app::kDefaultStaleAfterSeconds (run, resume).
  Options& stale_after(double* seconds);

  // False when --help was asked for (printed to stdout): the command returns 0.
  bool parse(const std::vector<std::string>& args);
  bool has(const std::string& name) const { return vm_.count(name) > 0; }
  const po::variables_map& vm() const { return vm_; }

 private:
  po::options_description desc_;
  std::string command_;
  std::string usage_;
  std::string* positional_ = nullptr;
  bool positional_is_run_ = false;
  std::vector<std::string>* positionals_ = nullptr;
  std::string* format_ = nullptr;
  std::vector<std::string> format_choices_;
  po::variables_map vm_;
};

// Default database path (results/amptune.sqlite) unless AMPTUNE_DB is set.
std::string default_db();
// `patterns` with each glob pattern (holding *, ? or [) replaced by the files it matches, in
// sorted order; other paths are kept as they are. A pattern that matches nothing is a UsageError
// naming it.
std::vector<std::string> expand_globs(const std::vector<std::string>& patterns);

}  // namespace amptune::cli
