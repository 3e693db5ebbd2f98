// Tests of KvBlockManager (sched/kv_block_manager.hpp): allocation and reference counts, the
// prefix cache (chained keys, exact verification, the longest hit, max_blocks), LRU eviction of
// released cached blocks (a sequence's tail first), revival by acquire, and its errors.
#include "sched/kv_block_manager.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "formats/common.hpp"

using rz::Error;
using rz::KvBlockManager;

namespace {

constexpr int kBs = 4;

std::vector<int32_t> toks(int n, int32_t first) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

std::span<const int32_t> block_of(const std::vector<int32_t>& t, int i) {
  return std::span<const int32_t>(t).subspan(static_cast<size_t>(i * kBs), kBs);
}

// Allocates a sequence's blocks for `t` (whole blocks only) and registers them, as the scheduler
// does once their KV is computed.
std::vector<int32_t> cache_sequence(KvBlockManager& m, const std::vector<int32_t>& t) {
  std::vector<int32_t> blocks;
  for (int i = 0; i < static_cast<int>(t.size()) / kBs; ++i) {
    const int32_t b = m.allocate();
    EXPECT_GE(b, 0);
    blocks.push_back(m.register_full(b, i > 0 ? blocks.back() : -1, block_of(t, i)));
  }
  return blocks;
}

void release_last_to_first(KvBlockManager& m, const std::vector<int32_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) m.release(*it);
}

}  // namespace

TEST(KvBlockManager, RejectsBadSizes) {
  EXPECT_THROW(KvBlockManager(4, 0, true), Error);
  EXPECT_THROW(KvBlockManager(-1, 4, true), Error);
  KvBlockManager empty(0, 4, true);
  EXPECT_EQ(empty.allocate(), -1);
  EXPECT_EQ(empty.free_blocks(), 0);
}

TEST(KvBlockManager, AllocateAndReleaseCountBlocks) {
  KvBlockManager m(3, kBs, true);
  EXPECT_EQ(m.n_blocks(), 3);
  EXPECT_EQ(m.block_size(), kBs);
  EXPECT_EQ(m.blocks_for(0), 0);
  EXPECT_EQ(m.blocks_for(4), 1);
  EXPECT_EQ(m.blocks_for(5), 2);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_EQ(m.allocate(), 0) << "block 0 first";
  EXPECT_EQ(m.allocate(), 1);
  EXPECT_EQ(m.free_blocks(), 1);
  EXPECT_EQ(m.referenced_blocks(), 2);
  EXPECT_EQ(m.refs(0), 1);
  m.acquire(0);  // shared by two sequences
  EXPECT_EQ(m.refs(0), 2);
  EXPECT_EQ(m.allocate(), 2);
  EXPECT_EQ(m.allocate(), -1) << "every block is referenced";
  EXPECT_EQ(m.allocate(), -1);
  m.release(0);
  EXPECT_EQ(m.free_blocks(), 0) << "block 0 still has a reference";
  EXPECT_EQ(m.allocate(), -1);
  m.release(0);
  EXPECT_EQ(m.free_blocks(), 1);
  EXPECT_EQ(m.refs(0), 0);
  EXPECT_EQ(m.allocate(), 0);
  for (int32_t b : {0, 1, 2}) m.release(b);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_EQ(m.referenced_blocks(), 0);
  EXPECT_EQ(m.cached_blocks(), 0);
  EXPECT_EQ(m.stats().evictions, 0u) << "nothing was cached";
}

