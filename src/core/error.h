// amptune error hierarchy. Every error is caught once, in cli::dispatch (cli/command_table.h,
// which main calls), and mapped to an exit code (README "Exit codes"). Messages name the
// file/key/run and say what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace amptune {

enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,    // a bug or an unexpected library failure
  kUsage = 2,       // bad command line
  kConfig = 3,      // invalid YAML / config value
  kData = 4,        // missing or malformed data set
  kStore = 5,       // database cannot be opened / written
  kCheckpoint = 6,  // checkpoint missing / corrupt with no fallback
  kModel = 7,       // weight import/export mismatch
  kFailedRuns = 8,  // the command worked but one or more runs failed or diverged
  kEnvironment = 9,  // the environment failed: a missing tool (gnuplot), an unwritable output path, a read error, fork() failing
  kInterrupted = 130,
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

#define AMPTUNE_DEFINE_ERROR(Name, Code) \
  class Name : public Error {            \
   public:                               \
    explicit Name(const std::string& what) : Error(ExitCode::Code, what) {} \
  };

AMPTUNE_DEFINE_ERROR(UsageError, kUsage)
AMPTUNE_DEFINE_ERROR(ConfigError, kConfig)
AMPTUNE_DEFINE_ERROR(DataError, kData)
AMPTUNE_DEFINE_ERROR(StoreError, kStore)
AMPTUNE_DEFINE_ERROR(CheckpointError, kCheckpoint)
AMPTUNE_DEFINE_ERROR(ModelError, kModel)
AMPTUNE_DEFINE_ERROR(EnvironmentError, kEnvironment)
// A process of a data-parallel job stopped answering (killed, hung past dist.timeout_s, its
// machine gone); the message names it. The run it trained is left resumable.
AMPTUNE_DEFINE_ERROR(RankLostError, kEnvironment)

#undef AMPTUNE_DEFINE_ERROR

}  // namespace amptune
