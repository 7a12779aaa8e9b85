#include "dist/reducer.h"

#include <cmath>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace amptune::dist {

void broadcast_buffers(ProcessGroup& group, const std::vector<torch::Tensor>& buffers) {
  torch::NoGradGuard no_grad;
  std::map<int, std::vector<torch::Tensor>> by_dtype;
  for (const auto& b : buffers) by_dtype[static_cast<int>(b.scalar_type())].push_back(b);
  for (auto& [dtype, list] : by_dtype) {
    std::vector<torch::Tensor> flat;
    for (const auto& b : list) flat.push_back(b.reshape({-1}));
    torch::Tensor all = torch::cat(flat);
    group.broadcast(all);
    int64_t offset = 0;
    for (auto& b : list) {
      b.copy_(all.narrow(0, offset, b.numel()).view_as(b));
      offset += b.numel();
    }
  }
}

void allreduce_amax(ProcessGroup& group, std::vector<float>& amaxes) {
  // [maxima with NaN as -1 | NaN flags]: a max all-reduce would drop a NaN.
  const auto n = static_cast<int64_t>(amaxes.size());
  torch::Tensor wire = torch::empty({2 * n}, torch::kFloat);
  float* w = wire.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float a = amaxes[static_cast<size_t>(i)];
    w[i] = std::isnan(a) ? -1.0f : a;
    w[n + i] = std::isnan(a) ? 1.0f : 0.0f;
  }
  group.allreduce(wire, ProcessGroup::Op::kMax);
  w = wire.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    amaxes[static_cast<size_t>(i)] = w[n + i] > 0.0f ? NAN : w[i];
  }
}

std::vector<std::string> union_over_ranks(ProcessGroup& group,
                                          const std::vector<std::string>& names) {
  std::string mine;
  for (const std::string& name : names) {
    if (name.find('\0') != std::string::npos) {
      throw std::invalid_argument("union_over_ranks: a name holds a NUL byte");
    }
    mine += name;
    mine += '\0';
  }
  std::set<std::string> all;
  for (const std::string& bytes : group.allgather_bytes(mine)) {
    size_t from = 0;
    for (size_t end = bytes.find('\0'); end != std::string::npos;
         from = end + 1, end = bytes.find('\0', from)) {
      all.insert(bytes.substr(from, end - from));
    }
  }
  return {all.begin(), all.end()};
}

GradReducer::GradReducer(ProcessGroup& group, std::vector<torch::Tensor> params,
                         ReducerOptions options)
    : group_(group), params_(std::move(params)), options_(options) {
  slots_.resize(params_.size());
  const double cap_bytes = options_.one_buffer ? 1e300 : options_.bucket_mb * 1024.0 * 1024.0;
  // As DDP: the first bucket (the last layers, whose gradients come first) holds at most 1 MiB,
  // so its all-reduce starts early in backward.
  const double first_cap_bytes =
      options_.one_buffer ? cap_bytes : std::min(cap_bytes, 1024.0 * 1024.0);
  // Open bucket per (dtype, device); parameters in reverse order, as backward reaches them.
  std::map<std::tuple<int, int, int>, size_t> open, first;
  std::vector<int64_t> numel;              // of each bucket
  std::vector<torch::TensorOptions> kind;  // dtype and device of each bucket
  for (size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& p = params_[k];
    if (!p.requires_grad()) continue;
    const auto key =
        std::make_tuple(static_cast<int>(p.scalar_type()), static_cast<int>(p.device().type()),
                        static_cast<int>(p.device().index()));
    auto it = open.find(key);
    bool start = it == open.end();
    if (!start) {
      const double cap = it->second == first.at(key) ? first_cap_bytes : cap_bytes;
      start = static_cast<double>((numel[it->second] + p.numel()) * p.element_size()) > cap;
    }
    if (start) {  // a new bucket (a tensor larger than the cap gets one of its own)
      buckets_.emplace_back();
      numel.push_back(0);
      kind.push_back(p.options().requires_grad(false));
      first.emplace(key, buckets_.size() - 1);  // no-op after the first
      open[key] = buckets_.size() - 1;
      it = open.find(key);
    }
    slots_[k].bucket = it->second;
    slots_[k].offset = numel[it->second];
    buckets_[it->second].params.push_back(k);
    numel[it->second] += p.numel();
  }
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i].flat = torch::empty({numel[i]}, kind[i]);
  if (options_.overlap && !options_.one_buffer) {
    hooks_.assign(params_.size(), 0);
    for (size_t k = 0; k < params_.size(); ++k) {
      if (!params_[k].requires_grad()) continue;
      hooks_[k] = params_[k].register_hook([this, k](torch::Tensor grad) { on_grad(k, grad); });
    }
  }
}

GradReducer::~GradReducer() {
  for (size_t k = 0; k < hooks_.size(); ++k) {
    if (params_[k].requires_grad()) params_[k].remove_hook(hooks_[k]);
  }
}

void GradReducer::prepare() {
  torch::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    b.flat.zero_();
    b.pending = b.params.size();
    b.work = ProcessGroup::Pending();
  }
  for (auto& s : slots_) s.ready = false;
  in_backward_ = true;
}

void GradReducer::on_grad(size_t index, const torch::Tensor& grad) {
  if (!in_backward_) return;  // a backward outside training (none in amptune; be safe)
  Slot& slot = slots_[index];
  Bucket& bucket = buckets_[slot.bucket];
  if (slot.ready) {
    throw std::logic_error(
        "a parameter received two gradients in one backward (used twice in "
        "the forward pass); set dist.overlap: false for such a model");
  }
  torch::NoGradGuard no_grad;
  bucket.flat.narrow(0, slot.offset, grad.numel()).copy_(grad.reshape({-1}));
  slot.ready = true;
  if (--bucket.pending == 0) launch(bucket);
}

void GradReducer::launch(Bucket& bucket) { bucket.work = group_.allreduce_async(bucket.flat); }

double GradReducer::finish() {
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  in_backward_ = false;
  for (auto& bucket : buckets_) {
    if (bucket.work.started()) continue;
    // Not launched from hooks (no overlap, one buffer, or a parameter without a gradient):
    // gradients from .grad now.
    for (size_t k : bucket.params) {
      Slot& slot = slots_[k];
      if (slot.ready) continue;
      const torch::Tensor& g = params_[k].grad();
      if (g.defined()) bucket.flat.narrow(0, slot.offset, g.numel()).copy_(g.reshape({-1}));
    }
    launch(bucket);
  }
  const double world = static_cast<double>(group_.size());
  for (auto& bucket : buckets_) {
    bucket.work.wait();
    bucket.flat.div_(world);
    for (size_t k : bucket.params) {
      torch::Tensor& p = params_[k];
      if (!p.grad().defined()) continue;
      p.mutable_grad().copy_(bucket.flat.narrow(0, slots_[k].offset, p.numel()).view_as(p));
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace amptune::dist