TEST(KvBlockManager, ErrorsForBadIdsAndDoubleRelease) {
  KvBlockManager m(2, kBs, true);
  const auto t = toks(kBs, 1);
  EXPECT_THROW(m.release(0), Error) << "release of a free block";
  EXPECT_THROW(m.release(-1), Error);
  EXPECT_THROW(m.release(2), Error);
  EXPECT_THROW(m.acquire(0), Error) << "acquire of a free, uncached block";
  EXPECT_THROW(m.acquire(5), Error);
  EXPECT_THROW(m.register_full(0, -1, t), Error) << "register of an unreferenced block";
  EXPECT_THROW(m.register_full(7, -1, t), Error);
  const int32_t b = m.allocate();
  EXPECT_THROW(m.register_full(b, -1, toks(kBs - 1, 1)), Error) << "not a full block";
  EXPECT_THROW(m.register_full(b, 9, t), Error) << "parent out of range";
  m.release(b);
  EXPECT_THROW(m.release(b), Error) << "double release";
  EXPECT_EQ(m.free_blocks(), 2) << "the errors changed nothing";
}

TEST(KvBlockManager, MatchFindsTheLongestChainAndStopsAtTheFirstMiss) {
  KvBlockManager m(8, kBs, true);
  const auto t = toks(3 * kBs, 10);
  const auto blocks = cache_sequence(m, t);
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(m.cached_blocks(), 3);
  EXPECT_EQ(m.match_prefix(t, 10), blocks);
  EXPECT_EQ(m.match_prefix(t, 3), blocks);
  EXPECT_EQ(m.match_prefix(t, 2), (std::vector<int32_t>{blocks[0], blocks[1]})) << "max_blocks";
  EXPECT_TRUE(m.match_prefix(t, 0).empty());
  // Only whole blocks of the query count: 2.5 blocks of tokens match 2.
  const std::vector<int32_t> partial(t.begin(), t.begin() + 2 * kBs + 2);
  EXPECT_EQ(m.match_prefix(partial, 10), (std::vector<int32_t>{blocks[0], blocks[1]}));
  // Longer than the chain: the chain.
  auto longer = t;
  for (int i = 0; i < 2 * kBs; ++i) longer.push_back(500 + i);
  EXPECT_EQ(m.match_prefix(longer, 10), blocks);
  // A different token in block 1 ends the hit after block 0, even though block 2 is the same.
  auto miss = t;
  miss[kBs + 1] = 999;
  EXPECT_EQ(m.match_prefix(miss, 10), std::vector<int32_t>{blocks[0]});
  miss = t;
  miss[0] = 999;
  EXPECT_TRUE(m.match_prefix(miss, 10).empty());
  // match takes no reference.
  for (int32_t b : blocks) EXPECT_EQ(m.refs(b), 1);
}

TEST(KvBlockManager, AHitNeedsTheSameParent) {
  KvBlockManager m(8, kBs, true);
  const auto a = toks(2 * kBs, 10);  // blocks A0 A1
  const auto blocks = cache_sequence(m, a);
  // The same content as A1 after another first block: a miss, at the first block already.
  std::vector<int32_t> other = toks(kBs, 200);
  other.insert(other.end(), a.begin() + kBs, a.end());
  EXPECT_TRUE(m.match_prefix(other, 10).empty());
  // A1's content alone, as a sequence's first block: a miss (its key chains A0's).
  const std::vector<int32_t> second(a.begin() + kBs, a.end());
  EXPECT_TRUE(m.match_prefix(second, 10).empty());
  // Registering that content as a first block is a separate entry that hits on its own.
  const int32_t b = m.allocate();
  m.register_full(b, -1, second);
  EXPECT_EQ(m.match_prefix(second, 10), std::vector<int32_t>{b});
  EXPECT_EQ(m.match_prefix(a, 10), blocks);
}

TEST(KvBlockManager, TokensAreComparedNotOnlyHashed) {
  // A 64-bit collision cannot be forced; what can be checked is that equal lengths, equal
  // parents and different tokens never hit, at any position of the block.
  KvBlockManager m(4, kBs, true);
  const auto t = toks(kBs, 1);
  const auto blocks = cache_sequence(m, t);
  for (int i = 0; i < kBs; ++i) {
    auto u = t;
    u[static_cast<size_t>(i)] += 1;
    EXPECT_TRUE(m.match_prefix(u, 1).empty()) << i;
  }
  auto swapped = t;
  std::swap(swapped[0], swapped[1]);
  EXPECT_TRUE(m.match_prefix(swapped, 1).empty());
  EXPECT_EQ(m.match_prefix(t, 1), blocks);
}

