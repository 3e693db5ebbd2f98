// KvBlockAllocator (gpu/kv_blocks.hpp): reserve / grow / release / recycle, all-or-nothing
// exhaustion, errors, cache_row and the cache layout index, and a randomized stress run against
// a simple model (token counts per slot) checking that no block is owned twice and that the
// free and owned counts add up to n_blocks. Host only: no GPU needed.
#include "gpu/kv_blocks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/common.hpp"

namespace rz::gpu {
namespace {

std::vector<int32_t> ids(std::span<const int32_t> s) { return {s.begin(), s.end()}; }

TEST(KvBlocks, BlocksNeededAndCanFit) {
  KvBlockAllocator a(10, 16, 2);
  EXPECT_EQ(a.blocks_needed(0), 0);
  EXPECT_EQ(a.blocks_needed(1), 1);
  EXPECT_EQ(a.blocks_needed(16), 1);
  EXPECT_EQ(a.blocks_needed(17), 2);
  EXPECT_EQ(a.blocks_needed(160), 10);
  EXPECT_TRUE(a.can_fit(160));
  EXPECT_FALSE(a.can_fit(161));
  EXPECT_EQ(a.free_blocks(), 10);
  EXPECT_THROW(a.blocks_needed(-1), Error);
}

TEST(KvBlocks, ReserveGrowReleaseRecycle) {
  KvBlockAllocator a(8, 4, 3);
  ASSERT_TRUE(a.reserve(0, 5));  // 2 blocks
  EXPECT_EQ(a.table(0).size(), 2u);
  EXPECT_EQ(a.capacity(0), 8);
  EXPECT_EQ(a.free_blocks(), 6);
  const auto first = ids(a.table(0));
  ASSERT_TRUE(a.reserve(0, 8));  // still 2 blocks: unchanged
  EXPECT_EQ(ids(a.table(0)), first);
  ASSERT_TRUE(a.reserve(0, 3));  // never shrinks
  EXPECT_EQ(ids(a.table(0)), first);
  ASSERT_TRUE(a.reserve(0, 9));  // grows by one, earlier ids kept in order
  ASSERT_EQ(a.table(0).size(), 3u);
  EXPECT_EQ(a.table(0)[0], first[0]);
  EXPECT_EQ(a.table(0)[1], first[1]);
  EXPECT_EQ(a.free_blocks(), 5);

  ASSERT_TRUE(a.reserve(1, 12));  // 3 blocks
  EXPECT_EQ(a.free_blocks(), 2);
  std::set<int32_t> all;
  for (int s = 0; s < 2; ++s)
    for (int32_t b : a.table(s)) {
      EXPECT_GE(b, 0);
      EXPECT_LT(b, 8);
      EXPECT_TRUE(all.insert(b).second) << "block " << b << " owned twice";
    }

  const auto slot0 = ids(a.table(0));
  a.release(0);
  EXPECT_TRUE(a.table(0).empty());
  EXPECT_EQ(a.capacity(0), 0);
  EXPECT_EQ(a.free_blocks(), 5);
  // Recycled: slot 2 now gets blocks that slot 0 gave back (3 of the 5 free ones).
  ASSERT_TRUE(a.reserve(2, 12));
  std::set<int32_t> from0(slot0.begin(), slot0.end());
  int reused = 0;
  for (int32_t b : a.table(2)) reused += from0.count(b);
  EXPECT_EQ(reused, 3) << "released blocks should be handed out first";
  a.release(1);
  a.release(2);
  a.release(2);  // releasing an empty slot is a no-op
  EXPECT_EQ(a.free_blocks(), 8);
  ASSERT_TRUE(a.reserve(1, 32));  // everything
  EXPECT_EQ(a.free_blocks(), 0);
}

TEST(KvBlocks, ExhaustionLeavesStateUnchanged) {
  KvBlockAllocator a(5, 16, 2);
  ASSERT_TRUE(a.reserve(0, 40));  // 3 blocks
  const auto t0 = ids(a.table(0));
  EXPECT_FALSE(a.reserve(1, 33));  // needs 3, 2 free
  EXPECT_TRUE(a.table(1).empty());
  EXPECT_EQ(a.free_blocks(), 2);
  EXPECT_FALSE(a.reserve(0, 48 + 32 + 1));  // grow by 3, 2 free
  EXPECT_EQ(ids(a.table(0)), t0);
  EXPECT_EQ(a.free_blocks(), 2);
  EXPECT_FALSE(a.can_fit(33));
  EXPECT_TRUE(a.can_fit(32));
  ASSERT_TRUE(a.reserve(1, 32));  // exactly the rest
  EXPECT_EQ(a.free_blocks(), 0);
  EXPECT_FALSE(a.reserve(0, 49));
  EXPECT_TRUE(a.reserve(0, 48));  // already held
  EXPECT_TRUE(a.reserve(1, 0));
}

TEST(KvBlocks, ZeroBlocksAndErrors) {
  KvBlockAllocator z(0, 16, 1);
  EXPECT_TRUE(z.reserve(0, 0));
  EXPECT_FALSE(z.reserve(0, 1));
  EXPECT_THROW(KvBlockAllocator(4, 0, 1), Error);
  EXPECT_THROW(KvBlockAllocator(-1, 16, 1), Error);
  EXPECT_THROW(KvBlockAllocator(4, 16, -1), Error);
  KvBlockAllocator a(4, 16, 2);
  EXPECT_THROW(a.reserve(2, 1), Error);
  EXPECT_THROW(a.reserve(-1, 1), Error);
  EXPECT_THROW(a.reserve(0, -1), Error);
  EXPECT_THROW(a.release(2), Error);
  EXPECT_THROW(a.table(5), Error);
  EXPECT_THROW(a.cache_row(0, 0), Error);  // nothing reserved
  EXPECT_EQ(a.free_blocks(), 4);
}

TEST(KvBlocks, CacheRowAndLayoutIndex) {
  KvBlockAllocator a(6, 4, 2);
  ASSERT_TRUE(a.reserve(1, 4));
  ASSERT_TRUE(a.reserve(0, 10));  // 3 blocks
  const auto t = ids(a.table(0));
  for (int64_t p = 0; p < 12; ++p)
    EXPECT_EQ(a.cache_row(0, p), int64_t(t[p / 4]) * 4 + p % 4) << "pos " << p;
  EXPECT_THROW(a.cache_row(0, 12), Error);
  EXPECT_THROW(a.cache_row(0, -1), Error);

  // The layout index is dense and row-major over [n_blocks][n_head_kv][block_size][head_dim].
  const KvCacheShape sh{6, 3, 4, 8};
  EXPECT_EQ(sh.layer_elems(), 6 * 3 * 4 * 8);
  std::vector<int> seen(sh.layer_elems(), 0);
  int64_t expect = 0;
  for (int b = 0; b < 6; ++b)
    for (int h = 0; h < 3; ++h)
      for (int o = 0; o < 4; ++o)
        for (int d = 0; d < 8; ++d) {
          const int64_t i = sh.index(b, h, o, d);
          ASSERT_EQ(i, expect++);
          ++seen[i];
        }
  for (int c : seen) EXPECT_EQ(c, 1);
}

// Random reserve / grow / release against a model holding each slot's token count; after every
// operation: tables have exactly blocks_needed(tokens) blocks, no id is owned twice or also free,
// ids are in range, and owned + free == n_blocks.
TEST(KvBlocks, RandomizedStress) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    const int n_blocks = 1 + int(rng() % 64), block_size = 1 + int(rng() % 32);
    const int n_slots = 1 + int(rng() % 10);
    KvBlockAllocator a(n_blocks, block_size, n_slots);
    std::vector<int64_t> model(n_slots, 0);  // tokens each slot's table must hold
    auto model_free = [&] {
      int64_t owned = 0;
      for (int64_t t : model) owned += (t + block_size - 1) / block_size;
      return n_blocks - owned;
    };
    for (int step = 0; step < 2000; ++step) {
      const int s = int(rng() % n_slots);
      const auto before = ids(a.table(s));
      if (rng() % 4 == 0) {
        a.release(s);
        model[s] = 0;
      } else {
        const int64_t want = model[s] + int64_t(rng() % (3 * block_size + 1)) - block_size;
        const int64_t n = want < 0 ? 0 : want;
        const int64_t extra = std::max<int64_t>(
            0, (n + block_size - 1) / block_size - (model[s] + block_size - 1) / block_size);
        const bool fits = extra <= model_free();
        ASSERT_EQ(a.reserve(s, n), fits) << "step " << step;
        if (fits) {
          model[s] = std::max(model[s], n);
          // Earlier blocks never move.
          ASSERT_GE(a.table(s).size(), before.size());
          for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(a.table(s)[i], before[i]);
        } else {
          ASSERT_EQ(ids(a.table(s)), before) << "failed reserve changed the table";
        }
      }
      std::vector<int> owner(n_blocks, 0);
      int64_t owned = 0;
      for (int k = 0; k < n_slots; ++k) {
        ASSERT_EQ(int64_t(a.table(k).size()), (model[k] + block_size - 1) / block_size);
        for (int32_t b : a.table(k)) {
          ASSERT_TRUE(b >= 0 && b < n_blocks) << "block id " << b;
          ASSERT_EQ(++owner[b], 1) << "block " << b << " owned twice";
          ++owned;
        }
      }
      ASSERT_EQ(owned + a.free_blocks(), n_blocks);
      ASSERT_EQ(a.free_blocks(), model_free());
      ASSERT_EQ(a.can_fit(int64_t(a.free_blocks()) * block_size), true);
      ASSERT_EQ(a.can_fit(int64_t(a.free_blocks()) * block_size + 1), false);
    }
    // The free list holds no duplicates and nothing owned: after releasing everything, one slot
    // can take all blocks, and they are each id exactly once.
    for (int k = 0; k < n_slots; ++k) a.release(k);
    ASSERT_EQ(a.free_blocks(), n_blocks);
    ASSERT_TRUE(a.reserve(0, int64_t(n_blocks) * block_size));
    std::vector<int32_t> all = ids(a.table(0));
    std::sort(all.begin(), all.end());
    for (int b = 0; b < n_blocks; ++b) ASSERT_EQ(all[b], b);
  }
}

}  // namespace
}  // namespace rz::gpu
