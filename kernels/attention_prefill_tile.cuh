// What the two prefill attention tile kernels share (internal to kernels/attention_prefill*.cu):
// their parameters, how a thread block finds its query tile, and which (token, head) a tile row
// is. The split (attention_prefill.cu has the top comment): a tile holds kPrefillRows = 64 query
// rows, a row being one (query token, query head of the kv head's GQA group):
//   row r -> token t0 + r / hb, head kvh * group + chunk * hb + r % hb
// with hb = min(group, 64) heads per block, so a tile covers 64 / hb tokens of one sequence and
// the heads of a group share every K/V tile the block loads. The scan kernel writes tile_start
// (tiles of sequences before i); block x takes tile tile_start[n_seqs] - 1 - x (the tiles with
// the most keys first).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rz::gpu {

constexpr int kPrefillRows = 64;     // query rows per tile
constexpr int kPrefillKeyTile = 64;  // keys per K/V tile of the tensor-core kernel (key splits
                                     // cover whole tiles of these)

struct PrefillTileParams {
  const float* q;
  const __half* k_cache;
  const __half* v_cache;
  const int32_t* block_tables;
  const int32_t* cu_seqlens;
  const int32_t* seq_context_lens;
  const int32_t* tile_start;
  float* out;
  int n_seqs, n_head, group, hb, chunks, n_blocks, n_head_kv, block_size, head_dim, table_stride;
  float scale_log2;  // scale * log2(e): scores in the exp2 domain
  int window = 0;    // sliding window: a query at position q sees keys (q - window, q]; 0: all
  // Key splits (tensor-core kernel; grid.z = splits, 1: unsplit and the part_* unused). A tile of
  // n key tiles takes t = max(ceil(n / splits), min_split_tiles) of them per split, so it uses
  // ceil(n / t) splits; a tile that uses one is written to out directly, the others go through
  // the partials (block (x, y, z), row r: index ((z * gridDim.y + y) * gridDim.x + x) * 64 + r)
  // and the combine kernel (same x, y grid).
  int splits = 1, min_split_tiles = 1;
  float* part_o = nullptr;  // [splits][gridDim.y][gridDim.x][kPrefillRows][head_dim] fp32
  float* part_m = nullptr;  // [splits][gridDim.y][gridDim.x][kPrefillRows] running max (log2)
  float* part_l = nullptr;  // same shape: sum of 2^(score - m)
  // out's fp16 form (convert_to_half's rounding, same layout), written beside out where set
  // (the tensor-core kernel and its combine).
  __half* out_f16 = nullptr;
};

struct PrefillTile {
  int seq = -1;  // -1: this block has no tile (grid.x is an upper bound)
  int kvh = 0, chunk = 0;
  int t0 = 0;        // first query token of the tile
  int ntok = 0;      // query tokens in the tile
  int pos0 = 0;      // position of token t0
  int kv_begin = 0;  // keys kv_begin .. kv_end - 1 are needed (kv_begin > 0: a sliding window)
  int kv_end = 0;
  const int32_t* table = nullptr;

  // Query head of row r, -1 for an inactive row (past the tile's tokens or the group's heads).
  __device__ __forceinline__ int row_head(int r, const PrefillTileParams& p) const {
    const int tl = r / p.hb, g = chunk * p.hb + r % p.hb;
    return (tl < ntok && g < p.group) ? kvh * p.group + g : -1;
  }
  // Query position of row r; -1 for inactive rows (every key masked).
  __device__ __forceinline__ int row_pos(int r, const PrefillTileParams& p) const {
    return row_head(r, p) >= 0 ? pos0 + r / p.hb : -1;
  }
  // Keys at or below this are outside the sliding window of a row at qpos (-1: none are).
  __device__ __forceinline__ static int window_floor(int qpos, const PrefillTileParams& p) {
    return p.window > 0 ? qpos - p.window : -1;
  }
};

// The tile of this thread block: uniform per block.
__device__ __forceinline__ PrefillTile locate_prefill_tile(const PrefillTileParams& p) {
  PrefillTile t;
  const int tile = p.tile_start[p.n_seqs] - 1 - int(blockIdx.x);
  if (tile < 0) return t;
  int lo = 0, hi = p.n_seqs - 1;  // the sequence i with tile_start[i] <= tile < [i + 1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.tile_start[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  t.seq = lo;
  t.kvh = blockIdx.y / p.chunks;
  t.chunk = blockIdx.y % p.chunks;
  const int tpt = kPrefillRows / p.hb;  // tokens per tile
  const int begin = p.cu_seqlens[lo], end = p.cu_seqlens[lo + 1], ctx = p.seq_context_lens[lo];
  t.t0 = begin + (tile - p.tile_start[lo]) * tpt;
  t.ntok = min(tpt, end - t.t0);
  t.pos0 = ctx - (end - begin) + (t.t0 - begin);
  t.kv_end = t.pos0 + t.ntok;
  t.kv_begin = p.window > 0 ? max(0, t.pos0 - p.window + 1) : 0;
  t.table = p.block_tables + int64_t(lo) * p.table_stride;
  return t;
}

// kernels/attention_prefill_mma.cu: the tensor-core tile kernel, for head_dim a multiple of 16
// up to 128; grid as the CUDA-core kernel's, times p.splits in z (then also the combine kernel).
bool prefill_mma_supported(int head_dim);
void launch_prefill_mma(dim3 grid, const PrefillTileParams& p, cudaStream_t stream);

}  // namespace rz::gpu
