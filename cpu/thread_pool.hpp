// A small persistent thread pool for the CPU executor: parallel_for hands chunks of an index
// range to whichever threads are free (the caller always takes part). Workers spin briefly
// between jobs (a decode step dispatches a few hundred small jobs, so waking through the kernel
// each time would cost more than the work) and then sleep. The caller never waits for a worker
// that has not started: on a busy machine a descheduled worker only delays the chunk it holds.
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
  // Splits [0, n) into chunks of at least `grain` items (a multiple of grain) and runs
  // fn(begin, end, thread_index) for each; thread_index < size() is unique among the threads
  // running at the same time (use it to pick per-thread scratch). Not reentrant; fn must not
  // throw.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  struct Job {
    const std::function<void(int64_t, int64_t, int)>* fn;
    int64_t n, chunk, n_chunks;
    std::atomic<int64_t> next{0};  // next chunk to hand out
    std::atomic<int64_t> done{0};  // chunks finished
  };
  void worker(int index);
  static void work(Job& job, int index);

  int n_ = 1;
  std::vector<std::thread> threads_;
  Job* job_ = nullptr;
  std::atomic<bool> open_{false};  // job_ may be joined
  std::atomic<int> active_{0};     // workers inside job_
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleeping_{0};  // workers blocked in generation_.wait()
  std::atomic<bool> stop_{false};
};

}  // namespace rz
