// The paged KV cache as the attention, kv_append and qkv_post kernels see it: one layer's K (or
// V) cache and the element index of a (block, kv head, offset, dim). Plain data, no CUDA; which
// blocks hold which sequence's tokens is the scheduler's (sched/kv_block_manager.hpp), and each
// step brings its sequences' block tables (model/executor.hpp).
//
// Device layout (one allocation per cache, K and V alike), fp16:
//
//   K, V: [n_layer][n_blocks][n_head_kv][block_size][head_dim]
//
//   layer l ─┬─ block 0 ─┬─ kv head 0: ┌ token offset 0: d0 d1 … d(head_dim-1) ┐ contiguous
//            │           │             │ token offset 1: …                       │ block_size *
//            │           │             └ token offset block_size-1               ┘ head_dim halves
//            │           ├─ kv head 1: …
//            │           └─ kv head n_head_kv-1
//            ├─ block 1 ─ …
//            └─ block n_blocks-1
//
// Why [block][head][offset][dim]: decode attention reads one kv head's keys (and values) for
// many tokens of one sequence; in this order a (block, head) tile is one contiguous run of
// block_size * head_dim halves (4 KiB for 16 x 128), so a warp streams whole rows and a block's
// rows for one head sit together. Appending a token writes n_head_kv short rows, which is cheap.
//
// Token position p (0-based, within its sequence) of a sequence with block table `table` lives at
//   block  = table[p / block_size]
//   offset = p % block_size
//   element (layer l, kv head h, dim d) =
//     (((l * n_blocks + block) * n_head_kv + h) * block_size + offset) * head_dim + d
// The kernels take one layer's cache (the pointer already offset by l) and, for appends, a flat
// "cache row" block * block_size + offset per token (computed on the host).
#pragma once

#include <cstdint>

namespace rz::gpu {

// Shape of one layer's paged K (or V) cache: [n_blocks][n_head_kv][block_size][head_dim] fp16.
struct KvCacheShape {
  int n_blocks = 0;
  int n_head_kv = 0;
  int block_size = 0;  // tokens per block
  int head_dim = 0;

  // Elements of one layer's cache (K or V).
  int64_t layer_elems() const { return int64_t(n_blocks) * n_head_kv * block_size * head_dim; }
  // Element index of (block, kv head, offset, dim) within one layer.
  int64_t index(int64_t block, int head, int offset, int d) const {
    return ((block * n_head_kv + head) * block_size + offset) * int64_t(head_dim) + d;
  }
  bool operator==(const KvCacheShape&) const = default;
};

}  // namespace rz::gpu
