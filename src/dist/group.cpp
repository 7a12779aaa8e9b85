#include "dist/group.h"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#ifdef AMPTUNE_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef AMPTUNE_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "compat/torch_compat.h"
#include "core/error.h"
#include "dist/cluster_impl.h"

namespace amptune::dist {
namespace {

using Backend = compat::C10dBackend;  // 1.13's ProcessGroup, 2.x's Backend

std::string first_line(const std::string& text) {
  const auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

// The dtypes the collectives carry as they are (Gloo's: it refuses others with "Invalid scalar
// type", NCCL's set is larger). A buffer of another dtype - a transformer's bool causal mask - is
// broadcast as the same bytes in the carried type of its element size, and summed in float32.
bool carried(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Half:
    case c10::ScalarType::Char:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
      return true;
    default:
      return false;
  }
}

std::optional<c10::ScalarType> carrier_of_size(int64_t element_size) {
  switch (element_size) {
    case 1:
      return c10::ScalarType::Byte;
    case 2:
      return c10::ScalarType::Half;  // bits copied, never converted
    case 4:
      return c10::ScalarType::Int;
    case 8:
      return c10::ScalarType::Long;
    default:
      return std::nullopt;
  }
}

std::string describe(const torch::Tensor& t) {
  std::string shape;
  for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? ", " : "") + std::to_string(t.size(d));
  return std::string("a ") + c10::toString(t.scalar_type()) + " tensor [" + shape + "]";
}

// A failure that a lost peer causes: the transport's errors (Gloo names its transport files),
// timeouts, closed or reset connections. Anything else is the operation's own error (a dtype,
// a shape, a root), which reporting as a lost rank would send the user after the network.
bool lost_peer_message(const std::string& text, DistBackend backend) {
  if (backend == DistBackend::kNccl) return true;  // NCCL's remote errors name no transport
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* mark : {"transport", "timed out", "timeout", "connection", "by peer",
                           "broken pipe", "socket", "eof", "unreachable", "refused"}) {
    if (lower.find(mark) != std::string::npos) return true;
  }
  return false;
}

