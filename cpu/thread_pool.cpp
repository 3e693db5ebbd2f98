// Persistent thread pool (see thread_pool.hpp).
#include "cpu/thread_pool.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace rz {

ThreadPool::ThreadPool(int n_threads) {
  n_ = n_threads > 0 ? n_threads : std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < n_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work(Job& job, int index) {
  for (;;) {
    const int64_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.n_chunks) return;
    const int64_t b = c * job.chunk;
    (*job.fn)(b, std::min(job.n, b + job.chunk), index);
    job.done.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      // Spin for about 30 microseconds, then sleep until the next job.
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; g == seen; ++i) {
        _mm_pause();
        g = generation_.load(std::memory_order_acquire);
        if ((i & 63) == 63 &&
            std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(30)) {
          break;
        }
      }
      while (g == seen) {
        sleeping_.fetch_add(1);
        generation_.wait(seen);
        sleeping_.fetch_sub(1);
        g = generation_.load();
      }
    }
    seen = g;
    if (stop_.load()) return;
    // Join the current job only while the caller has not closed it (seq_cst: either the caller
    // sees us in active_ and waits, or we see open_ false and touch nothing).
    active_.fetch_add(1);
    if (open_.load()) work(*job_, index);
    active_.fetch_sub(1);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  // About 4 chunks per thread so that a thread slowed by other work does not hold up the rest.
  int64_t chunk = std::max(grain, (n + 4 * n_ - 1) / (4 * n_));
  chunk = (chunk + grain - 1) / grain * grain;
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunk = chunk;
  job.n_chunks = (n + chunk - 1) / chunk;
  job_ = &job;
  open_.store(true);
  generation_.fetch_add(1);  // seq_cst: pairs with the workers' sleeping_ increment
  if (sleeping_.load() > 0) generation_.notify_all();
  work(job, 0);
  // Spin, then yield: a worker holding the last chunk may be waiting for a core.
  for (int i = 0; job.done.load(std::memory_order_acquire) < job.n_chunks; ++i) {
    if (i < 2048)
      _mm_pause();
    else
      std::this_thread::yield();
  }
  open_.store(false);
  while (active_.load() > 0) _mm_pause();
}

}  // namespace rz
