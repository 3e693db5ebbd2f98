// The KV cache as the scheduler owns it: which of the executor's kv_blocks() blocks are free,
// which sequences reference each one, and which full blocks hold a known prefix (automatic prefix
// caching). Plain host data; the executor only reads the block tables a step carries
// (model/executor.hpp). "No room" is an answer (allocate returns -1), never an exception.
//
//   block states:  free ──allocate──▶ referenced (refs >= 1) ──release to 0──▶ free
//                                         │ register_full (full block, its KV computed)
//                                         ▼
//                       cached + referenced ──release to 0──▶ cached, evictable (LRU)
//                                         ▲                        │ acquire (a prefix hit)
//                                         └────────────────────────┘
//                       cached, evictable ──allocate, no free block left──▶ evicted, reused
//
// A cached block is keyed by a hash of its tokens chained with its parent's key (the block
// before it in the sequence), so a key names a whole prefix. A hit is verified exactly: the
// candidate's parent must be the block just matched and its tokens must be equal, so a hash
// collision can cost a hit but never give a wrong one.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace rz {

struct KvCacheStats {
  uint64_t evictions = 0;  // cached blocks reused for other tokens
};

class KvBlockManager {
 public:
  // n_blocks blocks of block_size tokens, all free. prefix_cache: register_full keeps blocks for
  // reuse; without it, register_full does nothing and match_prefix never hits. Throws rz::Error
  // for block_size < 1 or n_blocks < 0.
  KvBlockManager(int64_t n_blocks, int block_size, bool prefix_cache);

  int block_size() const { return block_size_; }
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  bool prefix_cache() const { return prefix_cache_; }
  // Blocks allocate() can hand out now: never-used or released ones, plus cached blocks no
  // sequence references (evicted on demand).
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t referenced_blocks() const { return n_blocks() - free_blocks(); }
  int64_t cached_blocks() const { return static_cast<int64_t>(index_.size()); }
  int refs(int32_t block) const { return blocks_.at(static_cast<size_t>(block)).refs; }
  // Blocks that hold n tokens: ceil(n / block_size).
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // The longest run of cached blocks that holds tokens[0 .. k * block_size) for k <= max_blocks,
  // in order. Takes no reference (acquire each block to keep it).
  std::vector<int32_t> match_prefix(std::span<const int32_t> tokens, int64_t max_blocks) const;
  // One more reference to a block (a cached one leaves the evictable list).
  void acquire(int32_t block);
  // A block with one reference: a free one, else the least recently released cached one, which
  // is evicted (its key forgotten). -1 when every block is referenced.
  int32_t allocate();
  // One reference less. At zero a cached block becomes evictable (most recently used last), any
  // other block free. Release a sequence's blocks last to first, so its tail goes first.
  void release(int32_t block);
  // Releases a sequence's whole block table, last block first (its tail is evicted before the
  // prefix it extends), and empties it.
  void release_all(std::vector<int32_t>& table);
  // `block`, referenced, now holds the KV of `tokens` (block_size of them) following the prefix
  // that ends with block `parent` (-1: the sequence's first block). With the prefix cache on, it
  // becomes cached; when another block already holds exactly that prefix (two sequences computed
  // it at once), the caller's reference moves to that block instead (`block` is released) so
  // that the sequence's later blocks chain onto the cached prefix. Returns the block that now
  // holds the tokens for the caller: `block` or the cached one (put it in the block table).
  int32_t register_full(int32_t block, int32_t parent, std::span<const int32_t> tokens);

  const KvCacheStats& stats() const { return stats_; }

 private:
  struct Block {
    int refs = 0;
    bool cached = false;
    uint64_t key = 0;
    int32_t parent = -1;
    std::vector<int32_t> tokens;           // cached only
    std::list<int32_t>::iterator lru_pos;  // cached and refs == 0 only
  };
  uint64_t key_of(uint64_t parent_key, std::span<const int32_t> tokens) const;
  void check_block(int32_t block, const char* what) const;
  void forget(int32_t block);  // drop a cached block's key

  int block_size_;
  bool prefix_cache_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;                    // uncached, unreferenced; taken from the back
  std::list<int32_t> lru_;                       // cached, unreferenced; oldest first
  std::unordered_map<uint64_t, int32_t> index_;  // key -> cached block
  KvCacheStats stats_;
};

}  // namespace rz
