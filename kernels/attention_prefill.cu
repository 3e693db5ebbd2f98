// Tiled (flash-attention style) causal prefill attention: the launcher, the tile scan and the fp32
// CUDA-core kernel; see attention_prefill.hpp. The tensor-core kernel is attention_prefill_mma.cu.
//
// Work split (attention_prefill_tile.cuh): one thread block per (query tile, kv head, head chunk),
// a tile being kRows = 64 (query token, query head of the GQA group) rows. A scan kernel first
// counts each valid sequence's tiles (tile_start, in the workspace); the attention kernels find
// their sequence by binary search over tile_start (block x takes tile total - 1 - x, so the tiles
// with the most keys start first). The CUDA-core kernel below runs 256 threads per block.
//
// Per block: Q (times scale * log2 e) to shared fp32 [kRows][DMAX + 4]; then for each tile of
// kKeys = 32 key positions up to the tile's last query position:
//   1. each key's K/V row offset from the block table (bad block id -> flag, zeros loaded)
//   2. K and V tile to shared as fp32 [kKeys][DMAX + 4] (positions past the end: zeros)
//   3. scores: thread (tr = tid / 16, tk = tid % 16) owns rows tr + 16 i (i < 4) and keys
//      tk + 16 j (j < 2); causal mask key <= query position; online softmax (running max m and
//      sum l per row, exp2) with the row reductions over the 16 lanes of a half warp; P to shared
//   4. O = O * alpha + P V: the same thread owns rows tr + 16 i and dims 4 (tk + 16 j) .. + 3
// out = O / l. head_dim is padded with zeros to DMAX (64, 128 or 256), so any even head_dim works.
// Rows no tile writes (invalid sequences, tokens outside every sequence) keep the NaN that the
// launcher's memset put there; a bad block id in a tile's key range makes the tile's rows NaN.
// This kernel is never key-split (grid.z = 1); the launcher below chooses the tensor-core
// kernel's key splits (the rule is above prefill_detail::choose_key_splits).
#include "kernels/attention_prefill.hpp"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "kernels/attention_prefill_tile.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/dequant.hpp"  // convert_to_half
#include "kernels/launch.cuh"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = kPrefillRows;   // query rows per block (4 per thread, 16 row groups)
constexpr int kKeys = 32;             // key positions per K/V tile (2 per thread)
constexpr int kPStride = kKeys + 16;  // P row stride: the two half warps write different banks
constexpr int kScanThreads = 1024;
constexpr int kMaxHeadDim = 256;

template <int DMAX>
__host__ __device__ constexpr int q_stride() {
  return DMAX + 4;
}  // float4 rows on distinct banks

template <int DMAX>
constexpr size_t smem_bytes() {
  return sizeof(float) * (size_t(kRows + 2 * kKeys) * q_stride<DMAX>() + size_t(kRows) * kPStride) +
         sizeof(int64_t) * kKeys;
}

// Heads of a GQA group handled by one block (and so the tokens of a tile: kRows / hb).
int heads_per_block(int group) { return group < kRows ? group : kRows; }

// grid 1, block kScanThreads. tile_start[0] = 0, tile_start[i + 1] = tiles of sequences 0..i,
// clamped to max_tiles (the grid of the attention kernel). A sequence has tiles only when it is
// valid: 0 <= begin <= end <= n_tokens, 0 < n <= ctx <= max_context.
__global__ void __launch_bounds__(kScanThreads)
    attn_prefill_tile_scan_kernel(const int32_t* __restrict__ cu_seqlens,
                                  const int32_t* __restrict__ seq_context_lens,
                                  int32_t* __restrict__ tile_start, int n_seqs, int n_tokens,
                                  int max_context, int tokens_per_tile, int max_tiles) {
  grid_dependency_sync();
  __shared__ long long s[kScanThreads];
  __shared__ long long carry_s;
  const int tid = threadIdx.x;
  if (tid == 0) {
    carry_s = 0;
    tile_start[0] = 0;
  }
  __syncthreads();
  for (int base = 0; base < n_seqs; base += kScanThreads) {
    const int i = base + tid;
    long long c = 0;
    if (i < n_seqs) {
      const int begin = cu_seqlens[i], end = cu_seqlens[i + 1], ctx = seq_context_lens[i];
      if (begin >= 0 && begin <= end && end <= n_tokens) {
        const int n = end - begin;
        if (n > 0 && ctx >= n && ctx <= max_context)
          c = (n + tokens_per_tile - 1) / tokens_per_tile;
      }
    }
    s[tid] = c;
    __syncthreads();
    for (int off = 1; off < kScanThreads; off <<= 1) {  // inclusive Hillis-Steele scan
      const long long v = tid >= off ? s[tid - off] : 0;
      __syncthreads();
      s[tid] += v;
      __syncthreads();
    }
    const long long total = carry_s + s[tid];
    if (i < n_seqs) tile_start[i + 1] = int(total < max_tiles ? total : max_tiles);
    __syncthreads();  // every thread has read carry_s
    if (tid == kScanThreads - 1) carry_s = total;
    __syncthreads();
  }
}

