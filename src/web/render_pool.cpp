#include "web/render_pool.h"

#include <algorithm>

namespace amptune::web {

RenderPool::RenderPool(int threads, size_t max_queued, size_t per_peer)
    : max_queued_(max_queued), per_peer_(std::max<size_t>(1, per_peer)) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { loop(); });
}

RenderPool::~RenderPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& t : threads_) t.join();
}

bool RenderPool::submit(const std::string& peer, std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() >= max_queued_) return false;
    queue_.push_back({peer, std::move(work)});
  }
  ready_.notify_one();
  return true;
}

bool RenderPool::next(Job* job) {
  // A scan of at most max_queued_ jobs: the queue is small, and fairness between clients needs
  // to skip a client's jobs while it already renders per_peer_.
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    const auto busy = rendering_.find(it->peer);
    if (busy != rendering_.end() && busy->second >= per_peer_) continue;
    *job = std::move(*it);
    queue_.erase(it);
    ++rendering_[job->peer];
    return true;
  }
  return false;
}

void RenderPool::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    Job job;
    ready_.wait(lock, [&] { return stopping_ || next(&job); });
    if (!job.work) return;  // stopping
    lock.unlock();
    job.work();
    job.work = nullptr;  // what the job holds (a connection) is released before the next one
    lock.lock();
    if (--rendering_[job.peer] == 0) rendering_.erase(job.peer);
    // A job of this client that was skipped may run now, on any waiting thread.
    ready_.notify_all();
  }
}

}  // namespace amptune::web
