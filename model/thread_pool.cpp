// Persistent thread pool (see thread_pool.hpp).
#include "model/thread_pool.hpp"

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

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a while (about 100 microseconds) before sleeping.
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; g == seen; ++i) {
        _mm_pause();
        g = generation_.load(std::memory_order_acquire);
        if ((i & 255) == 255 &&
            std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(100)) {
          break;
        }
      }
      while (g == seen) {
        sleeping_.fetch_add(1);
        generation_.wait(seen);
        sleeping_.fetch_sub(1);
        g = generation_.load(std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load()) return;
    (*job_)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: pairs with the workers' sleeping_ increment
  if (sleeping_.load() > 0) generation_.notify_all();
  fn(0);
  // Spin, then yield: with more threads than free cores a worker may be waiting for our core.
  for (int i = 0; pending_.load(std::memory_order_acquire) > 0; ++i) {
    if (i < 4096) _mm_pause();
    else std::this_thread::yield();
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
  // Chunks: about 4 per thread so that a thread slowed by other work does not hold up the rest.
  int64_t chunk = std::max(grain, (n + 4 * n_ - 1) / (4 * n_));
  chunk = (chunk + grain - 1) / grain * grain;
  std::atomic<int64_t> next{0};
  run([&](int t) {
    for (;;) {
      int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
      if (b >= n) break;
      fn(b, std::min(n, b + chunk), t);
    }
  });
}

}  // namespace rz