// grid (max_tiles, n_head_kv * chunks), block kThreads, dynamic shared smem_bytes<DMAX>().
template <int DMAX>
__global__ void __launch_bounds__(kThreads) attn_prefill_tile_kernel(const PrefillTileParams p) {
  grid_dependency_sync();
  constexpr int QS = q_stride<DMAX>();
  constexpr int NJ = DMAX / 64;  // float4 dim groups per thread in the P V phase
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* q_s = reinterpret_cast<float*>(smem_raw);                       // [kRows][QS]
  float* k_s = q_s + kRows * QS;                                         // [kKeys][QS]
  float* v_s = k_s + kKeys * QS;                                         // [kKeys][QS]
  float* p_s = v_s + kKeys * QS;                                         // [kRows][kPStride]
  int64_t* krow_s = reinterpret_cast<int64_t*>(p_s + kRows * kPStride);  // [kKeys], -1: none
  __shared__ int bad_s;

  const int tid = threadIdx.x;
  const PrefillTile tl = locate_prefill_tile(p);
  if (tl.seq < 0) return;  // uniform per block
  const int hb = p.hb, head_dim = p.head_dim, block_size = p.block_size;
  const int t0 = tl.t0, pos0 = tl.pos0, kv_end = tl.kv_end;
  const int32_t* __restrict__ table = tl.table;
  const float* __restrict__ q = p.q;
  const float scale_log2 = p.scale_log2;
  const __half* __restrict__ k_cache = p.k_cache;
  const __half* __restrict__ v_cache = p.v_cache;
  auto row_head = [&](int r) { return tl.row_head(r, p); };

  if (tid == 0) bad_s = 0;
  // Q tile, times scale * log2(e), zero-padded to DMAX dims and for inactive rows.
  for (int idx = tid; idx < kRows * (DMAX / 2); idx += kThreads) {
    const int r = idx / (DMAX / 2), d = 2 * (idx % (DMAX / 2));
    const int h = row_head(r);
    float2 v = make_float2(0.0f, 0.0f);
    if (h >= 0 && d < head_dim) {
      const int t = t0 + r / hb;
      v = *reinterpret_cast<const float2*>(q + (int64_t(t) * p.n_head + h) * head_dim + d);
      v.x *= scale_log2;
      v.y *= scale_log2;
    }
    *reinterpret_cast<float2*>(q_s + r * QS + d) = v;
  }
  __syncthreads();  // bad_s = 0 before any thread sets it

  const int tr = tid / 16, tk = tid % 16;
  int qpos[4];  // query position of row tr + 16 i; -1 for inactive rows (everything masked)
#pragma unroll
  for (int i = 0; i < 4; ++i) qpos[i] = row_head(tr + 16 * i) >= 0 ? pos0 + (tr + 16 * i) / hb : -1;
  float m[4], l[4], o[4][NJ][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    for (int j = 0; j < NJ; ++j)
      for (int c = 0; c < 4; ++c) o[i][j][c] = 0.0f;
  }

  int qlo[4];  // keys at or below: outside the row's sliding window
#pragma unroll
  for (int i = 0; i < 4; ++i) qlo[i] = PrefillTile::window_floor(qpos[i], p);
  for (int kbase = tl.kv_begin / kKeys * kKeys; kbase < kv_end; kbase += kKeys) {
    // 1. key rows (the previous iteration ended with a sync: krow_s, k_s, v_s, p_s are free)
    if (tid < kKeys) {
      const int pos = kbase + tid;
      int64_t row = -1;
      if (pos < kv_end) {
        const int32_t blk = table[pos / block_size];
        if (blk < 0 || blk >= p.n_blocks)
          atomicExch(&bad_s, 1);
        else
          row = ((int64_t(blk) * p.n_head_kv + tl.kvh) * block_size + pos % block_size) * head_dim;
      }
      krow_s[tid] = row;
    }
    __syncthreads();
    // 2. K and V tile to fp32 shared; zeros past the end and in the padding dims
    if (head_dim % 8 == 0) {
      for (int idx = tid; idx < kKeys * (DMAX / 8); idx += kThreads) {
        const int kk = idx / (DMAX / 8), d = 8 * (idx % (DMAX / 8));
        const int64_t row = krow_s[kk];
        float4 ka = make_float4(0.f, 0.f, 0.f, 0.f), kb = ka, va = ka, vb = ka;
        if (row >= 0 && d < head_dim) {
          const uint4 kr = *reinterpret_cast<const uint4*>(k_cache + row + d);
          const uint4 vr = *reinterpret_cast<const uint4*>(v_cache + row + d);
          const __half2* kh = reinterpret_cast<const __half2*>(&kr);
          const __half2* vh = reinterpret_cast<const __half2*>(&vr);
          float2 a = __half22float2(kh[0]), b = __half22float2(kh[1]);
          float2 c = __half22float2(kh[2]), e = __half22float2(kh[3]);
          ka = make_float4(a.x, a.y, b.x, b.y);
          kb = make_float4(c.x, c.y, e.x, e.y);
          a = __half22float2(vh[0]), b = __half22float2(vh[1]);
          c = __half22float2(vh[2]), e = __half22float2(vh[3]);
          va = make_float4(a.x, a.y, b.x, b.y);
          vb = make_float4(c.x, c.y, e.x, e.y);
        }
        *reinterpret_cast<float4*>(k_s + kk * QS + d) = ka;
        *reinterpret_cast<float4*>(k_s + kk * QS + d + 4) = kb;
        *reinterpret_cast<float4*>(v_s + kk * QS + d) = va;
        *reinterpret_cast<float4*>(v_s + kk * QS + d + 4) = vb;
      }
    } else {
      for (int idx = tid; idx < kKeys * (DMAX / 2); idx += kThreads) {
        const int kk = idx / (DMAX / 2), d = 2 * (idx % (DMAX / 2));
        const int64_t row = krow_s[kk];
        float2 kf = make_float2(0.f, 0.f), vf = kf;
        if (row >= 0 && d < head_dim) {
          kf = __half22float2(*reinterpret_cast<const __half2*>(k_cache + row + d));
          vf = __half22float2(*reinterpret_cast<const __half2*>(v_cache + row + d));
        }
        *reinterpret_cast<float2*>(k_s + kk * QS + d) = kf;
        *reinterpret_cast<float2*>(v_s + kk * QS + d) = vf;
      }
    }
    __syncthreads();

    // 3. scores for rows tr + 16 i, keys tk + 16 j (log2 domain)
    float s[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i][0] = s[i][1] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < DMAX; d += 4) {
      float4 kv[2], qv[4];
#pragma unroll
      for (int j = 0; j < 2; ++j)
        kv[j] = *reinterpret_cast<const float4*>(k_s + (tk + 16 * j) * QS + d);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        qv[i] = *reinterpret_cast<const float4*>(q_s + (tr + 16 * i) * QS + d);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j) {
          float a = s[i][j];
          a = fmaf(qv[i].x, kv[j].x, a);
          a = fmaf(qv[i].y, kv[j].y, a);
          a = fmaf(qv[i].z, kv[j].z, a);
          a = fmaf(qv[i].w, kv[j].w, a);
          s[i][j] = a;
        }
    }
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
      for (int j = 0; j < 2; ++j) {
        const int key = kbase + tk + 16 * j;
        if (key > qpos[i] || key <= qlo[i]) s[i][j] = -INFINITY;  // causal (and inactive rows)
        mx = fmaxf(mx, s[i][j]);
      }
      mx = group_max<16>(mx);
      const float m_new = fmaxf(m[i], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0
      alpha[i] = exp2f(m[i] - m_use);                         // m = -inf: 0 (o, l are 0)
      float sum = 0.0f;
      for (int j = 0; j < 2; ++j) {
        const float p = exp2f(s[i][j] - m_use);
        p_s[(tr + 16 * i) * kPStride + tk + 16 * j] = p;
        sum += p;
      }
      sum = group_sum<16>(sum);
      l[i] = l[i] * alpha[i] + sum;
      m[i] = m_new;
    }
    __syncthreads();

