// KvBlockManager (sched/kv_block_manager.hpp).
#include "sched/kv_block_manager.hpp"

#include <algorithm>
#include <string>

#include "formats/common.hpp"

namespace rz {

KvBlockManager::KvBlockManager(int64_t n_blocks, int block_size, bool prefix_cache)
    : block_size_(block_size), prefix_cache_(prefix_cache) {
  if (block_size < 1)
    throw Error("kv blocks: block size must be at least 1, got " + std::to_string(block_size));
  if (n_blocks < 0 || n_blocks > (int64_t{1} << 30))
    throw Error("kv blocks: bad block count " + std::to_string(n_blocks));
  blocks_.resize(static_cast<size_t>(n_blocks));
  free_.reserve(static_cast<size_t>(n_blocks));
  // Taken from the back: block 0 first.
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

uint64_t KvBlockManager::key_of(uint64_t parent_key, std::span<const int32_t> tokens) const {
  // 64-bit FNV-1a over the parent key and the token ids, then a final mix (splitmix64).
  uint64_t h = 0xcbf29ce484222325ull ^ parent_key;
  auto eat = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  eat(parent_key);
  for (int32_t t : tokens) eat(static_cast<uint32_t>(t));
  h += 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

void KvBlockManager::check_block(int32_t block, const char* what) const {
  if (block < 0 || block >= n_blocks())
    throw Error(std::string("kv blocks: ") + what + ": block " + std::to_string(block) +
                " out of range");
}

std::vector<int32_t> KvBlockManager::match_prefix(std::span<const int32_t> tokens,
                                                  int64_t max_blocks) const {
  std::vector<int32_t> out;
  if (!prefix_cache_) return out;
  const int64_t full =
      std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
  uint64_t key = 0;
  int32_t parent = -1;
  for (int64_t i = 0; i < full; ++i) {
    const auto chunk =
        tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_));
    key = key_of(key, chunk);
    auto it = index_.find(key);
    if (it == index_.end()) break;
    const Block& b = blocks_[static_cast<size_t>(it->second)];
    if (b.parent != parent ||
        !std::equal(chunk.begin(), chunk.end(), b.tokens.begin(), b.tokens.end()))
      break;
    out.push_back(it->second);
    parent = it->second;
  }
  return out;
}

void KvBlockManager::acquire(int32_t block) {
  check_block(block, "acquire");
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.refs == 0) {
    if (!b.cached) throw Error("kv blocks: acquire of a free block " + std::to_string(block));
    lru_.erase(b.lru_pos);
  }
  ++b.refs;
}

int32_t KvBlockManager::allocate() {
  int32_t id = -1;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();
    lru_.pop_front();
    forget(id);
    ++stats_.evictions;
  } else {
    return -1;
  }
  blocks_[static_cast<size_t>(id)].refs = 1;
  return id;
}

void KvBlockManager::release(int32_t block) {
  check_block(block, "release");
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.refs <= 0)
    throw Error("kv blocks: release of an unreferenced block " + std::to_string(block));
  if (--b.refs > 0) return;
  if (b.cached) {
    b.lru_pos = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void KvBlockManager::release_all(std::vector<int32_t>& table) {
  for (auto b = table.rbegin(); b != table.rend(); ++b) release(*b);
  table.clear();
}

void KvBlockManager::forget(int32_t block) {
  Block& b = blocks_[static_cast<size_t>(block)];
  index_.erase(b.key);
  b.cached = false;
  b.key = 0;
  b.parent = -1;
  b.tokens.clear();
}

int32_t KvBlockManager::register_full(int32_t block, int32_t parent,
                                      std::span<const int32_t> tokens) {
  check_block(block, "register_full");
  if (static_cast<int64_t>(tokens.size()) != block_size_)
    throw Error("kv blocks: register_full of " + std::to_string(tokens.size()) +
                " tokens in a block of " + std::to_string(block_size_));
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.refs <= 0) throw Error("kv blocks: register_full of an unreferenced block");
  if (!prefix_cache_ || b.cached) return block;
  uint64_t parent_key = 0;
  if (parent >= 0) {
    check_block(parent, "register_full parent");
    const Block& p = blocks_[static_cast<size_t>(parent)];
    if (!p.cached) return block;  // the prefix before it is not reachable: nor would this block be
    parent_key = p.key;
  }
  const uint64_t key = key_of(parent_key, tokens);
  const auto [it, inserted] = index_.emplace(key, block);
  if (!inserted) {
    const int32_t other = it->second;
    const Block& o = blocks_[static_cast<size_t>(other)];
    if (o.parent != parent ||
        !std::equal(tokens.begin(), tokens.end(), o.tokens.begin(), o.tokens.end()))
      return block;  // a hash collision: keep ours, uncached
    acquire(other);  // the same prefix, computed by another sequence: share it
    release(block);
    return other;
  }
  b.cached = true;
  b.key = key;
  b.parent = parent;
  b.tokens.assign(tokens.begin(), tokens.end());
  return block;
}

}  // namespace rz
