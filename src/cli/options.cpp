#include "cli/options.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <boost/program_options/parsers.hpp>

#include "core/error.h"
#include "core/log.h"

namespace amptune::cli {

Options::Options(const std::string& command, std::string usage)
    : desc_("amptune " + command + " options"), usage_(std::move(usage)) {
  desc_.add_options()("help,h", "show this help");
}

Options& Options::db(std::string* path) {
  desc_.add_options()("db", po::value(path)->default_value(default_db()),
                      "results database (env AMPTUNE_DB)");
  return *this;
}

Options& Options::quiet() {
  desc_.add_options()("quiet,q", "no progress or info lines (warnings stay)");
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

bool Options::parse(const std::vector<std::string>& args) {
  po::options_description all;
  all.add(desc_);
  po::positional_options_description pos;
  if (positional_) {
    po::options_description hidden;
    hidden.add_options()("positional", po::value(positional_));
    all.add(hidden);
    pos.add("positional", 1);
  }
  po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm_);
  po::notify(vm_);
  if (vm_.count("help")) {
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
  if (vm_.count("quiet")) log::set_quiet(true);
  return true;
}

std::string default_db() {
  const char* env = std::getenv("AMPTUNE_DB");
  return env && *env ? env : "results/amptune.sqlite";
}

store::Store open_existing(const std::string& db) {
  if (!std::filesystem::exists(db)) {
    throw StoreError("database " + db + " does not exist; run a sweep first or pass --db FILE");
  }
  return store::Store(db);
}

}  // namespace amptune::cli