c10d::ReduceOp reduce_op(ProcessGroup::Op op) {
  switch (op) {
    case ProcessGroup::Op::kMin:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case ProcessGroup::Op::kMax:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ProcessGroup::Op::kSum:
      break;
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

#ifdef AMPTUNE_HAVE_GLOO
// The network device Gloo connects ranks through: GLOO_SOCKET_IFNAME when set (as PyTorch),
// the loopback for a job on one machine (--nproc, torchrun --standalone), else this host's name.
std::shared_ptr<::gloo::transport::Device> gloo_device(const launch::LaunchEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

}  // namespace

DistBackend resolve_backend(DistBackend backend, const torch::Device& device) {
  const DistBackend b = backend != DistBackend::kAuto ? backend
                        : device.is_cuda()            ? DistBackend::kNccl
                                                      : DistBackend::kGloo;
  if (b == DistBackend::kNccl) {
    if (!device.is_cuda()) {
      throw ConfigError("dist.backend: nccl needs CUDA tensors, but this run trains on " +
                        device.str() + "; use dist.backend: gloo (or auto)");
    }
    if (!torch::cuda::is_available()) {  // before c10d's constructor, which would throw
      throw ConfigError("dist.backend: nccl needs CUDA devices, and this machine has none (" +
                        device.str() +
                        " asked for); train on a GPU machine, or on the CPU "
                        "with dist.backend: gloo");
    }
    if (!have_nccl()) {
      throw ConfigError(
          "dist.backend: nccl - this amptune was built without c10d NCCL (a "
          "LibTorch with CUDA and NCCL is needed); use dist.backend: gloo");
    }
  } else {
    if (device.is_cuda()) {
      throw ConfigError("dist.backend: gloo trains on CPU tensors here, but this run trains on " +
                        device.str() + "; use dist.backend: nccl (or auto)");
    }
    if (!have_gloo()) {
      throw EnvironmentError(
          "dist.backend: gloo - this amptune was built without c10d Gloo "
          "(libgloo-dev headers missing when it was configured): install "
          "libgloo-dev (tools/install-deps.sh) and rebuild");
    }
  }
  return b;
}

class ProcessGroup::Impl {
 public:
  c10::intrusive_ptr<Backend> pg;
};

struct ProcessGroup::Pending::Work {
  c10::intrusive_ptr<c10d::Work> work;
  std::string what;      // the tensor, for a failure's message
  torch::Tensor wire;    // summed in float32 when the tensor's dtype is not carried
  torch::Tensor target;  // ... and copied back into it
};

ProcessGroup::Pending::Pending() = default;
ProcessGroup::Pending::~Pending() = default;
ProcessGroup::Pending::Pending(Pending&&) noexcept = default;
ProcessGroup::Pending& ProcessGroup::Pending::operator=(Pending&&) noexcept = default;
bool ProcessGroup::Pending::started() const { return work_ != nullptr; }

void ProcessGroup::Pending::wait() {
  if (!work_) return;
  std::unique_ptr<Work> work = std::move(work_);
  try {
    work->work->wait();
  } catch (const std::exception& e) {
    group_->failed("all-reduce", work->what, e, true);
  }
  if (work->target.defined()) {
    torch::NoGradGuard no_grad;
    work->target.copy_(work->wire);
  }
}

ProcessGroup::ProcessGroup(Cluster& cluster, const std::string& name, DistBackend backend,
                           double timeout_seconds, const torch::Device& device)
    : cluster_(cluster),
      backend_(resolve_backend(backend, device)),
      device_(device),
      impl_(std::make_unique<Impl>()) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  auto store = c10::make_intrusive<c10d::PrefixStore>(name + "/", cluster.impl().store);
  try {
    if (backend_ == DistBackend::kGloo) {
#ifdef AMPTUNE_HAVE_GLOO
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device(cluster.env()));
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, cluster.rank(), cluster.size(),
                                                              options);
#endif
    } else {
#ifdef AMPTUNE_HAVE_NCCL
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, cluster.rank(), cluster.size(),
                                                              options);
#endif
    }
  } catch (const std::exception& e) {
    lost(e);
  }
  if (!impl_->pg)
    throw EnvironmentError("no c10d backend " + to_string(backend_) + " in this build");
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return cluster_.rank(); }
int ProcessGroup::size() const { return cluster_.size(); }

void ProcessGroup::lost(const std::exception& e) const {
  throw RankLostError(cluster_.describe_rank(rank()) + " lost contact with " +
                      cluster_.peers_of(rank()) + " (" + to_string(backend_) +
                      "): " + first_line(e.what()));
}

void ProcessGroup::failed(const std::string& op, const std::string& what, const std::exception& e,
                          bool submitted) const {
  if (submitted && lost_peer_message(e.what(), backend_)) lost(e);
  throw EnvironmentError(cluster_.describe_rank(rank()) + ": the " + op + " of " + what + " (" +
                         to_string(backend_) + ") failed: " + first_line(e.what()) +
                         " (an error of the operation, not a lost rank)");
}

torch::Tensor ProcessGroup::summable(const torch::Tensor& tensor, const std::string& op) const {
  if (carried(tensor.scalar_type())) return tensor;
  if (!tensor.is_floating_point()) {
    throw EnvironmentError(cluster_.describe_rank(rank()) + ": cannot " + op + " " +
                           describe(tensor) + " over the ranks (" + to_string(backend_) +
                           " sums floating and integer tensors)");
  }
  return tensor.to(torch::kFloat);
}

ProcessGroup::Pending ProcessGroup::allreduce_async(torch::Tensor& tensor) {
  Pending p;
  p.group_ = this;
  p.work_ = std::make_unique<Pending::Work>();
  p.work_->what = describe(tensor);
  p.work_->wire = summable(tensor, "all-reduce");
  if (!p.work_->wire.is_same(tensor)) p.work_->target = tensor;
  try {
    std::vector<torch::Tensor> tensors{p.work_->wire};
    p.work_->work = impl_->pg->allreduce(tensors);
  } catch (const std::exception& e) {
    failed("all-reduce", p.work_->what, e, false);
  }
  return p;
}