// 4. o = o * alpha + P V for rows tr + 16 i, dims 4 (tk + 16 j) .. + 3
#pragma unroll
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < NJ; ++j)
        for (int c = 0; c < 4; ++c) o[i][j][c] *= alpha[i];
#pragma unroll 2
    for (int k = 0; k < kKeys; k += 4) {
      float4 pv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        pv[i] = *reinterpret_cast<const float4*>(p_s + (tr + 16 * i) * kPStride + k);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float4 vv[NJ];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
          vv[j] = *reinterpret_cast<const float4*>(v_s + (k + kk) * QS + 4 * (tk + 16 * j));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float p = kk == 0 ? pv[i].x : kk == 1 ? pv[i].y : kk == 2 ? pv[i].z : pv[i].w;
          for (int j = 0; j < NJ; ++j) {
            o[i][j][0] = fmaf(p, vv[j].x, o[i][j][0]);
            o[i][j][1] = fmaf(p, vv[j].y, o[i][j][1]);
            o[i][j][2] = fmaf(p, vv[j].z, o[i][j][2]);
            o[i][j][3] = fmaf(p, vv[j].w, o[i][j][3]);
          }
        }
      }
    }
    __syncthreads();  // k_s, v_s, p_s, krow_s free for the next tile
  }

  const bool bad = bad_s != 0;  // last written before the final loop sync (kv_end >= 1)
  const float nan = __int_as_float(0x7fc00000);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = tr + 16 * i;
    const int h = row_head(r);
    if (h < 0) continue;
    const int t = t0 + r / hb;
    float* __restrict__ orow = p.out + (int64_t(t) * p.n_head + h) * head_dim;
    const float inv = 1.0f / l[i];
    for (int j = 0; j < NJ; ++j) {
      const int d = 4 * (tk + 16 * j);
      const float2 a =
          bad ? make_float2(nan, nan) : make_float2(o[i][j][0] * inv, o[i][j][1] * inv);
      const float2 b =
          bad ? make_float2(nan, nan) : make_float2(o[i][j][2] * inv, o[i][j][3] * inv);
      if (d < head_dim) *reinterpret_cast<float2*>(orow + d) = a;
      if (d + 2 < head_dim) *reinterpret_cast<float2*>(orow + d + 2) = b;
    }
  }
}

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

