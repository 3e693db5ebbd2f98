// Causal prefill attention on tensor cores (flash-attention 2 style); see attention_prefill.hpp for
// the contract and attention_prefill_tile.cuh for the tiles. Chosen by attention_prefill for
// head_dim a multiple of 16 up to 128 (mma.sync needs sm_80; the build targets sm_90); the
// CUDA-core kernel (attention_prefill.cu) takes the rest.
//
// One thread block (4 warps) per (query tile, kv head, head chunk) as the CUDA-core kernel; warp
// w owns tile rows 16 w .. 16 w + 15. Q (times scale * log2 e) is rounded to fp16 once and kept
// in registers as mma A fragments. K and V (fp16 in the cache) go through a two-stage cp.async
// pipeline in tiles of kKeys = 64 positions, head_dim padded with zeros to D (64 or 128):
//   S = Q K^T     mma m16n8k16, B fragments by ldmatrix from K rows
//   causal mask (key > row position -> -inf), online softmax per row (running max and sum,
//   exp2; the row's 4 lanes agree on the max by two shuffles)
//   O = O * alpha + P V, P rounded to fp16 straight from the S accumulators (the C layout of two
//   n-tiles is the A layout of one k-step), V fragments by ldmatrix.trans
// out = O / l in fp32. Accuracy: Q and P in fp16 (2^-11 relative), every sum in fp32; the tests
// bound the error against a float64 reference (tests/gpu/attention_prefill_test.cpp).
// Keys past kv_end and bad block ids are zero-filled by cp.async (never read); a bad block id
// makes the tile's rows NaN, as in the CUDA-core kernel.
//
// Key splits (p.splits > 1, grid.z = splits; attention_prefill.cu chooses them): block z runs the
// same loop over its tile's key tiles [z t, min((z + 1) t, n)) only (key_range below), the causal
// mask unchanged, and ends with its rows' m (log2 domain), l and unnormalized O in the partials
// instead of out (m, l, O all NaN for a bad block id; blocks past the splits the tile uses
// write nothing). attn_prefill_combine_kernel then merges each row's splits into out. A tile that
// uses one split is finished by its block as in the unsplit kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "kernels/attention_prefill_tile.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma.cuh"

namespace rz::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kKeys = kPrefillKeyTile;  // key positions per K/V tile
constexpr int kCombineThreads = 256;
constexpr int kCombineParts = 8;  // blocks per tile in the combine: one row a warp
static_assert(kPrefillRows == 16 * kWarps, "one 16-row mma tile per warp");

// The key tiles [begin, end) that split z of a tile with keys kv_begin .. kv_end - 1 takes, and
// how many splits the tile uses (splits z >= used have no keys); see PrefillTileParams.
struct KeyRange {
  int begin, end, used;
};

__device__ __forceinline__ KeyRange key_range(const PrefillTileParams& p, const PrefillTile& tl,
                                              int z) {
  const int first = tl.kv_begin / kKeys, last = (tl.kv_end + kKeys - 1) / kKeys;
  const int n = last - first;
  if (p.splits <= 1) return {first, last, 1};
  const int per = max((n + p.splits - 1) / p.splits, p.min_split_tiles);
  return {first + z * per, min(last, first + (z + 1) * per), (n + per - 1) / per};
}

