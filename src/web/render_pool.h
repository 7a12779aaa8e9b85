// The threads that render the pages of `amptune serve` (web/server.h), so that no page, however
// slow, holds an I/O thread: a fixed number of threads, a bounded queue, and fairness between
// clients. A job waits in the queue until a thread is free; a client (its address) has at most
// `per_peer` jobs rendering at once, so one client's slow pages leave the other threads to the
// others (its further jobs wait, and the next job of another client runs first). A submit that
// finds `max_queued` jobs waiting is refused: the caller answers 503. No torch, no Asio.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace amptune::web {

class RenderPool {  // not copyable
 public:
  RenderPool(int threads, size_t max_queued, size_t per_peer);
  // Stops the threads once their current job ends; jobs still waiting are dropped unrun.
  ~RenderPool();
  RenderPool(const RenderPool&) = delete;
  RenderPool& operator=(const RenderPool&) = delete;

  // Queues `work` for the client `peer`; false (and `work` dropped) when max_queued jobs wait.
  // `work` runs on a pool thread and must not throw.
  bool submit(const std::string& peer, std::function<void()> work);

 private:
  struct Job {
    std::string peer;
    std::function<void()> work;
  };
  void loop();
  bool next(Job* job);  // the first waiting job whose client may render another; under mutex_

  const size_t max_queued_, per_peer_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  std::map<std::string, size_t> rendering_;  // jobs rendering now, by client
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace amptune::web
