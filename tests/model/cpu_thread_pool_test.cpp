// Tests of the persistent thread pool (model/thread_pool.cpp): every index is covered exactly
// once, over many back-to-back jobs and after the workers have gone to sleep.
#include "model/thread_pool.hpp"

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

TEST(ThreadPool, RunReachesEveryThreadAfterSleeping) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers go to sleep
    std::vector<std::atomic<int>> seen(3);
    pool.run([&](int t) { seen[t].fetch_add(1); });
    for (int t = 0; t < 3; ++t) EXPECT_EQ(seen[t].load(), 1);
  }
}

TEST(ThreadPool, DefaultUsesAllCores) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace rz
