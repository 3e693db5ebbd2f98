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
constexpr int kCombineParts = 8;  // blocks per tile in the combine: one item a thread at D = 128
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

  const PrefillTile tl = locate_prefill_tile(p);
  if (tl.seq < 0) return;  // uniform per block
  const KeyRange kr = key_range(p, tl, blockIdx.z);
  if (kr.begin >= kr.end) return;  // a split this tile does not use (uniform)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  if (tid == 0) bad_s = 0;
  __syncthreads();

  // K and V positions kbase .. kbase + kKeys - 1 into stage buf (zeros past kv_end, in the
  // padding dims and for bad block ids).
  auto load_kv = [&](int kbase, int buf) {
    __half* kd = k_s + buf * kKeys * S;
    __half* vd = v_s + buf * kKeys * S;
    for (int idx = tid; idx < kKeys * PIECES; idx += kThreads) {
      const int kk = idx / PIECES, d = 8 * (idx % PIECES);
      const int pos = kbase + kk;
      int64_t off = 0;
      int bytes = 0;
      if (pos < tl.kv_end && d < p.head_dim) {
        const int32_t blk = tl.table[pos / p.block_size];
        if (blk < 0 || blk >= p.n_blocks) {
          bad_s = 1;
        } else {
          off = ((int64_t(blk) * p.n_head_kv + tl.kvh) * p.block_size + pos % p.block_size) *
                    p.head_dim +
                d;
          bytes = 16;
        }
      }
      cp_async16_zfill(kd + kk * S + d, p.k_cache + off, bytes);
      cp_async16_zfill(vd + kk * S + d, p.v_cache + off, bytes);
    }
  };

  load_kv(kr.begin * kKeys, 0);
  cp_async_commit();

  // Q tile to shared as fp16, times scale * log2(e); zeros for inactive rows and padding dims.
  for (int idx = tid; idx < kPrefillRows * (D / 4); idx += kThreads) {
    const int r = idx / (D / 4), d = 4 * (idx % (D / 4));
    const int h = tl.row_head(r, p);
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (h >= 0 && d < p.head_dim)
      v = *reinterpret_cast<const float4*>(
          p.q + (int64_t(tl.t0 + r / p.hb) * p.n_head + h) * p.head_dim + d);
    uint2 packed;
    packed.x = pack_half2(v.x * p.scale_log2, v.y * p.scale_log2);
    packed.y = pack_half2(v.z * p.scale_log2, v.w * p.scale_log2);
    *reinterpret_cast<uint2*>(q_s + r * S + d) = packed;
  }
  __syncthreads();
  uint32_t qf[KD][4];
#pragma unroll
  for (int kd = 0; kd < KD; ++kd)
    ldmatrix_x4(qf[kd], q_s + (16 * warp + lane % 16) * S + 16 * kd + (lane / 16) * 8);

  const int r0 = 16 * warp + g, r1 = r0 + 8;  // this thread's two rows
  const int qpos0 = tl.row_pos(r0, p), qpos1 = tl.row_pos(r1, p);
  const int lo0 = PrefillTile::window_floor(qpos0, p), lo1 = PrefillTile::window_floor(qpos1, p);
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
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NK; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = kbase + 8 * j + 2 * c + e;
        // causal, and inactive rows (qpos -1); keys below a sliding window
        if (key > qpos0 || key <= lo0) s[j][e] = -INFINITY;
        if (key > qpos1 || key <= lo1) s[j][2 + e] = -INFINITY;
        mx0 = fmaxf(mx0, s[j][e]);
        mx1 = fmaxf(mx1, s[j][2 + e]);
      }
    mx0 = group_max<4>(mx0);
    mx1 = group_max<4>(mx1);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0;  // all masked so far: p = 0
    const float mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float alpha0 = exp2f(m0 - mu0), alpha1 = exp2f(m1 - mu1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NK; ++j) {
      s[j][0] = exp2f(s[j][0] - mu0);
      s[j][1] = exp2f(s[j][1] - mu0);
      s[j][2] = exp2f(s[j][2] - mu1);
      s[j][3] = exp2f(s[j][3] - mu1);
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
  const int h0 = tl.row_head(r0, p), h1 = tl.row_head(r1, p);
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
#pragma unroll
  for (int n = 0; n < ND; ++n) {
    const int d = 8 * n + 2 * c;
    if (d >= p.head_dim) continue;  // head_dim % 16 == 0: d + 1 is in range too
    if (h0 >= 0)
      *reinterpret_cast<float2*>(p.out + (int64_t(tl.t0 + r0 / p.hb) * p.n_head + h0) * p.head_dim +
                                 d) =
          bad ? make_float2(nan, nan) : make_float2(o[n][0] * inv0, o[n][1] * inv0);
    if (h1 >= 0)
      *reinterpret_cast<float2*>(p.out + (int64_t(tl.t0 + r1 / p.hb) * p.n_head + h1) * p.head_dim +
                                 d) =
          bad ? make_float2(nan, nan) : make_float2(o[n][2] * inv1, o[n][3] * inv1);
  }
}

