#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include "core/error.h"
#include "core/hash.h"

namespace amptune::train {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  throw CheckpointError(what + " " + path + ": " + std::strerror(errno) +
                        " (check free disk space and permissions)");
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) {
    throw CheckpointError("cannot create directory " + target.parent_path().string() + ": " +
                          ec.message());
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io("cannot create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      fail_io("cannot write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail_io("cannot flush", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail_io("cannot rename into", path);
  }
  int dfd = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

store::CheckpointFile save_checkpoint(const std::string& path, const torch::nn::Module& model,
                                      const torch::optim::Optimizer& optimizer,
                                      const CheckpointMeta& meta) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optim_archive;
  model.save(model_archive);
  optimizer.save(optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  archive.write("meta.format", c10::IValue(meta.format));
  archive.write("meta.epoch", c10::IValue(meta.epoch));
  archive.write("meta.global_step", c10::IValue(meta.global_step));
  archive.write("meta.config_hash", c10::IValue(meta.config_hash));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng.cpu", gen.get_state());
  }
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  write_file_atomic(path, bytes);
  return store::CheckpointFile{path, static_cast<int64_t>(bytes.size()), sha256_hex(bytes)};
}

CheckpointMeta load_checkpoint(const store::CheckpointFile& expected, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer,
                               const std::string& expected_config_hash) {
  const std::string& path = expected.path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("checkpoint " + path + " is missing or unreadable");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (expected.bytes > 0 && static_cast<int64_t>(bytes.size()) != expected.bytes) {
    throw CheckpointError("checkpoint " + path + " has " + std::to_string(bytes.size()) +
                          " bytes, the database recorded " + std::to_string(expected.bytes) +
                          " (truncated or replaced)");
  }
  if (!expected.sha256.empty() && sha256_hex(bytes) != expected.sha256) {
    throw CheckpointError("checkpoint " + path + " does not match its recorded sha256 (corrupt)");
  }
  CheckpointMeta meta;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    c10::IValue v;
    archive.read("meta.format", v);
    meta.format = v.toStringRef();
    archive.read("meta.epoch", v);
    meta.epoch = v.toInt();
    archive.read("meta.global_step", v);
    meta.global_step = v.toInt();
    archive.read("meta.config_hash", v);
    meta.config_hash = v.toStringRef();
    if (!expected_config_hash.empty() && meta.config_hash != expected_config_hash) {
      throw CheckpointError("checkpoint " + path + " belongs to config " +
                            meta.config_hash.substr(0, 8) + ", not to this run's " +
                            expected_config_hash.substr(0, 8));
    }
    torch::serialize::InputArchive model_archive, optim_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optim_archive);
    model.load(model_archive);
    optimizer.load(optim_archive);
    torch::Tensor rng;
    archive.read("rng.cpu", rng);
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  } catch (const CheckpointError&) {
    throw;
  } catch (const c10::Error& e) {
    throw CheckpointError("checkpoint " + path + " cannot be read: " + e.what_without_backtrace());
  }
  return meta;
}

}  // namespace amptune::train
