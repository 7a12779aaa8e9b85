// Option parsing every subcommand shares: --help (usage text plus the option table), --db,
// --quiet, --format, --threads, --set / --only of a sweep, --stale-after, one positional argument
// or the RUN a command works on, set up in one call each: an option several commands take is
// declared here, once.
//
//   std::string db, run, format;
//   std::optional<int> epoch;  // empty unless --epoch is given
//   bool all = false;
//   Options opts("eval", "usage: amptune eval RUN [--epoch N | --all] [options]\n\n...\n");
//   opts.run(&run).db(&db).format(&format, {"text", "csv", "json"});
//   opts.add()("epoch", optional_value(&epoch), "this epoch's checkpoint")(
//       "all", po::bool_switch(&all), "every kept checkpoint");
//   if (!opts.parse(inv.args)) return 0;  // --help was printed
//
// Every option is bound to a typed variable where it is declared (po::value(&x), a switch by
// po::bool_switch(&flag), a value whose absence means something by optional_value(&x)): an
// option's name is written once, and no command looks an option up by its name.
//
// parse() throws boost::program_options errors (cli::dispatch maps them to exit code 2) and
// UsageError for a --format outside its choices; with quiet(), -q silences info lines
// (log::set_quiet).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/positional_options.hpp>
#include <boost/program_options/value_semantic.hpp>
#include <boost/program_options/variables_map.hpp>

namespace amptune::cli {

namespace po = boost::program_options;

// A value whose absence means something: `--epoch 3` sets *target to 3; without the option it
// stays empty (po::value(&x) cannot tell "not given" from x's initial value). Shown in --help as
// po::value(&x) without a default is ("--epoch arg").
template <typename T>
po::typed_value<T>* optional_value(std::optional<T>* target) {
  return po::value<T>()->notifier([target](const T& value) { *target = value; });
}

class Options {
 public:
  // `command` names the option table ("amptune run options"); `usage` is printed above it.
  Options(const std::string& command, std::string usage);

  po::options_description_easy_init add() { return desc_.add_options(); }
  // --db FILE, default default_db(); *given (when not null) says after parse() whether the
  // command line named it.
  Options& db(std::string* path, bool* given = nullptr);
  // --db FILE|GLOB..., repeatable, default {default_db()}: several databases read as one
  // (app::open_databases); expand with expand_globs.
  Options& dbs(std::vector<std::string>* paths);
  Options& quiet();  // -q/--quiet: no info or progress lines; is_quiet() after parse()
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
  bool is_quiet() const { return quiet_; }

 private:
  po::options_description desc_;
  std::string command_;
  std::string usage_;
  std::string* positional_ = nullptr;
  bool positional_is_run_ = false;
  std::vector<std::string>* positionals_ = nullptr;
  std::string* format_ = nullptr;
  std::vector<std::string> format_choices_;
  bool* db_given_ = nullptr;
  bool help_ = false;
  bool quiet_ = false;
};

// Default database path (results/amptune.sqlite) unless AMPTUNE_DB is set.
std::string default_db();
// `patterns` with each glob pattern (holding *, ? or [) replaced by the files it matches, in
// sorted order; other paths are kept as they are. A pattern that matches nothing is a UsageError
// naming it.
std::vector<std::string> expand_globs(const std::vector<std::string>& patterns);

}  // namespace amptune::cli
