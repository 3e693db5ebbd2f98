// Tests of the persistent thread pool (cpu/thread_pool.cpp): every index is covered exactly
// once, over many back-to-back jobs and after the workers have gone to sleep.
#include "cpu/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace rz {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int rep = 0; rep < 300; ++rep) {
      const int64_t n = rep % 97;
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, 1 + rep % 5, [&](int64_t b, int64_t e, int t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, threads);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
    }
  }
}

TEST(ThreadPool, WorksAfterWorkersSleptAndWithMoreThreadsThanCores) {
  ThreadPool pool(8);
  for (int rep = 0; rep < 20; ++rep) {
    if (rep % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers sleep
    std::vector<std::atomic<int>> hits(1000);
    std::vector<std::atomic<int>> busy(8);  // a thread index is never used twice at once
    pool.parallel_for(1000, 7, [&](int64_t b, int64_t e, int t) {
      ASSERT_EQ(busy[t].fetch_add(1), 0);
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      busy[t].fetch_sub(1);
    });
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(hits[i].load(), 1);
  }
}

TEST(ThreadPool, DefaultUsesAllCores) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace rz