TEST(KvBlockManager, ADuplicateMovesOntoTheCachedBlocksAndANewBlockNeedsACachedParent) {
  KvBlockManager m(8, kBs, true);
  const auto t = toks(2 * kBs, 30);
  const auto first = cache_sequence(m, t);
  // A second sequence that computed the same tokens in its own blocks: each registration moves
  // its reference onto the cached block and frees its own.
  const int32_t own = m.allocate();
  EXPECT_EQ(m.register_full(own, -1, block_of(t, 0)), first[0]);
  EXPECT_EQ(m.refs(first[0]), 2);
  EXPECT_EQ(m.free_blocks(), 6) << "its own block went back to the free list";
  const auto dup = cache_sequence(m, t);  // the helper keeps what register_full returns
  EXPECT_EQ(dup, first);
  EXPECT_EQ(m.cached_blocks(), 2);
  // Its next block chains onto the cached prefix, so a third request reuses all three.
  auto longer = t;
  for (int32_t x : toks(kBs, 500)) longer.push_back(x);
  const int32_t b2 = m.allocate();
  EXPECT_EQ(m.register_full(b2, dup[1], block_of(longer, 2)), b2);
  EXPECT_EQ(m.match_prefix(longer, 10), (std::vector<int32_t>{first[0], first[1], b2}));
  m.release(first[0]);  // the first sequence's extra reference from the move above
  release_last_to_first(m, dup);
  m.release(b2);
  release_last_to_first(m, first);
  EXPECT_EQ(m.free_blocks(), 8);
  EXPECT_EQ(m.stats().evictions, 0u);
  // A block whose parent is not cached is not cached either (nothing could reach it).
  const int32_t p = m.allocate();
  const int32_t c = m.allocate();
  EXPECT_EQ(m.register_full(c, p, toks(kBs, 70)), c);
  EXPECT_EQ(m.cached_blocks(), 3);
  // Registering a cached block again changes nothing.
  m.acquire(first[0]);
  EXPECT_EQ(m.register_full(first[0], -1, block_of(t, 0)), first[0]);
  EXPECT_EQ(m.cached_blocks(), 3);
}

TEST(KvBlockManager, ReleasedCachedBlocksAreEvictedLeastRecentlyReleasedFirst) {
  KvBlockManager m(6, kBs, true);
  const auto x = toks(3 * kBs, 100);
  const auto y = toks(3 * kBs, 300);
  const auto bx = cache_sequence(m, x);
  const auto by = cache_sequence(m, y);
  EXPECT_EQ(m.free_blocks(), 0);
  EXPECT_EQ(m.allocate(), -1);
  release_last_to_first(m, bx);  // x first: its tail, then its middle, then its head
  release_last_to_first(m, by);
  EXPECT_EQ(m.free_blocks(), 6) << "cached, unreferenced blocks are free for new ones";
  EXPECT_EQ(m.referenced_blocks(), 0);
  EXPECT_EQ(m.cached_blocks(), 6);
  EXPECT_EQ(m.match_prefix(x, 10), bx) << "still cached";
  // Each allocation evicts the least recently released block: x's tail first.
  EXPECT_EQ(m.allocate(), bx[2]);
  EXPECT_EQ(m.stats().evictions, 1u);
  EXPECT_EQ(m.match_prefix(x, 10), (std::vector<int32_t>{bx[0], bx[1]})) << "x lost its tail";
  EXPECT_EQ(m.allocate(), bx[1]);
  EXPECT_EQ(m.allocate(), bx[0]);
  EXPECT_TRUE(m.match_prefix(x, 10).empty());
  EXPECT_EQ(m.match_prefix(y, 10), by) << "y, released later, is untouched";
  EXPECT_EQ(m.allocate(), by[2]);
  EXPECT_EQ(m.stats().evictions, 4u);
  EXPECT_EQ(m.cached_blocks(), 2);
}