template <int DMAX>
void launch_tiles(dim3 grid, const PrefillTileParams& p, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<DMAX>();
  RZ_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_tile_kernel<DMAX>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_kernel(attn_prefill_tile_kernel<DMAX>, grid, kThreads, smem, stream, p);
  RZ_CUDA_CHECK_LAUNCH("attn_prefill_tile_kernel");
}

// Key splits of the tensor-core kernel (attention_prefill.hpp). The automatic rule, for a grid of
// B blocks (an upper bound on the tiles, times kv heads and head chunks) and N SMs:
//   S = min(floor(kSplitBlocksPerSm * N / B), floor(key tiles of max_context / kMinSplitTiles),
//           kMaxKeySplits, floor(kMaxSplitBlocks / B)),  no split when S < 2.
// - kSplitBlocksPerSm = 2: the head_dim-128 kernel keeps 2 blocks resident per SM (87 KiB of
//   shared memory each of the 228), so 2 N blocks are one full wave. S is rounded down so that
//   B * S stays within that wave: a few blocks past it would wait for a whole second round
//   (a 224-token chunk of qwen2.5-1.5b has B = 46: S = 5 gives 230 blocks on the H200's 264
//   slots, S = 6 would give 276). Grids of at least N blocks are left alone.
// - kMinSplitTiles = 2 (128 keys): per split the block still loads its Q tile, fills the copy
//   pipeline, and writes 64 rows of (head_dim + 2) fp32 partials that the combine reads back,
//   about 2 K/V tiles' worth of bytes at head_dim 128. Splitting only ever happens for grids
//   smaller than one wave, where the kernel is bound by the latency of each block's serial walk
//   over its key tiles rather than by bytes, so halving the walk outweighs that overhead (a
//   96-token chunk at context 1,100 of qwen2.5-1.5b: 20 blocks, 4 splits of ~5 tiles at a
//   minimum of 4 tiles, 9 of ~2 at 2). The same minimum holds per tile in the kernel (a tile
//   with fewer keys than max_context uses fewer splits, one when it has at most 2 key tiles).
// - kMaxSplitBlocks = 512 bounds the partials (and so the workspace) on any GPU up to 256 SMs.
constexpr int kMaxKeySplits = 64;
constexpr int kSplitBlocksPerSm = 2;
constexpr int kMinSplitTiles = 2;
constexpr int64_t kMaxSplitBlocks = 512;

