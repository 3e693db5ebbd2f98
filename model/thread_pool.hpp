// A small persistent thread pool for the CPU executor: n threads (the caller is thread 0) run one
// job at a time. Workers spin briefly between jobs (a decode step dispatches a few hundred small
// jobs, so waking through the kernel each time would cost more than the work) and then sleep.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace rz {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: all cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  // Runs fn(thread_index) on every thread (the caller runs index 0) and returns when all are
  // done. Not reentrant; fn must not throw.
  void run(const std::function<void(int)>& fn);
  // Splits [0, n) into chunks of at least `grain` items handed out dynamically;
  // fn(begin, end, thread_index) runs for each chunk.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker(int index);

  int n_ = 1;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};    // workers still running the current job
  std::atomic<int> sleeping_{0};   // workers blocked in generation_.wait()
  std::atomic<bool> stop_{false};
};

}  // namespace rz