TEST(KvBlockManager, FreeBlocksGoBeforeCachedOnes) {
  KvBlockManager m(4, kBs, true);
  const auto t = toks(kBs, 1);
  const auto b = cache_sequence(m, t);
  m.release(b[0]);
  for (int i = 0; i < 3; ++i) EXPECT_NE(m.allocate(), b[0]);
  EXPECT_EQ(m.stats().evictions, 0u);
  EXPECT_EQ(m.match_prefix(t, 1), b);
  EXPECT_EQ(m.allocate(), b[0]) << "the last one left";
  EXPECT_EQ(m.stats().evictions, 1u);
  EXPECT_TRUE(m.match_prefix(t, 1).empty());
}

TEST(KvBlockManager, AcquireRevivesACachedBlock) {
  KvBlockManager m(3, kBs, true);
  const auto t = toks(2 * kBs, 1);
  const auto b = cache_sequence(m, t);
  release_last_to_first(m, b);
  EXPECT_EQ(m.free_blocks(), 3);
  const auto hit = m.match_prefix(t, 10);
  ASSERT_EQ(hit, b);
  for (int32_t x : hit) m.acquire(x);  // a new sequence reuses the prefix
  EXPECT_EQ(m.free_blocks(), 1) << "revived blocks are no longer evictable";
  EXPECT_EQ(m.refs(b[0]), 1);
  const int32_t fresh = m.allocate();
  EXPECT_NE(fresh, b[0]);
  EXPECT_NE(fresh, b[1]);
  EXPECT_EQ(m.allocate(), -1) << "the revived blocks are not evicted";
  EXPECT_EQ(m.stats().evictions, 0u);
  EXPECT_EQ(m.match_prefix(t, 10), b);
  // Released again, they are evictable again, now after nothing else.
  m.release(fresh);
  release_last_to_first(m, b);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_EQ(m.allocate(), fresh) << "an uncached free block first";
  EXPECT_EQ(m.allocate(), b[1]);
  EXPECT_EQ(m.allocate(), b[0]);
  EXPECT_EQ(m.stats().evictions, 2u);
}

TEST(KvBlockManager, AnEvictedParentOrphansItsChildren) {
  KvBlockManager m(3, kBs, true);
  const auto t = toks(2 * kBs, 1);
  const auto b = cache_sequence(m, t);
  m.release(b[0]);  // head first: it goes before its child
  m.release(b[1]);
  const int32_t reused = m.allocate();
  EXPECT_EQ(reused, 2) << "the never-used block first";
  const int32_t evicted = m.allocate();
  EXPECT_EQ(evicted, b[0]);
  EXPECT_TRUE(m.match_prefix(t, 10).empty()) << "the child is unreachable without its parent";
  // The parent's block reused for other tokens: its old child does not follow it.
  const auto other = toks(kBs, 900);
  m.register_full(evicted, -1, other);
  std::vector<int32_t> q = other;
  q.insert(q.end(), t.begin() + kBs, t.end());
  EXPECT_EQ(m.match_prefix(q, 10), std::vector<int32_t>{evicted});
}

TEST(KvBlockManager, WithoutThePrefixCacheNothingIsCached) {
  KvBlockManager m(3, kBs, false);
  EXPECT_FALSE(m.prefix_cache());
  const auto t = toks(3 * kBs, 1);
  const auto b = cache_sequence(m, t);
  EXPECT_EQ(m.cached_blocks(), 0);
  EXPECT_TRUE(m.match_prefix(t, 10).empty());
  release_last_to_first(m, b);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_THROW(m.acquire(b[0]), Error) << "released blocks are plain free blocks";
  for (int i = 0; i < 3; ++i) EXPECT_GE(m.allocate(), 0);
  EXPECT_EQ(m.stats().evictions, 0u);
}