// The launch grid of a (shapes already valid): tiles, kv heads times head chunks.
struct Grid {
  int group = 0, hb = 0, chunks = 0, tpt = 0;
  int64_t max_tiles = 0;  // an upper bound on the query tiles: grid.x
  int64_t gy = 0;         // grid.y
  int64_t blocks() const { return max_tiles * gy; }
};

Grid grid_of(const AttentionPrefillArgs& a) {
  Grid g;
  g.group = a.n_head / a.cache.n_head_kv;
  g.hb = heads_per_block(g.group);
  g.chunks = (g.group + g.hb - 1) / g.hb;
  g.tpt = kRows / g.hb;
  // Tiles of non-overlapping sequences: sum ceil(n_i / tpt) <= n_tokens / tpt + n_seqs.
  g.max_tiles = int64_t(a.n_tokens) / g.tpt + a.n_seqs;
  g.gy = int64_t(a.cache.n_head_kv) * g.chunks;
  return g;
}

bool mma_path(const AttentionPrefillArgs& a) {
  return a.tensor_cores && prefill_mma_supported(a.cache.head_dim);
}

// Whether grid_of and the split rules may be applied to a (the shapes workspace_bytes sees need
// not have been checked).
bool sane(const AttentionPrefillArgs& a) {
  return a.n_tokens > 0 && a.n_seqs > 0 && a.n_head > 0 && a.cache.n_head_kv > 0 &&
         a.n_head % a.cache.n_head_kv == 0 && a.cache.head_dim > 0 && a.max_context > 0;
}

// Splits a may use whatever the GPU: min(key limit, kMaxKeySplits); the automatic S is at most
// this and at most kMaxSplitBlocks / B.
int64_t key_split_cap(const AttentionPrefillArgs& a) {
  const int64_t key_tiles = (int64_t(a.max_context) + kPrefillKeyTile - 1) / kPrefillKeyTile;
  return std::min<int64_t>(key_tiles / kMinSplitTiles, kMaxKeySplits);
}

// Bytes of the key-split partials of part_blocks blocks of the split grid (part_o, part_m, part_l
// in attention_prefill_tile.cuh), each array 256-byte aligned.
size_t partial_bytes(int64_t part_blocks, int head_dim) {
  if (part_blocks <= 0) return 0;
  const size_t rows = size_t(part_blocks) * kRows;
  return align_up(rows * size_t(head_dim) * sizeof(float)) + 2 * align_up(rows * sizeof(float));
}

}  // namespace

