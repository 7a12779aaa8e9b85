#include "cli/options.h"

#include <glob.h>

#include <cstdlib>
#include <iostream>

#include <boost/program_options/parsers.hpp>

#include "app/run/runner.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::cli {
namespace {

// Declared by db() and dbs(); parse() tells db()'s caller whether the command line named it.
constexpr char kDbOption[] = "db";
// The hidden option the positional arguments fill.
constexpr char kPositional[] = "positional";

}  // namespace

Options::Options(const std::string& command, std::string usage)
    : desc_("amptune " + command + " options"), command_(command), usage_(std::move(usage)) {
  desc_.add_options()("help,h", po::bool_switch(&help_), "show this help");
}

Options& Options::db(std::string* path, bool* given) {
  desc_.add_options()(kDbOption, po::value(path)->default_value(default_db()),
                      "results database (env AMPTUNE_DB)");
  db_given_ = given;
  return *this;
}

Options& Options::dbs(std::vector<std::string>* paths) {
  desc_.add_options()(kDbOption,
                      po::value(paths)
                          ->multitoken()
                          ->composing()
                          ->default_value({default_db()}, default_db()),
                      "results database (env AMPTUNE_DB); several files or a quoted glob "
                      "('results/x.shard-*.sqlite') are read as one, merged in memory");
  return *this;
}

Options& Options::quiet() {
  desc_.add_options()("quiet,q", po::bool_switch(&quiet_),
                      "no progress or info lines (warnings stay)");
  return *this;
}

Options& Options::format(std::string* format, std::vector<std::string> choices) {
  std::string text;
  for (const auto& c : choices) text += (text.empty() ? "" : " | ") + c;
  desc_.add_options()("format", po::value(format)->default_value(choices.front()), text.c_str());
  format_ = format;
  format_choices_ = std::move(choices);
  return *this;
}

Options& Options::positional(std::string* value) {
  positional_ = value;
  return *this;
}

Options& Options::positionals(std::vector<std::string>* values) {
  positionals_ = values;
  return *this;
}

Options& Options::run(std::string* ref) {
  positional_is_run_ = true;
  return positional(ref);
}

Options& Options::threads(int* threads) {
  desc_.add_options()("threads", po::value(threads)->default_value(0),
                      "LibTorch threads; 0 = the config's `threads`");
  return *this;
}

Options& Options::sweep_selection(std::vector<std::string>* sets,
                                  std::vector<std::string>* only) {
  desc_.add_options()("set", po::value(sets)->composing(),
                      "override a base key before expansion: key=value (YAML value); repeatable")(
      "only", po::value(only)->composing(),
      "only the cells whose key equals value: key=value; repeatable");
  return *this;
}

Options& Options::stale_after(double* seconds) {
  desc_.add_options()(
      "stale-after", po::value(seconds)->default_value(app::kDefaultStaleAfterSeconds),
      "seconds without heartbeat after which a run held by a process on another host is taken "
      "over (presumed dead); a holder on this host is taken over as soon as its process is gone");
  return *this;
}

bool Options::parse(const std::vector<std::string>& args) {
  po::options_description all;
  all.add(desc_);
  po::positional_options_description pos;
  if (positional_ || positionals_) {
    po::options_description hidden;
    if (positional_) {
      hidden.add_options()(kPositional, po::value(positional_));
    } else {
      hidden.add_options()(kPositional, po::value(positionals_)->composing());
    }
    all.add(hidden);
    pos.add(kPositional, positional_ ? 1 : -1);
  }
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
  po::notify(vm);
  if (help_) {
    std::cout << usage_ << (usage_.empty() || usage_.back() == '\n' ? "" : "\n") << "\n" << desc_;
    return false;
  }
  if (format_) {
    bool known = false;
    std::string list;
    for (const auto& c : format_choices_) {
      known = known || c == *format_;
      list += (list.empty() ? "" : ", ") + c;
    }
    if (!known) throw UsageError("--format must be one of " + list + ", not '" + *format_ + "'");
  }
  if (positional_is_run_ && positional_->empty()) {
    throw UsageError("amptune " + command_ + " needs a run id or name (see amptune list)");
  }
  if (db_given_) *db_given_ = !vm[kDbOption].defaulted();
  if (quiet_) log::set_quiet(true);
  return true;
}

std::string default_db() {
  const char* env = std::getenv("AMPTUNE_DB");
  return env && *env ? env : "results/amptune.sqlite";
}

std::vector<std::string> expand_globs(const std::vector<std::string>& patterns) {
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    if (pattern.find_first_of("*?[") == std::string::npos) {
      paths.push_back(pattern);
      continue;
    }
    glob_t found{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &found);
    for (size_t i = 0; rc == 0 && i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
    globfree(&found);
    if (rc != 0) {
      throw UsageError("no file matches '" + pattern + "'" +
                       (rc == GLOB_NOMATCH ? "" : " (the directory cannot be read)"));
    }
  }
  return paths;
}

}  // namespace amptune::cli