// Index of row r of split z's partials for this block's (x, y): the attention and combine
// kernels share the x, y grid.
__device__ __forceinline__ int64_t part_row(int z, int r) {
  return ((int64_t(z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * kPrefillRows + r;
}

// 2^x on the special function unit, subnormal results flushed to zero (exp2f adds a range fix-up
// around the same instruction); 2^-inf = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Row stride in halves: 16 bytes of padding put the 8 rows of an ldmatrix on distinct banks.
template <int D>
constexpr int row_halves() {
  return D + 8;
}

template <int D>
constexpr size_t smem_bytes() {
  return sizeof(__half) * size_t(kPrefillRows + 4 * kKeys) * row_halves<D>();
}

// grid (max_tiles, n_head_kv * chunks), block kThreads, dynamic shared smem_bytes<D>().
template <int D>
__global__ void __launch_bounds__(kThreads) attn_prefill_mma_kernel(const PrefillTileParams p) {
  grid_dependency_wait();  // compute-bound: the next kernel launches as these blocks exit
  constexpr int S = row_halves<D>();
  constexpr int KD = D / 16;     // k-steps of Q K^T
  constexpr int ND = D / 8;      // n-tiles of O
  constexpr int NK = kKeys / 8;  // n-tiles of S
  constexpr int PIECES = D / 8;  // 16-byte pieces per K/V row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* q_s = reinterpret_cast<__half*>(smem_raw);  // [kPrefillRows][S]
  __half* k_s = q_s + kPrefillRows * S;               // [2][kKeys][S]
  __half* v_s = k_s + 2 * kKeys * S;                  // [2][kKeys][S]
  __shared__ int bad_s;
  __shared__ int row_head_s[kPrefillRows];  // tl.row_head(r), -1 for inactive rows
  __shared__ int row_tok_s[kPrefillRows];   // r / hb: the row's token within the tile

  const PrefillTile tl = locate_prefill_tile(p);
  if (tl.seq < 0) return;  // uniform per block
  const KeyRange kr = key_range(p, tl, blockIdx.z);
  if (kr.begin >= kr.end) return;  // a split this tile does not use (uniform)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  if (tid == 0) bad_s = 0;
  if (tid < kPrefillRows) {  // the divisions by hb once per block, not per element
    row_head_s[tid] = tl.row_head(tid, p);
    row_tok_s[tid] = tid / p.hb;
  }
  __syncthreads();

  // K and V positions kbase .. kbase + kKeys - 1 into stage buf (zeros past kv_end, in the
  // padding dims and for bad block ids). Thread tid copies dims d .. d + 7 of positions
  // kbase + kk0 + kRowStep i; the block-table walk steps through them without dividing.
  constexpr int kRowStep = kThreads / PIECES;
  static_assert(kThreads % PIECES == 0 && kKeys % kRowStep == 0, "whole rows per pass");
  const int d_own = 8 * (tid % PIECES), kk0 = tid / PIECES;
  const bool d_ok = d_own < p.head_dim;
  const int64_t blk_stride = int64_t(p.n_head_kv) * p.block_size * p.head_dim;
  const int64_t head_off = int64_t(tl.kvh) * p.block_size * p.head_dim + d_own;
  auto load_kv = [&](int kbase, int buf) {
    __half* kd = k_s + buf * kKeys * S + d_own;
    __half* vd = v_s + buf * kKeys * S + d_own;
    int pos = kbase + kk0;
    int bi = pos / p.block_size;       // block-table index of pos
    int bo = pos - bi * p.block_size;  // offset in the block
#pragma unroll
    for (int i = 0; i < kKeys / kRowStep; ++i) {
      const int kk = kk0 + kRowStep * i;
      int64_t off = 0;
      int bytes = 0;
      if (pos < tl.kv_end && d_ok) {
        const int32_t blk = tl.table[bi];
        if (blk < 0 || blk >= p.n_blocks) {
          bad_s = 1;
        } else {
          off = blk * blk_stride + head_off + int64_t(bo) * p.head_dim;
          bytes = 16;
        }
      }
      cp_async16_zfill(kd + kk * S, p.k_cache + off, bytes);
      cp_async16_zfill(vd + kk * S, p.v_cache + off, bytes);
      pos += kRowStep;
      bo += kRowStep;
      while (bo >= p.block_size) {  // once per step for blocks of kRowStep keys or more
        bo -= p.block_size;
        ++bi;
      }
    }
  };

  load_kv(kr.begin * kKeys, 0);
  cp_async_commit();

  // Q tile to shared as fp16, times scale * log2(e); zeros for inactive rows and padding dims.
  // Every load is issued before the first conversion waits on one (one round trip, not four).
  constexpr int kQIters = kPrefillRows * (D / 4) / kThreads;
  static_assert(kPrefillRows * (D / 4) % kThreads == 0, "whole Q passes");
  float4 qv[kQIters];
#pragma unroll
  for (int i = 0; i < kQIters; ++i) {
    const int idx = tid + i * kThreads, r = idx / (D / 4), d = 4 * (idx % (D / 4));
    const int h = row_head_s[r];
    qv[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (h >= 0 && d < p.head_dim)
      qv[i] = __ldg(reinterpret_cast<const float4*>(
          p.q + (int64_t(tl.t0 + row_tok_s[r]) * p.n_head + h) * p.head_dim + d));
  }
#pragma unroll
  for (int i = 0; i < kQIters; ++i) {
    const int idx = tid + i * kThreads, r = idx / (D / 4), d = 4 * (idx % (D / 4));
    uint2 packed;
    packed.x = pack_half2(qv[i].x * p.scale_log2, qv[i].y * p.scale_log2);
    packed.y = pack_half2(qv[i].z * p.scale_log2, qv[i].w * p.scale_log2);
    *reinterpret_cast<uint2*>(q_s + r * S + d) = packed;
  }
  __syncthreads();
  uint32_t qf[KD][4];
#pragma unroll
  for (int kd = 0; kd < KD; ++kd)
    ldmatrix_x4(qf[kd], q_s + (16 * warp + lane % 16) * S + 16 * kd + (lane / 16) * 8);

  const int r0 = 16 * warp + g, r1 = r0 + 8;  // this thread's two rows
  const int h0 = row_head_s[r0], h1 = row_head_s[r1];
  const int qpos0 = h0 >= 0 ? tl.pos0 + row_tok_s[r0] : -1;  // tl.row_pos
  const int qpos1 = h1 >= 0 ? tl.pos0 + row_tok_s[r1] : -1;
  const int lo0 = PrefillTile::window_floor(qpos0, p), lo1 = PrefillTile::window_floor(qpos1, p);
  // A key tile needs the mask only where it reaches past the warp's first active position (the
  // causal edge; keys past kv_end are there too) or down into a row's window floor. Inactive
  // rows have Q = 0 (scores 0, finite) and are never written, so they need no mask of their own.
  const int warp_qmin =
      __reduce_min_sync(0xffffffffu, min(h0 >= 0 ? qpos0 : INT_MAX, h1 >= 0 ? qpos1 : INT_MAX));
  const int warp_lomax = __reduce_max_sync(0xffffffffu, max(lo0, lo1));
  float o[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // l: this thread's columns only

  for (int it = kr.begin; it < kr.end; ++it) {
    const int buf = (it - kr.begin) & 1;
    if (it + 1 < kr.end) {  // stage buf ^ 1 was freed by the previous iteration's last sync
      load_kv((it + 1) * kKeys, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __half* kb = k_s + buf * kKeys * S;
    const __half* vb = v_s + buf * kKeys * S;

    float s[NK][4];
#pragma unroll
    for (int j = 0; j < NK; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd)
#pragma unroll
      for (int j = 0; j < NK; j += 2) {
        uint32_t b[4];  // keys 8j.. (dims 16kd, +8), keys 8j + 8.. (dims 16kd, +8)
        ldmatrix_x4(b,
                    kb + (8 * j + (lane / 16) * 8 + lane % 8) * S + 16 * kd + ((lane / 8) % 2) * 8);
        mma_16816(s[j], qf[kd][0], qf[kd][1], qf[kd][2], qf[kd][3], b[0], b[1]);
        mma_16816(s[j + 1], qf[kd][0], qf[kd][1], qf[kd][2], qf[kd][3], b[2], b[3]);
      }

    const int kbase = it * kKeys;
    if (kbase + kKeys - 1 > warp_qmin || kbase <= warp_lomax) {  // uniform per warp
#pragma unroll
      for (int j = 0; j < NK; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = kbase + 8 * j + 2 * c + e;
          // causal, and inactive rows (qpos -1); keys below a sliding window
          if (key > qpos0 || key <= lo0) s[j][e] = -INFINITY;
          if (key > qpos1 || key <= lo1) s[j][2 + e] = -INFINITY;
        }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NK; ++j) {
      mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
      mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
    }
    mx0 = group_max<4>(mx0);
    mx1 = group_max<4>(mx1);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0;  // all masked so far: p = 0
    const float mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float alpha0 = exp2_ftz(m0 - mu0), alpha1 = exp2_ftz(m1 - mu1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NK; ++j) {
      s[j][0] = exp2_ftz(s[j][0] - mu0);
      s[j][1] = exp2_ftz(s[j][1] - mu0);
      s[j][2] = exp2_ftz(s[j][2] - mu1);
      s[j][3] = exp2_ftz(s[j][3] - mu1);
      sum0 += s[j][0] + s[j][1];
      sum1 += s[j][2] + s[j][3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      o[n][0] *= alpha0;
      o[n][1] *= alpha0;
      o[n][2] *= alpha1;
      o[n][3] *= alpha1;
    }

#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t a0 = pack_half2(s[2 * kk][0], s[2 * kk][1]);
      const uint32_t a1 = pack_half2(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t a2 = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const uint32_t a3 = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < ND; n += 2) {
        uint32_t b[4];  // keys 16kk.. and 16kk + 8.. of dims 8n.., then of dims 8n + 8..
        ldmatrix_x4_trans(
            b, vb + (16 * kk + lane % 8 + ((lane / 8) % 2) * 8) * S + 8 * n + (lane / 16) * 8);
        mma_16816(o[n], a0, a1, a2, a3, b[0], b[1]);
        mma_16816(o[n + 1], a0, a1, a2, a3, b[2], b[3]);
      }
    }
    __syncthreads();  // stage buf is free for the copies issued in the next iteration
  }

  l0 = group_sum<4>(l0);
  l1 = group_sum<4>(l1);
  const bool bad = bad_s != 0;  // set before the sync that preceded its tile's use
  const float nan = __int_as_float(0x7fc00000);
  if (kr.used > 1) {  // partials for the combine kernel: unnormalized O, m and l
    const int64_t pr0 = part_row(blockIdx.z, r0), pr1 = part_row(blockIdx.z, r1);
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      const int d = 8 * n + 2 * c;
      if (d >= p.head_dim) continue;
      if (h0 >= 0)
        *reinterpret_cast<float2*>(p.part_o + pr0 * p.head_dim + d) =
            bad ? make_float2(nan, nan) : make_float2(o[n][0], o[n][1]);
      if (h1 >= 0)
        *reinterpret_cast<float2*>(p.part_o + pr1 * p.head_dim + d) =
            bad ? make_float2(nan, nan) : make_float2(o[n][2], o[n][3]);
    }
    if (c == 0 && h0 >= 0) {
      p.part_m[pr0] = bad ? nan : m0;
      p.part_l[pr0] = bad ? nan : l0;
    }
    if (c == 0 && h1 >= 0) {
      p.part_m[pr1] = bad ? nan : m1;
      p.part_l[pr1] = bad ? nan : l1;
    }
    return;
  }
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  // out's element (and its fp16 form's): two consecutive dims of one row
  const auto store = [&](int r, int h, int d, float2 v) {
    const int64_t e = (int64_t(tl.t0 + row_tok_s[r]) * p.n_head + h) * p.head_dim + d;
    *reinterpret_cast<float2*>(p.out + e) = v;
    if (p.out_f16) *reinterpret_cast<__half2*>(p.out_f16 + e) = __floats2half2_rn(v.x, v.y);
  };
#pragma unroll
  for (int n = 0; n < ND; ++n) {
    const int d = 8 * n + 2 * c;
    if (d >= p.head_dim) continue;  // head_dim % 16 == 0: d + 1 is in range too
    if (h0 >= 0)
      store(r0, h0, d, bad ? make_float2(nan, nan) : make_float2(o[n][0] * inv0, o[n][1] * inv0));
    if (h1 >= 0)
      store(r1, h1, d, bad ? make_float2(nan, nan) : make_float2(o[n][2] * inv1, o[n][3] * inv1));
  }
}

// grid (max_tiles, n_head_kv * chunks, kCombineParts), block kCombineThreads: merges the
// partials of the tiles that use more than one split; one warp per row (the z blocks of a tile
// share its rows), lane i holding dims 4 i .. 4 i + 3 (head_dim <= 128). Per row:
//   M = max_j m_j, w_j = 2^(m_j - M), out = sum_j w_j O_j / sum_j w_j l_j
// over the splits j the tile uses. The lanes load every split's m and l at once (lane j: split j
// and j + 32) and reduce them by shuffles, so the row waits for one round of loads there, and the
// O loads of several splits are in flight together (their addresses do not depend on the sums).
// A split whose keys all lie past the row's position (or below its sliding window) has
// m_j = -inf (weight 0); some split holds the row's own position, so M is finite unless a partial
// is NaN, and a NaN partial (bad block id) makes w_j, and so the row, NaN (fmaxf skips it in M).
// (The decode combine in attention_decode.cu is the same sum in the natural-log domain; what
// differs, and stays apart, is which rows and partitions exist: slots and lengths there, tiles
// here.)
__global__ void __launch_bounds__(kCombineThreads)
    attn_prefill_combine_kernel(const PrefillTileParams p) {
  grid_dependency_sync();
  constexpr int kRowWarps = kCombineThreads / 32;
  const PrefillTile tl = locate_prefill_tile(p);
  if (tl.seq < 0) return;
  const int used = key_range(p, tl, 0).used;
  if (used <= 1) return;  // written by the attention kernel
  const int lane = threadIdx.x % 32, d = 4 * lane;
  for (int r = blockIdx.z * kRowWarps + threadIdx.x / 32; r < kPrefillRows;
       r += kRowWarps * gridDim.z) {
    const int h = tl.row_head(r, p);  // uniform per warp
    if (h < 0) continue;
    const bool ja = lane < used, jb = lane + 32 < used;  // kMaxKeySplits <= 64
    const float ma = ja ? p.part_m[part_row(lane, r)] : -INFINITY;
    const float mb = jb ? p.part_m[part_row(lane + 32, r)] : -INFINITY;
    const float la = ja ? p.part_l[part_row(lane, r)] : 0.0f;
    const float lb = jb ? p.part_l[part_row(lane + 32, r)] : 0.0f;
    float mx = warp_max(fmaxf(ma, mb));
    if (mx == -INFINITY) mx = 0.0f;  // not reached (see above): l = 0 gives NaN
    const float wa = ja ? exp2f(ma - mx) : 0.0f, wb = jb ? exp2f(mb - mx) : 0.0f;
    const float l = warp_sum(ja ? wa * la : 0.0f) + warp_sum(jb ? wb * lb : 0.0f);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int j = 0; j < used; ++j) {
      const float w = __shfl_sync(0xffffffffu, j < 32 ? wa : wb, j % 32);
      if (d < p.head_dim) {
        const float4 v =
            *reinterpret_cast<const float4*>(p.part_o + part_row(j, r) * p.head_dim + d);
        acc.x = fmaf(w, v.x, acc.x);
        acc.y = fmaf(w, v.y, acc.y);
        acc.z = fmaf(w, v.z, acc.z);
        acc.w = fmaf(w, v.w, acc.w);
      }
    }
    if (d < p.head_dim) {
      const float inv = 1.0f / l;
      const float4 v = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      const int64_t e = (int64_t(tl.t0 + r / p.hb) * p.n_head + h) * p.head_dim + d;
      *reinterpret_cast<float4*>(p.out + e) = v;
      if (p.out_f16) {
        __half2* f = reinterpret_cast<__half2*>(p.out_f16 + e);
        f[0] = __floats2half2_rn(v.x, v.y);
        f[1] = __floats2half2_rn(v.z, v.w);
      }
    }
  }
}

template <int D>
void launch(dim3 grid, const PrefillTileParams& p, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<D>();
  RZ_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_mma_kernel<D>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_kernel(attn_prefill_mma_kernel<D>, grid, kThreads, smem, stream, p);
  RZ_CUDA_CHECK_LAUNCH("attn_prefill_mma_kernel");
  if (p.splits > 1) {
    launch_kernel(attn_prefill_combine_kernel, dim3(grid.x, grid.y, kCombineParts), kCombineThreads,
                  0, stream, p);
    RZ_CUDA_CHECK_LAUNCH("attn_prefill_combine_kernel");
  }
}

}  // namespace

bool prefill_mma_supported(int head_dim) {
  return head_dim > 0 && head_dim % 16 == 0 && head_dim <= 128;
}

void launch_prefill_mma(dim3 grid, const PrefillTileParams& p, cudaStream_t stream) {
  if (p.head_dim <= 64)
    launch<64>(grid, p, stream);
  else
    launch<128>(grid, p, stream);
}

}  // namespace rz::gpu