namespace prefill_detail {

// The splits attention_prefill uses for a on a GPU of sm_count SMs (a's shapes valid).
int choose_key_splits(const AttentionPrefillArgs& a, int sm_count) {
  if (!mma_path(a) || !sane(a)) return 1;
  if (a.key_splits > 0) return a.key_splits;
  const int64_t blocks = grid_of(a).blocks();
  const int64_t s = std::min({int64_t(kSplitBlocksPerSm) * std::max(sm_count, 0) / blocks,
                              key_split_cap(a), kMaxSplitBlocks / blocks});
  return s >= 2 ? int(s) : 1;
}

// Bytes of workspace a launch of a with `splits` key splits uses.
size_t workspace_bytes_for(const AttentionPrefillArgs& a, int splits) {
  if (a.n_tokens <= 0 || a.n_seqs <= 0) return 0;
  const size_t index = align_up((size_t(a.n_seqs) + 1) * sizeof(int32_t));
  if (splits <= 1 || !sane(a)) return index;
  return index + partial_bytes(grid_of(a).blocks() * splits, a.cache.head_dim);
}

}  // namespace prefill_detail

// Automatic splits: B' S' <= B' min(cap', kMaxSplitBlocks / B') <= min(B cap, kMaxSplitBlocks)
// for B' <= B and cap' <= cap (both grow with n_seqs, n_tokens and max_context), on any GPU.
size_t attention_prefill_workspace_bytes(const AttentionPrefillArgs& a) {
  if (a.n_tokens <= 0 || a.n_seqs <= 0) return 0;
  if (!sane(a) || !mma_path(a)) return prefill_detail::workspace_bytes_for(a, 1);
  if (a.key_splits > 0) return prefill_detail::workspace_bytes_for(a, a.key_splits);
  const int64_t cap = key_split_cap(a);
  const int64_t part_blocks = cap >= 2 ? std::min(grid_of(a).blocks() * cap, kMaxSplitBlocks) : 0;
  return prefill_detail::workspace_bytes_for(a, 1) + partial_bytes(part_blocks, a.cache.head_dim);
}

int attention_prefill_key_splits(const AttentionPrefillArgs& a) {
  if (a.key_splits < 0 || a.key_splits > kMaxKeySplits)
    throw Error("attention_prefill: key_splits " + std::to_string(a.key_splits) +
                " (0: automatic, or 1.." + std::to_string(kMaxKeySplits) + ")");
  // The SM count only where the automatic rule could split (no device query otherwise).
  const bool may_split = a.key_splits == 0 && mma_path(a) && sane(a) && key_split_cap(a) >= 2 &&
                         grid_of(a).blocks() * 2 <= kMaxSplitBlocks;
  return prefill_detail::choose_key_splits(a, may_split ? device_sm_count() : 0);
}