void ProcessGroup::allreduce(torch::Tensor& tensor, Op op) {
  torch::Tensor wire = summable(tensor, "all-reduce");
  std::vector<torch::Tensor> tensors{wire};
  c10d::AllreduceOptions options;
  options.reduceOp = reduce_op(op);
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = impl_->pg->allreduce(tensors, options);
  } catch (const std::exception& e) {
    failed("all-reduce", describe(tensor), e, false);
  }
  try {
    work->wait();
  } catch (const std::exception& e) {
    failed("all-reduce", describe(tensor), e, true);
  }
  if (!wire.is_same(tensor)) {
    torch::NoGradGuard no_grad;
    tensor.copy_(wire);
  }
}

void ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  // A dtype the backend does not carry travels as its bytes (a view: received in place).
  torch::Tensor wire = tensor;
  if (!carried(tensor.scalar_type())) {
    const auto carrier = carrier_of_size(tensor.element_size());
    if (!carrier) {
      throw EnvironmentError(cluster_.describe_rank(rank()) + ": cannot broadcast " +
                             describe(tensor) + " (" + to_string(backend_) +
                             " carries no type of its element size)");
    }
    wire = (tensor.is_contiguous() ? tensor : tensor.contiguous()).view(*carrier);
  }
  std::vector<torch::Tensor> tensors{wire};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = impl_->pg->broadcast(tensors, options);
  } catch (const std::exception& e) {
    failed("broadcast", describe(tensor), e, false);
  }
  try {
    work->wait();
  } catch (const std::exception& e) {
    failed("broadcast", describe(tensor), e, true);
  }
  if (!tensor.is_contiguous()) {
    torch::NoGradGuard no_grad;
    tensor.copy_(wire.view(tensor.scalar_type()));
  }
}

void ProcessGroup::broadcast_bytes(std::string& bytes, int root) {
  auto length = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong).to(device_);
  broadcast(length, root);
  const int64_t n = length.to(torch::kCPU).item<int64_t>();
  torch::Tensor buffer;
  if (rank() == root) {
    buffer = torch::from_blob(bytes.data(), {n}, torch::kUInt8).clone().to(device_);
  } else {
    buffer = torch::empty({n}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
  }
  if (n > 0) broadcast(buffer, root);
  if (rank() != root) {
    const torch::Tensor cpu = buffer.to(torch::kCPU).contiguous();
    bytes.assign(reinterpret_cast<const char*>(cpu.data_ptr<uint8_t>()), static_cast<size_t>(n));
  }
}

std::vector<std::string> ProcessGroup::allgather_bytes(const std::string& mine) {
  const int world = size();
  auto gather = [&](const torch::Tensor& input) {
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < world; ++r) outputs[0].push_back(torch::empty_like(input));
    std::vector<torch::Tensor> inputs{input};
    try {
      impl_->pg->allgather(outputs, inputs)->wait();
    } catch (const std::exception& e) {
      lost(e);
    }
    return outputs[0];
  };
  const auto lengths =
      gather(torch::tensor({static_cast<int64_t>(mine.size())}, torch::kLong).to(device_));
  int64_t longest = 0;
  std::vector<int64_t> n(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    n[static_cast<size_t>(r)] = lengths[static_cast<size_t>(r)].to(torch::kCPU).item<int64_t>();
    longest = std::max(longest, n[static_cast<size_t>(r)]);
  }
  std::vector<std::string> out(static_cast<size_t>(world));
  if (longest == 0) return out;
  auto padded = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(padded.data_ptr<uint8_t>(), mine.data(), mine.size());
  const auto all = gather(padded.to(device_));
  for (int r = 0; r < world; ++r) {
    const torch::Tensor cpu = all[static_cast<size_t>(r)].to(torch::kCPU).contiguous();
    out[static_cast<size_t>(r)].assign(reinterpret_cast<const char*>(cpu.data_ptr<uint8_t>()),
                                       static_cast<size_t>(n[static_cast<size_t>(r)]));
  }
  return out;
}

}  // namespace amptune::dist