// grid (max_tiles, n_head_kv * chunks, kCombineParts), block kCombineThreads: merges the
// partials of the tiles that use more than one split; the z blocks of a tile share its items
// (few tiles leave the machine mostly idle, so each thread takes as few items as it can: the
// kernel is bound by the latency of its loads). Thread item (row r, dims d .. d + 3):
//   M = max_j m_j, w_j = 2^(m_j - M), out = sum_j w_j O_j / sum_j w_j l_j
// over the splits j the tile uses. A split whose keys all lie past the row's position (or below
// its sliding window) has m_j = -inf (weight 0); some split holds the row's own position, so M is
// finite unless a partial is NaN, and a NaN
// partial (bad block id) makes w_j, and so the row, NaN (fmaxf skips it in M). (The decode
// combine in attention_decode.cu is the same sum in the natural-log domain; what differs, and
// stays apart, is which rows and partitions exist: slots and lengths there, tiles here.)
__global__ void __launch_bounds__(kCombineThreads)
    attn_prefill_combine_kernel(const PrefillTileParams p) {
  grid_dependency_sync();
  const int quads = p.head_dim / 4;
  if (int(blockIdx.z) * kCombineThreads >= kPrefillRows * quads) return;  // no items here
  const PrefillTile tl = locate_prefill_tile(p);
  if (tl.seq < 0) return;
  const int used = key_range(p, tl, 0).used;
  if (used <= 1) return;  // written by the attention kernel
  for (int idx = blockIdx.z * kCombineThreads + threadIdx.x; idx < kPrefillRows * quads;
       idx += kCombineThreads * gridDim.z) {
    const int r = idx / quads, d = 4 * (idx % quads);
    const int h = tl.row_head(r, p);
    if (h < 0) continue;
    float mx = -INFINITY;
    for (int j = 0; j < used; ++j) mx = fmaxf(mx, p.part_m[part_row(j, r)]);
    if (mx == -INFINITY) mx = 0.0f;  // not reached (see above): l = 0 gives NaN
    float l = 0.0f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int j = 0; j < used; ++j) {
      const int64_t pr = part_row(j, r);
      const float w = exp2f(p.part_m[pr] - mx);
      l = fmaf(w, p.part_l[pr], l);
      const float4 v = *reinterpret_cast<const float4*>(p.part_o + pr * p.head_dim + d);
      acc.x = fmaf(w, v.x, acc.x);
      acc.y = fmaf(w, v.y, acc.y);
      acc.z = fmaf(w, v.z, acc.z);
      acc.w = fmaf(w, v.w, acc.w);
    }
    const float inv = 1.0f / l;
    *reinterpret_cast<float4*>(p.out + (int64_t(tl.t0 + r / p.hb) * p.n_head + h) * p.head_dim +
                               d) = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
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