void attention_prefill(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                       const int32_t* block_tables, const int32_t* cu_seqlens,
                       const int32_t* seq_context_lens, float* out, void* workspace,
                       const AttentionPrefillArgs& a, cudaStream_t stream, void* out_f16) {
  const KvCacheShape& c = a.cache;
  const auto shape = [&] {
    return "n_seqs " + std::to_string(a.n_seqs) + ", n_tokens " + std::to_string(a.n_tokens) +
           ", n_head " + std::to_string(a.n_head) + ", n_head_kv " + std::to_string(c.n_head_kv) +
           ", head_dim " + std::to_string(c.head_dim) + ", n_blocks " + std::to_string(c.n_blocks) +
           ", block_size " + std::to_string(c.block_size) + ", max_context " +
           std::to_string(a.max_context) + ", table_stride " + std::to_string(a.table_stride);
  };
  if (a.n_seqs < 0 || a.n_tokens < 0 || a.n_seqs > 2147483646)
    throw Error("attention_prefill: bad shape (" + shape() + ")");
  if (a.n_tokens == 0) return;
  if (a.n_seqs == 0) throw Error("attention_prefill: tokens without sequences (" + shape() + ")");
  if (a.n_tokens > 65535)
    throw Error("attention_prefill: " + std::to_string(a.n_tokens) +
                " query tokens in one call (at most 65535)");
  if (workspace == nullptr) throw Error("attention_prefill: workspace required (" + shape() + ")");
  if (a.n_head <= 0 || c.n_head_kv <= 0 || a.n_head % c.n_head_kv != 0)
    throw Error("attention_prefill: n_head must be a positive multiple of n_head_kv (" + shape() +
                ")");
  if (c.head_dim < 2 || c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim)
    throw Error("attention_prefill: head_dim must be even and in [2, 256] (" + shape() + ")");
  if (c.n_blocks < 0 || c.block_size <= 0 || a.max_context <= 0 || a.table_stride <= 0 ||
      int64_t(a.table_stride) * c.block_size < a.max_context)
    throw Error("attention_prefill: block tables cannot hold max_context tokens (" + shape() + ")");
  if (a.window < 0) throw Error("attention_prefill: window must be >= 0 (" + shape() + ")");
  if (out_f16 && (!a.fill_uncovered || reinterpret_cast<uintptr_t>(out_f16) % 4 != 0))
    throw Error("attention_prefill: the fp16 form needs fill_uncovered and 4-byte alignment (" +
                shape() + ")");
  const Grid g = grid_of(a);
  if (g.max_tiles > INT_MAX || g.gy > 65535)
    throw Error("attention_prefill: too large (" + shape() + ")");
  const int splits = attention_prefill_key_splits(a);  // checks key_splits
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(float(c.head_dim));
  const float scale_log2 = scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)

  // Workspace: [tile index][part_o][part_m][part_l] (attention_prefill_tile.cuh has the shapes).
  auto* tile_start = static_cast<int32_t*>(workspace);
  // Rows that no tile writes stay NaN (0xFFFFFFFF), unless the caller owns them.
  const size_t elems = size_t(a.n_tokens) * a.n_head * c.head_dim;
  if (a.fill_uncovered) RZ_CUDA_CHECK(cudaMemsetAsync(out, 0xFF, elems * sizeof(float), stream));
  const bool mma = mma_path(a);
  if (out_f16 && mma)  // the CUDA-core kernel's form is converted from out after it
    RZ_CUDA_CHECK(cudaMemsetAsync(out_f16, 0xFF, elems * sizeof(uint16_t), stream));
  if (!a.tile_index_ready) {
    launch_kernel(attn_prefill_tile_scan_kernel, 1, kScanThreads, 0, stream, cu_seqlens,
                  seq_context_lens, tile_start, a.n_seqs, a.n_tokens, a.max_context, g.tpt,
                  int(g.max_tiles));
    RZ_CUDA_CHECK_LAUNCH("attn_prefill_tile_scan_kernel");
  }
  const dim3 grid(unsigned(g.max_tiles), unsigned(g.gy), unsigned(splits));
  PrefillTileParams p{q,
                      reinterpret_cast<const __half*>(k_cache),
                      reinterpret_cast<const __half*>(v_cache),
                      block_tables,
                      cu_seqlens,
                      seq_context_lens,
                      tile_start,
                      out,
                      a.n_seqs,
                      a.n_head,
                      g.group,
                      g.hb,
                      g.chunks,
                      c.n_blocks,
                      c.n_head_kv,
                      c.block_size,
                      c.head_dim,
                      a.table_stride,
                      scale_log2};
  p.window = a.window;
  if (mma) p.out_f16 = static_cast<__half*>(out_f16);
  if (splits > 1) {
    const size_t rows = size_t(g.blocks()) * splits * kRows;
    auto* base = static_cast<unsigned char*>(workspace) + prefill_detail::workspace_bytes_for(a, 1);
    p.splits = splits;
    // Forced splits split every tile that has keys for them; the automatic ones keep 4 key tiles
    // per split (kMinSplitTiles).
    p.min_split_tiles = a.key_splits > 0 ? 1 : kMinSplitTiles;
    p.part_o = reinterpret_cast<float*>(base);
    p.part_m = reinterpret_cast<float*>(base + align_up(rows * c.head_dim * sizeof(float)));
    p.part_l = p.part_m + align_up(rows * sizeof(float)) / sizeof(float);
  }
  if (mma)
    launch_prefill_mma(grid, p, stream);
  else if (c.head_dim <= 64)
    launch_tiles<64>(grid, p, stream);
  else if (c.head_dim <= 128)
    launch_tiles<128>(grid, p, stream);
  else
    launch_tiles<256>(grid, p, stream);
  if (out_f16 && !mma) convert_to_half(out, out_f16, HalfType::f16, int64_t(elems), stream);
}

}  // namespace rz::gpu
