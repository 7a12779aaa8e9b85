#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace amptune {
namespace {

namespace fs = std::filesystem;

// Throws for the step `what` on `path` with errno's reason; `cleanup` (the temp file) is removed
// first, keeping errno.
[[noreturn]] void fail(const std::string& what, const std::string& path,
                       const std::string& cleanup = "") {
  const int saved = errno;
  if (!cleanup.empty()) ::unlink(cleanup.c_str());
  throw EnvironmentError(what + " " + path + ": " + std::strerror(saved) +
                         " (check free disk space and permissions)");
}

void write_all(int fd, std::string_view bytes, const std::string& tmp) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("cannot write", tmp, tmp);
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string atomic_temp_name(const std::string& path, long pid) {
  return path + ".tmp." + std::to_string(pid);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw EnvironmentError("cannot create directory " + dir.string() + ": " + ec.message() +
                           " (check that the path is a directory and writable)");
  }
  const std::string tmp = atomic_temp_name(path, ::getpid());
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", tmp);
  write_all(fd, bytes, tmp);
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail("cannot flush", tmp, tmp);
  }
  if (::close(fd) != 0) fail("cannot flush", tmp, tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename into", path, tmp);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace amptune
