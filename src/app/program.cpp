#include "app/program.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace amptune::app {

bool ProgramRun::ok() const {
  return exec_error == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string ProgramRun::outcome() const {
  if (exec_error) return std::string("not started: ") + std::strerror(exec_error);
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "killed by signal " + std::to_string(WTERMSIG(status));
}

ProgramRun run_program(const std::vector<std::string>& argv, const std::string& dir,
                       const std::string& log) {
  if (argv.empty()) throw EnvironmentError("run_program: no program given");
  // The child's execvp errno comes back through `failed` (closed by a successful exec);
  // `output` carries its stdout when it is captured.
  int failed[2], output[2] = {-1, -1};
  if (pipe2(failed, O_CLOEXEC) != 0 || (log.empty() && pipe2(output, O_CLOEXEC) != 0)) {
    throw EnvironmentError("cannot start " + argv[0] + ": pipe: " + std::strerror(errno));
  }
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    for (int fd : {failed[0], failed[1], output[0], output[1]}) {
      if (fd >= 0) close(fd);
    }
    throw EnvironmentError("cannot start " + argv[0] + ": fork: " + std::strerror(error));
  }
  if (pid == 0) {
    // The log first: a relative path is relative to the caller's directory, not to `dir`.
    bool ready = true;
    if (!log.empty()) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
      ready = fd >= 0 && dup2(fd, STDOUT_FILENO) >= 0 && dup2(fd, STDERR_FILENO) >= 0;
    } else {
      ready = dup2(output[1], STDOUT_FILENO) >= 0;
    }
    ready = ready && (dir.empty() || chdir(dir.c_str()) == 0);
    if (ready) execvp(args[0], args.data());
    const int error = errno;
    (void)!write(failed[1], &error, sizeof error);
    _exit(127);
  }
  close(failed[1]);
  ProgramRun run;
  if (output[0] >= 0) {
    close(output[1]);
    char buffer[4096];
    ssize_t got = 0;
    while ((got = read(output[0], buffer, sizeof buffer)) != 0) {
      if (got > 0) run.out.append(buffer, static_cast<size_t>(got));
      if (got < 0 && errno != EINTR) break;
    }
    close(output[0]);
  }
  int exec_errno = 0;
  if (read(failed[0], &exec_errno, sizeof exec_errno) == static_cast<ssize_t>(sizeof exec_errno)) {
    run.exec_error = exec_errno;
  }
  close(failed[0]);
  while (waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
  }
  return run;
}

}  // namespace amptune::app
